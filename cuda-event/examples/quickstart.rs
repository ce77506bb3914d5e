//! Times a 4 GiB cudaMemsetAsync with two timing events and prints the bandwidth, then makes a
//! second stream wait on the first. Without a GPU it exits with status 1 and one line naming the
//! CUDA error.
//!
//! cargo run -p cuda-event --example quickstart

use cuda_event::{DeviceGuard, Event, Stream, sys};
use std::ffi::c_void;

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

/// Device memory for the example, freed on drop.
struct DeviceMemory(*mut c_void);

impl DeviceMemory {
    fn new(device: i32, bytes: usize) -> cuda_event::Result<DeviceMemory> {
        let _device = DeviceGuard::new(device)?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes the allocation through a live local.
        cuda_event::check_runtime("cudaMalloc", unsafe { sys::cudaMalloc(&mut ptr, bytes) })?;
        Ok(DeviceMemory(ptr))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: frees the allocation made in new; the work using it has completed.
        let freed = unsafe { sys::cudaFree(self.0) };
        // A Drop cannot return the error: say it, as the crate's own drops can.
        if let Err(e) = cuda_event::check_runtime("cudaFree", freed) {
            eprintln!("quickstart: {e}");
        }
    }
}
