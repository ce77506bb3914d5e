//! CUDA events and streams for Rust with the semantics of PyTorch's [`torch.cuda.Event`]: created
//! lazily and exactly once, safe to share between threads, every flag real (timing, blocking,
//! interprocess, external), errors as values and never a panic on a machine without a GPU; plus
//! futures that await GPU work and a timer that measures it.
//!
//! ```no_run
//! use cuda_event::{Event, IpcEventHandle, Stream, DeviceGuard};
//!
//! # fn main() -> Result<(), cuda_event::Error> {
//! let stream = Stream::new(0)?;                        // a stream on device 0
//! let start = Event::builder().enable_timing(true).build()?;
//! let end = Event::builder().enable_timing(true).blocking(true).build()?;
//!
//! start.record(&stream)?;                              // creates the CUDA event, lazily
//! // ... submit work to stream.as_raw() with any CUDA library ...
//! end.record(&stream)?;
//! end.synchronize()?;                                  // sleeps: `blocking`
//! println!("{} ms", start.elapsed_time(&end)?);
//!
//! let other = Stream::new(0)?;
//! end.wait(&other)?;                                   // other's future work waits for `end`
//! other.wait_stream(&stream)?;                         // or for everything stream has so far
//! assert!(end.query()?);                               // complete?
//!
//! // Interprocess: the handle crosses a pipe as hex, the other process opens it.
//! let shared = Event::builder().interprocess(true).build()?;
//! shared.record(&stream)?;
//! let text = shared.ipc_handle()?.to_string();
//! let handle: IpcEventHandle = text.parse()?;
//! // in the other process: Event::from_ipc_handle(0, handle)?.synchronize()?;
//! # let _ = handle;
//!
//! // Raw handles in and out, for C and other crates.
//! let raw = end.as_raw().expect("recorded, so created");
//! let _guard = DeviceGuard::new(0)?;                   // current device 0 for this scope
//! # let _ = raw;
//! # Ok(()) }
//! ```
//!
//! The crate's root holds its core: events, streams, devices, errors, and the futures and waits on
//! GPU work. The rest is in modules: [`timing`] (`measure`, `compare`, `Timer`, criterion's
//! `GpuTime`, the calibration), [`trace`] (a GPU timeline), [`capture`] (graph capture),
//! [`pool`] (the per-thread event pool and the counts of CUDA events) and [`drop_errors`] (what
//! `Drop` could not return).
//!
//! # Awaiting the GPU
//! [`Stream::completion`] and [`Event::completion`] (or `.await` on `&stream`, `&event`) are
//! futures for any async runtime whose output is the CUDA error of the work, if any; a stream's
//! future owns what it waits on, so `tokio::spawn(stream.completion())` works, and an event's
//! borrows the event, so move the event into the task. A reactor thread of the crate's wakes a
//! pending future by querying its event; nothing is queued on any stream for it ([`Completion`] has
//! the details). A synchronous wait chooses how it waits, per wait: spin, yield, spin for a budget
//! then sleep, sleep on the reactor, or CUDA's own synchronize ([`Wait`],
//! [`Event::synchronize_with`]), each with its latency and CPU cost documented; a future chooses
//! too, between the reactor and polls that spin through the executor
//! ([`Completion::with_wait`]).
//!
//! ```no_run
//! use cuda_event::Stream;
//! # async fn example() -> cuda_event::Result<()> {
//! let stream = Stream::new(0)?;
//! // ... queue work on stream.as_raw() ...
//! stream.completion().await?;                          // the thread is free meanwhile
//! let done = tokio::spawn(stream.completion());        // owns what it waits on
//! done.await.expect("the task ran")?;
//! # Ok(()) }
//! ```
//!
//! # Timing GPU work
//! [`Timer`] times one section of a stream's work with pooled timing events and reads it without
//! blocking. [`measure`] times a closure's GPU work the way `triton.testing.do_bench` and nvbench
//! do (warm-up, repetitions queued behind a host-held gate so that host launch gaps stay out, an L2
//! flush before each, a stop on noise) and returns the samples and their statistics
//! ([`Measurement`]); in graph mode ([`MeasureOptions::graph`]) it captures a batch of
//! repetitions into a CUDA graph once and replays it, so that work of many launches runs with no
//! launch gap and the L2 flush stays outside the intervals. [`compare`] times two closures the same way, in alternation on one stream
//! (A, B, then B, A...), and gives B's time as a ratio of A's with a distribution-free confidence
//! interval and a conservative verdict ([`Verdict`]: same, faster, slower or ambiguous; wrong with
//! at most a 0.1% chance over all the looks it takes before stopping, see [`CONFIDENCE`]).
//!
//! ```no_run
//! // `measure` with the work's own memory: the crate allocates nothing for the work; here the
//! // runtime's cudaMalloc through the raw bindings (any allocator, cudarc's among them, will do).
//! use cuda_event::{DeviceGuard, Stream, check_runtime, sys};
//! use cuda_event::timing::{MeasureOptions, measure};
//! # fn main() -> Result<(), cuda_event::Error> {
//! let stream = Stream::new(0)?;
//! let bytes = 64 << 20;
//! let mut buffer = std::ptr::null_mut();
//! {
//!     let _device = DeviceGuard::new(0)?;              // cudaMalloc allocates on the current device
//!     // SAFETY: writes the allocation through a live local.
//!     check_runtime("cudaMalloc", unsafe { sys::cudaMalloc(&mut buffer, bytes) })?;
//! }
//! let m = measure(&stream, &MeasureOptions::default(), |s| {
//!     // SAFETY: the allocation above, on the stream measure hands over.
//!     check_runtime("cudaMemsetAsync", unsafe { sys::cudaMemsetAsync(buffer, 0, bytes, s.as_raw()) })
//! })?;
//! println!("{:.1} GB/s", bytes as f64 / m.median().as_secs_f64() / 1e9);
//! // SAFETY: measure has returned: no work uses the buffer any more.
//! check_runtime("cudaFree", unsafe { sys::cudaFree(buffer) })?;
//! # Ok(()) }
//! ```
//!
//! Every [`Measurement`] says whether it can be trusted, and why not ([`Measurement::trust`]:
//! samples in two clusters, a lost gate, throttling, a flush that did not evict, a calibration that
//! drifted...), and [`compare`] answers [`Verdict::Ambiguous`] when either side is in doubt. With
//! the `cupti` feature, [`MeasureOptions::cupti`] times each repetition with CUPTI too, in the same
//! run, beside the events' intervals (and, calibrated, checks the net time against CUPTI's).
//!
//! ```no_run
//! use cuda_event::Stream;
//! use cuda_event::timing::{MeasureOptions, measure};
//! # fn main() -> Result<(), cuda_event::Error> {
//! # let stream = Stream::new(0)?;
//! let m = measure(&stream, &MeasureOptions::default().calibrate(true), |s| {
//!     // ... queue the work on s.as_raw() ...
//!     Ok::<(), cuda_event::Error>(())
//! })?;
//! match m.net() {
//!     Ok(net) if m.trust().is_trusted() => println!("{net:?} net of the launch's fixed cost"),
//!     _ => println!("median {:?}; {}", m.median(), m.trust()), // says each doubt
//! }
//! # Ok(()) }
//! ```
//!
//! With cudarc, its streams are this crate's through [`Stream::from_raw_borrowed`]; cudarc's
//! `CUstream` is the runtime's `cudaStream_t` under another type, hence the cast:
//! `unsafe { Stream::from_raw_borrowed(cudarc_stream.cu_stream() as _, 0)? }` (the repository's
//! `systest/examples/cudarc_interop.rs` times and orders cudarc's work with this crate's events).
//! With the `criterion` feature, `GpuTime` is a criterion measurement of GPU time on a stream
//! (`Criterion::default().with_measurement(GpuTime::on_device(0)?)`; the `gpu_time` benchmark).
//!
//! # Capturing into a CUDA graph
//! [`Stream::capture`] captures the work a closure queues (and the streams it forks through the
//! crate's waits) into a [`Graph`]; [`Graph::launch`] replays it, and [`Graph::launch_completion`]
//! is a replay to await. Events recorded inside the capture are graph nodes, and the crate keeps
//! the CUDA events such records took out of every other capture until this one has ended, so
//! captures on several threads never share one ([`Event`]'s "Recorded into a graph capture" has the
//! capture-safety table: what holds beside other threads' raw CUDA captures).
//!
//! ```no_run
//! use cuda_event::{Event, Stream};
//! use cuda_event::capture::CaptureMode;
//! # async fn example() -> cuda_event::Result<()> {
//! let (stream, side) = (Stream::new(0)?, Stream::new(0)?);
//! let half_way = Event::new();
//! let graph = stream.capture(CaptureMode::ThreadLocal, |s| {
//!     // ... queue work on s.as_raw() ...
//!     half_way.record(s)?;                               // a node of the graph
//!     half_way.wait(&side)?;                             // fork: side joins the capture
//!     // ... queue work on side.as_raw() ...
//!     s.wait_stream(&side)                               // join back before the end
//! })?;
//! for _ in 0..3 {
//!     graph.launch(&stream)?;                            // replays it
//! }
//! graph.launch_completion(&stream)?.await?;              // one more, awaited
//! # Ok(()) }
//! ```
//!
//! # Examples
//! In the package's `examples/` (`cargo run --release --example NAME`); each exits with status 1
//! and one line naming the CUDA error on a machine without a GPU:
//! - `quickstart`: device memory bandwidth with [`measure`] (memsets of 1 MiB to 4 GiB and a 1 GiB
//!   copy, against the device's peak), [`compare`], a [`Timer`] and a cross-stream wait.
//! - `async_pipeline`: a tokio service of concurrent requests, each on its own stream, awaiting the
//!   GPU ([`Stream::completion`]) instead of blocking a thread.
//! - `ipc`: one event shared by two processes through its hex handle.
//! - `torch_ipc` (with `torch_ipc.py`): interprocess events shared with PyTorch, both ways.
//! - `timeline`: a [`Trace`] of the quickstart's work on two streams and threads, written as
//!   `trace.json` for Perfetto.
//! - `capture`: work captured into a CUDA graph with [`Stream::capture`], an event recorded inside
//!   it, the graph replayed and a replay awaited.
//!
//! # What a build needs
//! Linux on x86_64 (GPU-tested) or aarch64 (cross-built and CPU-tested in CI, no GPU test yet); the
//! headers and libcudart of a CUDA runtime of 12.8 or newer (a toolkit, or PyPI's runtime wheels:
//! `pip install nvidia-cuda-runtime nvidia-cuda-crt`); Rust 1.88. Nothing else: bindings are
//! committed for CUDA 12.8, 12.9, 13.0 and 13.5, and a later minor release of a major uses its
//! newest set; libclang only with the `bindgen` feature, which generates them from the headers
//! found. [cuda-event-sys's README](https://github.com/cuda-event/cuda-event/tree/main/cuda-event-sys)
//! says where the build looks for CUDA and how to make a virtualenv's CUDA stick. libcudart is
//! linked statically; the `dynamic` feature links `libcudart.so` instead. Running needs an NVIDIA
//! driver and GPU; without them every call that needs one returns an [`Err`].
//!
//! # What it does
//! - [`Event`] is built with torch's options ([`EventBuilder`]); building makes no CUDA call, and
//!   an interprocess timing event is rejected there. The CUDA event is created on the first
//!   [`Event::record`] (on the stream's device) or [`Event::ipc_handle`] (on the current device),
//!   exactly once when threads race (a first record takes the event's lock); after that record,
//!   records outside captures, wait, query, synchronize and elapsed_time take no lock and never
//!   wait for one another, on any thread; records into captures and the forks they allow take the
//!   event's lock (see [`Event`]'s "Recorded into a graph capture").
//! - [`Stream`]: owned streams, a device's default streams, and streams borrowed from other
//!   libraries; [`device_count`], [`current_device`], [`set_device`] and [`DeviceGuard`].
//! - [`Error`] says what went wrong: a CUDA call's code, name and message, or one of the misuses
//!   the crate rejects itself before calling CUDA.
//! - Drop never panics and never changes the current device; errors it meets are kept for
//!   [`take_drop_errors`].
//! - A dropped event's CUDA event goes back to a per-thread pool, so that the next new event's first
//!   record costs about as much as a record ([`set_event_pool`] turns it off, [`empty_event_pool`]
//!   empties this thread's), unless its handle escaped (see [`Event`]): a CUDA graph that holds it
//!   can never drive an unrelated new event.
//! - Faults are answers, not hangs or crashes: after a kernel fault, calls on the failed context
//!   return the CUDA error (CUDA reports the events of the work the fault killed as complete, so
//!   an event's `query` may still say `true`); events and streams that a device reset destroyed return [`Error::DeviceWasReset`]; an
//!   imported IPC event whose exporter died returns [`Error::ExporterGone`].
//!
//! # From torch.cuda.Event
//!
//! | PyTorch | cuda-event | notes |
//! |---|---|---|
//! | `torch.cuda.Event()` | `Event::new()` | no CUDA call until the first record |
//! | `torch.cuda.Event(enable_timing=True, blocking=True, interprocess=True)` | `Event::builder().enable_timing(true).blocking(true).interprocess(true).build()?` | interprocess + timing is rejected here (`Error::InterprocessWithTiming`), not by CUDA later |
//! | `torch.cuda.Event(external=True)` | `Event::builder().external(true).build()?` | records and waits become external nodes of a graph being captured |
//! | `event.record(stream)` | `event.record(&stream)?` | on another device than the event's: `Error::DeviceMismatch` |
//! | `event.record()` (current stream) | `event.record_on_current_device()?` | the current device's legacy default stream |
//! | `event.wait(stream)` | `event.wait(&stream)?` or `stream.wait_event(&event)?` | before any record: does nothing, like torch |
//! | `event.wait()` | `event.wait_on_current_device()?` | |
//! | `event.query()` | `event.query()?` | `true` before any record, like torch |
//! | `event.synchronize()` | `event.synchronize()?`, `event.synchronize_timeout(d)?` | returns at once before any record |
//! | (no torch equivalent) | `event.completion().await`, `stream.completion().await` | futures for any async runtime |
//! | `start.elapsed_time(end)` | `start.elapsed_time(&end)?` | torch's preconditions as errors: `NotTimingEvent`, `NotRecorded`, `NotComplete`, `ElapsedAcrossDevices` |
//! | `event.ipc_handle()` | `event.ipc_handle()?` | an `IpcEventHandle`: 64 bytes, or 128 hex digits with `Display`/`FromStr` |
//! | `torch.cuda.Event.from_ipc_handle(device, handle)` | `Event::from_ipc_handle(device, handle)?` | refuses a handle of this same process (`IpcHandleFromThisProcess`) |
//! | `event.cuda_event` | `event.as_raw()` (`Option<cudaEvent_t>`) | `None` before creation; `from_raw`/`into_raw` too |
//! | `torch.cuda.Stream(device, priority=p)` | `Stream::new(device)?`, `Stream::with_options(device, StreamOptions::default().priority(p))?` | |
//! | `torch.cuda.current_stream()` / default streams | `Stream::legacy(device)?`, `Stream::per_thread(device)?` | |
//! | `torch.cuda.ExternalStream(ptr)` | `unsafe { Stream::from_raw_borrowed(raw, device)? }` | not destroyed on drop |
//! | `stream.record_event()` | `stream.record_event()?` | |
//! | `stream.wait_event(event)`, `stream.wait_stream(other)` | `stream.wait_event(&event)?`, `stream.wait_stream(&other)?` | |
//! | `stream.query()`, `stream.synchronize()` | `stream.query()?`, `stream.synchronize()?` | |
//! | `torch.cuda.device_count()` | `device_count()?` | |
//! | `torch.cuda.current_device()`, `torch.cuda.set_device(d)` | `current_device()?`, `set_device(d)?` | |
//! | `with torch.cuda.device(d):` | `let _guard = DeviceGuard::new(d)?;` | restores the previous device on drop; not `Send` |
//! | `triton.testing.do_bench(fn)` | `measure(&stream, &MeasureOptions::default(), \|s\| ...)?` | samples, median, percentiles, noise (`Measurement`) |
//! | nvbench's `nvbench_compare.py` on two runs | `compare(&stream, &CompareOptions::default(), a, b)?` | in one run, A and B alternating; ratio, interval, verdict (`Comparison`) |
//!
//! # Threads
//! [`Event`], [`Stream`] and [`IpcEventHandle`] are `Send + Sync`. [`DeviceGuard`] is not `Send`:
//! the current device belongs to a thread. A [`Stream::per_thread`] stream names the stream of the
//! thread that uses it, so on another thread it returns [`Error::PerThreadStreamOfAnotherThread`].
//!
//! # Processes and `fork`
//! CUDA does not support a child forked from a process that used it. In a child forked after the
//! crate's first CUDA call, every call returns [`Error::ForkedChild`], futures resolve to it, and
//! dropping an event or stream the parent made calls nothing and takes no lock (the parent still
//! owns them). Start workers with `std::process::Command`, which execs a new program.
//!
//! # A GPU timeline
//! [`Trace`] records named ranges on any stream of any device, opened and closed by any thread,
//! nested and overlapping, with host spans beside them; each range costs two timing event records
//! (events reused from the thread's earlier ranges) and a lock no other thread contends, and never
//! waits for the GPU. Complete ranges are
//! read without blocking ([`Trace::take_complete`]), placed on the host's monotonic clock through
//! per-device anchors (with the GPU clock's drift measured between reads), and written as a
//! Chrome trace that Perfetto and chrome://tracing open ([`ChromeTrace`]): no CUPTI, no profiler.
//! With the `nvtx` feature the same ranges are NVTX ranges too, for Nsight Systems
//! ([`Trace::nvtx_active`]); nothing is linked for it. With the `tracing` feature, `TraceSpans`
//! makes the `tracing` crate's spans host spans of a trace.
//!
//! # How it is built
//! The modules' floors, how the crate calls CUDA and why, and the driver model that its
//! concurrency tests run on: `ARCHITECTURE.md` beside this crate's manifest in the
//! [repository](https://github.com/cuda-event/cuda-event/blob/main/cuda-event/ARCHITECTURE.md).
//! Where a change goes, in that repository:
//! - a new option of [`measure`] and [`compare`]: a field of [`MeasureOptions`] in
//!   `src/timing/options.rs` (checked there, in `check`), read by the engine
//!   (`src/timing/engine/`), and reported in [`Measurement`] where it changes what a sample means;
//! - a new test of a capture race: against the driver model, in `src/model/tests/captures.rs`
//!   (or the file of its subject there), where the model checker walks every interleaving; on a
//!   GPU, in `tests/capture/races.rs`. The test kit's crate docs (`testkit/src/lib.rs`) have the
//!   table of where each kind of test goes.
//!
//! # Performance
//! Every hot call (record, wait, query, a pooled first record) is benchmarked against the raw
//! CUDA calls, the futures' wake latency against a thread blocked in `synchronize`, and
//! [`measure`] against triton's `do_bench`, in the same run each: the figures, how
//! they were measured and the machine are in [bench/results], which `bench/README.md` indexes.
//!
//! [bench/results]: https://github.com/cuda-event/cuda-event/tree/main/bench/results
//! [`Graph`]: capture::Graph
//! [`Graph::launch`]: capture::Graph::launch
//! [`Graph::launch_completion`]: capture::Graph::launch_completion
//! [`take_drop_errors`]: drop_errors::take_drop_errors
//! [`empty_event_pool`]: pool::empty_event_pool
//! [`set_event_pool`]: pool::set_event_pool
//! [`CONFIDENCE`]: timing::CONFIDENCE
//! [`MeasureOptions`]: timing::MeasureOptions
//! [`MeasureOptions::cupti`]: timing::MeasureOptions::cupti
//! [`MeasureOptions::graph`]: timing::MeasureOptions::graph
//! [`Measurement`]: timing::Measurement
//! [`Measurement::trust`]: timing::Measurement::trust
//! [`Timer`]: timing::Timer
//! [`Verdict`]: timing::Verdict
//! [`Verdict::Ambiguous`]: timing::Verdict::Ambiguous
//! [`compare`]: timing::compare
//! [`measure`]: timing::measure
//! [`ChromeTrace`]: trace::ChromeTrace
//! [`Trace`]: trace::Trace
//! [`Trace::nvtx_active`]: trace::Trace::nvtx_active
//! [`Trace::take_complete`]: trace::Trace::take_complete
//! [`torch.cuda.Event`]: https://pytorch.org/docs/stable/generated/torch.cuda.Event.html

#![deny(missing_docs)]

// `stream`, then `event`, first (apart, so that rustfmt keeps the order): rustdoc lists a type's
// impl blocks in the order it meets them, and the constructors belong before the methods that other
// modules add (`record_event`, `completion`, `launch_host_fn`).
mod stream;

mod event;

pub mod capture;
mod capture_mode;
mod completion;
mod context;
mod device;
mod driver;
pub mod drop_errors;
mod error;
mod fork;
mod mapped_memory;
#[cfg(all(test, cuda_event_model))]
mod model;
mod sync;
pub mod timing;
pub mod trace;

pub use completion::Completion;
pub use completion::wait::Wait;
pub use context::set_device_reset_checks;
/// The raw bindings (`cuda-event-sys`), for the handle types this crate's API takes and gives. Their
/// contents follow the CUDA headers the build found (a symbol of CUDA 12's headers may be absent
/// from CUDA 13's), so they are outside this crate's semantic versioning: only the handle types
/// (`cudaEvent_t`, `cudaStream_t`, `CUgraph`...) are its API.
pub use cuda_event_sys as sys;
pub use device::{DeviceGuard, current_device, device_count, set_device};
pub use driver::driver_entry_point;
pub use error::{CudaError, Error, IpcHandleParseError, Result, check_runtime};
pub use event::ipc::IpcEventHandle;
pub use event::{Event, EventBuilder};
pub use stream::{Stream, StreamOptions};

pub mod pool {
    //! The per-thread pool of CUDA events that dropped events go back to, and the process's counts
    //! of CUDA events: how many the crate has created, and how many it owns now.
    //!
    //! A dropped [`Event`](crate::Event)'s CUDA event goes back to its thread's pool (up to
    //! [`POOL_PER_THREAD`] per device and flags) unless its handle escaped, so that a new event's
    //! first record costs about as much as a record; [`set_event_pool`] turns that off, and
    //! [`empty_event_pool`] destroys the calling thread's pooled events.

    pub use crate::event::handle::{cuda_events_alive, cuda_events_created};
    pub use crate::event::pool::{POOL_PER_THREAD, empty_event_pool, set_event_pool};
}

// The README is the crates.io page: its Rust blocks compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
