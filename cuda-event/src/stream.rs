//! Streams: owned ones (created on a device, destroyed on drop), a device's default streams, and
//! streams borrowed from other libraries as raw `cudaStream_t`.

use crate::context::{Context, Made};
use crate::driver::{CUstream, NOT_READY, driver};
use crate::error::{Result, check_driver};
use crate::event::Event;
use cuda_event_sys as sys;
use std::fmt;

/// A CUDA stream and the device it belongs to.
///
/// `Send + Sync`: CUDA streams may be used from any thread, and every method takes `&self`.
pub struct Stream {
    raw: CUstream,
    device: i32,
    kind: Kind,
}

enum Kind {
    /// Created here, in this instance of the device's context; destroyed on drop.
    Owned(Made),
    /// A default stream handle (`cudaStreamLegacy`, `cudaStreamPerThread`, or null): it names the
    /// default stream of whichever context is current, so each call makes the device's current.
    Default(Context),
    /// Someone else's stream: never destroyed here.
    Borrowed,
}

// SAFETY: a cudaStream_t is an opaque handle that CUDA lets every thread use concurrently; the
// struct owns nothing else that is thread-bound.
unsafe impl Send for Stream {}
// SAFETY: as for Send; no method mutates the struct.
unsafe impl Sync for Stream {}

/// Options for [`Stream::with_options`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// Don't synchronize with the legacy default stream (`cudaStreamNonBlocking`).
    pub non_blocking: bool,
    /// Scheduling priority: lower numbers run first; CUDA clamps it to the device's range
    /// (`cudaDeviceGetStreamPriorityRange`). 0 is the default.
    pub priority: i32,
}

impl Stream {
    /// A new stream on `device`, with default flags and priority.
    #[doc(alias = "cudaStreamCreate")]
    pub fn new(device: i32) -> Result<Stream> {
        Stream::with_options(device, StreamOptions::default())
    }

    /// A new stream on `device`, with the given flags and priority. Does not change the current device.
    #[doc(alias = "cudaStreamCreateWithPriority")]
    #[doc(alias = "cuStreamCreateWithPriority")]
    pub fn with_options(device: i32, options: StreamOptions) -> Result<Stream> {
        let d = driver()?;
        let made = Made::in_primary(device)?;
        let _current = made.context().enter()?;
        let flags = if options.non_blocking {
            sys::cudaStreamNonBlocking
        } else {
            sys::cudaStreamDefault
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes the new stream through a live local, in the device's context made current above.
        let code = unsafe { (d.stream_create_with_priority)(&mut raw, flags, options.priority) };
        check_driver("cuStreamCreateWithPriority", code)?;
        Ok(Stream {
            raw,
            device,
            kind: Kind::Owned(made),
        })
    }

    /// The legacy default stream of `device` (`cudaStreamLegacy`, torch's default stream): it
    /// synchronizes with every blocking stream of the device.
    #[doc(alias = "cudaStreamLegacy")]
    pub fn legacy(device: i32) -> Result<Stream> {
        Stream::default_stream(device, sys::cudaStreamLegacy)
    }

    /// The calling thread's per-thread default stream of `device` (`cudaStreamPerThread`). The
    /// handle means "this thread's": use the `Stream` on the thread that made it.
    #[doc(alias = "cudaStreamPerThread")]
    pub fn per_thread(device: i32) -> Result<Stream> {
        Stream::default_stream(device, sys::cudaStreamPerThread)
    }

    fn default_stream(device: i32, raw: CUstream) -> Result<Stream> {
        Ok(Stream {
            raw,
            device,
            kind: Kind::Default(Context::primary(device)?),
        })
    }

    /// Uses a stream that another library created (or one of the default stream handles), without
    /// taking it over: dropping the `Stream` does not destroy it.
    ///
    /// # Safety
    /// `raw` is a valid stream of `device` (null, `cudaStreamLegacy` and `cudaStreamPerThread` mean
    /// that device's default streams) and stays valid as long as the returned `Stream` is used.
    pub unsafe fn from_raw_borrowed(raw: sys::cudaStream_t, device: i32) -> Result<Stream> {
        if raw.is_null() || raw == sys::cudaStreamLegacy || raw == sys::cudaStreamPerThread {
            return Stream::default_stream(device, raw);
        }
        Ok(Stream {
            raw,
            device,
            kind: Kind::Borrowed,
        })
    }

    /// The raw handle, for C or other CUDA libraries. It stays owned by this `Stream`.
    pub fn as_raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Records a new event (default options) on this stream and returns it.
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new();
        event.record(self)?;
        Ok(event)
    }

    /// Makes future work on this stream wait for `event` (see [`Event::wait`]).
    #[doc(alias = "cudaStreamWaitEvent")]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        event.wait(self)
    }

    /// Makes future work on this stream wait for the work submitted to `other` so far.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        self.wait_event(&other.record_event()?)
    }

    /// Waits until all work on this stream is complete.
    #[doc(alias = "cudaStreamSynchronize")]
    #[doc(alias = "cuStreamSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        let d = driver()?;
        // SAFETY: self.raw is a valid stream (an invariant of Stream), in the context made current.
        self.in_context(|| check_driver("cuStreamSynchronize", unsafe { (d.stream_synchronize)(self.raw) }))
    }

    /// Whether all work on this stream is complete: `Ok(false)` while work is pending.
    #[doc(alias = "cudaStreamQuery")]
    #[doc(alias = "cuStreamQuery")]
    pub fn query(&self) -> Result<bool> {
        let d = driver()?;
        // SAFETY: as in synchronize.
        let code = self.in_context(|| Ok(unsafe { (d.stream_query)(self.raw) }))?;
        if code == NOT_READY {
            return Ok(false);
        }
        check_driver("cuStreamQuery", code).map(|()| true)
    }

    /// The stream's priority.
    #[doc(alias = "cudaStreamGetPriority")]
    pub fn priority(&self) -> Result<i32> {
        let d = driver()?;
        let mut priority = 0;
        // SAFETY: as in synchronize; writes through a live local.
        let code = self.in_context(|| Ok(unsafe { (d.stream_get_priority)(self.raw, &mut priority) }))?;
        check_driver("cuStreamGetPriority", code).map(|()| priority)
    }

    /// Whether the stream is being captured into a CUDA graph (`cudaStreamIsCapturing`).
    #[doc(alias = "cudaStreamIsCapturing")]
    pub fn is_capturing(&self) -> Result<bool> {
        let d = driver()?;
        let mut status = sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
        // SAFETY: as in synchronize; writes through a live local.
        let code = self.in_context(|| Ok(unsafe { (d.stream_is_capturing)(self.raw, &mut status) }))?;
        check_driver("cuStreamIsCapturing", code)?;
        Ok(status != sys::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone)
    }

    /// Runs a driver call on this stream: default stream handles need their device's context current.
    #[inline]
    pub(crate) fn in_context<R>(&self, call: impl FnOnce() -> Result<R>) -> Result<R> {
        match &self.kind {
            Kind::Default(context) => {
                let _current = context.enter()?;
                call()
            }
            Kind::Owned(_) | Kind::Borrowed => call(),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let Kind::Owned(made) = self.kind else { return };
        // After a device reset the stream is already gone with its context.
        let (Ok(d), true) = (driver(), made.still_alive()) else {
            return;
        };
        // SAFETY: the stream was created here and is destroyed once; pending work still completes.
        crate::drop_errors::report(check_driver("cuStreamDestroy", unsafe {
            (d.stream_destroy)(self.raw)
        }));
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Owned(_) => "owned",
            Kind::Default(_) => "default",
            Kind::Borrowed => "borrowed",
        };
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("device", &self.device)
            .field("kind", &kind)
            .finish()
    }
}
