//! Interprocess events: the export of an event's handle, and the import of another process's
//! event, which watches its exporter. The handle itself, its text form and the exporter are
//! `ipc`'s.

use crate::context::{Context, ContextInstance};
use crate::device::current_device;
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::handle::{EventHandle, query_raw};
use crate::event::ipc::{self, Exporter, IpcEventHandle};
use crate::event::{Escape, Event, EventBuilder};
use cuda_event_sys as sys;

impl Event {
    /// The handle another process opens this event with ([`Event::from_ipc_handle`]). Creates the
    /// CUDA event on the current device if it does not exist yet. The handle of an imported event
    /// is the one it was imported with.
    ///
    /// # Errors
    /// [`Error::NotInterprocess`] for an event built without `interprocess`;
    /// [`Error::DeviceWasReset`] once a device reset destroyed the event, exported before or not.
    #[doc(alias = "cudaIpcGetEventHandle")]
    #[doc(alias = "cuIpcGetEventHandle")]
    pub fn ipc_handle(&self) -> Result<IpcEventHandle> {
        crate::fork::refuse_in_forked_child()?;
        if !self.options.interprocess {
            return Err(Error::NotInterprocess);
        }
        let d = driver("Event::ipc_handle")?;
        if let Some(handle) = self.ipc.get() {
            // Not after a device reset destroyed the event: an importer would open a dead one.
            if let Some(event) = self.created.get() {
                event.made_in().ensure_alive(d, None)?;
            }
            return Ok(*handle);
        }
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
    /// [`Error::IpcHandleFromThisProcess`] for a handle this process exported through this crate;
    /// CUDA's errors otherwise (also for one it exported through other code).
    #[doc(alias = "cudaIpcOpenEventHandle")]
    #[doc(alias = "cuIpcOpenEventHandle")]
    pub fn from_ipc_handle(device: i32, handle: IpcEventHandle) -> Result<Event> {
        let d = driver("Event::from_ipc_handle")?;
        // Not by the pid the handle carries: a process of another pid namespace (another
        // container sharing the IPC namespace) may have this process's pid.
        if ipc::exported_here(&handle) {
            return Err(Error::IpcHandleFromThisProcess);
        }
        // Before the open: an exporter that dies during it is seen alive first, and gone after.
        let exporter = Exporter::of(&handle);
        let (instance, _current) = ContextInstance::enter_primary(d, device)?;
        let mut raw = std::ptr::null_mut();
        d.ipc_open_event_handle.call(|f| {
            // SAFETY: writes the opened event through a live local, in the device's context made current.
            unsafe { f(&mut raw, handle.to_driver()) }
        })?;
        let mut event = Event::lazy(EventBuilder::default().interprocess(true));
        event.exporter = exporter;
        event.publish(EventHandle::adopt(raw, device, Some(instance)));
        let _ = event.ipc.set(handle);
        event.escape(Escape::ToCaller);
        Ok(event)
    }

    /// Waits for an imported event by polling, so that the exporter's death is noticed: CUDA's own wait
    /// never returns if the exporter dies with the work pending (measured). Sleeps of 10 us doubling
    /// up to 1 ms: little CPU, and the wake-up comes at most about 1 ms after completion.
    pub(super) fn synchronize_imported(
        &self,
        d: &Driver,
        raw: sys::cudaEvent_t,
        exporter: Exporter,
    ) -> Result<()> {
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
}

/// The primary context an event lives in, for the calls that need one current.
fn context_of(d: &Driver, event: &EventHandle) -> Result<Context> {
    match event.instance() {
        Some(instance) => instance.context(),
        None => Context::primary(d, event.device()),
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
