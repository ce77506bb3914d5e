//! Measures the bandwidth of device memory with `measure`: cudaMemsetAsync of 4 KiB, 1 MiB,
//! 64 MiB and 4 GiB and a 1 GiB device-to-device cudaMemcpyAsync, each repeated until its noise
//! settles, L2 flushed before each repetition, host launch gaps kept out: each both queued behind
//! the gate and replayed from a captured graph (graph mode), side by side, against the device's
//! peak (memory clock x bus width). `--json` prints one JSON object per operation instead, for
//! one mode: gated (the default), `--graph`, or `--no-gate` (each repetition queued as the host
//! submits it, launch gaps inside the intervals, as in do_bench), for the timer's validation
//! against do_bench; `--no-sm-clock` leaves out the SM clock's stamps around each repetition (to
//! see what they cost). Each row shows the SM clock the samples ran at beside the device's maximum.
//! Then compares a 2 GiB memset with a 1 GiB copy (the same bytes moved) with
//! `compare`, times one memset with a `Timer` and makes a second stream wait on the first. Without
//! a GPU it exits with status 1 and one line naming the CUDA error.
//!
//! cargo run --release -p cuda-event --example quickstart

/// The examples' shared files, in `support/`.
mod support {
    pub(crate) mod device_memory;
    pub(crate) mod json_row;
}

use cuda_event::timing::{CompareOptions, MeasureOptions, Measurement, Timer, compare, measure};
use cuda_event::{Stream, check_runtime, sys};
use std::time::Duration;
use support::device_memory::DeviceMemory;
use support::json_row;

const MIB: usize = 1 << 20;

/// How the JSON rows are measured.
#[derive(Clone, Copy)]
enum Mode {
    Gated,
    Graph,
    Ungated,
}

fn main() {
    let flag = |name: &str| std::env::args().any(|a| a == name);
    let mode = match (flag("--graph"), flag("--no-gate")) {
        (true, _) => Mode::Graph,
        (false, true) => Mode::Ungated,
        (false, false) => Mode::Gated,
    };
    if let Err(e) = run(flag("--json").then_some(mode), !flag("--no-sm-clock")) {
        eprintln!("quickstart: {e}");
        std::process::exit(1);
    }
}

/// `json`: the mode of the JSON rows to print; `None` for the tables. `sm_clock`: read the SM clock.
fn run(json: Option<Mode>, sm_clock: bool) -> Result<(), Box<dyn std::error::Error>> {
    let devices = cuda_event::device_count()?;
    let stream = Stream::new(0)?;
    let (big, copy_src, copy_dst) = (
        DeviceMemory::new(0, 4096 * MIB)?,
        DeviceMemory::new(0, 1024 * MIB)?,
        DeviceMemory::new(0, 1024 * MIB)?,
    );
    let options = MeasureOptions::default()
        .timeout(Duration::from_secs(5))
        .sm_clock(sm_clock);
    let memset = |bytes: usize| {
        move |s: &Stream| {
            // SAFETY: `big` holds 4 GiB of device 0, at least `bytes`, and outlives the work.
            check_runtime("cudaMemsetAsync", unsafe {
                sys::cudaMemsetAsync(big.0, 0x5A, bytes, s.as_raw())
            })
        }
    };
    let copy = |s: &Stream| {
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice;
        // SAFETY: both buffers hold 1 GiB of device 0 and outlive the work.
        check_runtime("cudaMemcpyAsync", unsafe {
            sys::cudaMemcpyAsync(copy_dst.0, copy_src.0, 1024 * MIB, kind, s.as_raw())
        })
    };
    // (name, bytes moved per call, the work): a copy reads and writes each byte.
    type Work<'a> = Box<dyn Fn(&Stream) -> cuda_event::Result<()> + 'a>;
    let ops: Vec<(&str, usize, Work)> = vec![
        ("memset 4 KiB", 4096, Box::new(memset(4096))),
        ("memset 1 MiB", MIB, Box::new(memset(MIB))),
        ("memset 64 MiB", 64 * MIB, Box::new(memset(64 * MIB))),
        ("memset 4 GiB", 4096 * MIB, Box::new(memset(4096 * MIB))),
        ("copy 1 GiB d2d", 2048 * MIB, Box::new(copy)),
    ];
    let peak = peak_gb_per_s(0)?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    if let Some(mode) = json {
        let (options, name) = match mode {
            Mode::Gated => (options, "gated"),
            Mode::Graph => (options.graph(true), "graph"),
            Mode::Ungated => (options.gate(false), "ungated"),
        };
        for (op, bytes, work) in &ops {
            let m = measure(&stream, &options, |s| work(s))?;
            let leading = [
                ("op", format!("\"{op}\"")),
                ("mode", format!("\"{name}\"")),
                ("bytes", bytes.to_string()),
            ];
            let trailing = [("peak_gb_per_s", format!("{peak:.0}"))];
            println!("{}", json_row::row(&leading, &m, &trailing));
        }
        return Ok(());
    }
    println!("{devices} device(s); device 0 peak {peak:.0} GB/s (memory clock x bus width)");
    println!(
        "| operation | gated median | gated GB/s | graph median | graph GB/s | % of peak (gated) | noise (gated) | SM clock (gated), MHz | samples (gated, graph) | trust (gated; graph) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (op, bytes, work) in &ops {
        let gated: Measurement = measure(&stream, &options, |s| work(s))?;
        let graph: Measurement = measure(&stream, &options.clone().graph(true), |s| work(s))?;
        let gb = |m: &Measurement| *bytes as f64 / m.median().as_secs_f64() / 1e9;
        println!(
            "| {op} | {:.1} us | {:.0} | {:.1} us | {:.0} | {:.0}% | {:.2}% | {} | {}, {} | {}; {} |",
            us(gated.median()),
            gb(&gated),
            us(graph.median()),
            gb(&graph),
            100.0 * gb(&gated) / peak,
            100.0 * gated.noise(),
            clock(&gated),
            gated.samples().len(),
            graph.samples().len(),
            gated.trust(),
            graph.trust()
        );
    }

    // A/B: in alternation on one stream, each after its own flush; B's time over A's.
    let ab = compare(
        &stream,
        &CompareOptions::default().measure(options.clone()),
        memset(2048 * MIB),
        copy,
    )?;
    println!("A/B, memset 2 GiB (A) against copy 1 GiB d2d (B), the same bytes moved: {ab}");

    // One section with a Timer, then a second stream waits for everything the first has done.
    let timer = Timer::start(&stream)?;
    memset(64 * MIB)(&stream)?;
    let timing = timer.stop(&stream)?;
    println!(
        "one 64 MiB memset, timed once (L2 warm, no flush): {:?}",
        timing.wait()?
    );
    let second = Stream::new(0)?;
    second.wait_event(timing.events().1)?;
    let done = second.record_event()?;
    done.synchronize()?;
    println!("second stream waited on the first: complete = {}", done.query()?);
    Ok(())
}

/// The median SM clock of a measurement beside the maximum, and the throttled samples it dropped.
fn clock(m: &Measurement) -> String {
    match (m.sm_clock_mhz(), m.max_sm_clock_mhz()) {
        (Some(clock), Some(max)) => format!("{clock:.0} of {max:.0} ({} throttled)", m.throttled_samples()),
        _ => "not read".to_string(),
    }
}

/// Peak DRAM bandwidth of `device` from its attributes: 2 transfers a clock (DDR) x bus width.
fn peak_gb_per_s(device: i32) -> cuda_event::Result<f64> {
    let attribute = |attr| {
        let mut value = 0;
        // SAFETY: writes one int through a live local.
        check_runtime("cudaDeviceGetAttribute", unsafe {
            sys::cudaDeviceGetAttribute(&mut value, attr, device)
        })
        .map(|()| f64::from(value))
    };
    let khz = attribute(sys::cudaDeviceAttr::cudaDevAttrMemoryClockRate)?;
    let bits = attribute(sys::cudaDeviceAttr::cudaDevAttrGlobalMemoryBusWidth)?;
    Ok(2.0 * khz * 1e3 * bits / 8.0 / 1e9)
}
