//! Times a 4 GiB cudaMemsetAsync with two timing events and prints the bandwidth, then makes a
//! second stream wait on the first. Without a GPU it exits with status 1 and one line naming the
//! CUDA error.
//!
//! cargo run -p cuda-event --example quickstart

#[path = "support/device_memory.rs"]
mod device_memory;

use cuda_event::{Event, Stream, sys};
use device_memory::DeviceMemory;

const BYTES: usize = 4 << 30;

fn main() {
    if let Err(e) = run() {
        eprintln!("quickstart: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let devices = cuda_event::device_count()?;
    let stream = Stream::new(0)?;
    let buffer = DeviceMemory::new(0, BYTES)?;
    let start = Event::builder().enable_timing(true).build()?;
    let end = Event::builder().enable_timing(true).blocking(true).build()?;

    start.record(&stream)?;
    // SAFETY: the buffer holds BYTES bytes of device 0 and outlives the work (freed after the sync).
    cuda_event::check_runtime("cudaMemsetAsync", unsafe {
        sys::cudaMemsetAsync(buffer.0, 0x5A, BYTES, stream.as_raw())
    })?;
    end.record(&stream)?;
    end.synchronize()?;
    let ms = start.elapsed_time(&end)?;
    println!(
        "{devices} device(s); memset of 4 GiB on device 0: {ms:.3} ms, {:.0} GB/s",
        BYTES as f64 / ms as f64 / 1e6
    );

    // A second stream waits for everything the first has done so far.
    let second = Stream::new(0)?;
    second.wait_event(&end)?;
    let done = second.record_event()?;
    done.synchronize()?;
    println!("second stream waited on the first: complete = {}", done.query()?);
    Ok(())
}
