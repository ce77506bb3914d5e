//! Streams: owned ones (created on a device, destroyed on drop), a device's default streams, and
//! streams borrowed from other libraries as raw `cudaStream_t`.

pub(crate) mod capture_gate;
pub(crate) mod flag_lane;
mod host_fn;
pub(crate) mod known_capture;
mod prime;

use crate::context::{Context, ContextInstance, MadeIn};
use crate::driver::{Driver, driver, runtime};
use crate::error::{Error, Result, check_runtime};
use crate::stream::capture_gate::Gate;
use crate::stream::flag_lane::FlagSlot;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::thread::ThreadId;
use cuda_event_sys as sys;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

/// A CUDA stream and the device it belongs to: one the crate made ([`new`](Self::new),
/// [`with_options`](Self::with_options); destroyed on drop), a device's default stream
/// ([`legacy`](Self::legacy), [`per_thread`](Self::per_thread)), or another library's, borrowed
/// ([`from_raw_borrowed`](Self::from_raw_borrowed)). Work is submitted to [`as_raw`](Self::as_raw)
/// with any CUDA library.
///
/// `Send + Sync`: CUDA streams may be used from any thread, and every method takes `&self`.
///
/// A stream the crate makes gets one record of a timing event before it is returned: CUDA takes
/// event records at a lower rate, most of all from several threads, on a stream that never had one
/// (measured by `bench/probes/stream_first_use.c`). So a new stream's [`query`](Self::query) may
/// answer `false` until that record completes, and its creation may fail with the errors of
/// `cuEventCreate` and `cuEventRecord` (out of memory, for one). A borrowed stream is left as it
/// is.
///
/// ```no_run
/// use cuda_event::{Stream, StreamOptions};
/// # fn main() -> cuda_event::Result<()> {
/// let copies = Stream::with_options(0, StreamOptions::default().non_blocking(true))?;
/// let compute = Stream::new(0)?;
/// // ... submit copies to copies.as_raw() ...
/// compute.wait_stream(&copies)?;                 // compute's later work waits for the copies
/// // ... submit kernels to compute.as_raw() ...
/// let done = compute.record_event()?;            // an event of what compute has so far
/// compute.synchronize()?;                        // or .await compute.completion() in async code
/// assert!(done.query()?);
/// # Ok(()) }
/// ```
pub struct Stream {
    raw: sys::cudaStream_t,
    device: i32,
    kind: Kind,
    /// What an event recorded on it remembers, so that the reactor checks the futures of one
    /// stream's events in record order; `None` for default streams.
    id: Option<StreamId>,
    /// The flag lane's slot, for a stream made with [`StreamOptions::flag_lane`].
    lane: Option<&'static FlagSlot>,
    /// Its handle's capture gate, shared with every `Stream` on the handle (`capture_gate`).
    gate: Arc<Gate>,
}

/// A stream's identity among the owned and borrowed streams of the process: never reused, so an
/// event that remembers it never mistakes a later stream for the one it was recorded on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct StreamId(NonZeroU64);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl StreamId {
    fn next() -> StreamId {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        StreamId(NonZeroU64::new(id).expect("64-bit ids are never exhausted"))
    }

    /// As one word, for an atomic: 0 is `None`.
    pub(crate) fn to_word(id: Option<StreamId>) -> u64 {
        id.map_or(0, |id| id.0.get())
    }
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
    /// The flag lane: waits on this stream's events wake within microseconds of the GPU, for a
    /// core that spins while any such wait is pending. For a stream that will never be captured
    /// into a graph.
    ///
    /// Behind each record of a timing-disabled event on the stream that the crate makes
    /// ([`Event::record`], [`Stream::record_event`], [`Stream::completion`], the bounded waits), the
    /// stream also writes a ticket into host memory that the crate registered
    /// (`cuStreamWriteValue64`: one more stream operation per record). A timing event's record gets
    /// none, so that its own write never starts the interval it times (waits on it go at the
    /// reactor's pace); a timing-disabled record made inside a timed interval (a
    /// [`Stream::completion`] within `measure`'s work) still adds its write to that interval. A
    /// future, [`Wait::Reactor`] or [`Stream::synchronize_timeout`] wait on such an event is then
    /// also watched by the crate's scanner thread, which spins on those tickets while lane waits
    /// are pending and queries the event once its ticket lands: a wake-up within a few
    /// microseconds of the GPU's write,
    /// instead of the reactor's tens of microseconds. The scanner spins (one core) while tickets
    /// land or waits arrive; after 2 ms without either it yields between looks (still a core where
    /// nothing else wants it), and after 20 ms it sleeps between looks, 50 us at first, doubling
    /// up to 1 ms; it sleeps whenever no lane wait is pending. A program that arms lane waits more
    /// often than every 20 ms keeps that core busy (a wait given up before the scanner takes it,
    /// as a zero-timeout one may be, does not count).
    ///
    /// A ticket is only a hint: nothing is woken before a query of its event says complete, and
    /// the reactor keeps every wait as on any stream. So a lane wait never resolves early, and the
    /// reactor still ends it at its own pace if the scanner does not (where the scanner's core
    /// competes with the reactor's on a busy machine, that pace can slip); a ticket that is late
    /// or lost only costs the lane's speed. A capture begun on the stream anyway is not broken: a
    /// record that the crate sees going into a capture writes no ticket, and one it does not see
    /// (a capture that raw CUDA began between the crate's check and its record, or any capture
    /// with the capture checks off) takes the ticket's write into the graph, which rewrites that
    /// old ticket at each launch, harmlessly as long as the crate's pages stay registered (see
    /// [`Stream::release_flag_lane_memory`]).
    ///
    /// # Errors
    /// At creation, also those of registering host memory (`cuMemHostRegister`, once per 64 lane
    /// streams of a context) and of the stream's first ticket (`cuStreamWriteValue64`: a device or
    /// driver without stream memory operations).
    ///
    /// [`Event::record`]: crate::Event::record
    /// [`Wait::Reactor`]: crate::Wait::Reactor
    pub flag_lane: bool,
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

    /// Sets [`flag_lane`](Self::flag_lane).
    pub fn flag_lane(mut self, on: bool) -> Self {
        self.flag_lane = on;
        self
    }
}

impl Stream {
    /// A new stream on `device`, with default flags and priority.
    #[doc(alias = "cudaStreamCreate")]
    pub fn new(device: i32) -> Result<Stream> {
        Ok(Stream::create("Stream::new", device, StreamOptions::default())?.identified())
    }

    /// A new stream on `device`, with the given flags and priority. Does not change the current device.
    #[doc(alias = "cudaStreamCreateWithPriority")]
    #[doc(alias = "cuStreamCreateWithPriority")]
    pub fn with_options(device: i32, options: StreamOptions) -> Result<Stream> {
        Ok(Stream::create("Stream::with_options", device, options)?.identified())
    }

    fn create(operation: &'static str, device: i32, options: StreamOptions) -> Result<Stream> {
        let d = driver(operation)?;
        let (instance, _current) = ContextInstance::enter_primary(d, device)?;
        let flags = if options.non_blocking {
            sys::cudaStreamNonBlocking
        } else {
            sys::cudaStreamDefault
        };
        let mut raw = std::ptr::null_mut();
        // Made by the runtime: with the device's primary context current, the runtime uses it, so
        // no other context is made and the current device is left alone.
        // SAFETY: writes the new stream through a live local, in the device's context made current above.
        check_runtime("cudaStreamCreateWithPriority", unsafe {
            runtime::cudaStreamCreateWithPriority(&mut raw, flags, options.priority)
        })?;
        let mut stream = Stream {
            raw,
            device,
            kind: Kind::Owned(instance),
            id: None,
            lane: None,
            gate: Gate::of(raw),
        };
        // On an error the stream is dropped, which destroys it.
        prime::prime(d, stream.raw)?;
        if options.flag_lane {
            let slot = flag_lane::take(d, instance)?;
            stream.lane = Some(slot);
            // A first ticket: a device or driver without stream memory operations fails the
            // creation, not every record after it.
            slot.mark(d, stream.raw)?;
        }
        Ok(stream)
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
        let thread = (raw == sys::cudaStreamPerThread).then(|| crate::sync::thread::current().id());
        Ok(Stream {
            raw,
            device,
            kind: Kind::Default {
                context: Context::primary(driver(operation)?, device)?,
                thread,
            },
            id: None,
            lane: None,
            gate: Gate::of(raw),
        })
    }

    /// Uses a stream that another library created (or one of the default stream handles), without
    /// taking it over: dropping the `Stream` does not destroy it. The crate uses the raw stream
    /// only in the calls made on this `Stream` (and in `Event` calls given it), never in the
    /// background: nothing is queued on any stream to wake a future. Making one (and dropping the
    /// last on a handle) takes a short lock of a registry shared by the `Stream`s on each handle,
    /// so a `Stream` kept for the library's stream is cheaper than one made for every call.
    ///
    /// # Safety
    /// `raw` is a valid stream of `device` (null, `cudaStreamLegacy` and `cudaStreamPerThread` mean
    /// that device's default streams; `cudaStreamPerThread` is then the calling thread's) whenever
    /// a call is made on the returned `Stream`: until it is dropped, or until its last use if that
    /// comes first. A device reset destroys the raw stream with its context, so it ends that.
    pub unsafe fn from_raw_borrowed(raw: sys::cudaStream_t, device: i32) -> Result<Stream> {
        if raw.is_null() || raw == sys::cudaStreamLegacy || raw == sys::cudaStreamPerThread {
            return Stream::default_stream("Stream::from_raw_borrowed", device, raw);
        }
        Ok(Stream {
            raw,
            device,
            kind: Kind::Borrowed,
            id: None,
            lane: None,
            gate: Gate::of(raw),
        }
        .identified())
    }

    fn identified(mut self) -> Stream {
        self.id = Some(StreamId::next());
        self
    }

    /// What an event recorded on it remembers, so that the futures of events recorded on one stream
    /// are checked in record order (`None` for a default stream).
    pub(crate) fn id(&self) -> Option<StreamId> {
        self.id
    }

    /// After a record on this stream (made now, not into a capture), the flag lane's ticket behind
    /// it, for a lane stream. `None` also where the write failed (the creation's first ticket
    /// showed that the device takes them, so a broken context, which the next call reports): the
    /// record stands, and its waits go at the reactor's pace.
    pub(crate) fn mark_lane(&self, d: &Driver) -> Option<(&'static FlagSlot, u64)> {
        let slot = self.lane?;
        slot.mark(d, self.raw).ok().map(|ticket| (slot, ticket))
    }

    /// Unregisters the host memory of the [flag lane](StreamOptions::flag_lane)'s slots that no
    /// lane stream holds, for a program about to exit under a leak checker (compute-sanitizer's
    /// `--leak-check full` reports memory still registered at exit). Returns how many pages with
    /// a spare slot (64 slots a page) stay registered: a page stays while a live lane stream holds
    /// one of its slots, or while a dropped stream's last ticket has not landed (a later call may
    /// release it; one that never lands, behind a stuck stream or a broken context, keeps it).
    /// Pages whose every slot a live lane stream holds are not counted. The next lane stream
    /// registers a new page. A released page's host memory stays allocated (an event may still
    /// point at one of its slots), so a program that releases and makes lane streams again and
    /// again keeps a page more each time: call it once, before exit. Made in relaxed capture mode,
    /// so that it never breaks another thread's capture.
    ///
    /// # Safety
    /// No graph that holds a ticket's write may have a launch pending at this call, nor be
    /// launched after it: one captured from a lane stream (which the lane's streams are declared
    /// never to be), or one whose capture began around a record on a lane stream (see
    /// [`StreamOptions::flag_lane`]). Such a launch writes into host memory no longer registered,
    /// a fault of the context.
    ///
    /// # Errors
    /// CUDA's first error of unregistering (the other pages are still tried, and a page it failed
    /// on stays).
    pub unsafe fn release_flag_lane_memory() -> Result<usize> {
        // SAFETY: the caller's promise, passed on.
        unsafe { flag_lane::release_memory() }
    }

    /// The raw handle, for C or other CUDA libraries. It stays owned by this `Stream`.
    pub fn as_raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// Its handle's capture gate (`capture_gate`).
    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
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
        d.stream_query.ready(code)
    }

    /// The stream's priority.
    #[doc(alias = "cudaStreamGetPriority")]
    pub fn priority(&self) -> Result<i32> {
        let d = driver("Stream::priority")?;
        let mut priority = 0;
        self.in_context_alive(d, || {
            d.stream_get_priority.call(|f| {
                // SAFETY: as in synchronize; writes through a live local.
                unsafe { f(self.raw, &mut priority) }
            })
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
    #[inline]
    pub(crate) fn is_capturing_with(&self, d: &Driver) -> Result<bool> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        d.stream_is_capturing.call(|f| {
            // SAFETY: as in synchronize; writes through a live local.
            unsafe { f(self.raw, &mut status) }
        })?;
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
                if thread.is_some_and(|thread| thread != crate::sync::thread::current().id()) {
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
        let Kind::Owned(instance) = self.kind else { return };
        if !crate::fork::in_forked_child() {
            self.gate.forget(); // the child takes no lock (see `fork`)
            if let Some(slot) = self.lane {
                flag_lane::give(instance, slot);
            }
        }
        crate::drop_errors::report(ContextInstance::destroy_unless_reset(Some(instance), |d| {
            // SAFETY: the stream was created here and is destroyed once; pending work still
            // completes.
            d.stream_destroy.call(|f| unsafe { f(self.raw) })
        }));
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
            .field("flag_lane", &self.lane.is_some())
            .finish()
    }
}
