//! The event: torch.cuda.Event's semantics, created lazily and exactly once, every flag real.

use crate::context::{Made, in_context_if_needed};
use crate::device::current_device;
use crate::driver::{CUevent, Driver, NOT_READY, driver};
use crate::error::{Error, Result, check_driver};
use crate::ipc::{self, IpcEventHandle};
use crate::pool::{self, Pooled};
use crate::stream::Stream;
use cuda_event_sys as sys;
use parking_lot::Mutex;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A CUDA event, with the semantics of PyTorch's `torch.cuda.Event`.
///
/// Building one makes no CUDA call: the CUDA event is created on the first [`record`](Self::record)
/// (on the stream's device) or [`ipc_handle`](Self::ipc_handle) (on the current device), exactly
/// once even when threads race, and after that no call takes a lock.
///
/// `Send + Sync`, every method `&self`: share it between threads by reference or in an `Arc`.
///
/// What differs from torch: flags are checked when the event is built; `blocking` and
/// `interprocess` always work (torch.Event ignores them); errors are typed values, not exceptions;
/// no call, `Drop` included, changes the current device or creates a context on a device the event
/// does not live on.
pub struct Event {
    options: EventBuilder,
    created: OnceLock<Created>,
    /// Taken only while the CUDA event does not exist yet, so that one thread creates it.
    creating: Mutex<()>,
    recorded: AtomicBool,
    /// The handle of an interprocess event, once exported or when imported.
    ipc: OnceLock<IpcEventHandle>,
}

/// The CUDA event behind an [`Event`], once it exists.
struct Created {
    raw: CUevent,
    device: i32,
    /// The context instance it was made in; unknown for events taken over with `from_raw`.
    made: Option<Made>,
}

// SAFETY: the CUDA event handle may be used from any thread (CUDA's API is thread safe); the rest of
// the state is in OnceLock, Mutex and atomics.
unsafe impl Send for Event {}
// SAFETY: as for Send: every method takes &self, creation is serialized by `creating` and published
// through the OnceLock, and every later read is of immutable data or atomics.
unsafe impl Sync for Event {}

/// Counts CUDA events created by this crate, for diagnostics and tests.
static CREATED: AtomicU64 = AtomicU64::new(0);

/// How many CUDA events this process has created through this crate: not counting imported ones,
/// nor events reused from the pool.
pub fn cuda_events_created() -> u64 {
    CREATED.load(Ordering::Relaxed)
}

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
    /// The event records time, for [`Event::elapsed_time`]. Off by default: timing makes a record
    /// about 5 times dearer (no `cudaEventDisableTiming`).
    pub fn enable_timing(mut self, on: bool) -> Self {
        self.enable_timing = on;
        self
    }

    /// [`Event::synchronize`] sleeps instead of spinning, using almost no CPU while it waits
    /// (`cudaEventBlockingSync`), at the cost of a later wake-up.
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
    /// they behave as usual.
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

    fn lazy(options: EventBuilder) -> Event {
        Event {
            options,
            created: OnceLock::new(),
            creating: Mutex::new(()),
            recorded: AtomicBool::new(false),
            ipc: OnceLock::new(),
        }
    }

    /// The options the event was built with.
    pub fn options(&self) -> EventBuilder {
        self.options
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
        let d = driver()?;
        let created = self.created_on(stream.device(), Reuse::FromPool)?;
        if created.device != stream.device() {
            return Err(Error::DeviceMismatch {
                event: created.device,
                stream: stream.device(),
            });
        }
        stream.in_context(|| {
            let (raw, s) = (created.raw, stream.as_raw());
            if self.options.external && stream.is_capturing()? {
                // SAFETY: a live event and stream of one device; the flag is a record flag.
                let code = unsafe { (d.event_record_with_flags)(raw, s, sys::cudaEventRecordExternal) };
                return check_driver("cuEventRecordWithFlags", code);
            }
            // SAFETY: a live event and stream of one device (checked above).
            check_driver("cuEventRecord", unsafe { (d.event_record)(raw, s) })
        })?;
        if !self.recorded.load(Ordering::Relaxed) {
            self.recorded.store(true, Ordering::Relaxed);
        }
        Ok(())
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
        let Some(created) = self.created.get() else {
            return Ok(());
        };
        let d = driver()?;
        stream.in_context(|| {
            let flags = if self.options.external && stream.is_capturing()? {
                sys::cudaEventWaitExternal
            } else {
                sys::cudaEventWaitDefault
            };
            // SAFETY: a live stream and event; CUDA allows them on different devices.
            check_driver("cuStreamWaitEvent", unsafe {
                (d.stream_wait_event)(stream.as_raw(), created.raw, flags)
            })
        })
    }

    /// Makes future work on the current device's legacy default stream wait for this event
    /// (torch's `wait()` with no stream).
    pub fn wait_on_current_device(&self) -> Result<()> {
        self.wait(&Stream::legacy(current_device()?)?)
    }

    /// Whether all work the event captured has completed: `Ok(true)` when complete or never
    /// recorded, `Ok(false)` while pending. Any other CUDA error, such as one from earlier
    /// asynchronous work, is returned as an error, never read as "done" or "not ready".
    #[doc(alias = "cudaEventQuery")]
    #[doc(alias = "cuEventQuery")]
    pub fn query(&self) -> Result<bool> {
        let Some(created) = self.created.get() else {
            return Ok(true);
        };
        query_raw(driver()?, created.raw)
    }

    /// Waits on this thread until the work the event captured has completed: sleeping for a
    /// `blocking` event, spinning otherwise. Returns at once if never recorded.
    #[doc(alias = "cudaEventSynchronize")]
    #[doc(alias = "cuEventSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        let Some(created) = self.created.get() else {
            return Ok(());
        };
        let d = driver()?;
        // SAFETY: a live event.
        check_driver("cuEventSynchronize", unsafe {
            (d.event_synchronize)(created.raw)
        })
    }

    /// Milliseconds between this event's record and `end`'s. The resolution is about half a
    /// microsecond.
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
        let d = driver()?;
        if start_event.device != end_event.device {
            // torch's order: incomplete work is reported before the device mismatch.
            if !query_raw(d, start_event.raw)? || !query_raw(d, end_event.raw)? {
                return Err(Error::NotComplete);
            }
            return Err(Error::ElapsedAcrossDevices {
                start: start_event.device,
                end: end_event.device,
            });
        }
        // On one device, CUDA's not-ready answer is exactly "not both complete": read it as the typed
        // error instead of querying both first (two queries cost far more than the call itself).
        let mut ms = 0.0;
        let ms_ptr: *mut f32 = &mut ms;
        let (start, end) = (start_event.raw, end_event.raw);
        // SAFETY: two live, recorded events of one device; writes through a pointer to a live local.
        let code = in_context_if_needed(start_event.device, || unsafe {
            (d.event_elapsed_time)(ms_ptr, start, end)
        })?;
        if code == NOT_READY {
            return Err(Error::NotComplete);
        }
        check_driver("cuEventElapsedTime", code).map(|()| ms)
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
        if !self.options.interprocess {
            return Err(Error::NotInterprocess);
        }
        if let Some(handle) = self.ipc.get() {
            return Ok(*handle);
        }
        let created = match self.created.get() {
            Some(created) => created,
            None => self.created_on(current_device()?, Reuse::No)?,
        };
        let d = driver()?;
        let mut raw = sys::cudaIpcEventHandle_t::default();
        let raw_ptr: *mut sys::cudaIpcEventHandle_t = &mut raw;
        // SAFETY: a live interprocess event; writes the handle through a pointer to a live local.
        let code = in_context_if_needed(created.device, || unsafe {
            (d.ipc_get_event_handle)(raw_ptr, created.raw)
        })?;
        check_driver("cuIpcGetEventHandle", code)?;
        let handle = *self.ipc.get_or_init(|| IpcEventHandle::from_raw(&raw));
        ipc::remember_exported(handle);
        Ok(handle)
    }

    /// Opens, on `device`, an event that another process exported with [`Event::ipc_handle`].
    /// The event is interprocess and never timing; it can be recorded, waited on, queried and
    /// synchronized like any other.
    ///
    /// It must not be used after the exporting process destroyed its event (CUDA leaves that
    /// undefined): keep the exporter's event alive for as long as importers use theirs.
    ///
    /// # Errors
    /// [`Error::IpcHandleFromThisProcess`] for a handle this process exported; CUDA's errors otherwise.
    #[doc(alias = "cudaIpcOpenEventHandle")]
    #[doc(alias = "cuIpcOpenEventHandle")]
    pub fn from_ipc_handle(device: i32, handle: IpcEventHandle) -> Result<Event> {
        if ipc::exported_here(&handle) {
            return Err(Error::IpcHandleFromThisProcess);
        }
        let d = driver()?;
        let made = Made::in_primary(device)?;
        let _current = made.context().enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes the opened event through a live local, in the device's context made current.
        check_driver("cuIpcOpenEventHandle", unsafe {
            (d.ipc_open_event_handle)(&mut raw, handle.to_raw())
        })?;
        let event = Event::lazy(EventBuilder::default().interprocess(true));
        let _ = event.created.set(Created {
            raw,
            device,
            made: Some(made),
        });
        let _ = event.ipc.set(handle);
        Ok(event)
    }

    /// The device the CUDA event lives on; `None` before it is created.
    pub fn device(&self) -> Option<i32> {
        self.created.get().map(|c| c.device)
    }

    /// The raw handle, for C or other CUDA libraries; `None` before it is created. It stays owned
    /// by this `Event`: don't destroy it, and don't use it after the `Event` drops.
    pub fn as_raw(&self) -> Option<sys::cudaEvent_t> {
        self.created.get().map(|c| c.raw)
    }

    /// Takes over a CUDA event made elsewhere (C, another crate); it is destroyed when the `Event`
    /// drops. `options` tell what it was created with (timing, blocking, interprocess); it counts
    /// as recorded.
    ///
    /// # Safety
    /// `raw` is a live event of `device`'s primary context, created with flags matching `options`,
    /// that nothing else destroys or uses after the returned `Event` drops.
    pub unsafe fn from_raw(raw: sys::cudaEvent_t, device: i32, options: EventBuilder) -> Event {
        let event = Event::lazy(options);
        let _ = event.created.set(Created {
            raw,
            device,
            made: None,
        });
        event.recorded.store(true, Ordering::Relaxed);
        event
    }

    /// Gives up the raw handle, for C or another crate to use and destroy (`cudaEventDestroy`);
    /// `None` if the CUDA event was never created.
    pub fn into_raw(self) -> Option<sys::cudaEvent_t> {
        let mut this = ManuallyDrop::new(self);
        let raw = this.created.take().map(|c| c.raw);
        // SAFETY: `this` is not used again; its fields own no CUDA resource now that `created` is
        // empty, so dropping them in place only frees Rust memory.
        unsafe { ManuallyDrop::drop(&mut this) };
        raw
    }

    /// The CUDA event, made on `device` by the first caller (others wait for it and use it): from
    /// this thread's pool when `reuse` allows (see the pool module for why only a record may reuse
    /// one), else created.
    #[inline]
    fn created_on(&self, device: i32, reuse: Reuse) -> Result<&Created> {
        if let Some(created) = self.created.get() {
            return Ok(created);
        }
        self.create_once(device, reuse)
    }

    #[cold]
    fn create_once(&self, device: i32, reuse: Reuse) -> Result<&Created> {
        let _creating = self.creating.lock();
        if let Some(created) = self.created.get() {
            return Ok(created);
        }
        let flags = self.options.cuda_flags();
        if reuse == Reuse::FromPool {
            if let Some(pooled) = pool::take(device, flags) {
                return Ok(self.created.get_or_init(|| Created {
                    raw: pooled.raw,
                    device,
                    made: Some(pooled.made),
                }));
            }
        }
        let d = driver()?;
        let made = Made::in_primary(device)?;
        let _current = made.context().enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes the new event through a live local, in the device's context made current.
        check_driver("cuEventCreate", unsafe { (d.event_create)(&mut raw, flags) })?;
        CREATED.fetch_add(1, Ordering::Relaxed);
        Ok(self.created.get_or_init(|| Created {
            raw,
            device,
            made: Some(made),
        }))
    }

    fn recorded(&self) -> Option<&Created> {
        self.created
            .get()
            .filter(|_| self.recorded.load(Ordering::Relaxed))
    }
}

/// Whether a lazily made CUDA event may come from the pool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reuse {
    FromPool,
    No,
}

/// `cuEventQuery` as torch reads it: complete, not ready, or an error.
fn query_raw(d: &Driver, raw: CUevent) -> Result<bool> {
    // SAFETY: a live event.
    match unsafe { (d.event_query)(raw) } {
        NOT_READY => Ok(false),
        code => check_driver("cuEventQuery", code).map(|()| true),
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let Some(Created { raw, device, made }) = self.created.take() else {
            return;
        };
        // Only events made here whose handle never escaped go back to the pool.
        if let (Some(made), None) = (made, self.ipc.get()) {
            if let Err(back) = pool::give(device, self.options.cuda_flags(), Pooled { raw, made }) {
                pool::destroy(back.raw, Some(back.made));
            }
            return;
        }
        pool::destroy(raw, made);
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Event");
        match self.created.get() {
            None => s.field("cuda_event", &format_args!("not created")),
            Some(c) => s.field("cuda_event", &c.raw).field("device", &c.device),
        };
        s.field("options", &self.options)
            .field("recorded", &self.recorded.load(Ordering::Relaxed))
            .finish()
    }
}
