//! `measure` with the calibration on, for kernels of known length and memsets: the rows that
//! `bench/calibration_referee.py` sets beside CUPTI's times of the same launches, do_bench and
//! do_bench_cudagraph.
//!
//! `cargo bench -p cuda-event --bench calibration` on a GPU machine (the GPU machine's runner: the
//! staged binary with `--bench`); writes `calibration.jsonl` to `$CUDA_EVENT_BENCH_OUT` (default:
//! the current folder). Run it under `bench/cupti_referee/` for CUPTI's column: each row carries
//! the CLOCK_MONOTONIC window of its measurement, in which the referee finds the measurement's own
//! launches.
//!
//! Rows: the test kit's spinning kernel (one thread on `%globaltimer`) of 0, 1, 2, 5, 10 and 100 us
//! and memsets of 4 KiB, 1 MiB and 64 MiB, gated and in graph mode, L2 flushed, calibrated; then
//! the 10 us kernel ten times more in each mode (`"phase": "spread"`), for the spread of its median
//! from run to run. Each row carries the measurement's verdict (`Measurement::trust`), which the
//! referee sets beside whether the row met its goal against CUPTI.

use cuda_event::Stream;
use cuda_event::timing::{FlushVerdict, MeasureOptions, Measurement, measure};
use cuda_event_testkit::{self as common, TestBuffer};
use std::fmt::Write as _;
use std::time::Duration;

const LENGTHS_US: [u64; 6] = [0, 1, 2, 5, 10, 100];
const MEMSETS: [(&str, usize); 3] = [("4 KiB", 4 << 10), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20)];

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("the calibration benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    let _watchdog = common::deadline_for("the calibration benchmark", Duration::from_secs(400));
    let stream = Stream::new(0).expect("a CUDA GPU");
    let options = MeasureOptions::default()
        .calibrate(true)
        .timeout(Duration::from_secs(5));
    let mut rows = String::new();
    let mut row =
        |phase: &str, op: &str, length_us: Option<u64>, bytes: usize, graph: bool, work: &dyn Fn(&Stream)| {
            let options = options.clone().graph(graph);
            let (from, m) = (
                common::monotonic_ns(),
                measure(&stream, &options, |s| -> cuda_event::Result<()> {
                    work(s);
                    Ok(())
                }),
            );
            let to = common::monotonic_ns();
            let m = m.expect("a measurement");
            let line = json(phase, op, length_us, bytes, graph, &m, from, to);
            println!("{line}");
            let _ = writeln!(rows, "{line}");
        };
    for graph in [false, true] {
        for us in LENGTHS_US {
            let length = Duration::from_micros(us);
            row("table", &format!("kernel {us} us"), Some(us), 0, graph, &|s| {
                common::gpu_spin(s, length)
            });
        }
        for (name, bytes) in MEMSETS {
            let buffer = TestBuffer::new(0, bytes);
            row("table", &format!("memset {name}"), None, bytes, graph, &|s| {
                buffer.memset(s, 0x5A)
            });
        }
    }
    for run in 0..10 {
        for graph in [false, true] {
            let length = Duration::from_micros(10);
            row(
                "spread",
                &format!("kernel 10 us, run {run}"),
                Some(10),
                0,
                graph,
                &|s| common::gpu_spin(s, length),
            );
        }
    }
    let dir = std::path::PathBuf::from(std::env::var("CUDA_EVENT_BENCH_OUT").unwrap_or_else(|_| ".".into()));
    std::fs::write(dir.join("calibration.jsonl"), rows).unwrap();
}

#[allow(clippy::too_many_arguments)]
fn json(
    phase: &str,
    op: &str,
    length_us: Option<u64>,
    bytes: usize,
    graph: bool,
    m: &Measurement,
    from: u128,
    to: u128,
) -> String {
    let us = |d: Duration| format!("{:.4}", d.as_secs_f64() * 1e6);
    let c = m.calibration().expect("calibrated");
    let (net, why) = match m.net() {
        Ok(net) => (us(net), String::new()),
        Err(e) => ("null".into(), json_text(&e.to_string())),
    };
    let flush = m.flush_check().expect("flushed");
    let trust = m.trust();
    let verdict = match flush.verdict() {
        FlushVerdict::Evicts => "evicts",
        FlushVerdict::DoesNotEvict => "does not evict",
        FlushVerdict::CannotTell => "cannot tell",
        _ => "unknown",
    };
    format!(
        "{{\"phase\":\"{phase}\",\"op\":\"{op}\",\"length_us\":{},\"bytes\":{bytes},\"mode\":\"{}\",\
         \"median_us\":{},\"net_us\":{net},\"no_net\":\"{why}\",\"fixed_cost_us\":{},\
         \"uncertainty_us\":{},\"largest_residual_us\":{},\"slope\":{},\"empty_us\":{},\
         \"samples\":{},\"noise\":{:.5},\"gated\":{},\"flush_warm_us\":{},\"flush_after_us\":{},\
         \"flush_cold_us\":{},\"flush_verdict\":\"{verdict}\",\"trusted\":{},\"trust\":\"{}\",\
         \"from_ns\":{from},\"to_ns\":{to}}}",
        length_us.map_or("null".into(), |u| u.to_string()),
        if graph { "graph" } else { "gated" },
        us(m.median()),
        us(c.fixed_cost),
        us(c.uncertainty),
        us(c.largest_residual),
        c.slope.map_or("null".into(), |slope| format!("{slope:.5}")),
        c.empty.map_or("null".into(), us),
        m.samples().len(),
        m.noise(),
        m.gated(),
        us(flush.warm),
        us(flush.after_flush),
        us(flush.cold),
        trust.is_trusted(),
        json_text(&trust.to_string()),
    )
}

/// `text` as the inside of a JSON string.
fn json_text(text: &str) -> String {
    let mut json = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                json.push('\\');
                json.push(c);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(json, "\\u{:04x}", c as u32);
            }
            c => json.push(c),
        }
    }
    json
}
