//! Where a `Trace` places GPU ranges on the host's clock, against when the host launched them.
//!
//! `cargo bench -p cuda-event --bench trace_clock` on a GPU machine (the GPU machine's runner: the
//! staged binary with `--bench`); writes `trace_clock.md` to `$CUDA_EVENT_BENCH_OUT` (default: the
//! current folder). `CUDA_EVENT_TRACE_SECONDS` (default 60) sets the long phases' length.
//!
//! Every 50 ms, on an idle stream of device 0, the host notes the time and opens a range around a
//! 100 us spinning kernel. The offset of a range is its placed start minus that host time: the
//! launch's own latency (the GPU starts the range's event record a few microseconds after the
//! call) plus the placement's error. Phases: 1 s with a read every second; the long phase with a
//! read every second; the long phase read only at its end (placed through the anchors of the reads
//! before and after it: the drift correction over the whole phase). Per phase: the offsets'
//! median, p1, p99, min and max, and the median per tenth of the phase (a drift that the anchors
//! miss shows as a trend). `bench/trace_clock_cupti.py` measures the same launch-to-start offset
//! with CUPTI (PyTorch's profiler) for the referee's column.
//!
//! It also writes every timed range to `trace_clock_ranges.csv` on `CLOCK_MONOTONIC` (the host
//! clock `Instant` reads on Linux): run under `bench/cupti_referee/` (a CUPTI injection library
//! that writes the same process's kernel records on that clock), `bench/trace_clock_referee.py`
//! sets each range beside the very kernel it timed.

use cuda_event::Stream;
use cuda_event::trace::{Trace, TracedRange};
use cuda_event_testkit as common;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_millis(50);
const KERNEL: Duration = Duration::from_micros(100);

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("the trace_clock benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    let long: u64 = std::env::var("CUDA_EVENT_TRACE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let _watchdog = common::deadline_for("the trace_clock benchmark", Duration::from_secs(3 * long + 60));
    let stream = Stream::new(0).expect("a CUDA GPU");
    let trace = Trace::new();
    let to_monotonic = MonotonicOffset::now();
    let mut csv = String::from("phase,launch_ns,start_ns,end_ns\n");
    // Warm: the kernel loaded, device 0's first anchor made.
    trace
        .in_range(&stream, "warm", || common::gpu_spin(&stream, KERNEL))
        .unwrap();
    stream.synchronize().unwrap();
    trace.take_complete();
    let mut md = format!(
        "# Trace placement against the host's launch time\n\n{}\n\nEvery {EVERY:?}: a range around a \
         {KERNEL:?} spinning kernel on an idle stream of device 0. Offset: placed start minus the host's \
         time just before the range's open, in microseconds.\n\n| phase | ranges | median | p1 | p99 | min | \
         max | max anchor error | median per tenth of the phase |\n|---|---|---|---|---|---|---|---|---|\n",
        device()
    );
    for (name, seconds, read_every_second) in [
        ("1 s, read every second", 1, true),
        ("long, read every second", long, true),
        ("long, read at the end only", long, false),
    ] {
        let (offsets, max_error, rows) =
            phase(&trace, &stream, Duration::from_secs(seconds), read_every_second);
        for (launched, range) in rows {
            let start = trace.started() + range.start;
            let _ = writeln!(
                csv,
                "\"{name}\",{},{},{}",
                to_monotonic.ns(launched),
                to_monotonic.ns(start),
                to_monotonic.ns(start + range.duration)
            );
        }
        let row = summary(&offsets);
        let tenths: Vec<String> = offsets
            .chunks(offsets.len().div_ceil(10).max(1))
            .map(|c| format!("{:.1}", median(c)))
            .collect();
        let _ = writeln!(
            md,
            "| {name} ({seconds} s) | {} | {} | {:.1} | {} |",
            offsets.len(),
            row,
            max_error.as_secs_f64() * 1e6,
            tenths.join(" ")
        );
        println!("{name}: {} ranges, {row}", offsets.len());
    }
    let dir = std::path::PathBuf::from(std::env::var("CUDA_EVENT_BENCH_OUT").unwrap_or_else(|_| ".".into()));
    std::fs::write(dir.join("trace_clock.md"), md).unwrap();
    std::fs::write(dir.join("trace_clock_ranges.csv"), csv).unwrap();
}

/// `CLOCK_MONOTONIC` at one `Instant`, read back to back: turns later `Instant`s into that clock's
/// nanoseconds (within the pair's own gap, tens of nanoseconds).
struct MonotonicOffset {
    at: Instant,
    ns: i128,
}

impl MonotonicOffset {
    fn now() -> Self {
        let at = Instant::now();
        MonotonicOffset {
            at,
            ns: common::monotonic_ns() as i128,
        }
    }

    fn ns(&self, at: Instant) -> i128 {
        match at.checked_duration_since(self.at) {
            Some(after) => self.ns + after.as_nanos() as i128,
            None => self.ns - self.at.duration_since(at).as_nanos() as i128,
        }
    }
}

/// One phase: the offsets (us) in launch order, the widest anchor error bound of its reads, and
/// each range beside the host's time before its open.
fn phase(
    trace: &Trace,
    stream: &Stream,
    length: Duration,
    read_every_second: bool,
) -> (Vec<f64>, Duration, Vec<(Instant, TracedRange)>) {
    let begin = Instant::now();
    let mut launched = Vec::new();
    let mut ranges = Vec::new();
    let mut max_error = Duration::ZERO;
    let mut last_read = Instant::now();
    let mut next = Instant::now();
    while begin.elapsed() < length {
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        next += EVERY;
        launched.push(Instant::now());
        trace
            .in_range(stream, "timed", || common::gpu_spin(stream, KERNEL))
            .unwrap();
        if read_every_second && last_read.elapsed() >= Duration::from_secs(1) {
            stream.synchronize().unwrap();
            let read = trace.take_complete();
            max_error = max_error.max(read.max_anchor_error);
            ranges.extend(read.ranges);
            last_read = Instant::now();
        }
    }
    stream.synchronize().unwrap();
    let read = trace.take_complete();
    max_error = max_error.max(read.max_anchor_error);
    assert_eq!((read.lost, read.pending), (0, 0));
    ranges.extend(read.ranges);
    ranges.sort_by_key(|r| r.start);
    assert_eq!(ranges.len(), launched.len());
    let offsets = ranges
        .iter()
        .zip(&launched)
        .map(|(r, at)| {
            let at = at.saturating_duration_since(trace.started());
            (r.start.as_secs_f64() - at.as_secs_f64()) * 1e6
        })
        .collect();
    (offsets, max_error, launched.into_iter().zip(ranges).collect())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(offsets: &[f64]) -> String {
    let mut v = offsets.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "{:.1} | {:.1} | {:.1} | {:.1} | {:.1}",
        at(0.5),
        at(0.01),
        at(0.99),
        v[0],
        v[v.len() - 1]
    )
}

fn device() -> String {
    let mut driver = 0;
    // SAFETY: writes an int through a live local.
    let code = unsafe { cuda_event::sys::cudaDriverGetVersion(&mut driver) };
    let driver = if code == cuda_event::sys::cudaError::cudaSuccess {
        driver.to_string()
    } else {
        "unknown".into()
    };
    format!(
        "Device 0 of {} GPU(s); CUDA driver API version {driver}.",
        cuda_event::device_count().unwrap_or(0)
    )
}
