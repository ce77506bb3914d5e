//! Writes a GPU timeline of the quickstart's bandwidth work to `trace.json` (or the path given),
//! for Perfetto (ui.perfetto.dev: open the file) or chrome://tracing.
//!
//! One thread times the memsets with `measure` (4 KiB, 1 MiB, 64 MiB, 4 GiB), each repetition a
//! GPU range on its stream inside a host span per size; another thread, on a second stream at the
//! same time, makes twenty 1 GiB device-to-device copies, each a range, nested in a range of the
//! whole. The trace is written as it goes: the complete ranges after each size, the rest at the
//! end. Without a GPU it exits with status 1 and one line naming the CUDA error.
//!
//! cargo run --release -p cuda-event --example timeline [-- trace.json]

/// The examples' shared files, in `support/`.
mod support {
    pub(crate) mod device_memory;
}

use cuda_event::timing::{MeasureOptions, measure};
use cuda_event::trace::{ChromeTrace, Trace};
use cuda_event::{Stream, check_runtime, sys};
use std::time::Duration;
use support::device_memory::DeviceMemory;

const MIB: usize = 1 << 20;

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "trace.json".into());
    if let Err(e) = run(&path) {
        eprintln!("timeline: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let trace = Trace::new();
    let (memsets, copies) = (Stream::new(0)?, Stream::new(0)?);
    let big = DeviceMemory::new(0, 4096 * MIB)?;
    let (src, dst) = (
        DeviceMemory::new(0, 1024 * MIB)?,
        DeviceMemory::new(0, 1024 * MIB)?,
    );
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut writer = ChromeTrace::new(&trace, file)?;
    let options = MeasureOptions::default().timeout(Duration::from_secs(2));
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let copying = std::thread::Builder::new().name("copies".into()).spawn_scoped(
            s,
            || -> cuda_event::Result<()> {
                // The buffers whole (DeviceMemory is Sync), not their pointer fields.
                let (src, dst) = (&src, &dst);
                let _all = trace.range(&copies, "20 copies of 1 GiB")?;
                for _ in 0..20 {
                    trace.in_range(&copies, "copy 1 GiB d2d", || {
                        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice;
                        // SAFETY: both buffers hold 1 GiB of device 0 and outlive the work.
                        check_runtime("cudaMemcpyAsync", unsafe {
                            sys::cudaMemcpyAsync(dst.0, src.0, 1024 * MIB, kind, copies.as_raw())
                        })
                    })??;
                }
                Ok(())
            },
        )?;
        for (name, bytes) in [
            ("memset 4 KiB", 4096),
            ("memset 1 MiB", MIB),
            ("memset 64 MiB", 64 * MIB),
            ("memset 4 GiB", 4096 * MIB),
        ] {
            let _span = trace.host_range(format!("measure {name}"));
            let m = measure(&memsets, &options, |s| {
                trace.in_range(s, name, || {
                    // SAFETY: `big` holds 4 GiB of device 0, at least `bytes`, and outlives the work.
                    check_runtime("cudaMemsetAsync", unsafe {
                        sys::cudaMemsetAsync(big.0, 0x5A, bytes, s.as_raw())
                    })
                })?
            })?;
            println!(
                "{name}: median {:?} over {} samples",
                m.median(),
                m.samples().len()
            );
            writer.write_complete()?;
        }
        copying.join().expect("the copying thread")?;
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    copies.synchronize()?;
    memsets.synchronize()?;
    let summary = writer.finish()?;
    println!(
        "{path}: {} ranges ({} dropped, {} lost, {} pending, {} open); anchors within {:?}",
        summary.written,
        summary.dropped,
        summary.lost,
        summary.pending,
        summary.open,
        summary.max_anchor_error
    );
    Ok(())
}
