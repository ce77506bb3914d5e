//! How fast and how cheaply a future learns that the GPU got there (issue: await the GPU).
//!
//! `cargo bench -p cuda-event --bench wake` on a GPU machine; writes `wake.md` and `wake.json` to
//! `$CUDA_EVENT_BENCH_OUT` (default: the current folder).
//!
//! - Wake latency: a host function reads the host clock just before the measured record (or the
//!   stream completion's doorbell), the waiter reads it when its wait returns; p50 and p99 of 200
//!   trials, with 1 and with 10,000 futures pending on later work (held by kernels for the whole
//!   run) across 62 streams on every GPU. Waiters: a `Stream::completion` future, an
//!   `Event::completion` future (each awaited on a multi-thread tokio runtime), a thread blocked in
//!   `synchronize` on a blocking event, a thread spinning on `query` (the floors), and a thread
//!   spinning on a flag that a host function queued after a record sets (what CUDA's host-function
//!   thread alone adds, the floor of any wake-up by host function).
//! - Idle cost: CPU time of the whole process (getrusage) while 10,000 futures stay pending, in
//!   five windows of 1 s in a row.
//! - Throughput: 64 tasks, each with its own stream, submit a 20 us kernel and await its
//!   completion, for 2 s; against the same loop with a blocking `synchronize` on `spawn_blocking`.
//!
//! `CUDA_EVENT_WAKE_QUICK=1`: only the latencies with none and with 10,000 stream futures pending
//! (a probe of seconds; the full run waits minutes for held kernels before its throughput phase).

#[path = "../tests/common/mod.rs"]
mod common;

use common::gpu_sleep;
use cuda_event::{Completion, Event, Stream};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TRIALS: usize = 200;
const IDLE_WINDOWS: usize = 5;
const PENDING: usize = 10_000;
/// Held streams per device: one fewer than the hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=32,
/// set below), so that the measured stream does not share a queue with held work.
const HELD_PER_DEVICE: usize = 31;

fn main() {
    // `cargo bench` passes --bench; a runner of every test binary (the GPU machine's) passes test
    // flags instead: this is no test, so it does nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the wake benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    // SAFETY: set before any thread or CUDA call exists.
    unsafe { std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32") };
    let devices = cuda_event::device_count().expect("a CUDA GPU");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let epoch = Instant::now();
    let mut rows = String::new();
    let mut idle = String::new();
    let mut json = Vec::new();

    let measured: Vec<Stream> = (0..devices).map(|d| Stream::new(d).unwrap()).collect();
    // Warm up: kernels loaded, the reactor and heartbeat streams made.
    for stream in &measured {
        gpu_sleep(stream, Duration::from_micros(10));
        runtime.block_on(stream.completion()).unwrap();
        let event = stream.record_event().unwrap();
        gpu_sleep(stream, Duration::from_micros(100));
        event.record(stream).unwrap();
        runtime.block_on(event.completion()).unwrap();
    }

    let quick = std::env::var_os("CUDA_EVENT_WAKE_QUICK").is_some();
    let phases: &[&str] = if quick {
        &["none", "stream futures"]
    } else {
        &["none", "stream futures", "event futures"]
    };
    let mut held_streams = Vec::new();
    for &pending_kind in phases {
        // Futures pending on later work: kernels that outlast the run.
        let mut pending: Vec<Completion<'static>> = Vec::new();
        let mut events: Vec<&'static Event> = Vec::new();
        if pending_kind != "none" {
            let streams: Vec<&'static Stream> = (0..devices as usize * HELD_PER_DEVICE)
                .map(|i| &*Box::leak(Box::new(Stream::new(i as i32 % devices).unwrap())))
                .collect();
            for stream in &streams {
                gpu_sleep(stream, Duration::from_secs(120));
            }
            for i in 0..PENDING {
                let stream = streams[i % streams.len()];
                if pending_kind == "stream futures" {
                    pending.push(stream.completion());
                } else {
                    let event: &'static Event = Box::leak(Box::new(stream.record_event().unwrap()));
                    events.push(event);
                    pending.push(event.completion());
                }
            }
            for future in &mut pending {
                assert!(common::poll_once(future).is_pending());
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
            let mut samples = Vec::with_capacity(TRIALS);
            for trial in 0..TRIALS {
                let stream = &measured[trial % measured.len()];
                samples.push(wake_once(&runtime, stream, waiter, epoch));
            }
            samples.sort_unstable_by(f64::total_cmp);
            let pct = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
            let (p50, p99, max) = (pct(0.5), pct(0.99), *samples.last().unwrap());
            let _ = writeln!(
                rows,
                "| {waiter} | {count} {pending_kind} | {p50:.1} | {p99:.1} | {max:.1} |"
            );
            json.push(format!(
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
            json.push(format!(
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
        drop(pending); // cancelled while pending
    }

    let mut report = format!(
        "# Wake latency, idle cost and throughput of the futures\n\n\
         {devices} GPU(s). Latency: from a host function's clock read just before the measured point \
         of the stream to the waiter's return, {TRIALS} trials each; pending futures wait on kernels \
         that outlast the run, on {HELD_PER_DEVICE} streams per GPU.\n\n\
         | waiter | pending | p50 us | p99 us | max us |\n|---|---|---|---|---|\n{rows}\n"
    );
    if !quick {
        let (futures, blocking) = throughput(&runtime, devices);
        let _ = write!(
            report,
            "Idle cost (getrusage of the process, tokio runtime idle):\n\n{idle}\n\
             Throughput, 64 tasks each awaiting a 20 us kernel on its own stream for 2 s: futures \
             {futures:.0}/s, blocking synchronize on spawn_blocking {blocking:.0}/s ({:.2}x).\n",
            futures / blocking
        );
        json.push(format!(
            "{{\"throughput_futures_per_s\":{futures:.0},\"throughput_blocking_per_s\":{blocking:.0}}}"
        ));
        println!("throughput: futures {futures:.0}/s, spawn_blocking synchronize {blocking:.0}/s");
    }

    let out = std::path::PathBuf::from(std::env::var("CUDA_EVENT_BENCH_OUT").unwrap_or_else(|_| ".".into()));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("wake.md"), report).unwrap();
    std::fs::write(out.join("wake.json"), format!("[\n{}\n]\n", json.join(",\n"))).unwrap();
    // The held kernels outlast the run: end without waiting for them.
    std::process::exit(0);
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
    done.saturating_sub(reached).as_secs_f64() * 1e6
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
