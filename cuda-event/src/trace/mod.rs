//! A GPU timeline: named ranges on streams and host spans, on the host's clock, read without
//! blocking and written as a Chrome trace that Perfetto opens.
//!
//! A GPU range is two timing events, recorded where it opens and where it closes (`range`). They
//! live in the opening thread's lane (`lanes`), and are read once complete (`read`), placed on the
//! host's monotonic clock through anchors (`clock`), and written by [`ChromeTrace`] (`chrome`);
//! with the `nvtx` feature they are NVTX ranges too (`nvtx`).

mod chrome;
mod clock;
mod lanes;
mod nvtx;
mod range;
mod read;
#[cfg(feature = "tracing")]
mod spans;

pub use chrome::{ChromeTrace, TraceSummary};
pub use range::{GpuRange, HostRange};
#[cfg(feature = "tracing")]
pub use spans::TraceSpans;

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Mutex, OnceLock, thread_local};
use clock::DeviceClock;
use lanes::Lane;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Ranges a [`Trace`] holds at most by default (open, or closed and not yet read).
pub const DEFAULT_TRACE_CAPACITY: usize = 1 << 16;

/// A timeline of named ranges: GPU ranges on any stream of any device, opened and closed by any
/// thread, nested and overlapping, and host spans beside them, all on the host's monotonic clock.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use cuda_event::Stream;
/// use cuda_event::trace::Trace;
/// let trace = Trace::new();
/// let stream = Stream::new(0)?;
/// {
///     let _step = trace.host_range("step");
///     let copy = trace.range(&stream, "copy")?;
///     // ... submit the copy to stream.as_raw() ...
///     copy.end()?;
///     trace.in_range(&stream, "kernel", || { /* ... launch it ... */ })?;
/// }
/// stream.synchronize()?;
/// let summary = trace.write_chrome(std::fs::File::create("trace.json")?)?;
/// println!("{} ranges written, {} still pending", summary.written, summary.pending);
/// # Ok(()) }
/// ```
///
/// **Cost.** Opening and closing a GPU range records one timing event each, taken from the opening
/// thread's own spares (the events of its ranges already read), and locks only that thread's lane,
/// which no other thread takes but the trace's reader, briefly. Nothing blocks on the GPU. Names
/// given as `&'static str` allocate nothing; in a steady trace (ranges read as fast as they are
/// made) nothing else allocates either.
///
/// **Bounds.** The trace holds at most its capacity of ranges, open or closed and not yet read,
/// and one lane per thread that opens ranges (with the timing events of its peak), which goes once
/// the thread has exited and its ranges are read. A range opened beyond the capacity is dropped:
/// it records nothing, its guard does nothing, and it is counted in [`dropped`](Self::dropped).
/// Nothing ever waits for room.
///
/// **Reading.** [`take_complete`](Self::take_complete) (and the writers built on it) returns the
/// ranges whose work is complete, without waiting for the others, which stay for a later read. Each
/// read of GPU ranges makes an anchor per device (a few microseconds' spin on a private, idle
/// stream) to place them on the host's clock; see [`TracedRange`] for what error remains. A read's
/// CUDA calls run in relaxed capture mode, so that a collector thread never breaks a graph capture
/// that another thread makes in global mode (the default of `torch.cuda.graph`), which refuses,
/// and is broken by, queries from threads in global mode.
///
/// **What it does with bad input:**
/// - A range closed on another stream of its device ([`GpuRange::end_on`]) spans from its open on
///   the first stream to its close on the second, as [`Timer::stop`](crate::timing::Timer::stop) does: it
///   means something only if the second stream's work was ordered after the first's. On a stream
///   of another device it is closed on its own stream and
///   [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) is returned.
/// - A range cannot be closed twice: its guard is consumed. A guard that is never dropped
///   (`std::mem::forget`) leaves its range open for good: it keeps its place in the capacity and
///   is counted as open by every read.
/// - On a stream being captured, [`range`](Self::range) returns
///   [`Error::StreamCapturing`](crate::Error::StreamCapturing) and records nothing. A range whose
///   stream began a capture after it opened gets the same error at its close and is read as lost.
/// - After a device reset, or a fault of the work, the ranges whose events died are read as lost
///   (counted, not returned), and the device's anchors are made anew.
/// - A trace read or written while ranges are pending returns what is complete and counts the
///   rest ([`Complete::pending`], [`Complete::open`]); they are returned by a later read.
/// - In a child process forked after the trace was made, the trace is the parent's (the parent's
///   threads, which did not fork, may hold its locks): the child's host spans on it are dropped
///   and counted, its GPU ranges and closes return [`Error::ForkedChild`](crate::Error::ForkedChild),
///   and its reads return nothing. A trace made in the child works there as in any process (GPU
///   ranges only where the parent had not used CUDA through the crate, as for every CUDA call).
pub struct Trace {
    id: u64,
    capacity: usize,
    started: Instant,
    /// Ranges held: open, or closed and not yet read.
    held: AtomicUsize,
    dropped: AtomicU64,
    /// Incremented after a read's anchors are made: a range notes it at its open, before its
    /// first record (see `clock`).
    epoch: AtomicU64,
    lanes: Mutex<Vec<Arc<Lane>>>,
    /// The lane of threads whose thread-locals are gone (ranges opened in their destructors).
    homeless: OnceLock<Arc<Lane>>,
    next_thread: AtomicU64,
    /// The reader's: one read at a time.
    clocks: Mutex<BTreeMap<i32, DeviceClock>>,
    /// The forks this process descended from when the trace was made (`fork::forks`).
    forks: u64,
}

/// A complete range, placed on the host's clock.
///
/// `start` is from the trace's creation. For a GPU range, `duration` is the GPU's own interval
/// between its two events (resolution about 0.5 us) and `start` is placed through the device's
/// anchors: off by at most half the anchor's bracket ([`Complete::max_anchor_error`], typically a
/// few microseconds), plus the `f32` resolution of the GPU interval to the nearer anchor (about
/// 4 us at a minute from it), plus what the GPU's and host's clocks drift apart between two reads
/// that the pair of anchors does not capture. A GPU start placed before the trace's creation (by
/// that error) reads as zero.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TracedRange {
    /// The name it was opened with.
    pub name: Cow<'static, str>,
    /// Where it is drawn.
    pub track: Track,
    /// When it started, from the trace's creation.
    pub start: Duration,
    /// How long it lasted.
    pub duration: Duration,
    /// Ranges open on the opening thread when it opened, host and GPU alike.
    pub depth: u32,
    /// The opening thread's number in this trace.
    pub thread: u64,
}

/// Where a range is drawn: a host thread's track or a stream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Track {
    /// A host span.
    Host {
        /// The opening thread's number in the trace.
        thread: u64,
    },
    /// A GPU range.
    Gpu {
        /// The stream's device.
        device: i32,
        /// The stream's raw handle, as a number.
        stream: u64,
        /// Which stream that is: a number of the process's that no other stream ever gets (CUDA
        /// may give a later stream the handle of a destroyed one); for the per-thread default
        /// stream, the opening thread's number with the top bit set; 0 for the legacy default
        /// stream.
        id: u64,
    },
}

/// What a read of a trace returned, and what it left.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Complete {
    /// The complete ranges, in no particular order.
    pub ranges: Vec<TracedRange>,
    /// Ranges given up: their end could not be recorded, or their events failed (a fault, a
    /// device reset).
    pub lost: u64,
    /// Closed GPU ranges whose work is not complete yet (or whose device could not be anchored
    /// this time): a later read returns them.
    pub pending: usize,
    /// Ranges still open.
    pub open: usize,
    /// Half the widest bracket of this read's anchors: the bound on their error.
    pub max_anchor_error: Duration,
}

static NEXT_TRACE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's lane of each trace it opened ranges in (weak: the trace owns its lanes).
    static LANES: RefCell<LaneCache> = const { RefCell::new(LaneCache(Vec::new())) };
}

/// A thread's lanes, by trace id; when the thread exits, its lanes are orphaned, for the reader to
/// drop once their ranges are read.
struct LaneCache(Vec<(u64, Weak<Lane>)>);

impl Drop for LaneCache {
    fn drop(&mut self) {
        for lane in self.0.iter().filter_map(|(_, lane)| lane.upgrade()) {
            lane.orphan();
        }
    }
}

impl Default for Trace {
    fn default() -> Trace {
        Trace::new()
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("capacity", &self.capacity)
            .field("held", &self.held())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Trace {
    /// A trace that holds up to [`DEFAULT_TRACE_CAPACITY`] ranges; its clock starts now.
    pub fn new() -> Trace {
        Trace::with_capacity(DEFAULT_TRACE_CAPACITY)
    }

    /// A trace that holds up to `ranges` ranges (open, or closed and not yet read).
    pub fn with_capacity(ranges: usize) -> Trace {
        crate::fork::keep_the_registration(); // a forked child is known without a CUDA call too
        Trace {
            id: NEXT_TRACE.fetch_add(1, Ordering::Relaxed),
            capacity: ranges,
            started: Instant::now(),
            held: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            lanes: Mutex::new(Vec::new()),
            homeless: OnceLock::new(),
            next_thread: AtomicU64::new(1),
            clocks: Mutex::new(BTreeMap::new()),
            forks: crate::fork::forks(),
        }
    }

    /// Whether this process forked since the trace was made: then it is the parent's, whose
    /// threads, which did not fork, may hold its locks, and the child's copy takes none of them
    /// (nothing is read or kept in it; the parent reads the ranges). A trace made in the child
    /// is the child's own.
    fn made_before_a_fork(&self) -> bool {
        crate::fork::forked_since(self.forks)
    }

    /// Whether the ranges are also NVTX ranges: the `nvtx` feature is on and its library was found
    /// (`libnvtx3interop.so.1` on the loader's path, or the file `CUDA_EVENT_NVTX_LIBRARY` names;
    /// looked for once, at the first call or range).
    pub fn nvtx_active() -> bool {
        nvtx::active()
    }

    /// The instant the trace's times count from.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Ranges opened while the trace was full, and so not recorded.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Ranges held now: open, or closed and not yet read.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Writes the complete ranges as a Chrome trace (JSON) to `out`, leaving the pending ones in
    /// the trace; see [`ChromeTrace`] for the format and for writing a long trace in parts.
    ///
    /// # Errors
    /// Those of `out`.
    pub fn write_chrome<W: std::io::Write>(&self, out: W) -> std::io::Result<TraceSummary> {
        let mut writer = ChromeTrace::new(self, out)?;
        writer.write_complete()?;
        writer.finish()
    }

    fn take_room(&self) -> bool {
        if self.held.fetch_add(1, Ordering::Relaxed) < self.capacity {
            return true;
        }
        self.held.fetch_sub(1, Ordering::Relaxed);
        self.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Frees a read (or given up) range's slot and its place in the capacity; a read range's
    /// events are kept for the lane's next ranges, a lost one's (which failed) are dropped.
    fn release(&self, inner: &mut lanes::LaneInner, slot: usize, read: bool) {
        if let Some(slot) = inner.free(slot) {
            if read {
                inner.keep_events(slot.what);
            }
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The calling thread's lane of this trace, made at its first range.
    fn lane(&self) -> Arc<Lane> {
        let found = LANES.try_with(|lanes| {
            let mut lanes = lanes.borrow_mut();
            if let Some(lane) = lanes
                .0
                .iter()
                .find(|(id, _)| *id == self.id)
                .and_then(|(_, w)| w.upgrade())
            {
                return lane;
            }
            lanes.0.retain(|(_, lane)| lane.strong_count() > 0);
            let lane = self.new_lane();
            lanes.0.push((self.id, Arc::downgrade(&lane)));
            lane
        });
        // A thread whose thread-locals are gone shares one lane with any other such.
        found.unwrap_or_else(|_| self.homeless.get_or_init(|| self.new_lane()).clone())
    }

    fn new_lane(&self) -> Arc<Lane> {
        let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
        let name = crate::sync::thread::current().name().map(str::to_owned);
        let lane = Arc::new(Lane::new(thread, name));
        self.lanes.lock().push(lane.clone());
        lane
    }

    /// The names of the threads that opened ranges, by their number in the trace.
    fn thread_names(&self) -> BTreeMap<u64, Option<String>> {
        self.lanes
            .lock()
            .iter()
            .map(|l| (l.thread, l.name.clone()))
            .collect()
    }
}

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::*;

    #[test]
    fn host_spans_nest_and_are_read_once_closed() {
        let trace = Trace::new();
        let outer = trace.host_range("outer");
        trace.in_host_range("inner", || std::thread::sleep(Duration::from_millis(2)));
        let read = trace.take_complete();
        assert_eq!((read.ranges.len(), read.open), (1, 1), "{read:?}");
        assert_eq!((read.ranges[0].name.as_ref(), read.ranges[0].depth), ("inner", 1));
        assert!(read.ranges[0].duration >= Duration::from_millis(2));
        outer.end();
        let read = trace.take_complete();
        assert_eq!((read.ranges.len(), read.open), (1, 0));
        assert_eq!((read.ranges[0].name.as_ref(), read.ranges[0].depth), ("outer", 0));
        assert!(read.ranges[0].duration >= Duration::from_millis(2));
        assert_eq!(trace.held(), 0);
        assert!(trace.take_complete().ranges.is_empty(), "each range is read once");
    }

    /// Review 3's S7: a child forked while another thread holds a lane's lock (a reader inside
    /// `take_complete`) opens, closes and reads ranges without taking it; before, it blocked. (The
    /// crate need not have called CUDA before the fork.)
    #[test]
    fn a_forked_child_takes_none_of_the_traces_locks() {
        let trace = Trace::new();
        drop(trace.host_range("primes the lane"));
        let open = trace.host_range("open at the fork");
        let lane = trace.lane();
        let held = lane.inner.lock(); // as another thread's read would hold it at the fork
        // SAFETY: the child calls only the trace (whose behaviour after a fork is the subject) and
        // async-signal-safe libc functions, then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: async-signal-safe calls; a blocked child dies of the alarm instead.
            unsafe { libc::alarm(5) };
            let dropped = trace.host_range("in the child").is_dropped();
            drop(open);
            let read = trace.take_complete();
            let code = if dropped && read.ranges.is_empty() { 0 } else { 3 };
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(held);
        let mut status = 0;
        // SAFETY: waits for the child forked above, writing through a live local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child ended with status {status:#x} (a signal: it blocked on a lock)"
        );
    }

    #[test]
    fn a_full_trace_drops_and_counts_ranges_and_never_blocks() {
        let trace = Trace::with_capacity(3);
        let spans: Vec<_> = (0..5).map(|i| trace.host_range(format!("s{i}"))).collect();
        assert_eq!(spans.iter().filter(|s| s.is_dropped()).count(), 2);
        assert_eq!((trace.dropped(), trace.held()), (2, 3));
        drop(spans);
        assert_eq!(trace.take_complete().ranges.len(), 3);
        // Room again once read.
        assert!(!trace.host_range("again").is_dropped());
        assert_eq!(trace.dropped(), 2);
    }

    #[test]
    fn each_thread_has_its_own_track_and_a_forgotten_guard_stays_open() {
        let trace = Trace::new();
        std::thread::scope(|s| {
            for t in 0..4 {
                let trace = &trace;
                std::thread::Builder::new()
                    .name(format!("worker {t}"))
                    .spawn_scoped(s, move || {
                        for _ in 0..100 {
                            trace.in_host_range("work", || ());
                        }
                    })
                    .unwrap();
            }
        });
        std::mem::forget(trace.host_range("never closed"));
        let read = trace.take_complete();
        assert_eq!((read.ranges.len(), read.open, read.lost), (400, 1, 0));
        let threads: std::collections::BTreeSet<u64> = read.ranges.iter().map(|r| r.thread).collect();
        assert_eq!(threads.len(), 4);
        let names = trace.thread_names();
        assert!(
            threads
                .iter()
                .all(|t| names[t].as_deref().is_some_and(|n| n.starts_with("worker ")))
        );
        assert_eq!(trace.held(), 1, "the forgotten span keeps its place");
    }

    #[test]
    fn lanes_of_exited_threads_go_once_their_ranges_are_read() {
        // A joined thread has run its thread-locals' destructors, which orphan its lanes (a scoped
        // thread's scope ends when its closure does, possibly before them).
        let trace = Arc::new(Trace::with_capacity(8));
        let run = |work: fn(&Trace)| {
            let trace = trace.clone();
            std::thread::spawn(move || work(&trace)).join().unwrap();
        };
        for _ in 0..100 {
            run(|trace| trace.in_host_range("task", || ()));
            assert_eq!(trace.take_complete().ranges.len(), 1);
        }
        // Each read drops the lanes whose ranges an earlier read took.
        trace.take_complete();
        assert_eq!((trace.held(), trace.lanes.lock().len()), (0, 0));
        // A thread that exits with a range still open keeps its lane.
        run(|trace| std::mem::forget(trace.host_range("never closed")));
        trace.take_complete();
        trace.take_complete();
        assert_eq!(trace.lanes.lock().len(), 1);
    }

    #[test]
    fn ranges_opened_in_thread_local_destructors_share_one_lane() {
        static TRACE: std::sync::LazyLock<Trace> = std::sync::LazyLock::new(Trace::new);
        struct OnExit;
        impl Drop for OnExit {
            fn drop(&mut self) {
                for _ in 0..3 {
                    TRACE.in_host_range("in a thread-local destructor", || ());
                }
            }
        }
        std::thread_local!(static GUARD: OnExit = const { OnExit });
        std::thread::spawn(|| {
            GUARD.with(|_| ()); // registered before the lanes' cache: destroyed after it
            TRACE.in_host_range("first", || ());
        })
        .join()
        .expect("no panic in the thread");
        assert_eq!(TRACE.take_complete().ranges.len(), 4);
        TRACE.take_complete();
        assert_eq!(
            TRACE.lanes.lock().len(),
            1,
            "the thread's own lane is gone, the shared one stays"
        );
    }
}
