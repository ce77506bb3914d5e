//! One capture as the crate knows it (`event::captured` binds captured CUDA events to it, and the
//! stream gates list the streams in it): its id, whether it is over, and the gate that keeps the
//! crate's records into it and forks from it apart from the crate's own end of it.

use crate::error::Result;
use crate::sync::RwLock;
use crate::sync::atomic::{AtomicBool, Ordering};

/// One capture, as the crate's captured events know it: its id, whether it is over, and the gate
/// that keeps the crate's records into it and forks from it apart from the crate's end of it.
pub(crate) struct Capture {
    pub(crate) id: u64,
    over: AtomicBool,
    gate: RwLock<()>,
    /// The crate ends it ([`Stream::capture`](crate::Stream::capture)): it is over exactly when
    /// its end has returned.
    ended_by_the_crate: AtomicBool,
}

impl Capture {
    /// Capture `id` (`cuStreamGetCaptureInfo`'s, unique in the process), not over.
    pub(crate) fn new(id: u64) -> Capture {
        Capture {
            id,
            over: AtomicBool::new(false),
            gate: RwLock::new(()),
            ended_by_the_crate: AtomicBool::new(false),
        }
    }

    /// Whether the capture is known to be over: no end of it can still be running.
    pub(crate) fn is_over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// Marks the capture over: its graph, and every instance of it, are gone.
    pub(crate) fn mark_over(&self) {
        self.over.store(true, Ordering::Release);
    }

    /// Entry for a record into this capture or a fork from it, held until that CUDA call has
    /// returned; `None` once the capture is over. The crate's own end of the capture
    /// ([`Capture::end`]) waits for every entry to be left, and none is given while it runs.
    pub(crate) fn enter(&self) -> Option<impl Sized + '_> {
        let entry = self.gate.read();
        (!self.is_over()).then_some(entry)
    }

    /// The capture is over without an end: a device reset destroyed its stream and graph. Marked
    /// apart from every record into it and fork from it made through the crate, as an end is.
    pub(crate) fn destroyed(&self) {
        let _alone = self.gate.write();
        self.mark_over();
    }

    /// Runs `end`, the crate's own end of this capture, apart from every record into it and fork
    /// from it made through the crate, and marks the capture over once it has returned valid.
    /// A failed end leaves that to the graph's user object: a capture invalidated ends with its
    /// graph destroyed inside the end, which runs the destructor (capture_end_signals v); a capture
    /// that raw CUDA ended first is over once the graph it handed out is gone.
    pub(crate) fn end(&self, end: impl FnOnce() -> Result<()>) -> Result<()> {
        let _alone = self.gate.write();
        let ended = end();
        if ended.is_ok() {
            self.mark_over();
        }
        ended
    }

    /// The crate began this capture and will end it ([`Capture::end`]).
    pub(crate) fn to_be_ended_by_the_crate(&self) {
        self.ended_by_the_crate.store(true, Ordering::Relaxed);
    }

    /// Whether the crate ends it: then it is over exactly when its end has returned valid, and a
    /// stream in it is in no other capture meanwhile (unless raw CUDA ends it first).
    pub(crate) fn is_ended_by_the_crate(&self) -> bool {
        self.ended_by_the_crate.load(Ordering::Relaxed)
    }
}
