//! A stream the crate makes gets one timing-event record before it is handed out.
//!
//! On a stream that has never had a timing (or interprocess) event recorded on it, CUDA takes
//! later event records, from one thread or several, at a lower rate than on a stream that has:
//! `bench/probes/stream_first_use.c` measures each first use, and `bench/README.md` indexes its
//! runs. A plain record does not do it. Without this, an application with a thread per stream
//! records at that lower rate on every stream it gets from `Stream::new`, while a stream that
//! happened to time something first does not.
//!
//! The record is of an event made and destroyed here, so nothing waits on it, and it is queued on
//! a stream nothing else can see yet. Made on a new non-blocking stream, these three calls were
//! measured not to disturb another thread's global-mode capture, whatever the calling thread's
//! mode (`bench/probes/capture_unsafe_calls.c`; its row for a blocking stream has not run yet).

use crate::driver::Driver;
use crate::drop_errors;
use crate::error::Result;
use cuda_event_sys as sys;

/// Records a timing event on `raw`, a stream just made in the context current on this thread. A
/// failed create or record is the stream's creation's error; a failed destroy leaves a working
/// stream, so it is kept for `take_drop_errors`, as any destroy's error is.
pub(super) fn prime(d: &Driver, raw: sys::cudaStream_t) -> Result<()> {
    let mut event = std::ptr::null_mut();
    // SAFETY: writes a new event through a live local, in the current context; flags 0 is a
    // timing event.
    d.event_create.call(|f| unsafe { f(&mut event, 0) })?;
    // SAFETY: a live event and stream of the current context.
    let recorded = d.event_record.call(|f| unsafe { f(event, raw.cast()) });
    // SAFETY: made above and destroyed once; CUDA releases a pending event when its work completes.
    drop_errors::report(d.event_destroy.call(|f| unsafe { f(event) }));
    recorded
}
