//! criterion with GPU time ([`cuda_event::timing::GpuTime`], the `criterion` feature): device memory
//! bandwidth on device 0, as criterion measures it, beside `measure`'s median of the same calls.
//!
//! `cargo bench -p cuda-event --features criterion --bench gpu_time` on a GPU machine; criterion's
//! options go after `--` (a filter, `--quick`, `--sample-size N`, `--measurement-time SECONDS`,
//! `--save-baseline NAME`, `--baseline NAME`). Without `--bench` (which cargo bench passes) it
//! prints one line and exits, as the GPU machine's test runner calls every staged binary;
//! `--bench --test` runs each benchmark once, criterion's check that they run. criterion keeps
//! its results for the next run's comparison in `$CRITERION_HOME` (default: `target/criterion`).
//!
//! Benchmarks, each with its throughput in GB/s (10^9 bytes per second of GPU time):
//!
//! - `memset/iter/SIZE`: `cudaMemsetAsync` of 4 KiB, 1 MiB and 64 MiB through criterion's own loop
//!   (`Bencher::iter`): each sample is one GPU interval around its iterations.
//! - `copy/iter_custom/64 MiB`: a 64 MiB device-to-device `cudaMemcpyAsync` (a copy reads and
//!   writes each byte: 128 MiB moved) through `Bencher::iter_custom` and `GpuTime::time_iters`.
//!
//! Before criterion's, one line per call gives `measure`'s median of it (gated, so that host launch
//! gaps stay out; no L2 flush, as criterion has none): where the two differ, the GPU waited for
//! the host between criterion's iterations (`GpuTime`'s docs explain).

use criterion::{BenchmarkId, Criterion, Throughput};
use cuda_event::timing::{GpuTime, MeasureOptions, measure};
use cuda_event::{DeviceGuard, Stream, check_runtime, sys};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// The memsets' sizes, with their names.
const MEMSETS: [(usize, &str); 3] = [(4 * KIB, "4 KiB"), (MIB, "1 MiB"), (64 * MIB, "64 MiB")];
/// The copy's size.
const COPY: usize = 64 * MIB;

fn main() {
    // `cargo bench` passes --bench; a runner of every test binary (the GPU machine's) passes test
    // flags instead: this is no test, so it does nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the gpu_time benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    if let Err(e) = run() {
        eprintln!("gpu_time: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = GpuTime::on_device(0)?;
    let stream = Arc::clone(gpu.stream());
    let memory = device_memory(64 * MIB)?;
    let (copy_src, copy_dst) = (device_memory(COPY)?, device_memory(COPY)?);
    let memset = |bytes: usize| {
        move |s: &Stream| {
            // SAFETY: `memory` holds 64 MiB of device 0, at least `bytes`, and outlives the work.
            check_runtime("cudaMemsetAsync", unsafe {
                sys::cudaMemsetAsync(memory, 0x5A, bytes, s.as_raw())
            })
        }
    };
    let copy = |s: &Stream| {
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice;
        // SAFETY: both buffers hold COPY bytes of device 0 and outlive the work.
        check_runtime("cudaMemcpyAsync", unsafe {
            sys::cudaMemcpyAsync(copy_dst, copy_src, COPY, kind, s.as_raw())
        })
    };

    // The reference, in the same process: measure's median of each call.
    let options = MeasureOptions::default()
        .flush_l2(false)
        .timeout(Duration::from_secs(5));
    let reference = |name: &str, bytes: usize, work: &dyn Fn(&Stream) -> cuda_event::Result<()>| {
        measure(&stream, &options, work).map(|m| {
            println!(
                "measure, {name}: median {:?}, {:.1} GB/s{}",
                m.median(),
                m.bandwidth_gb_per_s(bytes as u64),
                if m.gated() { "" } else { " (not gated)" }
            );
        })
    };
    for (bytes, name) in MEMSETS {
        reference(&format!("memset {name}"), bytes, &memset(bytes))?;
    }
    reference("copy 64 MiB", 2 * COPY, &copy)?;

    let mut c = Criterion::default()
        .with_measurement(gpu.clone())
        .without_plots()
        .configure_from_args();
    let mut group = c.benchmark_group("memset");
    for (bytes, name) in MEMSETS {
        let work = memset(bytes);
        group.throughput(Throughput::BytesDecimal(bytes as u64));
        group.bench_function(BenchmarkId::new("iter", name), |b| {
            b.iter(|| work(&stream).expect("memset"))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("copy");
    group.throughput(Throughput::BytesDecimal(2 * COPY as u64));
    group.bench_function(BenchmarkId::new("iter_custom", "64 MiB"), |b| {
        b.iter_custom(|iters| gpu.time_iters(iters, copy).expect("copy"))
    });
    group.finish();
    c.final_summary();
    Ok(())
}

/// `bytes` of device memory on device 0, for the rest of the process: the benchmark uses it until
/// it ends, and the process's end frees it.
fn device_memory(bytes: usize) -> cuda_event::Result<*mut c_void> {
    let _device = DeviceGuard::new(0)?;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: writes the allocation through a live local.
    check_runtime("cudaMalloc", unsafe { sys::cudaMalloc(&mut ptr, bytes) })?;
    Ok(ptr)
}
