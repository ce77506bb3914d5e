//! How fast and how cheaply a future learns that the GPU got there (issue: await the GPU; issue 18,
//! items 4 and 5).
//!
//! `cargo bench -p cuda-event --bench wake` on a GPU machine; writes `wake.md` and `wake.json` to
//! `$CUDA_EVENT_BENCH_OUT` (default: the current folder), rewritten after each section, so that a
//! run cut short keeps what it measured. The header names the GPUs, the driver and the parameters.
//!
//! Sections, in the order they run (but section 6, listed last, runs first):
//!
//! 1. **The `select!` pattern** (issue 18 item 4): on a fresh stream of device 0 held by a kernel of
//!    [`SELECT_HOLD`] with [`SELECT_QUEUED`] near-empty kernels queued behind it, 5,000 times: make a
//!    future, poll it once with a no-op waker, drop it; each call timed alone. For
//!    `Stream::completion` and `Event::completion` (of an event recorded behind the queued
//!    kernels), each on its own held stream; the floors, each on its own held stream too, are the
//!    raw calls such a future cannot avoid: `record_event` + `query` + drop (what a stream's future
//!    records), and `Event::query` alone. Worst, p99, p50, the first call, and whether the stream was
//!    still held when the 5,000 pairs were done (else the measurement did not see a held stream).
//!    Goal: worst < 1 ms.
//! 2. **Every future's wake-up** (issue 18 item 5): every future measured, each a tokio task of
//!    its own, spawned and polled while its stream is held: (a) 9,984 event futures over 64
//!    streams (39 steps of 5 ms of work per stream, staggered, 4 futures on each step's event),
//!    then the same over 64 flag-lane streams (`StreamOptions::flag_lane`), (b) 12 event futures and 8 stream futures on each of 50 steps of 20 ms on one stream while
//!    9,000 event and 1,000 stream futures wait on a held stream. The floor, in the same run: a
//!    thread blocked in `synchronize` on each blocking event in turn (in (a) on one more stream
//!    stepping alike, in (b) on the steps' own events); the reference: each step's kernel sets a
//!    flag in mapped host memory as it ends, which one thread spins on (reading memory, so that
//!    the reference makes no CUDA call to compete with the reactor's). Latencies count from each
//!    step's end as seen there (or by a future, if earlier); reported per phase and observer
//!    (p50, p99, max) with the goal's verdict.
//! 3. **Wake latency of one waiter** (the earlier phases): a host function reads the host clock just
//!    before the measured record (or the stream completion's record), the waiter reads it when its
//!    wait returns; p50 and p99 of 200 trials, with none and with 10,000 futures pending on later
//!    work (held by kernels for [`OLD_HOLD`]) across 31 streams per GPU. Waiters: a
//!    `Stream::completion` future, an `Event::completion` future (each awaited on a multi-thread
//!    tokio runtime), a thread blocked in `synchronize` on a blocking event, a thread spinning on
//!    `query` (the floors), a thread spinning on a flag that a host function queued after a
//!    record sets (what CUDA's host-function thread alone adds), and `Event::synchronize_with`
//!    under each [`Wait`] policy (issue 43: a way of waiting chosen per wait), and an
//!    `Event::completion` and a `Wait::Reactor` wait on a flag-lane stream's event, an
//!    `Event::completion` future that waits by its own polls (`Completion::with_wait`: spinning,
//!    and spinning for 20 us then by the reactor), and an
//!    `Event::completion` future polled in a loop on this thread, on a plain and on a flag-lane
//!    stream (a later poll only reads what the reactor or the scanner found: the crate's latency
//!    with no thread's wake-up in it, which the parked waiters all pay). Beside each
//!    waiter's latencies, what that way of waiting costs in CPU, in cores: the waiting thread's
//!    CPU time over its waits (from its wait's call to its return) divided by their wall time, and
//!    the whole process's (every thread: the reactor's, CUDA's own) over the waiter's 200 trials,
//!    set-up included, divided by theirs.
//! 4. **Idle cost**: CPU time of the whole process (getrusage) while 10,000 futures stay pending, in
//!    five windows of 1 s in a row.
//! 5. **Throughput**: 64 tasks, each with its own stream, submit a 20 us kernel and await its
//!    completion, for 2 s; against the same loop with a blocking `synchronize` on `spawn_blocking`.
//! 6. **64 waiters at once** (run first: the other sections leave kernels running that would hold
//!    its streams' hardware queues): for each of section 3's waiters, 64 threads, each on a stream
//!    of its own; work queued on every stream first, then the threads released together, each
//!    running one of section 3's trials behind it; 10 rounds (quick: 4) after one uncounted. Latency and CPU as in section 3; between its lone waiter and section 2's ten thousand
//!    futures, for the chart of each way of waiting at 1, 64 and 10,000 waiters.
//!
//! About a minute (most of it the idle windows and the held kernels' end before the
//! throughput phase). `CUDA_EVENT_WAKE_QUICK=1`: sections 1 and 2 in full (a 2 s hold in section 1),
//! section 3 with none and with 10,000 stream futures pending, section 6 in 4 rounds; no idle or
//! throughput phase (about 20 s). A deadline ends a run that hangs after 6 minutes (quick: 150 s); what was
//! measured until then is saved. `CUDA_EVENT_WAKE_SECTIONS` (say `13`; default `1236`) runs only
//! the sections it names.

use cuda_event_testkit as common;

use common::{HostFlags, gpu_sleep, gpu_sleep_then_set};
use cuda_event::{Completion, Event, Stream, StreamOptions, Wait, sys};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const TRIALS: usize = 200;
const IDLE_WINDOWS: usize = 5;
const PENDING: usize = 10_000;
/// Held streams per device: one fewer than the hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=32,
/// set below), so that the measured stream does not share a queue with held work.
const HELD_PER_DEVICE: usize = 31;
/// How long the kernels hold the streams of the pending futures in section 3: longer than a phase
/// (200 trials of ten waiters and the idle windows take under 10 s). The throughput phase waits
/// for them to end first.
const OLD_HOLD: Duration = Duration::from_secs(20);

/// Section 1: make + poll + drop pairs per kind.
const SELECT_PAIRS: usize = 5_000;
/// Section 1: near-empty kernels queued behind the holding one.
const SELECT_QUEUED: usize = 1_000;
/// Section 1: how long the first kernel holds the stream (quick mode: [`SELECT_HOLD_QUICK`]).
const SELECT_HOLD: Duration = Duration::from_secs(5);
const SELECT_HOLD_QUICK: Duration = Duration::from_secs(2);
/// Section 1: how long to wait for the kernels to be queued before timing the calls anyway.
const SELECT_QUEUE_WAIT: Duration = Duration::from_millis(500);
/// Section 1's goal for the worst call.
const SELECT_GOAL: Duration = Duration::from_millis(1);

fn main() {
    // `cargo bench` passes --bench; a runner of every test binary (the GPU machine's) passes test
    // flags instead: this is no test, so it does nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the wake benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    // 32 hardware queues unless the caller chose (the header says which).
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        // SAFETY: set before any thread or CUDA call exists.
        unsafe { std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32") };
    }
    let quick = std::env::var_os("CUDA_EVENT_WAKE_QUICK").is_some();
    let select_hold = if quick { SELECT_HOLD_QUICK } else { SELECT_HOLD };
    // Whatever hangs, the process ends (the device's budget is tight); what was measured is saved.
    let _deadline = common::deadline_for(
        "the wake benchmark",
        Duration::from_secs(if quick { 150 } else { 360 }),
    );
    let devices = cuda_event::device_count().expect("a CUDA GPU");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let epoch = Instant::now();
    let mut out = Output::new(header(devices, quick, select_hold));
    println!("{}", out.report);

    let measured: Vec<Stream> = (0..devices).map(|d| Stream::new(d).unwrap()).collect();
    // The flag lane's waiters wait on streams of their own, so that the other rows measure no
    // ticket writes.
    let lane_options = StreamOptions::default().flag_lane(true);
    let lane_measured: Vec<Stream> = (0..devices)
        .map(|d| Stream::with_options(d, lane_options).unwrap())
        .collect();
    // Warm up: kernels loaded, the reactor and whatever streams it keeps made.
    for stream in measured.iter().chain(&lane_measured) {
        gpu_sleep(stream, Duration::from_micros(10));
        runtime.block_on(stream.completion()).unwrap();
        let event = stream.record_event().unwrap();
        gpu_sleep(stream, Duration::from_micros(100));
        event.record(stream).unwrap();
        runtime.block_on(event.completion()).unwrap();
    }

    let sections = std::env::var("CUDA_EVENT_WAKE_SECTIONS").unwrap_or_else(|_| "1236".into());
    // First: the other sections leave kernels running that would hold its streams' queues.
    if sections.contains('6') {
        together_section(&mut out, &runtime, devices, quick, epoch);
    }
    if sections.contains('1') {
        select_section(&mut out, select_hold);
    }
    if sections.contains('2') {
        every_future_section(&mut out);
    }
    if sections.contains('3') {
        latency_section(
            &mut out,
            &runtime,
            [&measured, &lane_measured],
            devices,
            quick,
            epoch,
        );
    }
    // The held kernels of section 3 may outlast the run: end without waiting for them.
    std::process::exit(0);
}

/// The report so far, saved after each section.
struct Output {
    report: String,
    json: Vec<String>,
    /// Lines written after the current table ends.
    notes: Vec<String>,
    dir: std::path::PathBuf,
}

impl Output {
    fn new((report, json): (String, String)) -> Output {
        let dir =
            std::path::PathBuf::from(std::env::var("CUDA_EVENT_BENCH_OUT").unwrap_or_else(|_| ".".into()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Output {
            report,
            json: vec![json],
            notes: Vec::new(),
            dir,
        };
        out.save();
        out
    }

    fn save(&self) {
        std::fs::write(self.dir.join("wake.md"), &self.report).unwrap();
        std::fs::write(
            self.dir.join("wake.json"),
            format!("[\n{}\n]\n", self.json.join(",\n")),
        )
        .unwrap();
    }
}

/// The report's header (markdown) and its JSON object: GPUs, driver, parameters.
fn header(devices: i32, quick: bool, select_hold: Duration) -> (String, String) {
    let names: Vec<String> = (0..devices).map(device_name).collect();
    let (mut driver_api, mut runtime_api) = (0, 0);
    // SAFETY: each writes one int through a pointer to a live local.
    unsafe {
        let _ = sys::cudaDriverGetVersion(&mut driver_api);
        let _ = sys::cudaRuntimeGetVersion(&mut runtime_api);
    }
    let module = kernel_module_version();
    let version = |v: i32| format!("{}.{}", v / 1000, v % 1000 / 10);
    let mode = if quick {
        "quick (CUDA_EVENT_WAKE_QUICK)"
    } else {
        "full"
    };
    let gpus: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i}: {n}"))
        .collect();
    let report = format!(
        "# Wake benchmark: select! calls, every future's wake-up, wake latency, idle cost, throughput\n\n\
         - GPUs: {} ({devices})\n\
         - driver {module} (CUDA driver API {}), CUDA runtime {}\n\
         - mode: {mode}; CUDA_DEVICE_MAX_CONNECTIONS={}\n\
         - select!: {SELECT_PAIRS} make + poll once (no-op waker) + drop per kind, on a fresh stream of \
         GPU 0 held by a {} s kernel with {SELECT_QUEUED} near-empty kernels queued behind it\n\
         - every future: (a) {} event futures over {SPREAD_STREAMS} streams, (b) {} on one stream \
         with {} pending on another (details in its section)\n\
         - wake latency: {TRIALS} trials per waiter; pending futures on {HELD_PER_DEVICE} streams per GPU \
         held {} s\n\
         - {TOGETHER} waiters at once: {} rounds per waiter\n\n",
        gpus.join(", "),
        version(driver_api),
        version(runtime_api),
        std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_default(),
        select_hold.as_secs_f64(),
        SPREAD_STREAMS * SPREAD_STEPS * SPREAD_FUTURES_PER_EVENT,
        ONE_STREAM_STEPS * (ONE_STREAM_EVENT_FUTURES + ONE_STREAM_STREAM_FUTURES),
        HELD_EVENT_FUTURES + HELD_STREAM_FUTURES,
        OLD_HOLD.as_secs(),
        together_rounds(quick),
    );
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let json = format!(
        "{{\"gpus\":[{}],\"driver\":{module:?},\"cuda_driver_api\":{driver_api},\"cuda_runtime\":{runtime_api},\
         \"quick\":{quick},\"select_pairs\":{SELECT_PAIRS},\"select_queued_kernels\":{SELECT_QUEUED},\
         \"select_hold_s\":{},\"every_spread_streams\":{SPREAD_STREAMS},\"trials\":{TRIALS},\
         \"held_per_device\":{HELD_PER_DEVICE},\"held_s\":{},\"together\":{TOGETHER},\"together_rounds\":{}}}",
        quoted.join(","),
        select_hold.as_secs_f64(),
        OLD_HOLD.as_secs(),
        together_rounds(quick),
    );
    (report, json)
}

/// The device's name (`cuDeviceGetName`).
fn device_name(device: i32) -> String {
    type GetName =
        unsafe extern "C" fn(*mut std::ffi::c_char, std::ffi::c_int, sys::CUdevice) -> sys::CUresult;
    let get: sys::PFN_cuDeviceGet_v2000 = common::driver_fn(c"cuDeviceGet", 2000);
    let name: GetName = common::driver_fn(c"cuDeviceGetName", 2000);
    let (mut handle, mut buffer) = (0, [0 as std::ffi::c_char; 256]);
    // SAFETY: cuDeviceGet writes one handle to a live local; cuDeviceGetName writes at most the
    // buffer's length, NUL-terminated. The driver is initialized (device_count ran).
    unsafe {
        if get.unwrap()(&mut handle, device) != sys::CUresult::CUDA_SUCCESS
            || name(buffer.as_mut_ptr(), buffer.len() as _, handle) != sys::CUresult::CUDA_SUCCESS
        {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(buffer.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// The NVIDIA kernel module's version (580.159.04), from /proc.
fn kernel_module_version() -> String {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").unwrap_or_default();
    text.split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or("unknown")
        .to_string()
}

/// Polls `future` once with a waker that does nothing.
fn poll_now<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// The value at quantile `p` of sorted samples.
fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// p50, p99 and max of the samples (sorted here); None if there are none.
fn summary(samples: &mut [f64]) -> Option<[f64; 3]> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable_by(f64::total_cmp);
    Some([pct(samples, 0.5), pct(samples, 0.99), *samples.last().unwrap()])
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---------------------------------------------------------------------------------------------
// Section 1: the select! pattern.

#[derive(Clone, Copy)]
enum SelectKind {
    StreamCompletion,
    EventCompletion,
    FloorRecordQuery,
    FloorQuery,
}

impl SelectKind {
    fn name(self) -> &'static str {
        match self {
            SelectKind::StreamCompletion => "Stream::completion",
            SelectKind::EventCompletion => "Event::completion",
            SelectKind::FloorRecordQuery => "floor: record_event + query + drop",
            SelectKind::FloorQuery => "floor: Event::query",
        }
    }
}

/// One make + poll + drop of a future: how long each part took, and whether the poll was ready.
fn select_call<F: Future>(make: impl FnOnce() -> F) -> ([Duration; 3], bool) {
    let start = Instant::now();
    let future = make();
    let made = Instant::now();
    let (ready, polled) = {
        let mut future = std::pin::pin!(future);
        let ready = poll_now(future.as_mut()).is_ready();
        (ready, Instant::now())
    }; // dropped here
    let dropped = Instant::now();
    ([made - start, polled - made, dropped - polled], ready)
}

/// Section 1 for one kind, on a fresh held stream (returned, to be synchronized later).
///
/// A thread queues the kernels: about 1,000 queued kernels fill a stream's hardware queue, and a
/// launch past that blocks until the hold ends. If the thread is not done within
/// [`SELECT_QUEUE_WAIT`], the calls are timed while its launch is blocked (the queue full: the
/// harshest case), and the row says how many kernels went in.
fn select_pattern(out: &mut Output, kind: SelectKind, hold: Duration) -> Stream {
    let stream = Stream::new(0).unwrap();
    let queued = AtomicUsize::new(0);
    let queued_at = Instant::now();
    let row = std::thread::scope(|scope| {
        scope.spawn(|| {
            gpu_sleep(&stream, hold);
            for _ in 0..SELECT_QUEUED {
                gpu_sleep(&stream, Duration::ZERO);
                queued.fetch_add(1, Ordering::Release);
            }
        });
        while queued.load(Ordering::Acquire) < SELECT_QUEUED && queued_at.elapsed() < SELECT_QUEUE_WAIT {
            std::thread::sleep(Duration::from_micros(100));
        }
        let (queueing, queued) = (queued_at.elapsed(), queued.load(Ordering::Acquire));
        let event = stream.record_event().unwrap();
        let mut totals = Vec::with_capacity(SELECT_PAIRS);
        let mut part_max = [Duration::ZERO; 3];
        let mut ready = 0;
        for _ in 0..SELECT_PAIRS {
            let (parts, was_ready) = match kind {
                SelectKind::StreamCompletion => select_call(|| stream.completion()),
                SelectKind::EventCompletion => select_call(|| event.completion()),
                SelectKind::FloorRecordQuery => {
                    let start = Instant::now();
                    let recorded = stream.record_event().unwrap();
                    let made = Instant::now();
                    let done = recorded.query().unwrap();
                    let polled = Instant::now();
                    drop(recorded);
                    ([made - start, polled - made, polled.elapsed()], done)
                }
                SelectKind::FloorQuery => {
                    let start = Instant::now();
                    let done = event.query().unwrap();
                    ([Duration::ZERO, start.elapsed(), Duration::ZERO], done)
                }
            };
            ready += usize::from(was_ready);
            for (max, part) in part_max.iter_mut().zip(parts) {
                *max = (*max).max(part);
            }
            totals.push(us(parts.iter().sum()));
        }
        let still_held = queued_at.elapsed() < hold && !stream.query().unwrap();
        SelectRow {
            totals,
            part_max,
            ready,
            queueing,
            queued,
            still_held,
        }
    });
    row.write(out, kind, hold);
    stream
}

/// What section 1 measured for one kind.
struct SelectRow {
    /// Microseconds of each make + poll + drop.
    totals: Vec<f64>,
    part_max: [Duration; 3],
    ready: usize,
    queueing: Duration,
    queued: usize,
    still_held: bool,
}

impl SelectRow {
    fn write(self, out: &mut Output, kind: SelectKind, hold: Duration) {
        let SelectRow {
            totals,
            part_max,
            ready,
            queueing,
            queued,
            still_held,
        } = self;
        let first = totals[0];
        let worst_at = (0..totals.len())
            .max_by(|&a, &b| totals[a].total_cmp(&totals[b]))
            .unwrap();
        let mut sorted = totals;
        let [p50, p99, worst] = summary(&mut sorted).unwrap();
        let name = kind.name();
        let [create, poll, drop_] = part_max.map(us);
        let met = if worst < us(SELECT_GOAL) {
            "met"
        } else {
            "**not met**"
        };
        let queue_ms = queueing.as_secs_f64() * 1e3;
        let full = if queued < SELECT_QUEUED {
            " (the rest blocked: queue full)"
        } else {
            ""
        };
        let _ = writeln!(
            out.report,
            "| {name} | {worst:.1} | {p99:.1} | {p50:.1} | {first:.1} | {worst_at} | {create:.1} / {poll:.1} / {drop_:.1} | {ready} | {queued} in {queue_ms:.1} ms{full} | {} | {met} |",
            if still_held { "yes" } else { "**no**" },
        );
        out.json.push(format!(
            "{{\"select_pattern\":\"{name}\",\"pairs\":{SELECT_PAIRS},\"queued_kernels\":{queued},\
             \"queued_kernels_asked\":{SELECT_QUEUED},\"hold_s\":{},\"worst_us\":{worst:.2},\"p99_us\":{p99:.2},\
             \"p50_us\":{p50:.2},\"first_us\":{first:.2},\"worst_at\":{worst_at},\"max_make_us\":{create:.2},\
             \"max_poll_us\":{poll:.2},\"max_drop_us\":{drop_:.2},\"ready_polls\":{ready},\
             \"queueing_ms\":{queue_ms:.3},\"still_held\":{still_held},\"goal_us\":{}}}",
            hold.as_secs_f64(),
            us(SELECT_GOAL),
        ));
        println!(
            "select! {name:36} worst {worst:9.1} us  p99 {p99:7.1}  p50 {p50:6.1}  first {first:8.1}  queued {queued}  held throughout: {still_held}"
        );
    }
}

fn select_section(out: &mut Output, hold: Duration) {
    let _ = write!(
        out.report,
        "## The select! pattern (issue 18 item 4)\n\n\
         Each call: make the future, poll it once with a no-op waker, drop it; {SELECT_PAIRS} calls per \
         row, each on its own fresh stream of GPU 0 held by a {} s kernel with {SELECT_QUEUED} near-empty \
         kernels queued behind it (and, for `Event::completion` and `Event::query`, an event recorded \
         after them). The floors are the raw calls: a stream's future records an event and (at least \
         once) queries it. \"Held throughout\": the stream had not reached its end when the last call \
         returned (else the row did not measure a held stream). A thread queues the near-empty kernels; \
         if it is not done within {} ms (a full hardware queue blocks a launch until the hold ends), the \
         calls are timed while its launch is blocked. Goal: worst < {} ms.\n\n\
         | call | worst us | p99 us | p50 us | first call us | worst at call # | max make / poll / drop us | polls ready | near-empty kernels queued | held throughout | goal |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
        hold.as_secs_f64(),
        SELECT_QUEUE_WAIT.as_millis(),
        SELECT_GOAL.as_secs_f64() * 1e3,
    );
    let held: Vec<Stream> = [
        SelectKind::StreamCompletion,
        SelectKind::EventCompletion,
        SelectKind::FloorRecordQuery,
        SelectKind::FloorQuery,
    ]
    .into_iter()
    .map(|kind| select_pattern(out, kind, hold))
    .collect();
    out.report.push('\n');
    out.save();
    // Their held work would delay later streams that share a hardware queue with them.
    for stream in &held {
        stream.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Section 2: every future's wake-up.

/// Phase (a): streams, steps of work per stream, futures per step's event, and a step's length.
/// Few steps a stream: with CUDA's hardware queues shared by several streams, about 1,000
/// operations fill one.
const SPREAD_STREAMS: usize = 64;
const SPREAD_STEPS: usize = 39;
const SPREAD_FUTURES_PER_EVENT: usize = 4;
const SPREAD_STEP: Duration = Duration::from_millis(5);
/// Phase (b): steps on the one measured stream, event and stream futures on each step (1,000 in
/// all), a step's length, and the futures pending on a held stream beside it (event, then stream
/// futures). Its events are the floor's too, and blocking: CUDA queues only a few dozen records
/// of blocking events behind unfinished work before a record waits for the GPU (probe
/// `qdepth.c` in the results), so the steps are few and long.
const ONE_STREAM_STEPS: usize = 50;
const ONE_STREAM_EVENT_FUTURES: usize = 12;
const ONE_STREAM_STREAM_FUTURES: usize = 8;
const ONE_STREAM_STEP: Duration = Duration::from_millis(20);
const HELD_EVENT_FUTURES: usize = 9_000;
const HELD_STREAM_FUTURES: usize = 1_000;
/// How long the streams are held before their steps begin: every future is spawned and polled
/// within it (checked: the phase says so if not).
const STEPS_BEGIN_AFTER: Duration = Duration::from_secs(1);
/// Section 2's tokio workers: with the spinning and blocked threads, under the GPU machine's
/// cores.
const EVERY_WORKERS: usize = 4;
/// The longest a phase's steps may take to be seen (they take a few seconds).
const WATCH_AT_MOST: Duration = Duration::from_secs(60);
/// Section 2's goals (issue 18 item 5): every future's p99, and p50 against the blocked floor's.
const EVERY_P99_GOAL: Duration = Duration::from_millis(1);
const EVERY_P50_RATIO_GOAL: f64 = 2.0;
/// Issue 43's goals for section 2's phase (a): a flag-lane future's p99, and the reactor's p99
/// against the blocked floor's.
const LANE_P99_GOAL: Duration = Duration::from_micros(100);
const REACTOR_P99_RATIO_GOAL: f64 = 2.0;

/// When each measured step was seen to end: by the thread spinning on the flags its kernel sets
/// (the reference: the work's end as the host sees it, before the event after it completes) and
/// by each future's task. A latency counts from the first sighting by either.
struct Sightings {
    /// Per stream, per step in stream order: when the spinner saw its flag set.
    spun: Vec<Vec<Instant>>,
    /// Per future: its event (stream, index) and when its task saw it resolve.
    futures: Vec<((usize, usize), Instant)>,
}

impl Sightings {
    /// Each future's latency in microseconds; futures in `others` (of the same events) count
    /// toward the first sightings.
    fn latencies(&self, others: &[&Sightings]) -> Vec<f64> {
        let mut first = self.spun.clone();
        for ((s, i), at) in self.futures.iter().chain(others.iter().flat_map(|o| &o.futures)) {
            first[*s][*i] = first[*s][*i].min(*at);
        }
        self.futures
            .iter()
            .map(|((s, i), at)| us(at.duration_since(first[*s][*i])))
            .collect()
    }
}

/// `n` blocking, timing-free events, created before the measured steps (recorded once on
/// `stream`, which is then synchronized), so that no creation falls in the hold.
fn blocking_events(stream: &Stream, n: usize) -> Vec<Event> {
    let events: Vec<Event> = (0..n)
        .map(|_| {
            let event = Event::builder().blocking(true).build().unwrap();
            event.record(stream).unwrap();
            event
        })
        .collect();
    stream.synchronize().unwrap();
    events
}

/// Steps on `stream`: for each event, `work` (which sets the event's flag in `flags` as it ends),
/// then a record of the event.
fn steps(stream: &Stream, work: Duration, events: &[Event], flags: &HostFlags) {
    for (i, event) in events.iter().enumerate() {
        gpu_sleep_then_set(stream, work, flags, i);
        event.record(stream).unwrap();
    }
}

/// Sees each stream's steps end and, for `floor`, its events complete: one thread spinning on
/// the flags each step's kernel sets as it ends (per stream, in stream order: the next unset flag
/// of each), and a thread blocked in `synchronize` on each of `floor`'s (blocking) events in turn.
/// Returns when each was seen: the flags (per stream, in order), then the floor's events.
fn watch_steps(flags: &[(&HostFlags, usize)], floor: &[Event]) -> (Vec<Vec<Instant>>, Vec<Instant>) {
    std::thread::scope(|scope| {
        let blocked = scope.spawn(move || {
            floor
                .iter()
                .map(|e| {
                    e.synchronize().unwrap();
                    Instant::now()
                })
                .collect::<Vec<_>>()
        });
        let mut seen: Vec<Vec<Instant>> = flags.iter().map(|(_, n)| Vec::with_capacity(*n)).collect();
        let deadline = Instant::now() + WATCH_AT_MOST;
        while seen.iter().zip(flags).any(|(seen, (_, n))| seen.len() < *n) {
            // A kernel that faulted sets no flag: fail rather than spin forever.
            assert!(
                Instant::now() < deadline,
                "steps' flags still unset after {WATCH_AT_MOST:?}"
            );
            for ((flags, n), seen) in flags.iter().zip(&mut seen) {
                while seen.len() < *n && flags.is_set(seen.len()) {
                    seen.push(Instant::now());
                }
            }
        }
        (seen, blocked.join().unwrap())
    })
}

/// The floor's latency in microseconds: each synchronize's return after the flag's sighting
/// (or the synchronize's own, if it saw the event first).
fn floor_latencies(synchronized: &[Instant], spun: &[Instant]) -> Vec<f64> {
    synchronized
        .iter()
        .zip(spun)
        .map(|(sync, spin)| us(sync.duration_since(*sync.min(spin))))
        .collect()
}

type Task = tokio::task::JoinHandle<cuda_event::Result<Instant>>;

/// The time each task saw its future resolve, in order.
fn resolved(runtime: &tokio::runtime::Runtime, tasks: Vec<Task>) -> Vec<Instant> {
    tasks
        .into_iter()
        .map(|task| runtime.block_on(task).unwrap().expect("a future failed"))
        .collect()
}

/// A phase's measurements: futures' and floor's latencies (microseconds), and how long queueing
/// the work, then also spawning the tasks, took.
struct Phase {
    futures: Vec<(&'static str, Vec<f64>)>,
    floor: Vec<f64>,
    queued: Duration,
    spawned: Duration,
}

/// Phase (a): event futures on pooled events spread over [`SPREAD_STREAMS`] streams, every one
/// measured; the floor on a stream of its own beside them, stepping alike with blocking events.
/// With `lane`, the futures' streams are flag-lane streams (`StreamOptions::flag_lane`).
fn spread_phase(runtime: &tokio::runtime::Runtime, lane: bool) -> Phase {
    let options = StreamOptions::default().flag_lane(lane);
    let streams: Vec<Stream> = (0..=SPREAD_STREAMS)
        .map(|s| match s {
            SPREAD_STREAMS => Stream::new(0).unwrap(), // the floor's
            _ => Stream::with_options(0, options).unwrap(),
        })
        .collect();
    for stream in &streams {
        gpu_sleep(stream, Duration::from_micros(1));
        stream.synchronize().unwrap();
    }
    let (floor_stream, streams) = streams.split_last().unwrap();
    let floor = blocking_events(floor_stream, SPREAD_STEPS);
    let flags: Vec<HostFlags> = (0..=SPREAD_STREAMS)
        .map(|_| HostFlags::new(SPREAD_STEPS))
        .collect();
    let (floor_flags, flags) = flags.split_last().unwrap();
    let start = Instant::now();
    for (s, stream) in streams.iter().chain([floor_stream]).enumerate() {
        // Then the streams step in turn, staggered.
        gpu_sleep(
            stream,
            STEPS_BEGIN_AFTER + SPREAD_STEP * s as u32 / (SPREAD_STREAMS + 1) as u32,
        );
    }
    let events: Arc<Vec<Vec<Event>>> = Arc::new(
        streams
            .iter()
            .zip(flags)
            .map(|(stream, flags)| {
                (0..SPREAD_STEPS)
                    .map(|i| {
                        gpu_sleep_then_set(stream, SPREAD_STEP, flags, i);
                        stream.record_event().unwrap()
                    })
                    .collect()
            })
            .collect(),
    );
    steps(floor_stream, SPREAD_STEP, &floor, floor_flags);
    let queued = start.elapsed();
    let mut tasks = Vec::new();
    let mut futures = Vec::new();
    for s in 0..SPREAD_STREAMS {
        for i in 0..SPREAD_STEPS {
            for _ in 0..SPREAD_FUTURES_PER_EVENT {
                let events = events.clone();
                tasks.push(
                    runtime.spawn(async move { events[s][i].completion().await.map(|()| Instant::now()) }),
                );
                futures.push((s, i));
            }
        }
    }
    let spawned = start.elapsed();
    // The floor's steps are watched too (as the last stream), for its reference.
    let watched: Vec<(&HostFlags, usize)> = flags
        .iter()
        .chain([floor_flags])
        .map(|flags| (flags, SPREAD_STEPS))
        .collect();
    let (mut spun, synchronized) = watch_steps(&watched, &floor);
    let floor_spun = spun.pop().unwrap();
    let sightings = Sightings {
        spun,
        futures: futures.into_iter().zip(resolved(runtime, tasks)).collect(),
    };
    Phase {
        futures: vec![("Event::completion", sightings.latencies(&[]))],
        floor: floor_latencies(&synchronized, &floor_spun),
        queued,
        spawned,
    }
}

/// Phase (b): [`ONE_STREAM_EVENT_FUTURES`] event futures and [`ONE_STREAM_STREAM_FUTURES`] stream
/// futures on each of [`ONE_STREAM_STEPS`] steps of one stream, every one measured, with
/// [`HELD_EVENT_FUTURES`] and [`HELD_STREAM_FUTURES`] pending on a held stream; the floor waits
/// on the steps' (blocking) events.
fn one_stream_phase(runtime: &tokio::runtime::Runtime) -> Phase {
    let (held, measured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&measured, Duration::from_micros(1));
    measured.synchronize().unwrap();
    // Pinned host memory is allocated before the hold: its allocation may wait for the device.
    let flags = HostFlags::new(ONE_STREAM_STEPS);
    let steps_take = ONE_STREAM_STEP * ONE_STREAM_STEPS as u32;
    gpu_sleep(&held, STEPS_BEGIN_AFTER * 2 + steps_take * 2);
    let held_events: Vec<Event> = (0..HELD_EVENT_FUTURES)
        .map(|_| held.record_event().unwrap())
        .collect();
    let mut pending: Vec<Completion> = held_events.iter().map(Event::completion).collect();
    pending.extend((0..HELD_STREAM_FUTURES).map(|_| held.completion()));
    assert!(pending.iter_mut().all(|f| poll_now(Pin::new(f)).is_pending()));
    let events = Arc::new(blocking_events(&measured, ONE_STREAM_STEPS));
    let start = Instant::now();
    gpu_sleep(&measured, STEPS_BEGIN_AFTER);
    let mut stream_futures = Vec::new();
    for (i, event) in events.iter().enumerate() {
        gpu_sleep_then_set(&measured, ONE_STREAM_STEP, &flags, i);
        event.record(&measured).unwrap();
        stream_futures.extend((0..ONE_STREAM_STREAM_FUTURES).map(|_| ((0, i), measured.completion())));
    }
    let queued = start.elapsed();
    let event_tasks: Vec<((usize, usize), Task)> = (0..ONE_STREAM_STEPS * ONE_STREAM_EVENT_FUTURES)
        .map(|f| {
            let (events, i) = (events.clone(), f / ONE_STREAM_EVENT_FUTURES);
            (
                (0, i),
                runtime.spawn(async move { events[i].completion().await.map(|()| Instant::now()) }),
            )
        })
        .collect();
    let stream_tasks: Vec<((usize, usize), Task)> = stream_futures
        .into_iter()
        .map(|(at, f)| (at, runtime.spawn(async move { f.await.map(|()| Instant::now()) })))
        .collect();
    let spawned = start.elapsed();
    let (spun, synchronized) = watch_steps(&[(&flags, ONE_STREAM_STEPS)], &events);
    let sightings = |tasks: Vec<((usize, usize), Task)>| {
        let (at, tasks): (Vec<(usize, usize)>, Vec<Task>) = tasks.into_iter().unzip();
        Sightings {
            spun: spun.clone(),
            futures: at.into_iter().zip(resolved(runtime, tasks)).collect(),
        }
    };
    let (event_sightings, stream_sightings) = (sightings(event_tasks), sightings(stream_tasks));
    let still = pending
        .iter_mut()
        .map(|f| poll_now(Pin::new(f)).is_pending())
        .filter(|&p| p)
        .count();
    assert_eq!(still, pending.len(), "a future on the held stream resolved early");
    drop(pending);
    Phase {
        futures: vec![
            (
                "Event::completion",
                event_sightings.latencies(&[&stream_sightings]),
            ),
            (
                "Stream::completion",
                stream_sightings.latencies(&[&event_sightings]),
            ),
        ],
        floor: floor_latencies(&synchronized, &spun[0]),
        queued,
        spawned,
    }
}

/// Writes a phase's rows (each kind of future, then the floor) and its verdicts.
fn write_every(out: &mut Output, name: &str, phase: Phase) {
    let mut floor = phase.floor;
    let floor_n = floor.len();
    let [floor_p50, floor_p99, floor_max] = summary(&mut floor).unwrap();
    let valid = phase.spawned < STEPS_BEGIN_AFTER;
    let setup_ms = phase.spawned.as_secs_f64() * 1e3;
    let row = |out: &mut Output, observer: &str, n: usize, [p50, p99, max]: [f64; 3]| {
        let _ = writeln!(
            out.report,
            "| {name} | {observer} | {n} | {p50:.1} | {p99:.1} | {max:.1} |"
        );
        out.json.push(format!(
            "{{\"section\":\"every\",\"phase\":{name:?},\"observer\":{observer:?},\"n\":{n},\
             \"p50_us\":{p50:.1},\"p99_us\":{p99:.1},\"max_us\":{max:.1},\"setup_ms\":{setup_ms:.1},\
             \"valid\":{valid}}}"
        ));
    };
    for (kind, mut latencies) in phase.futures {
        let n = latencies.len();
        let over_1ms = latencies.iter().filter(|&&l| l > 1e3).count();
        let [p50, p99, max] = summary(&mut latencies).unwrap();
        row(out, kind, n, [p50, p99, max]);
        let ratio = p50 / floor_p50;
        let meets = ratio <= EVERY_P50_RATIO_GOAL && p99 <= us(EVERY_P99_GOAL);
        out.notes.push(format!(
            "{name}, {kind}: p50 {ratio:.2}x the floor's, p99 {p99:.1} us, {over_1ms} of {n} over 1 ms: \
             goal (p50 within {EVERY_P50_RATIO_GOAL}x the floor's, p99 within {} ms) {}",
            EVERY_P99_GOAL.as_millis(),
            if meets { "met" } else { "NOT met" },
        ));
        // Issue 43's goals: the flag lane's p99 within LANE_P99_GOAL, the reactor's within
        // REACTOR_P99_RATIO_GOAL of the floor's p99.
        let (goal, meets) = match name.contains("flag-lane") {
            true => (
                format!("p99 within {} us", LANE_P99_GOAL.as_micros()),
                p99 <= us(LANE_P99_GOAL),
            ),
            false => (
                format!("p99 within {REACTOR_P99_RATIO_GOAL}x the floor's"),
                p99 <= REACTOR_P99_RATIO_GOAL * floor_p99,
            ),
        };
        out.notes.push(format!(
            "{name}, {kind}: p99 {p99:.1} us, {:.2}x the floor's: issue 43's goal ({goal}) {}",
            p99 / floor_p99,
            if meets { "met" } else { "NOT met" },
        ));
    }
    row(
        out,
        "blocked synchronize (floor)",
        floor_n,
        [floor_p50, floor_p99, floor_max],
    );
    out.notes.push(format!(
        "{name}: work queued in {:.1} ms, tasks spawned by {setup_ms:.1} ms{}",
        phase.queued.as_secs_f64() * 1e3,
        if valid {
            ""
        } else {
            " (after the steps began: some futures were polled after their work; INVALID)"
        },
    ));
}

fn every_future_section(out: &mut Output) {
    let runtime = &tokio::runtime::Builder::new_multi_thread()
        .worker_threads(EVERY_WORKERS)
        .enable_all()
        .build()
        .unwrap();
    let _ = writeln!(
        out.report,
        "## Every future's wake-up\n\n\
         Every future measured, each its own tokio task (on {EVERY_WORKERS} workers), spawned and \
         polled while its stream is held. (a) {} event futures over {SPREAD_STREAMS} streams \
         ({SPREAD_STEPS} steps of {} ms per stream, staggered, {SPREAD_FUTURES_PER_EVENT} futures \
         per step's event); the floor on one more stream stepping alike. (b) One stream of \
         {ONE_STREAM_STEPS} steps of {} ms with {ONE_STREAM_EVENT_FUTURES} event futures and \
         {ONE_STREAM_STREAM_FUTURES} stream futures per step, while {HELD_EVENT_FUTURES} event and \
         {HELD_STREAM_FUTURES} stream futures wait on a held stream; the floor on the steps' own \
         events. Floor: a thread blocked in `synchronize` on each blocking event in turn. \
         Latency: from the first sighting of the step's end, by a thread spinning on the flag \
         each step's kernel sets in mapped host memory as it ends (no CUDA call) or by any \
         future, to the observer's. \
         Microseconds.\n\n\
         | phase | observer | n | p50 us | p99 us | max us |\n|---|---|---|---|---|---|",
        SPREAD_STREAMS * SPREAD_STEPS * SPREAD_FUTURES_PER_EVENT,
        SPREAD_STEP.as_millis(),
        ONE_STREAM_STEP.as_millis(),
    );
    let spread = spread_phase(runtime, false);
    write_every(out, "(a) over 64 streams", spread);
    out.save();
    let spread = spread_phase(runtime, true);
    write_every(out, "(a) over 64 flag-lane streams", spread);
    out.save();
    let one = one_stream_phase(runtime);
    write_every(out, "(b) 1,000 on one stream among 10,000", one);
    out.report.push('\n');
    for note in std::mem::take(&mut out.notes) {
        let _ = writeln!(out.report, "- {note}");
    }
    out.report.push('\n');
    out.save();
}

// ---------------------------------------------------------------------------------------------
// Sections 3-5: wake latency of one waiter, idle cost, throughput.

fn latency_section(
    out: &mut Output,
    runtime: &tokio::runtime::Runtime,
    [measured, lane_measured]: [&[Stream]; 2],
    devices: i32,
    quick: bool,
    epoch: Instant,
) {
    let mut rows = String::new();
    let mut idle = String::new();
    let mut held_notes = String::new();
    let mut goals = String::new();
    let phases: &[&str] = if quick {
        &["none", "stream futures"]
    } else {
        &["none", "stream futures", "event futures"]
    };
    let mut held_streams: Vec<&'static Stream> = Vec::new();
    for &pending_kind in phases {
        // Futures pending on later work: kernels that outlast the phase.
        let mut pending: Vec<Pin<Box<Completion<'static>>>> = Vec::new();
        if pending_kind != "none" {
            let streams: Vec<&'static Stream> = (0..devices as usize * HELD_PER_DEVICE)
                .map(|i| &*Box::leak(Box::new(Stream::new(i as i32 % devices).unwrap())))
                .collect();
            for stream in &streams {
                gpu_sleep(stream, OLD_HOLD);
            }
            for i in 0..PENDING {
                let stream = streams[i % streams.len()];
                if pending_kind == "stream futures" {
                    pending.push(Box::pin(stream.completion()));
                } else {
                    let event: &'static Event = Box::leak(Box::new(stream.record_event().unwrap()));
                    pending.push(Box::pin(event.completion()));
                }
            }
            let ready = pending
                .iter_mut()
                .map(|f| usize::from(poll_now(f.as_mut()).is_ready()))
                .sum::<usize>();
            if ready > 0 {
                let _ = writeln!(
                    held_notes,
                    "- **{ready} of {PENDING} {pending_kind} were ready at their first poll** (should be 0)"
                );
            }
            held_streams.extend(streams);
        }
        let count = pending.len();
        let mut seen: Vec<(&str, f64, f64)> = Vec::new();
        for waiter in WAITERS {
            let (mut cpu, mut wall) = (Duration::ZERO, Duration::ZERO);
            // The process's CPU only over many trials: another thread's running slice counts
            // only from its next tick (`process_cpu_time`).
            let (process_cpu, process_wall) = (common::process_cpu_time(), Instant::now());
            let mut samples: Vec<f64> = (0..TRIALS)
                .map(|trial| {
                    let streams = match waiter.contains("flag lane") {
                        true => lane_measured,
                        false => measured,
                    };
                    let woke = wake_once(runtime, &streams[trial % streams.len()], waiter, epoch);
                    (cpu, wall) = (cpu + woke.cpu, wall + woke.wall);
                    woke.latency_us
                })
                .collect();
            let process = (common::process_cpu_time() - process_cpu).as_secs_f64()
                / process_wall.elapsed().as_secs_f64();
            let [p50, p99, max] = summary(&mut samples).unwrap();
            seen.push((waiter, p50, p99));
            let cores = cpu.as_secs_f64() / wall.as_secs_f64();
            let _ = writeln!(
                rows,
                "| {waiter} | {count} {pending_kind} | {p50:.1} | {p99:.1} | {max:.1} | {cores:.2} | {process:.2} |"
            );
            out.json.push(format!(
                "{{\"waiter\":\"{waiter}\",\"pending\":{count},\"pending_kind\":\"{pending_kind}\",\"p50_us\":{p50:.2},\"p99_us\":{p99:.2},\"max_us\":{max:.2},\"cpu_cores\":{cores:.4},\"process_cpu_cores\":{process:.4}}}"
            ));
            println!(
                "{waiter:32} {count:5} {pending_kind:14} p50 {p50:8.1} us  p99 {p99:8.1} us  CPU {cores:.2} cores (process {process:.2})"
            );
        }
        let _ = write!(goals, "{}", lone_waiter_verdicts(&seen, count, pending_kind));
        if count > 0 && !quick {
            // Five 1 s windows in a row: the reactor's CPU comes in steps, and one window can
            // catch more of them than another.
            let windows: Vec<f64> = (0..IDLE_WINDOWS)
                .map(|_| idle_cpu(Duration::from_secs(1)))
                .collect();
            let max = windows.iter().copied().fold(0.0, f64::max);
            let mean = windows.iter().sum::<f64>() / windows.len() as f64;
            let each: Vec<String> = windows.iter().map(|w| format!("{:.2}%", w * 100.0)).collect();
            let _ = writeln!(
                idle,
                "- {count} {pending_kind} pending, {IDLE_WINDOWS} windows of 1 s: max {:.2}%, mean {:.2}% of one core ({})",
                max * 100.0,
                mean * 100.0,
                each.join(", ")
            );
            out.json.push(format!(
                "{{\"idle_pending\":{count},\"pending_kind\":\"{pending_kind}\",\"cpu_share\":{max:.5},\"cpu_share_mean\":{mean:.5},\"cpu_share_windows\":[{}]}}",
                windows.iter().map(|w| format!("{w:.5}")).collect::<Vec<_>>().join(",")
            ));
            println!(
                "idle with {count} {pending_kind}: max {:.2}%, mean {:.2}% of a core ({})",
                max * 100.0,
                mean * 100.0,
                each.join(", ")
            );
        }
        if count > 0 {
            // Their kernels must still have held them: else the phase measured fewer pending.
            let ready = pending
                .iter_mut()
                .map(|f| usize::from(poll_now(f.as_mut()).is_ready()))
                .sum::<usize>();
            let _ = writeln!(
                held_notes,
                "- {pending_kind}: {} of {count} still pending at the end of the phase",
                count - ready
            );
        }
        drop(pending); // cancelled while pending
    }

    let _ = write!(
        out.report,
        "## Wake latency of one waiter\n\n\
         {devices} GPU(s). Latency: from a host function's clock read just before the measured point \
         of the stream to the waiter's return, {TRIALS} trials each; pending futures wait on kernels \
         of {} s, on {HELD_PER_DEVICE} streams per GPU.\n\n\
         CPU, in cores: the waiting thread's CPU time over its waits divided by their wall time; \
         the process's (every thread) over the waiter's trials, set-up included, divided by \
         theirs (with futures pending, the reactor's own share is in it; for the flag lane's rows, \
         the scanner thread's spinning shows there only).\n\n\
         | waiter | pending | p50 us | p99 us | max us | CPU, waiting thread | CPU, process |\n|---|---|---|---|---|---|---|\n{rows}\n{held_notes}\n{goals}\n",
        OLD_HOLD.as_secs(),
    );
    out.save();
    if !quick {
        // The held kernels would delay the throughput phase's streams that share their queues.
        for stream in &held_streams {
            stream.synchronize().unwrap();
        }
        let (futures, blocking) = throughput(runtime, devices);
        let _ = write!(
            out.report,
            "Idle cost (getrusage of the process, tokio runtime idle):\n\n{idle}\n\
             Throughput, 64 tasks each awaiting a 20 us kernel on its own stream for 2 s: futures \
             {futures:.0}/s, blocking synchronize on spawn_blocking {blocking:.0}/s ({:.2}x).\n",
            futures / blocking
        );
        out.json.push(format!(
            "{{\"throughput_futures_per_s\":{futures:.0},\"throughput_blocking_per_s\":{blocking:.0}}}"
        ));
        println!("throughput: futures {futures:.0}/s, spawn_blocking synchronize {blocking:.0}/s");
        out.save();
    }
}

/// Section 6's waiters at once, each on a stream of its own, and its rounds (quick: fewer).
const TOGETHER: usize = 64;
const TOGETHER_ROUNDS: usize = 10;
const TOGETHER_ROUNDS_QUICK: usize = 4;

fn together_rounds(quick: bool) -> usize {
    match quick {
        true => TOGETHER_ROUNDS_QUICK,
        false => TOGETHER_ROUNDS,
    }
}

/// Section 6: [`TOGETHER`] waiters of one kind at once, for each of section 3's waiters, between
/// section 3's lone waiter and section 2's ten thousand futures. Each waiter is a thread of its
/// own running section 3's trial on its own stream (a future is awaited by `block_on` on that
/// thread), all released together; [`TOGETHER_ROUNDS`] rounds.
fn together_section(
    out: &mut Output,
    runtime: &tokio::runtime::Runtime,
    devices: i32,
    quick: bool,
    epoch: Instant,
) {
    let streams_with = |options: StreamOptions| -> Vec<Stream> {
        (0..TOGETHER)
            .map(|i| Stream::with_options(i as i32 % devices, options).unwrap())
            .collect()
    };
    let plain = streams_with(StreamOptions::default());
    let lane = streams_with(StreamOptions::default().flag_lane(true));
    for stream in plain.iter().chain(&lane) {
        gpu_sleep(stream, Duration::from_micros(10));
        stream.synchronize().unwrap();
    }
    let rounds = together_rounds(quick);
    // Each thread queues its host function and its waiter's record behind work queued on every
    // stream first: so that no stream's work starts behind another's host function on a shared
    // hardware queue.
    let hold = Duration::from_millis(2);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut rows = String::new();
    for waiter in WAITERS {
        let streams = match waiter.contains("flag lane") {
            true => &lane,
            false => &plain,
        };
        let (process_cpu, process_wall) = (common::process_cpu_time(), Instant::now());
        let mut woken: Vec<Woke> = Vec::with_capacity(rounds * TOGETHER);
        // A first round uncounted: the waiter's events created, the lanes of its streams made.
        for round in 0..=rounds {
            let start = std::sync::Barrier::new(TOGETHER + 1);
            let round_woken: Vec<Woke> = std::thread::scope(|s| {
                let threads: Vec<_> = streams
                    .iter()
                    .map(|stream| {
                        let start = &start;
                        s.spawn(move || {
                            start.wait();
                            wake_behind(runtime, stream, waiter, epoch)
                        })
                    })
                    .collect();
                for stream in streams {
                    gpu_sleep(stream, hold);
                }
                start.wait();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            if round > 0 {
                woken.extend(round_woken);
            }
        }
        let process =
            (common::process_cpu_time() - process_cpu).as_secs_f64() / process_wall.elapsed().as_secs_f64();
        let (cpu, wall) = woken.iter().fold((Duration::ZERO, Duration::ZERO), |(c, w), k| {
            (c + k.cpu, w + k.wall)
        });
        let cores_each = cpu.as_secs_f64() / wall.as_secs_f64();
        let mut samples: Vec<f64> = woken.iter().map(|w| w.latency_us).collect();
        let n = samples.len();
        let [p50, p99, max] = summary(&mut samples).unwrap();
        let _ = writeln!(
            rows,
            "| {waiter} | {n} | {p50:.1} | {p99:.1} | {max:.1} | {cores_each:.2} | {process:.2} |"
        );
        out.json.push(format!(
            "{{\"section\":\"together\",\"waiter\":\"{waiter}\",\"waiters\":{TOGETHER},\"pending\":0,\"pending_kind\":\"none\",\"n\":{n},\"p50_us\":{p50:.2},\"p99_us\":{p99:.2},\"max_us\":{max:.2},\"cpu_cores\":{cores_each:.4},\"process_cpu_cores\":{process:.4}}}"
        ));
        println!(
            "{TOGETHER} at once: {waiter:32} p50 {p50:8.1} us  p99 {p99:8.1} us  CPU {cores_each:.2} cores each (process {process:.2})"
        );
    }
    let _ = write!(
        out.report,
        "## {TOGETHER} waiters at once\n\n\
         For each waiter of the wake-latency section: {TOGETHER} threads, each on a stream of its own \
         (the flag lane's rows on flag-lane streams). Work of {} ms is queued on every stream \
         first, then the threads are released together, each running one trial of that section \
         behind it (a host function's clock read, the waiter's return; a future awaited by \
         `block_on` on its thread); {rounds} rounds after one uncounted. CUDA runs a context's host \
         functions one at a time, so the {TOGETHER} measured points come one after another, a \
         host function's run apart; the {TOGETHER} streams share CUDA_DEVICE_MAX_CONNECTIONS \
         hardware queues. {cores} cores: with more spinning waiters than cores, a row's latency \
         includes waiting for a core.\n\n\
         CPU, in cores: each waiting thread's CPU time over its wait, divided by the wall time \
         (the mean of the {TOGETHER}); the process's over the waiter's rounds.\n\n\
         | waiter | n | p50 us | p99 us | max us | CPU, each waiting thread | CPU, process |\n\
         |---|---|---|---|---|---|---|\n{rows}\n",
        hold.as_millis(),
    );
    out.save();
}

/// Issue 43's goals for one waiter: a flag-lane wait's p50 and p99, and `Wait::Spin` against the
/// spinning-query floor's p50.
const LONE_LANE_P50_GOAL_US: f64 = 10.0;
const LONE_LANE_P99_GOAL_US: f64 = 20.0;
const SPIN_P50_RATIO_GOAL: f64 = 1.2;

/// Section 3's goal verdicts for one phase's rows (waiter, p50, p99), as lines of the report.
fn lone_waiter_verdicts(seen: &[(&str, f64, f64)], count: usize, pending_kind: &str) -> String {
    let mut lines = String::new();
    let row = |name: &str| {
        seen.iter()
            .find(|(w, ..)| *w == name)
            .map(|&(_, p50, p99)| (p50, p99))
    };
    let verdict = |meets: bool| if meets { "met" } else { "NOT met" };
    for (waiter, p50, p99) in seen.iter().filter(|(w, ..)| w.contains("flag lane")) {
        let meets = *p50 <= LONE_LANE_P50_GOAL_US && *p99 <= LONE_LANE_P99_GOAL_US;
        let _ = writeln!(
            lines,
            "- {count} {pending_kind} pending, {waiter}: p50 {p50:.1} us, p99 {p99:.1} us: issue 43's goal \
             (p50 within {LONE_LANE_P50_GOAL_US} us, p99 within {LONE_LANE_P99_GOAL_US} us) {}",
            verdict(meets)
        );
    }
    for spinner in ["Wait::Spin", "Event::completion, Wait::Spin"] {
        if let (Some((spin, _)), Some((floor, _))) = (row(spinner), row("spinning query")) {
            let ratio = spin / floor;
            let _ = writeln!(
                lines,
                "- {count} {pending_kind} pending, {spinner}: p50 {ratio:.2}x the spinning query's: \
                 issue 43's goal (within {SPIN_P50_RATIO_GOAL}x) {}",
                verdict(ratio <= SPIN_P50_RATIO_GOAL)
            );
        }
    }
    lines
}

/// Section 3's waiters, in the order they run: the futures, the floors, the host function, then
/// `synchronize_with` under each `Wait` policy (named by `wait_policy`).
const WAITERS: [&str; 16] = [
    "Stream::completion",
    "Event::completion",
    "Event::completion, Wait::Spin",
    "Event::completion, Wait::SpinThen (20 us)",
    "Event::completion (flag lane)",
    "Wait::Reactor (flag lane)",
    "Event::completion, polled in a loop",
    "Event::completion (flag lane), polled in a loop",
    "blocking synchronize",
    "spinning query",
    "spinning on a host function",
    "Wait::Spin",
    "Wait::Yield",
    "Wait::SpinThen (20 us)",
    "Wait::Reactor",
    "Wait::Driver (default event)",
];

/// The `Wait` policy a section-3 waiter name stands for, and whether its event is a blocking one.
fn wait_policy(waiter: &str) -> Option<(Wait, bool)> {
    Some(match waiter {
        "Wait::Spin" => (Wait::Spin, false),
        "Wait::Yield" => (Wait::Yield, false),
        "Wait::SpinThen (20 us)" => (
            Wait::SpinThen {
                budget: Duration::from_micros(20),
            },
            false,
        ),
        "Wait::Reactor" => (Wait::Reactor, false),
        // On a blocking event it is "blocking synchronize": here CUDA's schedule for the context.
        "Wait::Driver (default event)" => (Wait::Driver, false),
        _ => return None,
    })
}

/// One trial of a waiter.
struct Woke {
    /// From the host clock read just before the measured point to the waiter's return.
    latency_us: f64,
    /// The waiting thread's CPU time, and the wall time, from the wait's call to its return.
    cpu: Duration,
    wall: Duration,
}

/// Runs `wait` on this thread: when it returned (since `epoch`), and this thread's CPU time and
/// the wall time it took.
fn waiting(epoch: Instant, wait: impl FnOnce()) -> (Duration, Duration, Duration) {
    let (cpu, wall) = (common::thread_cpu_time(), Instant::now());
    wait();
    let done = epoch.elapsed();
    (done, common::thread_cpu_time() - cpu, wall.elapsed())
}

/// One trial: the measured point is reached 1 ms after the waiter starts waiting.
fn wake_once(runtime: &tokio::runtime::Runtime, stream: &Stream, waiter: &str, epoch: Instant) -> Woke {
    // The measured point is reached 1 ms from now, after the waiter is waiting.
    gpu_sleep(stream, Duration::from_millis(1));
    wake_behind(runtime, stream, waiter, epoch)
}

/// A trial behind the work already queued on `stream`: a host function's clock read (the measured
/// point), then what the waiter waits on, then its wait.
fn wake_behind(runtime: &tokio::runtime::Runtime, stream: &Stream, waiter: &str, epoch: Instant) -> Woke {
    let reached = Arc::new(AtomicU64::new(0));
    let clock = reached.clone();
    stream
        .launch_host_fn(move || clock.store(epoch.elapsed().as_nanos() as u64, Ordering::Release))
        .unwrap();
    // Each arm makes what its wait needs, then waits inside `waiting`, which times this thread.
    let (done, cpu, wall) = match waiter {
        // Its future makes its record when first polled: inside the wait, as for any user.
        "Stream::completion" => waiting(epoch, || {
            runtime.block_on(async { stream.completion().await.unwrap() })
        }),
        "Event::completion" => {
            let event = stream.record_event().unwrap();
            waiting(epoch, || {
                runtime.block_on(async { event.completion().await.unwrap() })
            })
        }
        "Event::completion, Wait::Spin" | "Event::completion, Wait::SpinThen (20 us)" => {
            let wait = match waiter.contains("SpinThen") {
                true => Wait::SpinThen {
                    budget: Duration::from_micros(20),
                },
                false => Wait::Spin,
            };
            let event = stream.record_event().unwrap();
            waiting(epoch, || {
                runtime.block_on(async { event.completion().with_wait(wait).await.unwrap() })
            })
        }
        "Event::completion (flag lane)" => {
            let event = stream.record_event().unwrap();
            waiting(epoch, || {
                runtime.block_on(async { event.completion().await.unwrap() })
            })
        }
        // No thread's wake-up: a later poll only reads what the reactor or the scanner found.
        "Event::completion, polled in a loop" | "Event::completion (flag lane), polled in a loop" => {
            let event = stream.record_event().unwrap();
            waiting(epoch, || {
                let mut done = std::pin::pin!(event.completion());
                loop {
                    match poll_now(done.as_mut()) {
                        Poll::Ready(done) => break done.unwrap(),
                        Poll::Pending => std::hint::spin_loop(),
                    }
                }
            })
        }
        "Wait::Reactor (flag lane)" => {
            let event = stream.record_event().unwrap();
            waiting(epoch, || {
                assert!(event.synchronize_with(Wait::Reactor, None).unwrap())
            })
        }
        "spinning on a host function" => {
            let _event = stream.record_event().unwrap();
            let ran = Arc::new(AtomicU64::new(0));
            let flag = ran.clone();
            stream
                .launch_host_fn(move || flag.store(1, Ordering::Release))
                .unwrap();
            waiting(epoch, || {
                while ran.load(Ordering::Acquire) == 0 {
                    std::hint::spin_loop();
                }
            })
        }
        "blocking synchronize" => {
            let event = Event::builder().blocking(true).build().unwrap();
            event.record(stream).unwrap();
            waiting(epoch, || event.synchronize().unwrap())
        }
        "spinning query" => {
            let event = stream.record_event().unwrap();
            waiting(epoch, || while !event.query().unwrap() {})
        }
        policy => {
            let (wait, blocking) = wait_policy(policy).expect("a waiter of WAITERS");
            let event = Event::builder().blocking(blocking).build().unwrap();
            event.record(stream).unwrap();
            waiting(epoch, || assert!(event.synchronize_with(wait, None).unwrap()))
        }
    };
    let reached = Duration::from_nanos(reached.load(Ordering::Acquire));
    Woke {
        latency_us: us(done.saturating_sub(reached)),
        cpu,
        wall,
    }
}

/// The share of one core the whole process used while idle for `span`.
fn idle_cpu(span: Duration) -> f64 {
    let before = common::process_cpu_time();
    std::thread::sleep(span);
    (common::process_cpu_time() - before).as_secs_f64() / span.as_secs_f64()
}

/// Completions per second: futures on the runtime, then blocking synchronize on spawn_blocking.
fn throughput(runtime: &tokio::runtime::Runtime, devices: i32) -> (f64, f64) {
    let streams: Arc<Vec<Stream>> = Arc::new((0..64).map(|i| Stream::new(i % devices).unwrap()).collect());
    let span = Duration::from_secs(2);
    let run = |blocking: bool| {
        let start = Instant::now();
        let total: u64 = runtime.block_on(async {
            let tasks: Vec<_> = (0..streams.len())
                .map(|i| {
                    let streams = streams.clone();
                    tokio::spawn(async move {
                        let mut done = 0u64;
                        while start.elapsed() < span {
                            let stream = &streams[i];
                            gpu_sleep(stream, Duration::from_micros(20));
                            if blocking {
                                let event = Event::builder().blocking(true).build().unwrap();
                                event.record(stream).unwrap();
                                tokio::task::spawn_blocking(move || event.synchronize().unwrap())
                                    .await
                                    .unwrap();
                            } else {
                                stream.completion().await.unwrap();
                            }
                            done += 1;
                        }
                        done
                    })
                })
                .collect();
            let mut total = 0;
            for task in tasks {
                total += task.await.unwrap();
            }
            total
        });
        total as f64 / start.elapsed().as_secs_f64()
    };
    (run(false), run(true))
}
