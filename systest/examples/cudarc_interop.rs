//! cudarc and cuda-event together: cudarc's streams used through `Stream::from_raw_borrowed`, this
//! crate's events timing cudarc's work and ordering a second cudarc stream after it. cudarc's own
//! event tracking is switched off, so the only thing that orders the two streams is this crate's
//! `wait_event`; the consumer checks that it saw every byte the producer wrote. Then `measure`
//! times one cudarc copy, its closure returning cudarc's errors through this program's own error
//! type.
//!
//! cargo run -p cuda-event-systest --example cudarc_interop
//!
//! Without a GPU it exits with status 1 and one line naming the error.

use cuda_event::timing::{MeasureOptions, measure};
use cuda_event::{Event, Stream};
use cudarc::driver::{CudaContext, DriverError};
use std::error::Error;
use std::fmt;
use std::time::Duration;

const BYTES: usize = 256 << 20;
/// Device-to-device copies the producer makes before it writes the bytes the consumer checks: enough
/// work (tens of ms) that a consumer which did not wait would read the buffer before it is written.
const COPIES: usize = 40;
const PATTERN: u8 = 0x5A;

/// This program's error: cuda-event's or cudarc's. `measure`'s closure returns it, so that a cudarc
/// call inside it propagates with `?` (and cuda-event's own errors reach the caller the same way).
#[derive(Debug)]
enum InteropError {
    CudaEvent(cuda_event::Error),
    Cudarc(DriverError),
}

impl From<cuda_event::Error> for InteropError {
    fn from(e: cuda_event::Error) -> Self {
        InteropError::CudaEvent(e)
    }
}

impl From<DriverError> for InteropError {
    fn from(e: DriverError) -> Self {
        InteropError::Cudarc(e)
    }
}

impl fmt::Display for InteropError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InteropError::CudaEvent(e) => write!(f, "cuda-event: {e}"),
            InteropError::Cudarc(e) => write!(f, "cudarc: {e}"),
        }
    }
}

impl Error for InteropError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            InteropError::CudaEvent(e) => Some(e),
            InteropError::Cudarc(e) => Some(e),
        }
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("cudarc_interop: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    // cudarc panics when it finds no driver; this crate returns the error.
    cuda_event::device_count()?;
    // Device 0's primary context: the one the CUDA runtime, and so this crate, uses.
    let context = CudaContext::new(0)?;
    // SAFETY: from here on, every ordering between the two streams is made explicitly (below).
    unsafe { context.disable_event_tracking() };
    let producer = context.new_stream()?;
    let consumer = context.new_stream()?;
    // SAFETY: both are valid streams of device 0, and the cudarc streams outlive these borrows
    // (declared earlier, dropped later).
    let (on_producer, on_consumer) = unsafe {
        (
            Stream::from_raw_borrowed(producer.cu_stream().cast(), 0)?,
            Stream::from_raw_borrowed(consumer.cu_stream().cast(), 0)?,
        )
    };

    let source = producer.alloc_zeros::<u8>(BYTES)?;
    let mut scratch = producer.alloc_zeros::<u8>(BYTES)?;
    let mut buffer = producer.alloc_zeros::<u8>(BYTES)?;
    producer.synchronize()?;
    let pattern = vec![PATTERN; BYTES];

    let start = Event::builder().enable_timing(true).build()?;
    let copied = Event::builder().enable_timing(true).build()?;
    let written = Event::new();
    start.record(&on_producer)?;
    for _ in 0..COPIES {
        producer.memcpy_dtod(&source, &mut scratch)?;
    }
    copied.record(&on_producer)?;
    producer.memcpy_htod(&pattern, &mut buffer)?;
    written.record(&on_producer)?;

    // The consumer reads the buffer only after the producer wrote it: ordered by this crate's event.
    on_consumer.wait_event(&written)?;
    let seen = consumer.clone_dtoh(&buffer)?;
    consumer.synchronize()?;

    let ms = start.elapsed_time(&copied)?;
    let moved = 2.0 * (COPIES * BYTES) as f64; // each copy reads and writes BYTES
    println!(
        "{COPIES} cudarc copies of {} MiB on a cudarc stream, timed by cuda-event: {ms:.3} ms, {:.0} GB/s",
        BYTES >> 20,
        moved / ms as f64 / 1e6
    );
    let all = seen.iter().all(|&b| b == PATTERN);
    println!("the cudarc consumer stream, ordered by cuda-event's wait, saw the producer's bytes: {all}");
    if !all {
        return Err("the consumer read the buffer before the producer wrote it".into());
    }

    // One cudarc copy, timed by `measure` on the borrowed stream (`on_producer` is `producer`'s
    // CUDA stream, so the closure may submit through either).
    let options = MeasureOptions::default()
        .min_time(Duration::from_millis(100))
        .timeout(Duration::from_secs(2));
    let m = measure(&on_producer, &options, |_| -> Result<(), InteropError> {
        producer.memcpy_dtod(&source, &mut scratch)?;
        Ok(())
    })?;
    println!(
        "one cudarc copy of {} MiB, measured: median {:?} ({:.0} GB/s), noise {:.2}%, {} samples",
        BYTES >> 20,
        m.median(),
        m.bandwidth_gb_per_s(2 * BYTES as u64),
        100.0 * m.noise(),
        m.samples().len()
    );
    Ok(())
}
