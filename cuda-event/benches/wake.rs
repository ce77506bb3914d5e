//! How fast and how cheaply a future learns that the GPU got there (issue: await the GPU; issue 18,
//! items 4 and 5).
//!
//! `cargo bench -p cuda-event --bench wake` on a GPU machine; writes `wake.md` and `wake.json` to
//! `$CUDA_EVENT_BENCH_OUT` (default: the current folder), rewritten after each section, so that a
//! run cut short keeps what it measured. The header names the GPUs, the driver and the parameters.
//!
//! Sections, in the order they run:
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
//! 2. **Every future's wake-up** (issue 18 item 5): 10,000 futures pending at once, each on its own
//!    event, all measured: (a) spread over 64 streams (156-157 each), (b) 1,000 on one stream and
//!    9,000 on 63 others. Each future is a tokio task of its own on a multi-thread runtime, spawned
//!    in a shuffled order; event futures (`Event::completion`) and stream futures
//!    (`Stream::completion`, made right after the floor's event is recorded) in separate phases,
//!    and a fifth phase of event futures over 64 streams spawned in the events' order (what the
//!    order of the first polls costs). One ticker kernel per GPU, held by a gate
//!    (`cuStreamWaitValue32` on mapped host memory) until every task has polled its future once,
//!    then counts ticks of [`TICK`] on the GPU's clock into mapped memory; event `i` (the `i`-th in
//!    time, on whichever stream) completes at tick `i + 1`, or, past [`WAITS_PER_STREAM`] waits
//!    on its stream, with the events before it since that stream's last wait
//!    (`cuStreamWaitValue32`): in a known order, with no kernel on the measured streams (whose
//!    hardware queues take a bounded number of commands).
//!    The floor, in the same run: one thread per stream blocked in `Event::synchronize` on each of
//!    that stream's events in order (events built `.blocking(true).enable_timing(true)`). The GPU's
//!    own time of each event: `elapsed_time` from an anchor event per GPU recorded at tick 1, whose
//!    host time a spinning `query` reads (a few microseconds late). Reported per phase and subset:
//!    the future's and the floor's latency after the GPU (p50, p99, max), the future minus the
//!    floor for the same event (p50, p99, max, how many above 1 ms and above 100 ms), and how many
//!    of the floor's waits began after their event had completed (a late floor).
//! 3. **Wake latency of one waiter** (the earlier phases): a host function reads the host clock just
//!    before the measured record (or the stream completion's record), the waiter reads it when its
//!    wait returns; p50 and p99 of 200 trials, with none and with 10,000 futures pending on later
//!    work (held by kernels for [`OLD_HOLD`]) across 31 streams per GPU. Waiters: a
//!    `Stream::completion` future, an `Event::completion` future (each awaited on a multi-thread
//!    tokio runtime), a thread blocked in `synchronize` on a blocking event, a thread spinning on
//!    `query` (the floors), and a thread spinning on a flag that a host function queued after a
//!    record sets (what CUDA's host-function thread alone adds).
//! 4. **Idle cost**: CPU time of the whole process (getrusage) while 10,000 futures stay pending, in
//!    five windows of 1 s in a row.
//! 5. **Throughput**: 64 tasks, each with its own stream, submit a 20 us kernel and await its
//!    completion, for 2 s; against the same loop with a blocking `synchronize` on `spawn_blocking`.
//!
//! About a minute (most of it the idle windows and the held kernels' end before the
//! throughput phase). `CUDA_EVENT_WAKE_QUICK=1`: sections 1 and 2 in full (a 2 s hold in section 1),
//! and section 3 with none and with 10,000 stream futures pending; no idle or throughput phase
//! (about 20 s). Watchdogs bound a run that hangs: a phase of section 2 ends the process after
//! 90 s, the whole run after 6 minutes (quick: 150 s); what was measured until then is saved.
//! `CUDA_EVENT_WAKE_TICK_US` changes [`TICK`]; `CUDA_EVENT_WAKE_SECTIONS` (say `13`) runs only the
//! sections it names.

#[path = "../tests/common/mod.rs"]
mod common;

use common::gpu_sleep;
use cuda_event::{Completion, DeviceGuard, Event, Stream, sys};
use std::ffi::c_void;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const TRIALS: usize = 200;
const IDLE_WINDOWS: usize = 5;
const PENDING: usize = 10_000;
/// Held streams per device: one fewer than the hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=32,
/// set below), so that the measured stream does not share a queue with held work.
const HELD_PER_DEVICE: usize = 31;
/// How long the kernels hold the streams of the pending futures in section 3: longer than a phase
/// (200 trials of five waiters and the idle windows take under 10 s). The throughput phase waits
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

/// Section 2: futures pending at once, each on its own event.
const EVERY_FUTURES: usize = 10_000;
/// Section 2: streams the futures are spread over.
const EVERY_STREAMS: usize = 64;
/// Section 2, layout (b): futures on the one stream (the rest spread over the other 63).
const ONE_STREAM: usize = 1_000;
/// Section 2: the GPU passes one tick per event, so the last event completes [`EVERY_FUTURES`]
/// ticks after the gate opens.
const TICK: Duration = Duration::from_micros(20);
/// Section 2: `cuStreamWaitValue32` commands per stream at most: waits queued behind a closed gate
/// block the submitting thread past a limit of the hardware queues (the probe in the results
/// says where), and a submission blocked until the gate opens measures nothing.
const WAITS_PER_STREAM: usize = 8;
/// Section 2: the bound of the fallback query (issue 18 item 2): no future may wake later than this
/// after the floor.
const FALLBACK_BOUND: Duration = Duration::from_millis(100);
/// Section 2: the goal for every future's p99 (issue 18 item 5).
const EVERY_P99_GOAL: Duration = Duration::from_millis(1);
/// Section 2: how long the futures may take to be polled once, or the submission to be queued,
/// before a watchdog opens the gate anyway (and the phase is marked invalid).
const GATE_DEADLINE: Duration = Duration::from_secs(20);

fn main() {
    // `cargo bench` passes --bench; a runner of every test binary (the GPU machine's) passes test
    // flags instead: this is no test, so it does nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the wake benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    // SAFETY: set before any thread or CUDA call exists.
    unsafe { std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32") };
    let quick = std::env::var_os("CUDA_EVENT_WAKE_QUICK").is_some();
    let tick = std::env::var("CUDA_EVENT_WAKE_TICK_US")
        .ok()
        .and_then(|us| us.parse().ok())
        .map_or(TICK, Duration::from_micros);
    let select_hold = if quick { SELECT_HOLD_QUICK } else { SELECT_HOLD };
    // Whatever hangs, the process ends (the device's budget is tight); what was measured is saved.
    let _watchdog = common::watchdog_for(
        "the wake benchmark",
        Duration::from_secs(if quick { 150 } else { 360 }),
    );
    let devices = cuda_event::device_count().expect("a CUDA GPU");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let epoch = Instant::now();
    let mut out = Output::new(header(devices, quick, tick, select_hold));
    println!("{}", out.report);

    let measured: Vec<Stream> = (0..devices).map(|d| Stream::new(d).unwrap()).collect();
    // Warm up: kernels loaded, the reactor and whatever streams it keeps made.
    for stream in &measured {
        gpu_sleep(stream, Duration::from_micros(10));
        runtime.block_on(stream.completion()).unwrap();
        let event = stream.record_event().unwrap();
        gpu_sleep(stream, Duration::from_micros(100));
        event.record(stream).unwrap();
        runtime.block_on(event.completion()).unwrap();
    }

    let sections = std::env::var("CUDA_EVENT_WAKE_SECTIONS").unwrap_or_else(|_| "123".into());
    if sections.contains('1') {
        select_section(&mut out, select_hold);
    }
    if sections.contains('2') {
        every_future_section(&mut out, &runtime, devices, tick, epoch);
    }
    if sections.contains('3') {
        latency_section(&mut out, &runtime, &measured, devices, quick, epoch);
    }
    // The held kernels of section 3 may outlast the run: end without waiting for them.
    std::process::exit(0);
}

/// The report so far, saved after each section.
struct Output {
    report: String,
    json: Vec<String>,
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
fn header(devices: i32, quick: bool, tick: Duration, select_hold: Duration) -> (String, String) {
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
         - mode: {mode}; CUDA_DEVICE_MAX_CONNECTIONS=32\n\
         - select!: {SELECT_PAIRS} make + poll once (no-op waker) + drop per kind, on a fresh stream of \
         GPU 0 held by a {} s kernel with {SELECT_QUEUED} near-empty kernels queued behind it\n\
         - every future: {EVERY_FUTURES} futures pending at once, each on its own event and its own \
         task, (a) over {EVERY_STREAMS} streams, (b) {ONE_STREAM} on one stream and the rest over \
         {} others; one tick of {} us per event ({} ms in all), at most 8 waits per stream (events between two complete together)\n\
         - wake latency: {TRIALS} trials per waiter; pending futures on {HELD_PER_DEVICE} streams per GPU \
         held {} s\n\n",
        gpus.join(", "),
        version(driver_api),
        version(runtime_api),
        select_hold.as_secs_f64(),
        EVERY_STREAMS - 1,
        tick.as_secs_f64() * 1e6,
        (tick * EVERY_FUTURES as u32).as_secs_f64() * 1e3,
        OLD_HOLD.as_secs(),
    );
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let json = format!(
        "{{\"gpus\":[{}],\"driver\":{module:?},\"cuda_driver_api\":{driver_api},\"cuda_runtime\":{runtime_api},\
         \"quick\":{quick},\"select_pairs\":{SELECT_PAIRS},\"select_queued_kernels\":{SELECT_QUEUED},\
         \"select_hold_s\":{},\"every_futures\":{EVERY_FUTURES},\"every_streams\":{EVERY_STREAMS},\
         \"every_one_stream\":{ONE_STREAM},\"every_tick_us\":{},\"trials\":{TRIALS},\
         \"held_per_device\":{HELD_PER_DEVICE},\"held_s\":{}}}",
        quoted.join(","),
        select_hold.as_secs_f64(),
        tick.as_secs_f64() * 1e6,
        OLD_HOLD.as_secs(),
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

/// A ticker kernel: waits `tick_ns` on the GPU's global timer, writes the tick's number to
/// `counter` (mapped host memory), `ticks` times. The streams of the measured events wait for its
/// ticks (`cuStreamWaitValue32`).
const TICKER_PTX: &std::ffi::CStr = c".version 7.0
.target sm_70
.address_size 64
.visible .entry ticker(.param .u64 counter, .param .u64 tick_ns, .param .u32 ticks)
{
    .reg .u64 %ptr, %tick, %next, %now;
    .reg .u32 %k, %n;
    .reg .pred %p;
    ld.param.u64 %ptr, [counter];
    ld.param.u64 %tick, [tick_ns];
    ld.param.u32 %n, [ticks];
    mov.u64 %next, %globaltimer;
    mov.u32 %k, 0;
NEXT:
    setp.ge.u32 %p, %k, %n;
    @%p bra DONE;
    add.u64 %next, %next, %tick;
WAIT:
    mov.u64 %now, %globaltimer;
    setp.lt.u64 %p, %now, %next;
    @%p bra WAIT;
    add.u32 %k, %k, 1;
    st.volatile.global.u32 [%ptr], %k;
    membar.sys;
    bra NEXT;
DONE:
    ret;
}
";

fn driver_ok(call: &str, code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{call} failed: {}", code.0);
}

/// One GPU's clock for section 2: a gate and a tick counter in mapped host memory, the ticker
/// kernel, its stream, and the anchor (an event recorded at tick 1 on a stream of its own).
struct Clock {
    gate: &'static AtomicU32,
    counter: &'static AtomicU32,
    gate_device: sys::CUdeviceptr,
    counter_device: sys::CUdeviceptr,
    kernel: usize,
    ticker: Stream,
    anchor_stream: Stream,
    anchor: Event,
}

impl Clock {
    fn new(device: i32) -> Clock {
        let _device = DeviceGuard::new(device).unwrap();
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        common::ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
        let alloc: sys::PFN_cuMemHostAlloc_v2020 = common::driver_fn(c"cuMemHostAlloc", 2020);
        let device_ptr: sys::PFN_cuMemHostGetDevicePointer_v3020 =
            common::driver_fn(c"cuMemHostGetDevicePointer", 3020);
        let load: sys::PFN_cuModuleLoadData_v2000 = common::driver_fn(c"cuModuleLoadData", 2000);
        let get: sys::PFN_cuModuleGetFunction_v2000 = common::driver_fn(c"cuModuleGetFunction", 2000);
        let (mut host, mut words, mut module, mut kernel) = (
            std::ptr::null_mut::<c_void>(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: out-pointers are live locals; the allocation (8 bytes of page-locked host memory
        // mapped for the device) and the module stay for the process (never freed: the GPU may
        // still read the words when the process ends).
        unsafe {
            driver_ok(
                "cuMemHostAlloc",
                alloc.unwrap()(&mut host, 8, sys::CU_MEMHOSTALLOC_DEVICEMAP),
            );
            driver_ok(
                "cuMemHostGetDevicePointer",
                device_ptr.unwrap()(&mut words, host, 0),
            );
            driver_ok(
                "cuModuleLoadData",
                load.unwrap()(&mut module, TICKER_PTX.as_ptr().cast()),
            );
            driver_ok(
                "cuModuleGetFunction",
                get.unwrap()(&mut kernel, module, c"ticker".as_ptr()),
            );
        }
        // SAFETY: 8 bytes, page-aligned, never freed; the GPU and the host access them as atomics.
        let (gate, counter) = unsafe {
            let words = host.cast::<AtomicU32>();
            (&*words, &*words.add(1))
        };
        gate.store(0, Ordering::Release);
        counter.store(0, Ordering::Release);
        Clock {
            gate,
            counter,
            gate_device: words,
            counter_device: words + 4,
            kernel: kernel as usize,
            ticker: Stream::new(device).unwrap(),
            anchor_stream: Stream::new(device).unwrap(),
            anchor: Event::builder().enable_timing(true).build().unwrap(),
        }
    }

    /// Queues, gated: the ticker for `ticks` ticks of `tick`, and the anchor at tick 1.
    fn arm(&self, tick: Duration, ticks: usize) {
        // The last phase's ticker and anchor are done (their events completed); be sure.
        self.ticker.synchronize().unwrap();
        self.anchor_stream.synchronize().unwrap();
        self.gate.store(0, Ordering::Release);
        self.counter.store(0, Ordering::Release);
        wait_value(&self.ticker, self.gate_device, 1);
        let launch: sys::PFN_cuLaunchKernel_v4000 = common::driver_fn(c"cuLaunchKernel", 4000);
        let (mut counter, mut tick_ns, mut count) =
            (self.counter_device, tick.as_nanos() as u64, ticks as u32);
        let mut params: [*mut c_void; 3] = [
            (&mut counter as *mut sys::CUdeviceptr).cast(),
            (&mut tick_ns as *mut u64).cast(),
            (&mut count as *mut u32).cast(),
        ];
        let _device = DeviceGuard::new(self.ticker.device()).unwrap();
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        common::ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
        // SAFETY: the ticker kernel of this device's primary context (current), launched on a live
        // stream with the parameters its PTX declares; the counter outlives the kernel.
        driver_ok("cuLaunchKernel", unsafe {
            launch.unwrap()(
                self.kernel as _,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.ticker.as_raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        });
        wait_value(&self.anchor_stream, self.counter_device, 1);
        self.anchor.record(&self.anchor_stream).unwrap();
    }

    fn open(&self) {
        self.gate.store(1, Ordering::Release);
    }
}

/// Queues on `stream` a wait until the word at `address` is at least `value`.
fn wait_value(stream: &Stream, address: sys::CUdeviceptr, value: u32) {
    static WAIT: std::sync::OnceLock<sys::PFN_cuStreamWaitValue32_v11070> = std::sync::OnceLock::new();
    let wait = *WAIT.get_or_init(|| common::driver_fn(c"cuStreamWaitValue32", 11070));
    let _device = DeviceGuard::new(stream.device()).unwrap();
    let flag = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
    // SAFETY: a live stream, and mapped memory that is never freed.
    driver_ok("cuStreamWaitValue32", unsafe {
        wait.unwrap()(stream.as_raw(), address, value, flag)
    });
}

/// Which future each task awaits.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Event,
    Stream,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Event => "Event::completion",
            Kind::Stream => "Stream::completion",
        }
    }
}

/// Where the futures of a phase are: `stream_of[i]` is the stream of the `i`-th event in time.
struct Layout {
    name: &'static str,
    stream_of: Vec<usize>,
    /// Layout (b): the futures of stream 0 are a subset of their own.
    one_stream: bool,
}

fn spread() -> Layout {
    Layout {
        name: "(a) over 64 streams",
        stream_of: (0..EVERY_FUTURES).map(|i| i % EVERY_STREAMS).collect(),
        one_stream: false,
    }
}

fn one_stream() -> Layout {
    // Every tenth event is the one stream's; the rest go round the other 63.
    let every = EVERY_FUTURES / ONE_STREAM;
    let mut others = 0;
    let stream_of = (0..EVERY_FUTURES)
        .map(|i| {
            if i % every == 0 {
                0
            } else {
                others += 1;
                1 + (others - 1) % (EVERY_STREAMS - 1)
            }
        })
        .collect();
    Layout {
        name: "(b) 1,000 on one stream",
        stream_of,
        one_stream: true,
    }
}

/// What the tasks and the floor threads of one phase record, in nanoseconds since the epoch (0:
/// not yet).
struct Log {
    epoch: Instant,
    ready: Vec<AtomicU64>,
    floor: Vec<AtomicU64>,
    floor_late: Vec<AtomicBool>,
    polled: AtomicUsize,
    ready_at_first_poll: AtomicUsize,
    errors: AtomicUsize,
    floor_errors: AtomicUsize,
}

impl Log {
    fn new(epoch: Instant, n: usize) -> Log {
        Log {
            epoch,
            ready: (0..n).map(|_| AtomicU64::new(0)).collect(),
            floor: (0..n).map(|_| AtomicU64::new(0)).collect(),
            floor_late: (0..n).map(|_| AtomicBool::new(false)).collect(),
            polled: AtomicUsize::new(0),
            ready_at_first_poll: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            floor_errors: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Awaits `future` as task `i`, logging its first poll and when it became ready.
async fn track<F: Future<Output = cuda_event::Result<()>>>(future: F, i: usize, log: Arc<Log>) {
    let mut future = std::pin::pin!(future);
    let mut first = true;
    let result = std::future::poll_fn(|cx| {
        let poll = future.as_mut().poll(cx);
        if poll.is_ready() {
            log.ready[i].store(log.now(), Ordering::Release);
        }
        if first {
            first = false;
            if poll.is_ready() {
                log.ready_at_first_poll.fetch_add(1, Ordering::Relaxed);
            }
            log.polled.fetch_add(1, Ordering::Release);
        }
        poll
    })
    .await;
    if result.is_err() {
        log.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// A fixed shuffle of 0..n (the order the tasks are spawned, so first polls are in no stream's
/// order).
fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    order
}

fn every_future_section(
    out: &mut Output,
    runtime: &tokio::runtime::Runtime,
    devices: i32,
    tick: Duration,
    epoch: Instant,
) {
    let _ = write!(
        out.report,
        "## Every future's wake-up (issue 18 item 5)\n\n\
         {EVERY_FUTURES} futures pending at once, each its own tokio task (spawned in a shuffled order, \
         but for the last phase) on a multi-thread runtime, each on its own event (built blocking, with timing); every stream waits \
         on a gate until every task has polled once, then the GPU passes one tick per {} us; a stream waits for the tick of at most 8 of its events, the events between two waits completing together \
         (a ticker kernel; the streams wait on its count). Floor: one thread per stream blocked in \
         `Event::synchronize` on that stream's events in order. GPU time of each event: \
         `elapsed_time` from an anchor event at tick 1 whose host time a spinning `query` read (so the \
         latencies after the GPU are a few microseconds low). Stream futures are made right after their \
         floor event is recorded on the stream. \"Late floor\": the floor's wait began after its event \
         had completed (its time is then an upper bound). Goals: the future's p50 within 2x the \
         floor's, p99 <= {} ms, none more than {} ms after the floor.\n\n\
         | futures | layout | subset | n | future after GPU p50 / p99 / max us | floor after GPU p50 / p99 / max us | future - floor p50 / p99 / max us | > 1 ms | > 100 ms | late floor |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        us(tick),
        EVERY_P99_GOAL.as_secs_f64() * 1e3,
        FALLBACK_BOUND.as_millis(),
    );
    let streams: Vec<&'static Stream> = (0..EVERY_STREAMS)
        .map(|i| &*Box::leak(Box::new(Stream::new(i as i32 % devices).unwrap())))
        .collect();
    let clocks: Vec<Clock> = (0..devices).map(Clock::new).collect();
    let mut notes = String::new();
    let mut goals = String::new();
    // The last phase spawns the tasks in the events' order instead (first polls in time order):
    // against the shuffled phase of the same layout, what the order of registration costs.
    let phases = [
        (Kind::Event, spread(), true),
        (Kind::Event, one_stream(), true),
        (Kind::Stream, spread(), true),
        (Kind::Stream, one_stream(), true),
        (Kind::Event, spread(), false),
    ];
    for (kind, layout, shuffle) in &phases {
        let phase = Phase {
            kind: *kind,
            layout,
            shuffle: *shuffle,
            streams: &streams,
            clocks: &clocks,
            tick,
            epoch,
        };
        phase.run(out, runtime, &mut notes, &mut goals);
        out.save();
    }
    let _ = write!(
        out.report,
        "\n{notes}\nAgainst the goals (all futures of a phase, latencies after the GPU):\n\n\
         | futures | layout | p50: future vs 2x floor | p99 <= {} ms | none > {} ms after the floor |\n\
         |---|---|---|---|---|\n{goals}\n",
        EVERY_P99_GOAL.as_secs_f64() * 1e3,
        FALLBACK_BOUND.as_millis(),
    );
    out.save();
}

/// Whether event `i` is in a subset.
type Member<'a> = Box<dyn Fn(usize) -> bool + 'a>;

struct Phase<'a> {
    kind: Kind,
    layout: &'a Layout,
    /// Spawn the tasks in a shuffled order (else in the events' order).
    shuffle: bool,
    streams: &'a [&'static Stream],
    clocks: &'a [Clock],
    tick: Duration,
    epoch: Instant,
}

impl Phase<'_> {
    fn run(
        &self,
        out: &mut Output,
        runtime: &tokio::runtime::Runtime,
        notes: &mut String,
        goals: &mut String,
    ) {
        let n = self.layout.stream_of.len();
        let kind = self.kind.name();
        let layout = if self.shuffle {
            self.layout.name.to_string()
        } else {
            format!("{}, first polls in time order", self.layout.name)
        };
        let _phase_watchdog =
            common::watchdog_for(&format!("every future, {kind} {layout}"), Duration::from_secs(90));
        let log = Arc::new(Log::new(self.epoch, n));
        let events: Arc<Vec<Event>> = Arc::new(
            (0..n)
                .map(|_| {
                    Event::builder()
                        .blocking(true)
                        .enable_timing(true)
                        .build()
                        .unwrap()
                })
                .collect(),
        );
        let device_of = |s: usize| self.streams[s].device() as usize;
        // Each stream's events, in order.
        let mut on_stream: Vec<Vec<usize>> = vec![Vec::new(); self.streams.len()];
        for (i, &s) in self.layout.stream_of.iter().enumerate() {
            on_stream[s].push(i);
        }
        let position: Vec<usize> = {
            let mut position = vec![0; n];
            for list in &on_stream {
                for (p, &i) in list.iter().enumerate() {
                    position[i] = p;
                }
            }
            position
        };
        let opened = std::sync::mpsc::channel::<()>();
        let by_watchdog = AtomicBool::new(false);
        let mut stream_futures: Vec<Option<Completion<'static>>> = Vec::new();
        let mut anchors = vec![None; self.clocks.len()];
        let (mut registration, mut unresolved, mut polled_at_open) = (Duration::ZERO, 0, 0);
        let submitted_at = Instant::now();
        std::thread::scope(|scope| {
            // If queueing or the first polls block, the gate opens anyway (the phase is then marked).
            let (clocks, by_watchdog, wait) = (self.clocks, &by_watchdog, opened.1);
            scope.spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(GATE_DEADLINE) {
                    by_watchdog.store(true, Ordering::Relaxed);
                    clocks.iter().for_each(Clock::open);
                }
            });
            for clock in self.clocks {
                clock.arm(self.tick, n);
            }
            // In time order, so that each hardware queue's work is in the order it will run. A
            // stream takes at most WAITS_PER_STREAM waits: the events between two of its waits
            // complete together, at the tick of the first (each event's GPU time is measured).
            for (i, &s) in self.layout.stream_of.iter().enumerate() {
                let (stream, clock) = (self.streams[s], &self.clocks[device_of(s)]);
                let group = on_stream[s].len().div_ceil(WAITS_PER_STREAM);
                if position[i].is_multiple_of(group) {
                    wait_value(stream, clock.counter_device, i as u32 + 1);
                }
                events[i].record(stream).unwrap();
                if self.kind == Kind::Stream {
                    stream_futures.push(Some(stream.completion()));
                }
            }
            let submitted = submitted_at.elapsed();
            // The floor: a thread per stream, blocked on each of its events in turn.
            for list in &on_stream {
                let (events, log) = (&events, &log);
                scope.spawn(move || {
                    for &i in list {
                        let late = events[i].query().unwrap_or(false);
                        let result = events[i].synchronize();
                        log.floor[i].store(log.now(), Ordering::Release);
                        log.floor_late[i].store(late, Ordering::Relaxed);
                        if result.is_err() {
                            log.floor_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            let spawned_at = Instant::now();
            let order = if self.shuffle {
                shuffled(n)
            } else {
                (0..n).collect()
            };
            let handles: Vec<_> = order
                .into_iter()
                .map(|i| {
                    let log = log.clone();
                    match self.kind {
                        Kind::Event => {
                            let events = events.clone();
                            runtime.spawn(async move { track(events[i].completion(), i, log).await })
                        }
                        Kind::Stream => {
                            let future = stream_futures[i].take().unwrap();
                            runtime.spawn(track(future, i, log))
                        }
                    }
                })
                .collect();
            while log.polled.load(Ordering::Acquire) < n && spawned_at.elapsed() < GATE_DEADLINE {
                std::thread::sleep(Duration::from_micros(200));
            }
            registration = spawned_at.elapsed();
            polled_at_open = log.polled.load(Ordering::Acquire);
            for clock in self.clocks {
                clock.open();
            }
            let _ = opened.0.send(());
            // The anchors: when each GPU got to tick 1, read by spinning.
            while anchors.iter().any(Option::is_none) {
                for (anchor, clock) in anchors.iter_mut().zip(self.clocks) {
                    if anchor.is_none() && clock.anchor.query().unwrap() {
                        *anchor = Some(log.now());
                    }
                }
            }
            let limit = self.tick * n as u32 + Duration::from_secs(20);
            runtime.block_on(async {
                let _ = tokio::time::timeout(limit, async {
                    for handle in handles {
                        let _ = handle.await;
                    }
                })
                .await;
            });
            unresolved = log
                .ready
                .iter()
                .filter(|t| t.load(Ordering::Acquire) == 0)
                .count();
            let _ = writeln!(
                notes,
                "- {kind}, {layout}: queued in {:.1} ms; {polled_at_open} of {n} first polls done in {:.1} \
                 ms when the gate opened{}; ready at the first poll {} (should be 0); errors {} (floor {}); \
                 unresolved after {} s {}",
                submitted.as_secs_f64() * 1e3,
                registration.as_secs_f64() * 1e3,
                if by_watchdog.load(Ordering::Relaxed) {
                    " **by the watchdog (queueing or first polls blocked): invalid**"
                } else if polled_at_open < n {
                    " **before every future was polled: invalid**"
                } else {
                    ""
                },
                log.ready_at_first_poll.load(Ordering::Relaxed),
                log.errors.load(Ordering::Relaxed),
                log.floor_errors.load(Ordering::Relaxed),
                limit.as_secs(),
                unresolved,
            );
        });
        // The GPU's time of each event, on the host's clock.
        let gpu: Vec<Option<f64>> = (0..n)
            .map(|i| {
                let clock = &self.clocks[device_of(self.layout.stream_of[i])];
                let anchor = anchors[device_of(self.layout.stream_of[i])]? as f64;
                let ms = clock.anchor.elapsed_time(&events[i]).ok()?;
                Some(anchor + f64::from(ms) * 1e6)
            })
            .collect();
        let time = |v: &AtomicU64| {
            Some(v.load(Ordering::Acquire))
                .filter(|&t| t > 0)
                .map(|t| t as f64)
        };
        let mut subsets: Vec<(&str, Member<'_>)> = vec![
            ("all", Box::new(|_| true)),
            ("first 32 of a stream", Box::new(|i| position[i] < 32)),
            ("33rd and later", Box::new(|i| position[i] >= 32)),
        ];
        if self.layout.one_stream {
            subsets.push((
                "the one stream's 1,000",
                Box::new(|i| self.layout.stream_of[i] == 0),
            ));
            subsets.push((
                "the other 63 streams'",
                Box::new(|i| self.layout.stream_of[i] != 0),
            ));
        }
        for (subset, member) in subsets {
            let members: Vec<usize> = (0..n).filter(|&i| member(i)).collect();
            let (mut future, mut floor, mut diff) = (Vec::new(), Vec::new(), Vec::new());
            let (mut over_1ms, mut over_bound, mut late) = (0, 0, 0);
            for &i in &members {
                let (ready, floor_at) = (time(&log.ready[i]), time(&log.floor[i]));
                if let (Some(r), Some(g)) = (ready, gpu[i]) {
                    future.push((r - g) / 1e3);
                }
                if let (Some(f), Some(g)) = (floor_at, gpu[i]) {
                    floor.push((f - g) / 1e3);
                }
                if let (Some(r), Some(f)) = (ready, floor_at) {
                    let d = (r - f) / 1e3;
                    over_1ms += usize::from(d > 1e3);
                    over_bound += usize::from(d > us(FALLBACK_BOUND));
                    diff.push(d);
                }
                late += usize::from(log.floor_late[i].load(Ordering::Relaxed));
            }
            let (future, floor, diff) = (summary(&mut future), summary(&mut floor), summary(&mut diff));
            let cell =
                |s: Option<[f64; 3]>| s.map_or("-".into(), |[a, b, c]| format!("{a:.1} / {b:.1} / {c:.1}"));
            let field = |name: &str, s: Option<[f64; 3]>| {
                s.map_or(format!("\"{name}\":null"), |[a, b, c]| {
                    format!("\"{name}\":{{\"p50_us\":{a:.2},\"p99_us\":{b:.2},\"max_us\":{c:.2}}}")
                })
            };
            let _ = writeln!(
                out.report,
                "| {kind} | {layout} | {subset} | {} | {} | {} | {} | {over_1ms} | {over_bound} | {late} |",
                members.len(),
                cell(future),
                cell(floor),
                cell(diff),
            );
            out.json.push(format!(
                "{{\"every_future\":\"{kind}\",\"layout\":\"{layout}\",\"subset\":\"{subset}\",\"futures\":{},\
                 {},{},{},\"over_1ms\":{over_1ms},\"over_100ms\":{over_bound},\"late_floor\":{late},\
                 \"unresolved\":{unresolved},\"registration_ms\":{:.3},\"polled_at_open\":{polled_at_open},\"gate_by_watchdog\":{}}}",
                members.len(),
                field("future_after_gpu", future),
                field("floor_after_gpu", floor),
                field("future_minus_floor", diff),
                registration.as_secs_f64() * 1e3,
                by_watchdog.load(Ordering::Relaxed),
            ));
            println!(
                "every {kind:18} {layout:24} {subset:22} future {}  floor {}  diff {}  >1ms {over_1ms} >100ms {over_bound}",
                cell(future),
                cell(floor),
                cell(diff)
            );
            if subset == "all" {
                let verdict = |met: bool| if met { "met" } else { "**not met**" };
                let p50 = match (future, floor) {
                    (Some(f), Some(b)) => {
                        format!("{} ({:.1} vs {:.1} us)", verdict(f[0] <= 2.0 * b[0]), f[0], b[0])
                    }
                    _ => "-".into(),
                };
                let p99 = future.map_or("-".into(), |f| {
                    format!("{} ({:.1} us)", verdict(f[1] <= us(EVERY_P99_GOAL)), f[1])
                });
                let _ = writeln!(
                    goals,
                    "| {kind} | {layout} | {p50} | {p99} | {} ({over_bound} of {n}, {unresolved} unresolved) |",
                    verdict(over_bound == 0 && unresolved == 0),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sections 3-5: wake latency of one waiter, idle cost, throughput.

fn latency_section(
    out: &mut Output,
    runtime: &tokio::runtime::Runtime,
    measured: &[Stream],
    devices: i32,
    quick: bool,
    epoch: Instant,
) {
    let mut rows = String::new();
    let mut idle = String::new();
    let mut held_notes = String::new();
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
        for waiter in [
            "Stream::completion",
            "Event::completion",
            "blocking synchronize",
            "spinning query",
            "spinning on a host function",
        ] {
            let mut samples: Vec<f64> = (0..TRIALS)
                .map(|trial| wake_once(runtime, &measured[trial % measured.len()], waiter, epoch))
                .collect();
            let [p50, p99, max] = summary(&mut samples).unwrap();
            let _ = writeln!(
                rows,
                "| {waiter} | {count} {pending_kind} | {p50:.1} | {p99:.1} | {max:.1} |"
            );
            out.json.push(format!(
                "{{\"waiter\":\"{waiter}\",\"pending\":{count},\"pending_kind\":\"{pending_kind}\",\"p50_us\":{p50:.2},\"p99_us\":{p99:.2},\"max_us\":{max:.2}}}"
            ));
            println!("{waiter:22} {count:5} {pending_kind:14} p50 {p50:8.1} us  p99 {p99:8.1} us");
        }
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
         | waiter | pending | p50 us | p99 us | max us |\n|---|---|---|---|---|\n{rows}\n{held_notes}\n",
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

/// One trial: microseconds from the host clock read just before the measured point to the
/// waiter's return.
fn wake_once(runtime: &tokio::runtime::Runtime, stream: &Stream, waiter: &str, epoch: Instant) -> f64 {
    let reached = Arc::new(AtomicU64::new(0));
    // The measured point is reached 1 ms from now, after the waiter is waiting.
    gpu_sleep(stream, Duration::from_millis(1));
    let clock = reached.clone();
    stream
        .launch_host_fn(move || clock.store(epoch.elapsed().as_nanos() as u64, Ordering::Release))
        .unwrap();
    let done = match waiter {
        "Stream::completion" => runtime.block_on(async {
            stream.completion().await.unwrap();
            epoch.elapsed()
        }),
        "Event::completion" => {
            let event = stream.record_event().unwrap();
            runtime.block_on(async {
                event.completion().await.unwrap();
                epoch.elapsed()
            })
        }
        "spinning on a host function" => {
            let _event = stream.record_event().unwrap();
            let ran = Arc::new(AtomicU64::new(0));
            let flag = ran.clone();
            stream
                .launch_host_fn(move || flag.store(1, Ordering::Release))
                .unwrap();
            while ran.load(Ordering::Acquire) == 0 {
                std::hint::spin_loop();
            }
            epoch.elapsed()
        }
        "blocking synchronize" => {
            let event = Event::builder().blocking(true).build().unwrap();
            event.record(stream).unwrap();
            event.synchronize().unwrap();
            epoch.elapsed()
        }
        _ => {
            let event = stream.record_event().unwrap();
            while !event.query().unwrap() {}
            epoch.elapsed()
        }
    };
    let reached = Duration::from_nanos(reached.load(Ordering::Acquire));
    us(done.saturating_sub(reached))
}

/// The share of one core the whole process used while idle for `span`.
fn idle_cpu(span: Duration) -> f64 {
    let before = process_cpu();
    std::thread::sleep(span);
    (process_cpu() - before).as_secs_f64() / span.as_secs_f64()
}

fn process_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage through a pointer to a live, zeroed local.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
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
