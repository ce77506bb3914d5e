//! The event: torch.cuda.Event's semantics, created lazily and exactly once, every flag real.

pub(crate) mod capture_checks;
pub(crate) mod handle;
pub(crate) mod ipc;
mod last_record;
pub(crate) mod pool;
mod publish_once;
pub(crate) mod watchers;

use crate::context::{Context, ContextInstance, MadeIn};
use crate::device::current_device;
use crate::driver::{CUresult, Driver, Entry, driver};
use crate::error::{Error, Result};
use crate::event::handle::{EventHandle, QueryTarget, query_handle, query_raw};
use crate::event::ipc::{Exporter, IpcEventHandle};
use crate::event::last_record::{LastRecord, LastRecordWord};
use crate::event::publish_once::PublishOnce;
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
/// [`set_event_pool`](crate::set_event_pool)), unless its handle escaped, that is, something other
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
/// record one `cuStreamIsCapturing` call (see [`set_capture_checks`](crate::set_capture_checks)).
/// Each thread that records the event into a capture does so on a CUDA event of its own (two
/// threads' captured records of one CUDA event at once crash CUDA), under a lock of the event's.
/// When the event drops, the thread's own goes back to that thread's keeping for its next records
/// into captures, and any other thread's is kept until its device's context ends (a capture may
/// still hold it, and destroying it beside that capture's end crashes CUDA); both count in
/// [`cuda_events_alive`](crate::cuda_events_alive). A wait that forks a capture needs the waiting
/// thread's record to be the event's last. An [`interprocess`](EventBuilder::interprocess) event
/// is not recorded into a capture ([`Error::CapturedInterprocessEvent`]): its importers could never
/// see that record.
///
/// A thread that records the event into a capture that another thread ends must not wait on the
/// event (a fork), on that capture or a later one of its own, until that end has returned: CUDA
/// crashes when a wait on an event overlaps the end of a capture that holds its record, and only
/// the thread that ends a capture knows when it does. That is the caller's race, as is this one: a
/// capture that another thread begins on a stream while this thread records on it is outside
/// these guarantees: "when a stream is in capture mode, all operations
/// pushed into the stream will not be executed, but will instead be captured into a graph"
/// (CUDA's `cudaStreamBeginCapture`), this record included, on the CUDA event every thread reads.
/// So is a record of [`as_raw`](Self::as_raw)'s handle into a capture made by other code.
pub struct Event {
    options: EventBuilder,
    /// The published CUDA event: every read and every record outside a capture.
    created: PublishOnce<EventHandle>,
    /// The CUDA events that records into captures take (see `last_record`): one per thread and
    /// device that made one, so that no two threads ever call CUDA on the same one.
    captured: Mutex<Vec<Captured>>,
    /// Taken by a first record and to create the published CUDA event, so that one thread creates
    /// it and the first record is published before any other (no first record can lose a race).
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

/// The options of an [`Event`], torch's keyword arguments; all off by default, as in torch.
///
/// ```
/// let event = cuda_event::Event::builder().enable_timing(true).blocking(true).build()?;
/// # Ok::<(), cuda_event::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "an EventBuilder does nothing until .build()"]
pub struct EventBuilder {
    enable_timing: bool,
    blocking: bool,
    interprocess: bool,
    external: bool,
}

impl EventBuilder {
    /// The event records time, for [`Event::elapsed_time`] (no `cudaEventDisableTiming`). Off by
    /// default, as in torch: every record of a timing event also takes a GPU timestamp, which makes
    /// it much dearer than a plain record (see the crate's "Performance" section), so ask for
    /// timing only where the time is read. [`Timer`](crate::Timer) keeps pooled timing events for
    /// that.
    pub fn enable_timing(mut self, on: bool) -> Self {
        self.enable_timing = on;
        self
    }

    /// [`Event::synchronize`] sleeps instead of spinning, using almost no CPU while it waits
    /// (`cudaEventBlockingSync`), at the cost of a later wake-up. CUDA queues only a few dozen
    /// records of blocking events behind unfinished work: past that, [`Event::record`] itself
    /// waits for the GPU to catch up. Awaiting
    /// an event ([`Event::completion`]) sleeps without this flag.
    pub fn blocking(mut self, on: bool) -> Self {
        self.blocking = on;
        self
    }

    /// The event can be shared with other processes through [`Event::ipc_handle`]
    /// (`cudaEventInterprocess`). Cannot be combined with timing.
    pub fn interprocess(mut self, on: bool) -> Self {
        self.interprocess = on;
        self
    }

    /// While the stream is being captured into a CUDA graph, `record` and `wait` become external
    /// nodes of the graph (`cudaEventRecordExternal`, `cudaEventWaitExternal`); outside capture
    /// they behave as usual. An external record into a capture leaves the event's last record as
    /// it was (queries, synchronizes and waiting futures go on reading it) until a launch of the
    /// graph records it.
    pub fn external(mut self, on: bool) -> Self {
        self.external = on;
        self
    }

    /// The event, not yet created in CUDA (no CUDA call; `cudaEventCreateWithFlags` happens on first use).
    ///
    /// # Errors
    /// [`Error::InterprocessWithTiming`] for `interprocess` with `enable_timing`.
    pub fn build(self) -> Result<Event> {
        if self.interprocess && self.enable_timing {
            return Err(Error::InterprocessWithTiming);
        }
        Ok(Event::lazy(self))
    }

    /// The flags of `cudaEventCreateWithFlags`.
    fn cuda_flags(self) -> u32 {
        let mut flags = sys::cudaEventDefault;
        if !self.enable_timing {
            flags |= sys::cudaEventDisableTiming;
        }
        if self.blocking {
            flags |= sys::cudaEventBlockingSync;
        }
        if self.interprocess {
            flags |= sys::cudaEventInterprocess;
        }
        flags
    }
}

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

    /// Records the work submitted to `stream` so far: the event completes when that work has.
    /// Creates the CUDA event on the stream's device if needed. Recording again replaces what was
    /// captured; a [`wait`](Self::wait) already issued keeps what it saw.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] (no CUDA call) when the event lives on another device than the
    /// stream; CUDA's errors otherwise.
    #[doc(alias = "cudaEventRecord")]
    #[doc(alias = "cuEventRecord")]
    #[doc(alias = "cudaEventRecordWithFlags")]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.record_as(stream, false).map(drop)
    }

    /// [`record`](Self::record), telling how the record was made; with `refuse_capture`, a stream
    /// being captured gets [`Error::StreamCapturing`] and no record.
    #[inline]
    pub(crate) fn record_as(&self, stream: &Stream, refuse_capture: bool) -> Result<Recorded> {
        let d = driver("Event::record")?;
        let ask = Ask {
            refuse_capture,
            ..Ask::default()
        };
        let recorded = match self.created.get() {
            Some(handle) => self.record_handle(d, handle, stream, ask)?,
            None => self.record_first(d, stream, ask)?,
        };
        if !self.recorded.load(Ordering::Relaxed) {
            self.recorded.store(true, Ordering::Relaxed);
        }
        if let Recorded::Now = recorded {
            self.watchers.note_record(stream);
        }
        Ok(recorded)
    }

    /// The first record, under the `creating` lock: takes a CUDA event from this thread's pool or
    /// creates one, records it, and only then publishes it, so that a failed first record leaves
    /// the event uncreated (and a pooled CUDA event's old record never becomes this event's), and
    /// no other thread's record runs before the publish. On a stream being captured an external
    /// event gets a new CUDA event: the graph node is its only record, and a pooled one would
    /// answer its old owner's record until the graph runs.
    ///
    /// Not `#[cold]`: a new event's first record is a hot path (the pool makes it cost about a
    /// record), and a cold function gets little inlined into it.
    #[inline(never)]
    fn record_first(&self, d: &Driver, stream: &Stream, ask: Ask) -> Result<Recorded> {
        let _creating = self.creating.lock();
        if let Some(handle) = self.created.get() {
            // Another thread's first record came first.
            return self.record_handle(d, handle, stream, ask);
        }
        let flags = self.options.cuda_flags();
        // The stream's check first: a pooled event made in the instance the stream is alive in
        // needs no check of its own (one driver call in all, as for any record).
        let known_alive = stream.made_in().ensure_alive(d, None)?;
        let capturing = capture_checks::on() && stream.in_context(d, || stream.is_capturing_with(d))?;
        if capturing && ask.refuse_capture {
            return Err(Error::StreamCapturing); // before any CUDA event is taken
        }
        if capturing && self.options.interprocess && !self.options.external {
            return Err(Error::CapturedInterprocessEvent);
        }
        // On a stream being captured the published event gets no record now (a captured record
        // goes to this thread's captured event, an external one is a graph node): a new one, so
        // that it never carries a pooled event's old record (which `as_raw` would hand out).
        let pooled = match capturing {
            true => None,
            false => pool::take(d, stream.device(), flags, known_alive),
        };
        let handle = match pooled {
            Some(pooled) => pooled,
            None => EventHandle::create(d, stream.device(), flags)?,
        };
        let ask = Ask {
            known_alive: handle.instance(),
            capturing: Some(capturing),
            ..ask
        };
        match self.record_handle(d, &handle, stream, ask) {
            Ok(recorded) => {
                self.publish(handle);
                Ok(recorded)
            }
            Err(e) => {
                give_back_after_a_failed_record(capturing && self.options.external, stream, flags, handle);
                Err(e)
            }
        }
    }

    /// Records on `stream`: `handle` (the published CUDA event, or the one a first record is about
    /// to publish) outside a capture or as an external node, this thread's captured CUDA event
    /// into a capture.
    fn record_handle(&self, d: &Driver, handle: &EventHandle, stream: &Stream, ask: Ask) -> Result<Recorded> {
        if handle.device() != stream.device() {
            return Err(Error::DeviceMismatch {
                event: handle.device(),
                stream: stream.device(),
            });
        }
        MadeIn::ensure_both_alive(d, handle.made_in(), stream.made_in(), ask.known_alive)?;
        stream.in_context(d, || {
            let (raw, s) = (handle.raw, stream.as_raw());
            let capturing = match ask.capturing {
                Some(capturing) => capturing,
                None => capture_checks::on() && stream.is_capturing_with(d)?,
            };
            if !capturing {
                // SAFETY: a live event and stream of one device (checked above).
                d.event_record.call(|f| unsafe { f(raw, s) })?;
                self.last.made_on_a_stream();
                return Ok(Recorded::Now);
            }
            self.record_into_capture(d, handle, stream, ask.refuse_capture)
        })
    }

    /// A record on a stream being captured: refused, an external node of the graph for an external
    /// event, or else a plain record of this thread's captured CUDA event.
    #[cold]
    #[inline(never)]
    fn record_into_capture(
        &self,
        d: &Driver,
        handle: &EventHandle,
        stream: &Stream,
        refuse_capture: bool,
    ) -> Result<Recorded> {
        if refuse_capture {
            return Err(Error::StreamCapturing);
        }
        if !self.options.external {
            return self.record_captured(d, stream);
        }
        d.event_record_with_flags.call(|f| {
            // SAFETY: a live event and stream of one device (checked by the caller); the flag is a
            // record flag.
            unsafe { f(handle.raw, stream.as_raw(), sys::cudaEventRecordExternal) }
        })?;
        // The graph records this handle at every launch.
        self.escape(Escape::ToGraph);
        Ok(Recorded::IntoGraph)
    }

    /// A plain record into a capture of `stream`, made on this thread's captured CUDA event for
    /// the stream's device (see `last_record`), which it takes from this thread's pool of them or
    /// creates at its first.
    #[cold]
    fn record_captured(&self, d: &Driver, stream: &Stream) -> Result<Recorded> {
        if self.options.interprocess {
            return Err(Error::CapturedInterprocessEvent);
        }
        let Some(thread) = last_record::thread_token() else {
            return self.record_captured_without_a_thread(d, stream);
        };
        let device = stream.device();
        let mut captured = self.captured.lock();
        let at = match captured
            .iter()
            .position(|c| c.thread == thread && c.handle.device() == device)
        {
            Some(at) => at,
            None => {
                let flags = self.options.cuda_flags();
                let handle = match pool::take_captured(d, device, flags) {
                    Some(pooled) => pooled,
                    None => EventHandle::create(d, device, flags)?,
                };
                captured.push(Captured { thread, handle });
                captured.len() - 1
            }
        };
        let handle = &captured[at].handle;
        handle.made_in().ensure_alive(d, None)?;
        d.event_record.call(|f| {
            // SAFETY: a live event and stream of one device; only this thread calls CUDA on it.
            unsafe { f(handle.raw, stream.as_raw()) }
        })?;
        self.last.swallowed_by(thread);
        Ok(Recorded::Swallowed)
    }

    /// A plain record into a capture from a thread whose thread-locals are gone (a thread-local's
    /// destructor): on a CUDA event of its own, kept; no thread can fork through it.
    #[cold]
    fn record_captured_without_a_thread(&self, d: &Driver, stream: &Stream) -> Result<Recorded> {
        let handle = EventHandle::create(d, stream.device(), self.options.cuda_flags())?;
        let recorded = d.event_record.call(|f| {
            // SAFETY: a live event (just made) and stream of one device.
            unsafe { f(handle.raw, stream.as_raw()) }
        });
        handle.retire(); // a capture may hold it
        recorded?;
        self.last.swallowed_by(last_record::NO_THREAD);
        Ok(Recorded::Swallowed)
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

    /// Records on the legacy default stream of the current device (torch's `record()` with no
    /// stream).
    pub fn record_on_current_device(&self) -> Result<()> {
        self.record(&Stream::legacy(current_device()?)?)
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
                self.wait_handle(d, handle, stream, true)
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
        MadeIn::ensure_both_alive(d, mine.handle.made_in(), stream.made_in(), None)?;
        self.wait_handle(d, &mine.handle, stream, false)
    }

    /// The stream wait; `check_exporter`: first ask whether an imported event's exporter is gone.
    fn wait_handle(
        &self,
        d: &Driver,
        handle: &EventHandle,
        stream: &Stream,
        check_exporter: bool,
    ) -> Result<()> {
        if let Some(exporter) = self.exporter.filter(|_| check_exporter) {
            // A wait on work that will never complete would hang the stream for good.
            if !query_raw(d, handle.raw)? && exporter.is_gone() {
                return Err(Error::ExporterGone { pid: exporter.pid });
            }
        }
        stream.in_context(d, || {
            let external = self.options.external && stream.is_capturing_with(d)?;
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

    /// Its published CUDA event's last record may have been swallowed by a capture that another
    /// thread began around it: never reused.
    pub(crate) fn may_be_in_a_graph(&self) {
        self.escape(Escape::ToGraph);
    }

    /// Gives up the captured CUDA events: this thread's back to its pool of them (it alone ever
    /// calls CUDA on them, so a capture that still holds one sees only its own thread's calls),
    /// other threads' kept for good (a capture may still hold one, and destroying it beside that
    /// capture's end crashes CUDA).
    fn give_up_captured(&mut self) {
        let captured = std::mem::take(self.captured.get_mut());
        if captured.is_empty() {
            return;
        }
        let (thread, flags) = (last_record::thread_token(), self.options.cuda_flags());
        for Captured {
            thread: owner,
            handle,
        } in captured
        {
            match Some(owner) == thread {
                true => pool::give_captured(flags, handle),
                false => handle.retire(),
            }
        }
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

    /// Waits for an imported event by polling, so that the exporter's death is noticed: CUDA's own wait
    /// never returns if the exporter dies with the work pending (measured). Sleeps of 10 us doubling
    /// up to 1 ms: little CPU, and the wake-up comes at most about 1 ms after completion.
    fn synchronize_imported(&self, d: &Driver, raw: sys::cudaEvent_t, exporter: Exporter) -> Result<()> {
        let query = || {
            self.refuse_if_swallowed(&d.event_query)?;
            query_raw(d, raw)
        };
        let mut pause = std::time::Duration::from_micros(10);
        loop {
            if query()? {
                return Ok(());
            }
            if exporter.is_gone() {
                // It may have completed just before the exporter ended.
                return match query()? {
                    true => Ok(()),
                    false => Err(Error::ExporterGone { pid: exporter.pid }),
                };
            }
            crate::sync::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
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

    /// The handle another process opens this event with ([`Event::from_ipc_handle`]). Creates the
    /// CUDA event on the current device if it does not exist yet. The handle of an imported event
    /// is the one it was imported with.
    ///
    /// # Errors
    /// [`Error::NotInterprocess`] for an event built without `interprocess`.
    #[doc(alias = "cudaIpcGetEventHandle")]
    #[doc(alias = "cuIpcGetEventHandle")]
    pub fn ipc_handle(&self) -> Result<IpcEventHandle> {
        crate::fork::refuse_in_forked_child()?;
        if !self.options.interprocess {
            return Err(Error::NotInterprocess);
        }
        if let Some(handle) = self.ipc.get() {
            return Ok(*handle);
        }
        let d = driver("Event::ipc_handle")?;
        let event = match self.created.get() {
            Some(event) => event,
            None => self.create_for_ipc(d, current_device()?)?,
        };
        event.made_in().ensure_alive(d, None)?;
        let _current = context_of(d, event)?.enter(d)?;
        let mut raw = sys::CUipcEventHandle::default();
        d.ipc_get_event_handle.call(|f| {
            // SAFETY: a live interprocess event, its context current; writes the handle to a live local.
            unsafe { f(&mut raw, event.raw) }
        })?;
        let handle = *self.ipc.get_or_init(|| IpcEventHandle::from_driver(&raw));
        ipc::remember_exported(handle);
        // Importers may use it until the exporter destroys it: never reused.
        self.escape(Escape::ToCaller);
        Ok(handle)
    }

    /// The CUDA event, created on `device` (never taken from the pool: an exporter's importers
    /// could observe a pooled event's old record).
    #[cold]
    fn create_for_ipc(&self, d: &Driver, device: i32) -> Result<&EventHandle> {
        let _creating = self.creating.lock();
        if let Some(handle) = self.created.get() {
            return Ok(handle);
        }
        Ok(self.publish(EventHandle::create(d, device, self.options.cuda_flags())?))
    }

    /// Opens, on `device`, an event that another process exported with [`Event::ipc_handle`].
    /// The event is interprocess and never timing; it can be recorded, waited on, queried and
    /// synchronized like any other.
    ///
    /// It must not be used after the exporting process destroyed its event (CUDA leaves that
    /// undefined): keep the exporter's event alive for as long as importers use theirs.
    ///
    /// If the exporting process ends (or is killed) while the event's work is pending, CUDA never
    /// completes it, and its own wait never returns. So the imported event watches its exporter:
    /// [`synchronize`](Self::synchronize) polls instead of blocking in CUDA (sleeps from 10 us doubling to 1 ms, so it returns within about 1 ms of
    /// completion) and, like [`query`](Self::query) and [`wait`](Self::wait), returns
    /// [`Error::ExporterGone`] once the exporter has ended with the work still pending (after a
    /// SIGKILL, once the kernel has torn the process down). A stream
    /// that already waits on such an event on the GPU stays blocked: CUDA offers no way out.
    ///
    /// The exporter may hold its stream with a host function that waits for the importer (say,
    /// until the importer has queried): the importer's open, query and synchronize do not wait for
    /// the exporter's host-function thread. What does hang is a wait on the GPU for work that
    /// waits on the host of a process that waits for it.
    ///
    /// # Errors
    /// [`Error::IpcHandleFromThisProcess`] for a handle this process exported; CUDA's errors otherwise.
    #[doc(alias = "cudaIpcOpenEventHandle")]
    #[doc(alias = "cuIpcOpenEventHandle")]
    pub fn from_ipc_handle(device: i32, handle: IpcEventHandle) -> Result<Event> {
        let d = driver("Event::from_ipc_handle")?;
        if ipc::exported_here(&handle) {
            return Err(Error::IpcHandleFromThisProcess);
        }
        let (instance, _current) = ContextInstance::enter_primary(d, device)?;
        let mut raw = std::ptr::null_mut();
        d.ipc_open_event_handle.call(|f| {
            // SAFETY: writes the opened event through a live local, in the device's context made current.
            unsafe { f(&mut raw, handle.to_driver()) }
        })?;
        let mut event = Event::lazy(EventBuilder::default().interprocess(true));
        event.exporter = Exporter::of(&handle);
        event.publish(EventHandle::adopt(raw, device, Some(instance)));
        let _ = event.ipc.set(handle);
        event.escape(Escape::ToCaller);
        Ok(event)
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
    /// `fork`) the handle is the parent's, which the child must not use.
    pub fn into_raw(self) -> Option<sys::cudaEvent_t> {
        let mut this = ManuallyDrop::new(self);
        if crate::fork::in_forked_child() {
            // No reactor, and its locks may be held for ever (see `fork`).
            return this.created.take().map(EventHandle::release);
        }
        // A leaked future must not go on querying a handle its new owner may destroy.
        this.watchers.abandon_all();
        this.give_up_captured(); // as in Drop
        let raw = this.created.take().map(EventHandle::release);
        if let Some(handle) = this.ipc.get() {
            ipc::forget_exported(handle);
        }
        // SAFETY: `this` is not used again; its fields own no CUDA resource now that `created` is
        // empty, so dropping them in place only frees Rust memory.
        unsafe { ManuallyDrop::drop(&mut this) };
        raw
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

/// How a record is asked for.
#[derive(Clone, Copy, Default)]
struct Ask {
    /// A context instance the caller just found alive.
    known_alive: Option<ContextInstance>,
    /// Whether the stream is being captured, if the caller asked already.
    capturing: Option<bool>,
    /// A stream being captured gets `Error::StreamCapturing`, and nothing is recorded.
    refuse_capture: bool,
}

/// A captured CUDA event and the thread ([`last_record::thread_token`]) that records it.
struct Captured {
    thread: u64,
    handle: EventHandle,
}

/// How a record was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// On the stream, now.
    Now,
    /// As a plain record into a stream being captured: swallowed by the capture (made on the
    /// captured CUDA event).
    Swallowed,
    /// As an external record node of a graph being captured.
    IntoGraph,
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

/// A CUDA event whose first record for an `Event` failed goes back to the pool, unless the record
/// may have reached a capture of `stream` (`in_graph`: an external node; or a capture another
/// thread began meanwhile): then it is kept, never handed to another `Event` nor destroyed beside
/// that capture's end. (A plain record into a capture was made on a captured event, not on this.)
#[cold]
fn give_back_after_a_failed_record(in_graph: bool, stream: &Stream, flags: u32, handle: EventHandle) {
    match in_graph || stream.is_capturing() == Ok(true) {
        false => pool::give_or_destroy(flags, handle),
        true => handle.retire(),
    }
}

/// The primary context an event lives in, for the calls that need one current.
fn context_of(d: &Driver, event: &EventHandle) -> Result<Context> {
    match event.instance() {
        Some(instance) => instance.context(),
        None => Context::primary(d, event.device()),
    }
}

/// Milliseconds between two recorded timing events' records ([`Event::elapsed_time`] after its
/// checks).
fn elapsed_between(d: &Driver, start_event: &EventHandle, end_event: &EventHandle) -> Result<f32> {
    if start_event.device() != end_event.device() {
        // torch's order: incomplete work is reported before the device mismatch.
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
        self.give_up_captured();
        let Some(handle) = self.created.take() else {
            return;
        };
        self.watchers.abandon_all();
        if let Some(exported) = self.ipc.get() {
            ipc::forget_exported(exported);
        }
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

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::Event;
    use crate::stream::Stream;

    /// The handles this process exported are remembered (to refuse importing them here) only
    /// while their events live; `into_raw` gives the event up and forgets its handle too.
    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn an_exported_ipc_handle_is_forgotten_when_its_event_drops() {
        use crate::event::ipc::exported_handles_remembered;
        let stream = Stream::new(0).unwrap();
        let before = exported_handles_remembered();
        let events: Vec<Event> = (0..16)
            .map(|_| Event::builder().interprocess(true).build().unwrap())
            .collect();
        let handles: Vec<_> = events
            .iter()
            .map(|e| {
                e.record(&stream).unwrap();
                e.ipc_handle().unwrap()
            })
            .collect();
        assert_eq!(exported_handles_remembered(), before + 16);
        assert_eq!(
            Event::from_ipc_handle(0, handles[0]).map(drop),
            Err(crate::Error::IpcHandleFromThisProcess)
        );
        drop(events);
        assert_eq!(exported_handles_remembered(), before);
        let given_up = Event::builder().interprocess(true).build().unwrap();
        given_up.record(&stream).unwrap();
        given_up.ipc_handle().unwrap();
        let raw = given_up.into_raw().unwrap();
        assert_eq!(exported_handles_remembered(), before);
        stream.synchronize().unwrap();
        // SAFETY: into_raw gave the event up; destroyed once here.
        let code = unsafe { crate::sys::cudaEventDestroy(raw) };
        assert_eq!(code, crate::sys::cudaError::cudaSuccess);
    }
}
