//! Streams: owned ones (created on a device, destroyed on drop), a device's default streams, and
//! streams borrowed from other libraries as raw `cudaStream_t`.

use crate::context::{Context, ContextInstance, MadeIn};
use crate::driver::{CUresult, Driver, driver};
use crate::error::{Error, Result, check_runtime};
use crate::event::Event;
use crate::live_streams;
use cuda_event_sys as sys;
use std::fmt;
use std::mem::ManuallyDrop;
use std::thread::ThreadId;

/// A CUDA stream and the device it belongs to.
///
/// `Send + Sync`: CUDA streams may be used from any thread, and every method takes `&self`.
pub struct Stream {
    raw: sys::cudaStream_t,
    device: i32,
    kind: Kind,
    /// Its id among the live streams that event futures may wake on (see `live_streams`); 0 for
    /// default streams and aliases.
    id: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    /// Created here, in this instance of the device's context; destroyed on drop.
    Owned(ContextInstance),
    /// A default stream handle (`cudaStreamLegacy`, `cudaStreamPerThread`, or null): it names the
    /// default stream of whichever context is current, so each call makes the device's current.
    /// `cudaStreamPerThread` also names the calling thread's stream: `thread` is the one it means.
    Default {
        context: Context,
        thread: Option<ThreadId>,
    },
    /// Someone else's stream: never destroyed here.
    Borrowed,
}

// SAFETY: a cudaStream_t is an opaque handle that CUDA lets every thread use concurrently; the
// struct owns nothing else that is thread-bound.
unsafe impl Send for Stream {}
// SAFETY: as for Send; no method mutates the struct.
unsafe impl Sync for Stream {}

/// Options for [`Stream::with_options`]: `StreamOptions::default().non_blocking(true)`. New
/// options may be added, so it is built from `default()`, not from a struct literal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Don't synchronize with the legacy default stream (`cudaStreamNonBlocking`).
    pub non_blocking: bool,
    /// Scheduling priority: lower numbers run first; CUDA clamps it to the device's range
    /// (`cudaDeviceGetStreamPriorityRange`). 0 is the default.
    pub priority: i32,
}

impl StreamOptions {
    /// Sets [`non_blocking`](Self::non_blocking).
    pub fn non_blocking(mut self, on: bool) -> Self {
        self.non_blocking = on;
        self
    }

    /// Sets [`priority`](Self::priority).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}

impl Stream {
    /// A new stream on `device`, with default flags and priority.
    #[doc(alias = "cudaStreamCreate")]
    pub fn new(device: i32) -> Result<Stream> {
        Stream::create("Stream::new", device, StreamOptions::default())
    }

    /// A new stream on `device`, with the given flags and priority. Does not change the current device.
    #[doc(alias = "cudaStreamCreateWithPriority")]
    #[doc(alias = "cuStreamCreateWithPriority")]
    pub fn with_options(device: i32, options: StreamOptions) -> Result<Stream> {
        Stream::create("Stream::with_options", device, options)
    }

    fn create(operation: &'static str, device: i32, options: StreamOptions) -> Result<Stream> {
        let d = driver(operation)?;
        let instance = ContextInstance::of_primary(d, device)?;
        let _current = instance.context()?.enter(d)?;
        let flags = if options.non_blocking {
            sys::cudaStreamNonBlocking
        } else {
            sys::cudaStreamDefault
        };
        let mut raw = std::ptr::null_mut();
        // Made by the runtime (since 254d354; the driver's cuStreamCreateWithPriority before). Why
        // records from many threads scale worse on these streams, and on cudarc's, than on the
        // events bench's own runtime-made stream is open: not the creation call, nor what was done on
        // the stream first; where it falls among the streams made moves it, in a pattern not worked
        // out (bench/results/2026-11-30-h200-timing-3). Either API is correct here: with the
        // device's primary context current, the runtime uses it, so no other context is made and
        // the current device is left alone.
        // SAFETY: writes the new stream through a live local, in the device's context made current above.
        check_runtime("cudaStreamCreateWithPriority", unsafe {
            sys::cudaStreamCreateWithPriority(&mut raw, flags, options.priority)
        })?;
        Ok(Stream {
            raw,
            device,
            kind: Kind::Owned(instance),
            id: 0,
        }
        .registered())
    }

    /// The legacy default stream of `device` (`cudaStreamLegacy`, torch's default stream): it
    /// synchronizes with every blocking stream of the device.
    #[doc(alias = "cudaStreamLegacy")]
    pub fn legacy(device: i32) -> Result<Stream> {
        Stream::default_stream("Stream::legacy", device, sys::cudaStreamLegacy)
    }

    /// The calling thread's per-thread default stream of `device` (`cudaStreamPerThread`).
    ///
    /// The handle means "the stream of the thread that uses it", so this `Stream` is tied to the
    /// thread that made it: it is still `Send + Sync` (so that it can sit in the same places as any
    /// `Stream`), but every call that uses it on another thread returns
    /// [`Error::PerThreadStreamOfAnotherThread`] instead of touching that thread's stream. The check
    /// costs one thread-id read, on per-thread streams only. Make one per thread instead: it costs
    /// no CUDA call.
    #[doc(alias = "cudaStreamPerThread")]
    pub fn per_thread(device: i32) -> Result<Stream> {
        Stream::default_stream("Stream::per_thread", device, sys::cudaStreamPerThread)
    }

    fn default_stream(operation: &'static str, device: i32, raw: sys::cudaStream_t) -> Result<Stream> {
        let thread = (raw == sys::cudaStreamPerThread).then(|| std::thread::current().id());
        Ok(Stream {
            raw,
            device,
            kind: Kind::Default {
                context: Context::primary(driver(operation)?, device)?,
                thread,
            },
            id: 0,
        })
    }

    /// Uses a stream that another library created (or one of the default stream handles), without
    /// taking it over: dropping the `Stream` does not destroy it. Like an owned stream, a
    /// non-default one may get a host function from [`Event::completion`] (for an event last
    /// recorded on it) while this `Stream` lives.
    ///
    /// # Safety
    /// `raw` is a valid stream of `device` (null, `cudaStreamLegacy` and `cudaStreamPerThread` mean
    /// that device's default streams; `cudaStreamPerThread` is then the calling thread's) and stays
    /// valid as long as the returned `Stream` is used.
    pub unsafe fn from_raw_borrowed(raw: sys::cudaStream_t, device: i32) -> Result<Stream> {
        if raw.is_null() || raw == sys::cudaStreamLegacy || raw == sys::cudaStreamPerThread {
            return Stream::default_stream("Stream::from_raw_borrowed", device, raw);
        }
        Ok(Stream {
            raw,
            device,
            kind: Kind::Borrowed,
            id: 0,
        }
        .registered())
    }

    fn registered(mut self) -> Stream {
        self.id = live_streams::register(&self);
        self
    }

    /// A copy of this stream's fields that never drops (so never destroys or unregisters it), for
    /// the registry of live streams, which uses it only while the stream is registered.
    pub(crate) fn alias(&self) -> ManuallyDrop<Stream> {
        ManuallyDrop::new(Stream {
            raw: self.raw,
            device: self.device,
            kind: self.kind,
            id: 0,
        })
    }

    /// Its id among the live streams (0 for a default stream): what an event recorded on it
    /// remembers, for its future to wake on.
    pub(crate) fn id(&self) -> u64 {
        self.id
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
        let d = driver("Stream::synchronize")?;
        // SAFETY: self.raw is a valid stream (an invariant of Stream), in the context made current.
        self.in_context_alive(d, || d.stream_synchronize.call(|f| unsafe { f(self.raw) }))
    }

    /// Whether all work on this stream is complete: `Ok(false)` while work is pending.
    #[doc(alias = "cudaStreamQuery")]
    #[doc(alias = "cuStreamQuery")]
    pub fn query(&self) -> Result<bool> {
        let d = driver("Stream::query")?;
        // SAFETY: as in synchronize.
        let code = self.in_context_alive(d, || Ok(d.stream_query.code(|f| unsafe { f(self.raw) })))?;
        if code == CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        d.stream_query.check(code).map(|()| true)
    }

    /// The stream's priority.
    #[doc(alias = "cudaStreamGetPriority")]
    pub fn priority(&self) -> Result<i32> {
        let d = driver("Stream::priority")?;
        let mut priority = 0;
        // SAFETY: as in synchronize; writes through a live local.
        self.in_context_alive(d, || {
            d.stream_get_priority
                .call(|f| unsafe { f(self.raw, &mut priority) })
        })?;
        Ok(priority)
    }

    /// Whether the stream is being captured into a CUDA graph (`cudaStreamIsCapturing`).
    #[doc(alias = "cudaStreamIsCapturing")]
    pub fn is_capturing(&self) -> Result<bool> {
        let d = driver("Stream::is_capturing")?;
        self.in_context_alive(d, || self.is_capturing_with(d))
    }

    /// [`Stream::is_capturing`] for a caller that has the driver and the context already.
    pub(crate) fn is_capturing_with(&self, d: &Driver) -> Result<bool> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: as in synchronize; writes through a live local.
        d.stream_is_capturing
            .call(|f| unsafe { f(self.raw, &mut status) })?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// [`Stream::in_context`] for the stream's own calls, after checking that it is alive.
    pub(crate) fn in_context_alive<R>(&self, d: &Driver, call: impl FnOnce() -> Result<R>) -> Result<R> {
        self.made_in().ensure_alive(d, None)?;
        self.in_context(d, call)
    }

    /// Where an owned stream was made, for the check that no device reset has destroyed it
    /// (default and borrowed streams have nothing to check).
    pub(crate) fn made_in(&self) -> MadeIn {
        let instance = match self.kind {
            Kind::Owned(instance) => Some(instance),
            Kind::Default { .. } | Kind::Borrowed => None,
        };
        MadeIn::new(self.device, instance)
    }

    /// Runs a driver call on this stream: default stream handles need their device's context
    /// current, and a per-thread one its own thread. The caller has checked that the stream is
    /// alive ([`Stream::made_in`]).
    #[inline]
    pub(crate) fn in_context<R>(&self, d: &Driver, call: impl FnOnce() -> Result<R>) -> Result<R> {
        match &self.kind {
            Kind::Owned(_) => call(),
            Kind::Default { context, thread } => {
                if thread.is_some_and(|thread| thread != std::thread::current().id()) {
                    return Err(Error::PerThreadStreamOfAnotherThread);
                }
                let _current = context.enter(d)?;
                call()
            }
            Kind::Borrowed => call(),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.id != 0 {
            // First: an event future may be queuing a host function on it right now.
            live_streams::unregister(self.id);
        }
        let Kind::Owned(instance) = self.kind else { return };
        // After a device reset the stream is already gone with its context.
        let Some(d) = crate::driver::loaded_driver() else {
            return;
        };
        if !instance.still_alive(d) {
            return;
        }
        // SAFETY: the stream was created here and is destroyed once; pending work still completes.
        crate::drop_errors::report(d.stream_destroy.call(|f| unsafe { f(self.raw) }));
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Owned(_) => "owned",
            Kind::Default { thread: None, .. } => "default",
            Kind::Default { thread: Some(_), .. } => "per-thread default",
            Kind::Borrowed => "borrowed",
        };
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("device", &self.device)
            .field("kind", &kind)
            .finish()
    }
}
