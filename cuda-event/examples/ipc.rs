//! Two processes share one event through its hex handle: the parent records it behind 300 ms of
//! work and starts this same program as the child, with the handle in an environment variable; the
//! child opens the event and waits for the parent's work. Without a GPU it exits with status 1 and
//! one line naming the CUDA error.
//!
//! cargo run -p cuda-event --example ipc

use cuda_event::{Event, IpcEventHandle, Stream, sys};
use std::ffi::c_void;
use std::time::{Duration, Instant};

const HANDLE: &str = "CUDA_EVENT_IPC_EXAMPLE_HANDLE";

fn main() {
    let result = match std::env::var(HANDLE) {
        Ok(text) => child(&text),
        Err(_) => parent(),
    };
    if let Err(e) = result {
        eprintln!("ipc: {e}");
        std::process::exit(1);
    }
}

unsafe extern "C" fn sleep_300ms(_: *mut c_void) {
    std::thread::sleep(Duration::from_millis(300));
}

fn parent() -> Result<(), Box<dyn std::error::Error>> {
    let stream = Stream::new(0)?;
    let event = Event::builder().interprocess(true).build()?;
    // Work that takes 300 ms, then the record the child will wait for.
    // SAFETY: a host function with no data on a live stream.
    cuda_event::check_runtime("cudaLaunchHostFunc", unsafe {
        sys::cudaLaunchHostFunc(stream.as_raw(), Some(sleep_300ms), std::ptr::null_mut())
    })?;
    event.record(&stream)?;
    let handle = event.ipc_handle()?;
    println!("parent: exported {handle}");
    let status = std::process::Command::new(std::env::current_exe()?)
        .env(HANDLE, handle.to_string())
        .status()?;
    // The exporter's event must outlive the importer's use of it: it drops only after the child ends.
    drop(event);
    if !status.success() {
        return Err(format!("child failed: {status}").into());
    }
    Ok(())
}

fn child(text: &str) -> Result<(), Box<dyn std::error::Error>> {
    let handle: IpcEventHandle = text.parse()?;
    let event = Event::from_ipc_handle(0, handle)?;
    let started = Instant::now();
    let pending = !event.query()?;
    event.synchronize()?;
    println!(
        "child: the parent's work was pending: {pending}; waited {:?} for it",
        started.elapsed()
    );
    Ok(())
}
