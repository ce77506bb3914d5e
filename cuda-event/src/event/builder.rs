//! How an [`Event`] is built: torch's keyword arguments, checked, and the CUDA flags they make.

use crate::error::{Error, Result};
use crate::event::Event;
use cuda_event_sys as sys;

/// The options of an [`Event`], torch's keyword arguments; all off by default, as in torch.
///
/// ```
/// let event = cuda_event::Event::builder().enable_timing(true).blocking(true).build()?;
/// # Ok::<(), cuda_event::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[must_use = "an EventBuilder does nothing until .build()"]
pub struct EventBuilder {
    pub(super) enable_timing: bool,
    pub(super) blocking: bool,
    pub(super) interprocess: bool,
    pub(super) external: bool,
}

impl EventBuilder {
    /// The event records time, for [`Event::elapsed_time`] (no `cudaEventDisableTiming`). Off by
    /// default, as in torch: every record of a timing event also takes a GPU timestamp, which makes
    /// it much dearer than a plain record (see the crate's "Performance" section), so ask for
    /// timing only where the time is read. [`Timer`](crate::timing::Timer) keeps pooled timing events for
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

    /// Whether [`enable_timing`](Self::enable_timing) is on (also for an event's
    /// [`options`](Event::options)).
    pub fn has_timing(&self) -> bool {
        self.enable_timing
    }

    /// Whether [`blocking`](Self::blocking) is on.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// Whether [`interprocess`](Self::interprocess) is on (an imported event's is).
    pub fn is_interprocess(&self) -> bool {
        self.interprocess
    }

    /// Whether [`external`](Self::external) is on.
    pub fn is_external(&self) -> bool {
        self.external
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
    pub(super) fn cuda_flags(self) -> u32 {
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
