//! A tokio service answering many concurrent requests, each on its own CUDA stream with real GPU
//! work (a memset and a device-to-device copy of 8 MiB), awaiting the GPU instead of blocking a
//! thread. Prints the requests served per second and the wake latency: from a host function's
//! clock read just before each request's completion point to its task resuming (p50, p99).
//!
//! cargo run --release -p cuda-event --example async_pipeline [-- [--flag-lane] [--spin-then-us N]]
//!
//! `--flag-lane`: the workers' streams are flag-lane streams (`StreamOptions::flag_lane`), whose
//! waits the lane's scanner ends. `--spin-then-us N`: each completion spins through the executor
//! for up to N us before the reactor takes it (`Completion::with_wait`).
//!
//! Without a GPU it exits with status 1 and one line naming the CUDA error.

/// The examples' shared files, in `support/`.
mod support {
    pub(crate) mod device_memory;
}

use cuda_event::{Stream, StreamOptions, Wait, check_runtime, sys};
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::device_memory::DeviceMemory;

const REQUESTS: usize = 20_000;
const IN_FLIGHT: usize = 64;
const BYTES: usize = 8 << 20;

type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("async_pipeline: {e}");
        std::process::exit(1);
    }
}

/// How the workers' streams are made and their completions wait.
#[derive(Clone, Copy)]
struct Setup {
    options: StreamOptions,
    wait: Wait,
}

fn setup() -> Result<Setup, BoxError> {
    let (mut options, mut wait) = (StreamOptions::default(), Wait::Reactor);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--flag-lane" => options = options.flag_lane(true),
            "--spin-then-us" => {
                let us = args.next().ok_or("--spin-then-us needs a number")?;
                let us: u64 = us.parse().map_err(|e| format!("--spin-then-us {us:?}: {e}"))?;
                wait = Wait::SpinThen {
                    budget: Duration::from_micros(us),
                };
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    Ok(Setup { options, wait })
}

async fn run() -> Result<(), BoxError> {
    let setup = setup()?;
    let devices = cuda_event::device_count()?;
    let next = Arc::new(AtomicUsize::new(0));
    let epoch = Instant::now();
    // One worker per request in flight, each with its own stream and buffers, the GPUs in turn.
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|i| tokio::spawn(serve(i as i32 % devices, setup, next.clone(), epoch)))
        .collect();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await??);
    }
    let elapsed = epoch.elapsed();
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "{REQUESTS} requests on {devices} GPU(s), {IN_FLIGHT} in flight: {:.0} requests/s, {:.1} GB/s of \
         GPU memory traffic; wake latency p50 {:.1} us, p99 {:.1} us",
        REQUESTS as f64 / elapsed.as_secs_f64(),
        (REQUESTS * BYTES * 3) as f64 / elapsed.as_secs_f64() / 1e9,
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
    );
    Ok(())
}

/// Serves requests until there are none left; returns each one's wake latency.
async fn serve(
    device: i32,
    setup: Setup,
    next: Arc<AtomicUsize>,
    epoch: Instant,
) -> Result<Vec<Duration>, BoxError> {
    let stream = Stream::with_options(device, setup.options)?;
    let (source, target) = (
        DeviceMemory::new(device, BYTES)?,
        DeviceMemory::new(device, BYTES)?,
    );
    let mut latencies = Vec::new();
    while next.fetch_add(1, Ordering::Relaxed) < REQUESTS {
        // SAFETY: both buffers hold BYTES bytes of this device and outlive the work (awaited below).
        unsafe {
            check_runtime(
                "cudaMemsetAsync",
                sys::cudaMemsetAsync(source.0, 7, BYTES, stream.as_raw()),
            )?;
            check_runtime(
                "cudaMemcpyAsync",
                sys::cudaMemcpyAsync(
                    target.0,
                    source.0,
                    BYTES,
                    sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                    stream.as_raw(),
                ),
            )?;
        }
        let reached = Arc::new(AtomicU64::new(0));
        let clock = reached.clone();
        stream.launch_host_fn(move || clock.store(epoch.elapsed().as_nanos() as u64, Ordering::Release))?;
        stream.completion().with_wait(setup.wait).await?;
        let resumed = epoch.elapsed();
        latencies.push(resumed.saturating_sub(Duration::from_nanos(reached.load(Ordering::Acquire))));
    }
    Ok(latencies)
}
