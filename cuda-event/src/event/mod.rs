//! The event: torch.cuda.Event's semantics, created lazily and exactly once, every flag real.

mod builder;
pub(crate) mod capture_checks;
pub(crate) mod captured;
pub(crate) mod handle;
mod interprocess;
pub(crate) mod ipc;
mod last_record;
pub(crate) mod pool;
mod publish_once;
mod record;
pub(crate) mod watchers;

pub use builder::EventBuilder;

use crate::capture_mode::RelaxedCapture;
use crate::context::{ContextInstance, MadeIn};
use crate::device::current_device;
use crate::driver::{CUresult, Driver, Entry, driver};
use crate::error::{Error, Result};
use crate::event::handle::{EventHandle, QueryTarget, query_handle, query_raw};
use crate::event::ipc::{Exporter, IpcEventHandle};
use crate::event::last_record::{LastRecord, LastRecordWord};
use crate::event::publish_once::PublishOnce;
use crate::event::record::Captured;
use crate::event::watchers::Watchers;
use crate::stream::Stream;
use crate::sync::Mutex;
use crate::sync::OnceLock;
use crate::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use cuda_event_sys as sys;
use std::fmt;
use std::mem::ManuallyDrop;

/// A CUDA event, with the semantics of PyTorch's `torch.cuda.Event`.
///
/// Building one makes no CUDA call: the CUDA event is created on the first [`record`](Self::record)
/// (on the stream's device) or [`ipc_handle`](Self::ipc_handle) (on the current device), exactly
/// once even when threads race (a first record takes the event's lock, and another thread's first
/// record of the same event waits for it; later calls outside captures take none). A first record
/// that fails leaves the event uncreated (one that failed inside a capture may keep the CUDA event
/// it tried to record there; see "Recorded into a graph capture").
///
/// `Send + Sync`, every method `&self`: share it between threads by reference or in an `Arc`.
///
/// ```no_run
/// use cuda_event::{Event, Stream};
/// # fn main() -> cuda_event::Result<()> {
/// let (producer, consumer) = (Stream::new(0)?, Stream::new(0)?);
/// let ready = Event::new();                      // no CUDA call yet
/// // ... submit work to producer.as_raw() ...
/// ready.record(&producer)?;                      // creates the CUDA event, then records it
/// ready.wait(&consumer)?;                        // consumer's later work waits for it, on the GPU
/// // ... submit work that needs the producer's results to consumer.as_raw() ...
/// ready.synchronize()?;                          // or ready.query()? to ask without waiting
/// # Ok(()) }
/// ```
///
/// What differs from torch: flags are checked when the event is built; `blocking` and
/// `interprocess` always work (torch.Event ignores them); errors are typed values, not exceptions;
/// no call, `Drop` included, changes the current device or creates a context on a device the event
/// does not live on.
///
/// # Reuse, and handles that escape
/// A dropped event's CUDA event is kept for reuse by this thread's next new event (see
/// [`set_event_pool`](crate::pool::set_event_pool)), unless its handle escaped, that is, something other
/// than this `Event` may still use it after the drop:
/// - [`as_raw`](Self::as_raw) handed it out (the caller may have kept it);
/// - it was recorded or waited on as an external node of a CUDA graph being captured (an
///   [`external`](EventBuilder::external) event on a capturing stream): every launch of the graph
///   records or waits on it again;
/// - it is interprocess and [`ipc_handle`](Self::ipc_handle) exported it, or it was imported with
///   [`from_ipc_handle`](Self::from_ipc_handle);
/// - it came from [`from_raw`](Self::from_raw) (its creator may hold it) or left with
///   [`into_raw`](Self::into_raw).
///
/// Such an event is not reused, so that a C caller or a graph launch can never drive an unrelated
/// new `Event`. Its drop destroys it, except for an event a graph holds: CUDA may give a destroyed
/// event's handle to the next event created, and a graph launched
/// after its external event was destroyed records or waits on whatever event has the handle now
/// (or crashes). So such an event is kept, not destroyed, until its device's context ends (a
/// device reset, or the process's exit): one CUDA event per `Event` that ever became a graph node.
///
/// # Recorded into a graph capture
/// A plain (not [`external`](EventBuilder::external)) record on a stream being captured does not
/// record the event now: CUDA keeps it as a dependency of the capture. Reading a CUDA event whose
/// record a capture holds crashes CUDA when the read overlaps that record or the capture's end on
/// another thread, and a query while the capture is open breaks the capture. So such a record goes
/// to a second CUDA event of the same flags, which no other thread reads, and until the event is
/// recorded again outside a capture:
/// - [`query`](Self::query), [`synchronize`](Self::synchronize),
///   [`elapsed_time`](Self::elapsed_time) and [`completion`](Self::completion) return
///   `Error::Cuda` with `CUDA_ERROR_CAPTURED_EVENT` (907), CUDA's own answer during the capture,
///   without calling CUDA;
/// - [`wait`](Self::wait) on the thread that made that record forks the capture into the waiting
///   stream (CUDA's multi-stream capture); on another thread it returns the same error.
///
/// Reads, and records outside a capture, take no lock and never wait for each other: every read
/// is of the CUDA event no capture holds. Knowing whether a record goes into a capture costs each
/// record one `cuStreamIsCapturing` call (see [`set_capture_checks`](crate::capture::set_capture_checks)).
/// Each thread that records the event into a capture does so on a CUDA event of its own (two
/// threads' captured records of one CUDA event at once crash CUDA), under a lock of the event's.
/// Such a CUDA event is bound to the capture it went into: it goes into no other capture, on no
/// stream and into no destroy until that capture is over (the crate ended it, or CUDA destroyed
/// its graph), whichever `Event` or thread uses it next. What is kept so is bounded by the captures
/// and graphs alive, and counts in [`cuda_events_alive`](crate::pool::cuda_events_alive). A wait that
/// forks a capture needs the waiting thread's record to be the event's last. A plain record of an
/// [`interprocess`](EventBuilder::interprocess) event into a capture is refused
/// ([`Error::CapturedInterprocessEvent`]; CUDA answers 900 too): its importers could never see that
/// record. An interprocess event that is also [`external`](EventBuilder::external) records into a
/// capture as a node of the graph, which CUDA accepts, launches and exports (review 3's P4).
///
/// # Captures other threads make: what holds beside each
/// Captures made with [`Stream::capture`] need no rule of the caller's, so long as raw CUDA leaves
/// them alone: the crate's begin and end of such a capture, and its forks into it, never overlap
/// the crate's records, stream waits, host-function and graph launches, or forks on those streams
/// and into it. Beside
/// captures made by raw CUDA calls on other threads:
///
/// | other threads' raw CUDA | what the crate guarantees | measured by |
/// |---|---|---|
/// | end a capture that an `Event` was recorded into (once that record has returned), while any `Event` records into another capture, on a stream, waits or drops | no crash: that CUDA event is reused or destroyed only once the capture's graph is gone (a user object's destructor) | `bench/results/2026-12-06-h100-review-probes` (P1 `r`), `bench/results/2026-12-06-h100-capture-signals` (`r`, `u`, `v`), test `capture_threads` |
/// | end a capture while this thread records into that same capture (a record on its stream racing its end) | **none** beyond CUDA's own: the record's capture check, its capture-info read and its move of a user object into the capture's graph race the end | `bench/results/2026-12-06-h100-capture-signals` (`i`, `q`, `e`) |
/// | end a capture while this thread forks from its record into it ([`wait`](Self::wait) on the recording thread) | **none**: CUDA crashes on a stream wait beside the end of the capture that holds the event's record; fork only in captures that this thread ends, or made with [`Stream::capture`] | `bench/results/2026-12-06-h100-review-probes` (P1 `p`), `bench/results/2026-12-02-h200-ac5b2f1` (section 3) |
/// | begin a capture of a stream between the crate's capture check and its record there | the crate's own records (trace ranges, [`Stream::completion`]) ask again after the record and refuse it if the capture is still open (a capture begun and ended around the record goes unseen); for an `Event`'s record, **none**: the record goes into the capture on the CUDA event that every read uses, and a read beside that capture's end crashes CUDA; begin captures of a stream on the thread that submits to it, or with [`Stream::capture`] | `bench/results/2026-12-01-h200-captured-records`, `bench/results/2026-12-02-h200-two-events` |
/// | end by raw CUDA a capture the crate is making ([`Stream::capture`]), or capture by raw CUDA a stream the crate forked into one | **none**: the crate binds records on those streams to its own capture until its end returns | by reading |
/// | hold a global-mode capture while this thread queries, synchronizes or measures | the crate's own calls (futures, the reactor, trace and timing reads, [`Graph`](crate::capture::Graph)'s instantiation and destroy, [`release_measure_memory`](crate::timing::release_measure_memory)) run in relaxed mode and never break it; a caller's [`query`](Self::query) or [`synchronize`](Self::synchronize) in global mode is refused by CUDA (900) and breaks it, as CUDA documents | `bench/results/2026-12-06-h100-review-probes` (`capture_unsafe_calls.txt`), `bench/results/2026-12-07-h200-suite-lane-probes-at-28ac791` (`probe-capture_unsafe_calls.txt`: the frees and unregistering) |
/// | hold a global-mode capture while this thread makes a [`Stream`] (a new stream and one timing record on it) | no error, and the capture stays valid, in every mode of the calling thread, for non-blocking streams ([`StreamOptions::non_blocking`](crate::StreamOptions::non_blocking)) and blocking ones ([`Stream::new`]'s) | `bench/results/2026-12-07-h100-stream-first-use` (`at-cf870a3/capture_unsafe_calls.txt`; non-blocking, H100), `bench/results/2026-12-07-h200-suite-lane-probes-at-28ac791` (both, H200) |
/// | hold a global-mode capture while this thread makes or records on a [flag-lane](crate::StreamOptions::flag_lane) stream | no error, and the capture stays valid: the lane registers its pages in relaxed mode (a global-mode `cuMemHostRegister` is refused and breaks the capture), and its ticket writes (`cuStreamWriteValue64`) on its own stream are accepted in every mode | `bench/results/2026-12-07-h200-suite-lane-probes-at-28ac791` (`probe-capture_unsafe_calls.txt`) |
/// | record or wait on an [`external`](EventBuilder::external) event beside other threads' calls on it | no crash, no error | `bench/results/2026-12-06-h100-review-probes` (P2) |
/// | reset the device (`cudaDeviceReset`) between the crate's calls | an error ([`Error::DeviceWasReset`]); the crate's stores into its host words after the reset are harmless (they are its own, registered pages). A reset made inside [`measure`](crate::timing::measure)'s work is an error too: after the caller's work the crate checks the stream's context before any call of its own (test `lifecycle`). **None** for a reset by another thread between that check and the crate's next call on the stream: CUDA crashes inside `cuMemsetD32Async` (the L2 flush) on a stream of a context reset under it | `bench/results/2026-12-06-h100-review-probes` (P3), `bench/results/2026-12-06-h100-suite-issue-41`, `bench/results/2026-12-07-h100-suite-calibration-probes` (`s6-frames.txt`) |
pub struct Event {
    options: EventBuilder,
    /// The published CUDA event: every read and every record outside a capture.
    created: PublishOnce<EventHandle>,
    /// The CUDA events that records into captures take (see `last_record`): one per thread and
    /// device that made one, so that no two threads ever call CUDA on the same one.
    captured: Mutex<Vec<Captured>>,
    /// Taken to create the published CUDA event: by a first record (see `record`) and by
    /// `ipc_handle`.
    creating: Mutex<()>,
    recorded: AtomicBool,
    /// Who else may use the handle after this `Event` drops ([`Escape`] as a number): decides
    /// whether Drop pools, destroys or retires it.
    escaped: AtomicU8,
    /// The handle of an interprocess event, once exported or when imported.
    ipc: OnceLock<IpcEventHandle>,
    /// For an imported event, the process that exported it, if it can be watched.
    exporter: Option<Exporter>,
    /// The futures that wait on its published CUDA event.
    watchers: Watchers,
    /// Which CUDA event holds the last record (see `last_record`).
    last: LastRecordWord,
}

// SAFETY: the CUDA event handle may be used from any thread (CUDA's API is thread safe); the rest of
// the state is in OnceLock, PublishOnce, Mutex and atomics.
unsafe impl Send for Event {}
// SAFETY: as for Send: every method takes &self, creation and first records are serialized by
// `creating`, each CUDA event is published once through a PublishOnce, and every later read is of
// immutable data or atomics.
unsafe impl Sync for Event {}

impl Default for Event {
    fn default() -> Event {
        Event::new()
    }
}

impl Event {
    /// An event with default options: no timing, spinning synchronize, not interprocess. No CUDA
    /// call: the CUDA event (`cudaEventCreateWithFlags`) is made on first use, as in torch.
    #[doc(alias = "cudaEventCreate")]
    #[doc(alias = "cudaEventCreateWithFlags")]
    pub fn new() -> Event {
        Event::lazy(EventBuilder::default())
    }

    /// Options for a new event; see [`EventBuilder`].
    pub fn builder() -> EventBuilder {
        EventBuilder::default()
    }

    pub(crate) fn lazy(options: EventBuilder) -> Event {
        Event {
            options,
            created: PublishOnce::new(),
            captured: Mutex::new(Vec::new()),
            creating: Mutex::new(()),
            recorded: AtomicBool::new(false),
            escaped: AtomicU8::new(Escape::No as u8),
            ipc: OnceLock::new(),
            exporter: None,
            watchers: Watchers::new(),
            last: LastRecordWord::new(),
        }
    }

    /// The options the event was built with.
    pub fn options(&self) -> EventBuilder {
        self.options
    }

    /// Whether it was built `blocking`: its waits sleep rather than spin.
    pub(crate) fn is_blocking(&self) -> bool {
        self.options.blocking
    }

    /// Makes `handle` this event's. Every caller holds the `creating` lock or owns the only
    /// reference to the event, so the publish cannot lose; should it, `handle` goes back to the pool.
    fn publish(&self, handle: EventHandle) -> &EventHandle {
        match self.created.set(handle) {
            Ok(handle) => handle,
            Err((ours, winner)) => {
                pool::give_or_destroy(self.options.cuda_flags(), ours);
                winner
            }
        }
    }

    /// Makes all work submitted to `stream` from now on wait until this event completes. The
    /// stream may be on another device. An event never recorded (not created) is a no-op.
    #[doc(alias = "cudaStreamWaitEvent")]
    #[doc(alias = "cuStreamWaitEvent")]
    pub fn wait(&self, stream: &Stream) -> Result<()> {
        let Some(handle) = self.created.get() else {
            return Ok(());
        };
        let d = driver("Event::wait")?;
        match self.last.get() {
            LastRecord::Plain => {
                MadeIn::ensure_both_alive(d, handle.made_in(), stream.made_in(), None)?;
                // A wait on a stream being captured adds to the capture, as a record does: no
                // begin or end of a capture the crate makes of the stream falls beside it
                // (`capture_gate`).
                let gate = capture_checks::on().then(|| stream.gate().shared());
                let in_crate_capture = gate.as_ref().is_some_and(|gate| gate.capture().is_some());
                self.wait_handle(d, handle, stream, Some(in_crate_capture))
            }
            // On the thread that recorded it into the capture, a wait forks the capture into
            // `stream` (and asks nothing else of the event: a query would break the capture);
            // from another thread it could overlap the capture's end.
            LastRecord::Swallowed { here: true } => self.fork(d, handle.device(), stream),
            LastRecord::Swallowed { here: false } => {
                Err(d.stream_wait_event.error(CUresult::CUDA_ERROR_CAPTURED_EVENT))
            }
        }
    }

    /// A wait on this thread's captured CUDA event: CUDA's multi-stream capture forks the capture
    /// into `stream`. Only this thread calls CUDA on that event.
    #[cold]
    fn fork(&self, d: &Driver, device: i32, stream: &Stream) -> Result<()> {
        // A fork puts `stream` into the capture: no record or host-function launch of the crate's
        // on it falls between its capture check and its call meanwhile (`capture_gate`), as for
        // the crate's begin of a capture. Taken before the event's list, as records take them.
        let mut alone = stream.gate().exclusive();
        let thread = last_record::thread_token();
        let captured = self.captured.lock();
        // The waiting stream may be on another device (CUDA allows it); the captured event is on
        // the event's.
        let Some(mine) = captured
            .iter()
            .find(|c| Some(c.thread) == thread && c.handle.device() == device)
        else {
            return Err(d.stream_wait_event.error(CUresult::CUDA_ERROR_CAPTURED_EVENT));
        };
        // Until the wait returns, the crate's own end of that capture waits (`Capture::end`).
        let Some(_entry) = mine.capture.enter() else {
            // A fork on the record of a capture that is over joins nothing (CUDA answers invalid
            // value, review 3's P5 d); refused here with no CUDA call.
            return Err(d.stream_wait_event.error(CUresult::CUDA_ERROR_CAPTURED_EVENT));
        };
        MadeIn::ensure_both_alive(d, mine.handle.made_in(), stream.made_in(), None)?;
        self.wait_handle(d, &mine.handle, stream, None)?;
        // Listed with the stream's gate: records on it then know the capture without
        // `cuStreamGetCaptureInfo`, which crashes beside the capture's end (capture_end_signals i).
        // Only a capture the crate ends: a raw one's streams may be captured again while its graph
        // lives.
        if mine.capture.is_ended_by_the_crate() {
            alone.began(mine.capture.clone());
        }
        Ok(())
    }

    /// The stream wait. `plain`, for a wait on the event's plain record: whether the stream is
    /// in a capture the crate makes (then known without asking CUDA, whose capture info crashes
    /// beside that capture's end); and first ask whether an imported event's exporter is gone.
    /// `None` for a fork (a wait on this thread's captured event).
    fn wait_handle(
        &self,
        d: &Driver,
        handle: &EventHandle,
        stream: &Stream,
        plain: Option<bool>,
    ) -> Result<()> {
        if let Some(exporter) = self.exporter.filter(|_| plain.is_some()) {
            // A wait on work that will never complete would hang the stream for good. The query is
            // the crate's: relaxed, so it never breaks another thread's global capture.
            let complete = {
                let _relaxed = RelaxedCapture::enter(d);
                query_raw(d, handle.raw)?
            };
            if !complete && exporter.is_gone() {
                return Err(Error::ExporterGone { pid: exporter.pid });
            }
        }
        stream.in_context(d, || {
            let external = self.options.external
                && match plain {
                    Some(true) => true,
                    _ => stream.is_capturing_with(d)?,
                };
            let flags = if external {
                sys::cudaEventWaitExternal
            } else {
                sys::cudaEventWaitDefault
            };
            d.stream_wait_event.call(|f| {
                // SAFETY: a live stream and event; CUDA allows them on different devices.
                unsafe { f(stream.as_raw(), handle.raw, flags) }
            })?;
            if external {
                // The graph waits on this handle at every launch.
                self.escape(Escape::ToGraph);
            }
            Ok(())
        })
    }

    /// Makes future work on the current device's legacy default stream wait for this event
    /// (torch's `wait()` with no stream).
    pub fn wait_on_current_device(&self) -> Result<()> {
        self.wait(&Stream::legacy(current_device()?)?)
    }

    /// Whether all work the event captured has completed: `Ok(true)` when complete or never
    /// recorded, `Ok(false)` while pending. Any other CUDA error, such as one from earlier
    /// asynchronous work, is returned as an error, never read as "done" or "not ready". Needs no
    /// current device or context: any thread may ask.
    #[doc(alias = "cudaEventQuery")]
    #[doc(alias = "cuEventQuery")]
    pub fn query(&self) -> Result<bool> {
        let Some(handle) = self.created.get() else {
            return Ok(true);
        };
        let d = driver("Event::query")?;
        self.refuse_if_swallowed(&d.event_query)?;
        query_handle(d, handle.raw, handle.made_in(), self.exporter)
    }

    /// Refuses a read (of `call`) when the event's last record was swallowed by a graph capture,
    /// with the error CUDA gives `call` for such an event during the capture, and no CUDA call
    /// (see "Recorded into a graph capture"). One load.
    #[inline]
    pub(crate) fn refuse_if_swallowed<F: Copy>(&self, call: &Entry<F>) -> Result<()> {
        match self.last.get() {
            LastRecord::Plain => Ok(()),
            LastRecord::Swallowed { .. } => Err(call.error(CUresult::CUDA_ERROR_CAPTURED_EVENT)),
        }
    }

    /// What [`query`](Self::query) asks about, for a future; None before creation.
    pub(crate) fn query_target(&self) -> Option<QueryTarget> {
        let handle = self.created.get()?;
        Some(QueryTarget {
            raw: handle.raw,
            made_in: handle.made_in(),
            exporter: self.exporter,
        })
    }

    /// The futures that wait on its published CUDA event.
    pub(crate) fn watchers(&self) -> &Watchers {
        &self.watchers
    }

    /// Waits on this thread until the work the event captured has completed: sleeping for a
    /// `blocking` event, spinning otherwise. Returns at once if never recorded. Needs no current
    /// device or context.
    #[doc(alias = "cudaEventSynchronize")]
    #[doc(alias = "cuEventSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        let Some(handle) = self.created.get() else {
            return Ok(());
        };
        let d = driver("Event::synchronize")?;
        handle.made_in().ensure_alive(d, None)?;
        if let Some(exporter) = self.exporter {
            return self.synchronize_imported(d, handle.raw, exporter);
        }
        self.refuse_if_swallowed(&d.event_synchronize)?;
        // SAFETY: a live event.
        d.event_synchronize.call(|f| unsafe { f(handle.raw) })
    }

    /// Milliseconds between this event's record and `end`'s. The resolution is about half a
    /// microsecond. Needs no current device or context.
    ///
    /// # Errors
    /// In torch's order: [`Error::NotTimingEvent`] unless both were built with `enable_timing`
    /// (imported events never are) and [`Error::NotRecorded`] unless both were recorded, each with no
    /// CUDA call; [`Error::NotComplete`] unless both have completed (CUDA's not-ready answer is never
    /// returned as a CUDA error); [`Error::ElapsedAcrossDevices`] unless both are on one device.
    #[doc(alias = "cudaEventElapsedTime")]
    #[doc(alias = "cuEventElapsedTime")]
    pub fn elapsed_time(&self, end: &Event) -> Result<f32> {
        if !self.options.enable_timing || !end.options.enable_timing {
            return Err(Error::NotTimingEvent);
        }
        let (Some(start_event), Some(end_event)) = (self.recorded(), end.recorded()) else {
            return Err(Error::NotRecorded);
        };
        let d = driver("Event::elapsed_time")?;
        MadeIn::ensure_both_alive(d, start_event.made_in(), end_event.made_in(), None)?;
        self.refuse_if_swallowed(&d.event_elapsed_time)?;
        end.refuse_if_swallowed(&d.event_elapsed_time)?;
        elapsed_between(d, start_event, end_event)
    }

    /// The device the CUDA event lives on; `None` before it is created.
    pub fn device(&self) -> Option<i32> {
        self.created.get().map(|c| c.device())
    }

    /// The raw handle, for C or other CUDA libraries; `None` before it is created. It stays owned
    /// by this `Event`: don't destroy it, and don't use it after the `Event` drops. Handing it out
    /// keeps this event's CUDA event out of the reuse pool (see "Reuse" above). Don't record it
    /// into a stream capture: the crate reads it from any thread, and CUDA can crash when such a
    /// read overlaps a record into a capture or the capture's end (record the `Event` instead).
    ///
    /// It never carries a record made into a capture: after a plain record of the `Event` into a
    /// capture, code waiting on this handle waits on the `Event`'s last record outside captures
    /// (a wait through the `Event` on the recording thread forks the capture instead).
    pub fn as_raw(&self) -> Option<sys::cudaEvent_t> {
        let handle = self.created.get()?;
        self.escape(Escape::ToCaller);
        Some(handle.raw)
    }

    /// Takes over a CUDA event made elsewhere (C, another crate); it is destroyed when the `Event`
    /// drops (never reused), and not destroyed again if a device reset already did. `options` tell
    /// what it was created with (timing, blocking, interprocess); it counts as recorded.
    ///
    /// # Safety
    /// `raw` is a live event of `device`'s primary context, created with flags matching `options`,
    /// that nothing else destroys or uses after the returned `Event` drops, and that no other
    /// code records into a stream capture while the `Event` may read it (see `as_raw`).
    pub unsafe fn from_raw(raw: sys::cudaEvent_t, device: i32, options: EventBuilder) -> Event {
        // The context instance it lives in, so that Drop after a device reset does not destroy it
        // again; without a driver there is no instance to read, and then nothing else either.
        let instance = driver("Event::from_raw")
            .and_then(|d| ContextInstance::of_primary(d, device))
            .ok();
        let event = Event::lazy(options);
        event.publish(EventHandle::adopt(raw, device, instance));
        event.recorded.store(true, Ordering::Relaxed);
        event.escape(Escape::ToCaller);
        event
    }

    /// Gives up the raw handle, for C or another crate to use and destroy (`cudaEventDestroy`);
    /// `None` if the CUDA event was never created. In a forked child (see the crate's docs on
    /// `fork`) the handle is the parent's, which the child must not use. As for
    /// [`as_raw`](Self::as_raw), the handle carries no record made into a capture.
    pub fn into_raw(self) -> Option<sys::cudaEvent_t> {
        let mut this = ManuallyDrop::new(self);
        if crate::fork::in_forked_child() {
            // No reactor, and its locks may be held for ever (see `fork`).
            return this.created.take().map(EventHandle::release);
        }
        let raw = this.give_up().map(EventHandle::release);
        // SAFETY: `this` is not used again. Dropping it in place runs `Event`'s `Drop`, whose
        // `give_up` finds nothing left to give up (`created` and `captured` emptied, every cell
        // abandoned, the export forgotten: each step is idempotent), then frees Rust memory.
        unsafe { ManuallyDrop::drop(&mut this) };
        raw
    }

    /// What `Drop` and `into_raw` share outside a forked child: gives up the captured CUDA events,
    /// abandons every future's cell (a leaked future must not go on querying a CUDA event that is
    /// destroyed, reused or handed over) and forgets the exported handle. Returns the published
    /// CUDA event, which nothing else of this `Event` uses now.
    fn give_up(&mut self) -> Option<EventHandle> {
        self.give_up_captured();
        self.watchers.abandon_all();
        if let Some(exported) = self.ipc.get() {
            ipc::forget_exported(exported);
        }
        self.created.take()
    }

    /// Gives up the captured CUDA events, each kept for the capture it went into until that
    /// capture is over (see `captured`), whichever thread drops the event.
    fn give_up_captured(&mut self) {
        let flags = self.options.cuda_flags();
        for Captured { capture, handle, .. } in std::mem::take(self.captured.get_mut()) {
            captured::give(capture, flags, handle);
        }
    }

    /// Its published CUDA event's last record may have been swallowed by a capture that another
    /// thread began around it: never reused.
    pub(crate) fn may_be_in_a_graph(&self) {
        self.escape(Escape::ToGraph);
    }

    /// Whether nothing but this `Event` may use its CUDA event (no raw handle out, no graph that
    /// may hold it): it may be recorded again for another purpose.
    pub(crate) fn is_private(&self) -> bool {
        self.escaped.load(Ordering::Relaxed) == Escape::No as u8
    }

    fn escape(&self, to: Escape) {
        if self.escaped.load(Ordering::Relaxed) < to as u8 {
            self.escaped.fetch_max(to as u8, Ordering::Relaxed);
        }
    }

    fn recorded(&self) -> Option<&EventHandle> {
        self.created
            .get()
            .filter(|_| self.recorded.load(Ordering::Relaxed))
    }
}

/// The event capabilities of a stream.
impl Stream {
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
}

/// Who, besides this `Event`, may use its CUDA event after the `Event` drops.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Escape {
    /// No one: it may be reused.
    No,
    /// Code that got the raw handle (`as_raw`, `from_raw`, IPC exporters and importers), which
    /// must not use it after the `Event` drops: destroyed.
    ToCaller,
    /// A CUDA graph holding it as an external record or wait node: kept until its device's context
    /// ends (see `EventHandle::retire`).
    ToGraph,
}

/// Milliseconds between two recorded timing events' records ([`Event::elapsed_time`] after its
/// checks).
fn elapsed_between(d: &Driver, start_event: &EventHandle, end_event: &EventHandle) -> Result<f32> {
    if start_event.device() != end_event.device() {
        // torch's order: incomplete work is reported before the device mismatch. The queries are
        // the crate's, not the caller's: relaxed, so they never break another thread's capture.
        let _relaxed = RelaxedCapture::enter(d);
        if !query_raw(d, start_event.raw)? || !query_raw(d, end_event.raw)? {
            return Err(Error::NotComplete);
        }
        return Err(Error::ElapsedAcrossDevices {
            start: start_event.device(),
            end: end_event.device(),
        });
    }
    // On one device, CUDA's not-ready answer is exactly "not both complete": read it as the typed
    // error instead of querying both first (two queries cost far more than the call itself).
    let mut ms = 0.0;
    // SAFETY: two live, recorded events of one device; writes through a pointer to a live local.
    let code = d
        .event_elapsed_time
        .code(|f| unsafe { f(&mut ms, start_event.raw, end_event.raw) });
    match d.event_elapsed_time.ready(code)? {
        true => Ok(ms),
        false => Err(Error::NotComplete),
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if crate::fork::in_forked_child() {
            return; // the parent owns the CUDA event; the child takes no lock (see `fork`)
        }
        let Some(handle) = self.give_up() else {
            return;
        };
        match *self.escaped.get_mut() {
            // A graph may launch it at any time: destroying it would let CUDA hand the same
            // handle to the next event created, which the graph would then drive.
            e if e == Escape::ToGraph as u8 => handle.retire(),
            e if e == Escape::ToCaller as u8 => handle.destroy(),
            _ => pool::give_or_destroy(self.options.cuda_flags(), handle),
        }
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Event");
        match self.created.get() {
            None => s.field("cuda_event", &format_args!("not created")),
            Some(c) => s.field("cuda_event", &c.raw).field("device", &c.device()),
        };
        s.field("options", &self.options)
            .field("recorded", &self.recorded.load(Ordering::Relaxed))
            .finish()
    }
}
