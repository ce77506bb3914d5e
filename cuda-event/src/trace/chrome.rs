//! The Chrome trace event format (JSON object form), which Perfetto and chrome://tracing open,
//! written as ranges complete rather than held as one string.

use super::{Complete, Trace, TracedRange, Track};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::Duration;

/// Writes a [`Trace`] as a Chrome trace, in parts: [`write_complete`](Self::write_complete) as
/// often as wanted (each writes the ranges completed since, and leaves the pending ones in the
/// trace), then [`finish`](Self::finish), which writes what completed last and closes the JSON
/// (a writer dropped without it leaves the file unterminated).
///
/// The file: one process per device (`GPU 0`...) with a thread track per stream, and one host
/// process with a track per thread that opened ranges; each range a complete (`"ph":"X"`) event,
/// with times in microseconds from the trace's creation on the host's monotonic clock, and `args`
/// of its device and stream (GPU ranges), nesting depth and opening thread. `otherData` holds the
/// counts of [`TraceSummary`].
pub struct ChromeTrace<'t, W: Write> {
    trace: &'t Trace,
    out: W,
    events: usize,
    /// Each stream's thread id in its device's process, numbered as they first appear.
    streams: BTreeMap<(i32, u64, u64), u64>,
    /// Host threads and devices whose track names are written.
    named: BTreeSet<Track>,
    summary: TraceSummary,
}

/// What a written trace holds and what it left out.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TraceSummary {
    /// Ranges written.
    pub written: usize,
    /// Ranges opened while the trace was full (all of the trace's, not only this writer's).
    pub dropped: u64,
    /// Ranges lost (see [`Complete::lost`]).
    pub lost: u64,
    /// At the last write: closed ranges whose work was not complete, left in the trace.
    pub pending: usize,
    /// At the last write: ranges still open, left in the trace.
    pub open: usize,
    /// The largest bound on an anchor's error over the writes (see [`TracedRange`]).
    pub max_anchor_error: Duration,
}

/// The host's process id in the file; devices get their own, above it.
const HOST_PID: u64 = 1;
const GPU_PID_BASE: u64 = 100;

impl<'t, W: Write> ChromeTrace<'t, W> {
    /// Starts the file.
    ///
    /// # Errors
    /// Those of `out`.
    pub fn new(trace: &'t Trace, mut out: W) -> io::Result<ChromeTrace<'t, W>> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        let mut writer = ChromeTrace {
            trace,
            out,
            events: 0,
            streams: BTreeMap::new(),
            named: BTreeSet::new(),
            summary: TraceSummary::default(),
        };
        let name = format!("host (process {})", std::process::id());
        writer.metadata("process_name", HOST_PID, None, &name)?;
        writer.metadata_index("process_sort_index", HOST_PID, 0)?;
        Ok(writer)
    }

    /// What was written so far, and what was left out.
    pub fn summary(&self) -> &TraceSummary {
        &self.summary
    }

    /// Writes the ranges completed since the last write; returns how many.
    ///
    /// # Errors
    /// Those of the output. The ranges this write took from the trace and could not write are
    /// lost (counted in [`TraceSummary::lost`]), and the file is left unterminated.
    pub fn write_complete(&mut self) -> io::Result<usize> {
        let complete = self.trace.take_complete();
        self.write(complete)
    }

    /// Writes the ranges completed since the last write and closes the file.
    ///
    /// # Errors
    /// Those of the output.
    pub fn finish(mut self) -> io::Result<TraceSummary> {
        self.write_complete()?;
        self.summary.dropped = self.trace.dropped();
        let s = &self.summary;
        write!(
            self.out,
            "\n],\"otherData\":{{\"clock\":\"host monotonic, microseconds from the trace's creation\",\
             \"written\":{},\"dropped\":{},\"lost\":{},\"pending\":{},\"open\":{},\"max_anchor_error_us\":{:.3}}}}}\n",
            s.written,
            s.dropped,
            s.lost,
            s.pending,
            s.open,
            micros(s.max_anchor_error)
        )?;
        self.out.flush()?;
        Ok(self.summary)
    }

    fn write(&mut self, complete: Complete) -> io::Result<usize> {
        let names = if complete
            .ranges
            .iter()
            .any(|r| !self.named.contains(&Track::Host { thread: r.thread }))
        {
            self.trace.thread_names()
        } else {
            BTreeMap::new()
        };
        let n = complete.ranges.len();
        self.summary.lost += complete.lost;
        for (i, range) in complete.ranges.iter().enumerate() {
            if let Err(e) = self.range(range, &names) {
                // Taken out of the trace and not written: lost.
                self.summary.written += i;
                self.summary.lost += (n - i) as u64;
                return Err(e);
            }
        }
        self.summary.written += n;
        self.summary.pending = complete.pending;
        self.summary.open = complete.open;
        self.summary.max_anchor_error = self.summary.max_anchor_error.max(complete.max_anchor_error);
        Ok(n)
    }

    fn range(&mut self, range: &TracedRange, names: &BTreeMap<u64, Option<String>>) -> io::Result<()> {
        let host = Track::Host { thread: range.thread };
        if self.named.insert(host) {
            let name = match names.get(&range.thread) {
                Some(Some(name)) => format!("thread {} ({name})", range.thread),
                _ => format!("thread {}", range.thread),
            };
            self.metadata("thread_name", HOST_PID, Some(range.thread), &name)?;
        }
        let (pid, tid, cat) = match range.track {
            Track::Host { thread } => (HOST_PID, thread, "host"),
            Track::Gpu { device, stream, id } => {
                let device_track = Track::Gpu {
                    device,
                    stream: u64::MAX,
                    id: u64::MAX,
                };
                let pid = GPU_PID_BASE + device.max(0) as u64;
                if self.named.insert(device_track) {
                    self.metadata("process_name", pid, None, &format!("GPU {device}"))?;
                    self.metadata_index("process_sort_index", pid, 1 + device.max(0) as u64)?;
                }
                let next = self.streams.keys().filter(|(d, ..)| *d == device).count() as u64 + 1;
                let tid = match self.streams.get(&(device, id, stream)) {
                    Some(&tid) => tid,
                    None => {
                        self.streams.insert((device, id, stream), next);
                        self.metadata("thread_name", pid, Some(next), &stream_name(stream))?;
                        next
                    }
                };
                (pid, tid, "gpu")
            }
        };
        self.separator()?;
        self.out.write_all(b"{\"name\":")?;
        json_string(&mut self.out, &range.name)?;
        write!(
            self.out,
            ",\"cat\":\"{cat}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{tid},\"args\":{{",
            micros(range.start),
            micros(range.duration)
        )?;
        if let Track::Gpu { device, stream, .. } = range.track {
            write!(self.out, "\"device\":{device},\"stream\":\"{stream:#x}\",")?;
        }
        write!(
            self.out,
            "\"depth\":{},\"thread\":{}}}}}",
            range.depth, range.thread
        )
    }

    fn metadata(&mut self, what: &str, pid: u64, tid: Option<u64>, name: &str) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            "{{\"name\":\"{what}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":",
            tid.unwrap_or(0)
        )?;
        json_string(&mut self.out, name)?;
        self.out.write_all(b"}}")
    }

    fn metadata_index(&mut self, what: &str, pid: u64, index: u64) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            "{{\"name\":\"{what}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"args\":{{\"sort_index\":{index}}}}}"
        )
    }

    fn separator(&mut self) -> io::Result<()> {
        self.events += 1;
        if self.events > 1 {
            self.out.write_all(b",\n")?;
        }
        Ok(())
    }
}

impl<W: Write> std::fmt::Debug for ChromeTrace<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChromeTrace")
            .field("events", &self.events)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A stream's track name: the special handles by their role, others by their handle.
fn stream_name(stream: u64) -> String {
    match stream {
        0 => "default stream".to_string(),
        1 => "legacy default stream".to_string(),
        2 => "per-thread default stream".to_string(),
        _ => format!("stream {stream:#x}"),
    }
}

/// Writes `s` as a JSON string.
fn json_string(out: &mut impl Write, s: &str) -> io::Result<()> {
    out.write_all(b"\"")?;
    for c in s.chars() {
        match c {
            '"' => out.write_all(b"\\\"")?,
            '\\' => out.write_all(b"\\\\")?,
            '\n' => out.write_all(b"\\n")?,
            '\r' => out.write_all(b"\\r")?,
            '\t' => out.write_all(b"\\t")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => write!(out, "{c}")?,
        }
    }
    out.write_all(b"\"")
}

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_as_json_strings() {
        let mut out = Vec::new();
        json_string(&mut out, "a \"b\" \\ c\n\u{1}é").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#""a \"b\" \\ c\n\u0001é""#);
    }

    #[test]
    fn a_trace_of_host_spans_is_written_in_parts_and_closed() {
        let trace = Trace::with_capacity(4);
        let mut file = Vec::new();
        let mut writer = ChromeTrace::new(&trace, &mut file).unwrap();
        trace.in_host_range("first \"one\"", || ());
        let open = trace.host_range("open at the first write");
        assert_eq!(writer.write_complete().unwrap(), 1);
        drop(open);
        let _spans: Vec<_> = (0..5).map(|_| trace.host_range("over capacity")).collect();
        let summary = writer.finish().unwrap();
        assert_eq!((summary.written, summary.open, summary.dropped), (2, 3, 2));
        let text = String::from_utf8(file).unwrap();
        assert!(text.starts_with("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"));
        assert!(text.ends_with("}}\n"));
        assert_eq!(text.matches("\"ph\":\"X\"").count(), 2);
        assert!(
            text.contains(r#""name":"first \"one\"","cat":"host","ph":"X""#),
            "{text}"
        );
        assert!(
            text.contains(r#""name":"thread_name","ph":"M","pid":1,"tid":1"#),
            "{text}"
        );
        assert!(
            text.contains(r#""dropped":2,"lost":0,"pending":0,"open":3"#),
            "{text}"
        );
    }

    #[test]
    fn streams_get_tracks_numbered_per_device() {
        let trace = Trace::new();
        let mut file = Vec::new();
        let mut writer = ChromeTrace::new(&trace, &mut file).unwrap();
        let range = |device, stream, start_us| TracedRange {
            name: "r".into(),
            track: Track::Gpu {
                device,
                stream,
                id: stream,
            },
            start: Duration::from_micros(start_us),
            duration: Duration::from_nanos(1500),
            depth: 0,
            thread: 1,
        };
        let complete = Complete {
            ranges: vec![
                range(0, 0xa0, 1),
                range(1, 0xb0, 2),
                range(0, 0xc0, 3),
                range(0, 0xa0, 4),
            ],
            ..Complete::default()
        };
        assert_eq!(writer.write(complete).unwrap(), 4);
        writer.finish().unwrap();
        let text = String::from_utf8(file).unwrap();
        for want in [
            r#""name":"process_name","ph":"M","pid":100,"tid":0,"args":{"name":"GPU 0"}"#,
            r#""name":"process_name","ph":"M","pid":101,"tid":0,"args":{"name":"GPU 1"}"#,
            r#""name":"thread_name","ph":"M","pid":100,"tid":1,"args":{"name":"stream 0xa0"}"#,
            r#""name":"thread_name","ph":"M","pid":100,"tid":2,"args":{"name":"stream 0xc0"}"#,
            r#""name":"thread_name","ph":"M","pid":101,"tid":1,"args":{"name":"stream 0xb0"}"#,
            r#""ts":4.000,"dur":1.500,"pid":100,"tid":1,"args":{"device":0,"stream":"0xa0","depth":0,"thread":1}"#,
        ] {
            assert!(text.contains(want), "{want} not in {text}");
        }
        assert_eq!(
            text.matches(r#""stream 0xa0""#).count(),
            1,
            "each track is named once"
        );
    }

    #[test]
    fn ranges_a_failed_write_took_are_counted_lost() {
        struct FailAfter(usize);
        impl Write for FailAfter {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(io::Error::other("disk full"));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let trace = Trace::new();
        for _ in 0..10 {
            trace.in_host_range("r", || ());
        }
        let mut writer = ChromeTrace::new(&trace, FailAfter(600)).unwrap();
        assert!(writer.write_complete().is_err());
        let s = writer.summary();
        assert!(s.written > 0 && s.lost > 0, "{s:?}");
        assert_eq!(s.written as u64 + s.lost, 10, "{s:?}");
        assert_eq!(trace.held(), 0);
    }
}
