//! CUDA events with the semantics of PyTorch's [`torch.cuda.Event`], every flag real, safe to
//! share between threads, and never a panic on a machine without a GPU.
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
//! # What it does
//! - [`Event`] is built with torch's options ([`EventBuilder`]); building makes no CUDA call, and
//!   an interprocess timing event is rejected there. The CUDA event is created on the first
//!   [`Event::record`] (on the stream's device) or [`Event::ipc_handle`] (on the current device),
//!   exactly once when threads race; after that record, wait, query, synchronize and
//!   elapsed_time take no lock (nor does a first record that reuses a pooled CUDA event).
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
//! - Timing: [`Timer`] times one section of a stream's work with pooled timing events, read without
//!   blocking; [`measure`] times a closure's GPU work the way `triton.testing.do_bench` and nvbench
//!   do (warm-up, repetitions queued behind a host-held gate so that host launch gaps stay out, an
//!   L2 flush, a stop on noise) and returns samples and statistics ([`Measurement`]).
//! - Awaiting: [`Event::completion`] and [`Stream::completion`] are futures for any async runtime
//!   (`(&event).await`, `tokio::spawn(stream.completion())`), woken by a host function on a
//!   stream of the crate's own and backed by a query of their own event at least every 100 ms;
//!   they never queue anything on your streams, never block, and never break another thread's
//!   graph capture ([`Completion`] has the details). [`Event::synchronize_timeout`] and
//!   [`Stream::synchronize_timeout`] are the bounded blocking waits.
//! - Faults are answers, not hangs or crashes: after a kernel fault, calls on the failed context
//!   return the CUDA error (CUDA reports the events of the work the fault killed as complete, so
//!   an event's `query` may still say `true`); events and streams that a device reset destroyed return [`Error::DeviceWasReset`]; an
//!   imported IPC event whose exporter died returns [`Error::ExporterGone`].
//!
//! # Threads
//! [`Event`], [`Stream`] and [`IpcEventHandle`] are `Send + Sync`. [`DeviceGuard`] is not `Send`:
//! the current device belongs to a thread. A [`Stream::per_thread`] stream names the stream of the
//! thread that uses it, so on another thread it returns [`Error::PerThreadStreamOfAnotherThread`].
//!
//! # How it calls CUDA
//! Through the driver API, resolved once with `cudaGetDriverEntryPointByVersion` from the linked
//! runtime: driver calls on explicit handles never create a context on the thread's current device
//! (the way PyTorch made stray contexts) and skip the runtime's bookkeeping. Event and stream
//! handles are the runtime's `cudaEvent_t` / `cudaStream_t`, usable with any runtime API code.
//! Where a context must be current (creating, IPC handles, timing, default streams), the device's
//! primary context is pushed for the call and popped after. Streams are the one thing made by the
//! runtime (`cudaStreamCreateWithPriority`, in the pushed context, so no other context is made).
//! Each driver function's type is the `PFN_*` declaration of `cudaTypedefs.h` at the ABI version the crate asks for, so a wrong
//! signature does not compile; [`driver_entry_point`] resolves others the same way.
//!
//! [`torch.cuda.Event`]: https://pytorch.org/docs/stable/generated/torch.cuda.Event.html

#![deny(missing_docs)]

mod capture_mode;
mod completion;
mod context;
mod device;
mod driver;
mod drop_errors;
mod error;
mod event;
mod gate;
mod handle;
mod host_fn;
mod ipc;
mod measure;
mod pool;
mod publish_once;
mod reactor;
mod scratch_memory;
mod stream;
mod timer;
// Its nested `if`s predate rust-version 1.88 (let chains), and the file is being changed elsewhere:
// until they are collapsed there, clippy's suggestion to collapse them is held back for it alone.
#[allow(clippy::collapsible_if)]
mod wake_streams;

pub use completion::Completion;
pub use context::set_device_reset_checks;
pub use cuda_event_sys as sys;
pub use device::{DeviceGuard, current_device, device_count, set_device};
pub use driver::driver_entry_point;
pub use drop_errors::{DropErrors, print_drop_errors, take_drop_errors};
pub use error::{CudaError, Error, Result, check_runtime};
pub use event::{Event, EventBuilder};
pub use handle::{cuda_events_alive, cuda_events_created};
pub use ipc::IpcEventHandle;
pub use measure::{MeasureOptions, Measurement, StopReason, measure};
pub use pool::{POOL_PER_THREAD, empty_event_pool, set_event_pool};
pub use stream::{Stream, StreamOptions};
pub use timer::{Timer, Timing};
