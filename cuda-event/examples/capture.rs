//! Captures a stream's work into a CUDA graph with `Stream::capture`: two memsets on the stream and
//! one on a second stream forked from it (a plain event recorded in the capture, waited on by the
//! second stream) and joined back, timed by two external timing events whose records are nodes of
//! the graph. The graph is then replayed three times, each replay timed by those events, and once
//! more as a future, awaited on a minimal executor. Without a GPU it exits with status 1 and one
//! line naming the CUDA error.
//!
//! cargo run --release -p cuda-event --example capture

/// The examples' shared files, in `support/`.
mod support {
    pub(crate) mod device_memory;
}

use cuda_event::capture::CaptureMode;
use cuda_event::{Event, Stream, check_runtime, sys};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use support::device_memory::DeviceMemory;

const BYTES: usize = 64 << 20;

fn main() {
    if let Err(e) = run() {
        eprintln!("capture: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (stream, side) = (Stream::new(0)?, Stream::new(0)?);
    let (a, b) = (DeviceMemory::new(0, BYTES)?, DeviceMemory::new(0, BYTES)?);
    // External: every replay records them again (a plain event's record in a capture is only a
    // dependency inside the graph, which no read outside it sees).
    let timing = || Event::builder().enable_timing(true).external(true).build();
    let (start, end) = (timing()?, timing()?);
    let forked = Event::new();
    let memset = |buffer: &DeviceMemory, value: i32, on: &Stream| {
        // SAFETY: the buffer holds BYTES of device 0 and outlives every replay (it is dropped after
        // the last one has completed).
        check_runtime("cudaMemsetAsync", unsafe {
            sys::cudaMemsetAsync(buffer.0, value, BYTES, on.as_raw())
        })
    };
    let graph = stream.capture(CaptureMode::ThreadLocal, |s| {
        start.record(s)?;
        memset(&a, 1, s)?;
        forked.record(s)?; // a dependency inside the graph
        forked.wait(&side)?; // fork: side joins the capture
        memset(&b, 2, &side)?; // beside the next memset
        memset(&a, 3, s)?;
        s.wait_stream(&side)?; // join side back before the end
        end.record(s)
    })?;
    for replay in 1..=3 {
        graph.launch(&stream)?;
        end.synchronize()?;
        let ms = start.elapsed_time(&end)?;
        println!(
            "replay {replay}: three 64 MiB memsets, two of them side by side, in {:.1} us",
            ms * 1e3
        );
    }
    // A replay as a future: any async runtime can await it; a thread-parking executor here.
    block_on(graph.launch_completion(&stream)?)?;
    println!("replay 4, awaited: complete");
    Ok(())
}

/// Runs `future` on this thread, parking it until the future's waker is woken.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}
