//! The per-record capture check, and the unsafe switch that turns it off.

use crate::sync::atomic::{AtomicBool, Ordering};

/// Whether every record asks whether its stream is being captured (see [`set_capture_checks`]).
static CAPTURE_CHECKS: AtomicBool = AtomicBool::new(true);

/// Whether records ask whether their stream is being captured.
#[inline]
pub(crate) fn on() -> bool {
    CAPTURE_CHECKS.load(Ordering::Relaxed)
}

/// Turns on or off, for the whole process, the check each [`Event::record`](crate::Event::record)
/// makes first: whether its stream is being captured into a CUDA graph (one
/// `cuStreamIsCapturing`). On by default.
///
/// The check is how a record into a capture is kept apart from the CUDA event that other threads
/// read (see `Event`'s "Recorded into a graph capture"). A program that never captures a stream
/// it records events on can turn it off and save that call on every record (the project's
/// benchmark results measure it beside raw calls).
///
/// # Safety
/// While the checks are off, no stream that any [`Event`](crate::Event) is recorded on may be
/// captured (`cudaStreamBeginCapture`, `torch.cuda.graph`, [`measure`](crate::timing::measure)'s graph
/// mode on such a stream, or any library that captures). A record into a capture would then be
/// made on the CUDA event every thread reads, and a read overlapping that record or the capture's
/// end crashes inside CUDA. With the checks off, an [`external`](crate::EventBuilder::external)
/// event's records are plain records.
pub unsafe fn set_capture_checks(on: bool) {
    CAPTURE_CHECKS.store(on, Ordering::Relaxed);
}
