//! The calling thread's stream-capture mode, for the calls the crate makes on its own account.
//!
//! While any thread captures a stream in `cudaStreamCaptureModeGlobal` (the default of
//! `torch.cuda.graph` and of most C++ code), CUDA forbids "potentially unsafe" calls, an event
//! query among them, from every other thread whose own mode is global: the call fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and the capture is invalidated. A thread in relaxed mode
//! is never so restricted. The futures' queries, on the polling thread and the reactor's, run in
//! relaxed mode, so that awaiting never breaks a capture made elsewhere (PyTorch's NCCL watchdog
//! thread does the same).

use crate::driver::{CUresult, Driver};
use crate::error::Error;
use cuda_event_sys as sys;
use std::cell::Cell;
use std::marker::PhantomData;

/// Relaxed capture mode on this thread until dropped, then the mode it had before. Not `Send`: a
/// thread's mode is restored on that thread.
pub(crate) struct RelaxedCapture<'d> {
    mode: ModeGuard<'d>,
    _this_thread: PhantomData<*const ()>,
}

impl<'d> RelaxedCapture<'d> {
    pub(crate) fn enter(d: &'d Driver) -> RelaxedCapture<'d> {
        RelaxedCapture {
            mode: ModeGuard::set(d, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED),
            _this_thread: PhantomData,
        }
    }

    /// Runs `f` in the caller's mode (the one this guard replaced), then relaxed mode again (also
    /// when `f` panics, so that the crate's cleanup while unwinding runs relaxed): the caller's own
    /// calls within a span of the crate's (the work `measure` times) keep the caller's mode. A mode
    /// that `f` sets becomes the caller's: the next span starts in it, and the drop restores it.
    pub(crate) fn in_callers_mode<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(callers) = self.mode.previous.get() else {
            return f();
        };
        let _span = CallersSpan::enter(&self.mode, callers);
        f()
    }

    /// Keeps relaxed mode for the rest of the thread's life (the reactor thread's).
    pub(crate) fn forever(self) {
        std::mem::forget(self);
    }
}

/// Relaxed capture mode on this thread while the guard lives, for the crate's own reads on a
/// caller's behalf, where the driver is loaded: where it is not, no CUDA event or stream was ever
/// made, so there is nothing such a read calls CUDA about.
pub(crate) fn relaxed_if_loaded() -> Option<RelaxedCapture<'static>> {
    crate::driver::loaded_driver().map(RelaxedCapture::enter)
}

/// `mode` on this thread until dropped, then the mode it replaced (none to restore where the
/// exchange failed).
struct ModeGuard<'d> {
    d: &'d Driver,
    previous: Cell<Option<sys::CUstreamCaptureMode>>,
}

impl<'d> ModeGuard<'d> {
    fn set(d: &'d Driver, mode: sys::CUstreamCaptureMode) -> ModeGuard<'d> {
        ModeGuard {
            d,
            previous: Cell::new(exchange(d, mode)),
        }
    }
}

impl Drop for ModeGuard<'_> {
    fn drop(&mut self) {
        if let Some(mode) = self.previous.get() {
            exchange(self.d, mode);
        }
    }
}

/// The caller's mode within a [`RelaxedCapture`] until dropped; then relaxed again, and the mode
/// the span ended in is what the relaxed guard restores. Where the entry's exchange failed, the
/// thread stayed relaxed and there is nothing to undo.
struct CallersSpan<'g, 'd> {
    relaxed: Option<&'g ModeGuard<'d>>,
}

impl<'g, 'd> CallersSpan<'g, 'd> {
    fn enter(relaxed: &'g ModeGuard<'d>, callers: sys::CUstreamCaptureMode) -> CallersSpan<'g, 'd> {
        CallersSpan {
            relaxed: exchange(relaxed.d, callers).map(|_| relaxed),
        }
    }
}

impl Drop for CallersSpan<'_, '_> {
    fn drop(&mut self) {
        let Some(guard) = self.relaxed else { return };
        let relaxed = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        if let Some(left) = exchange(guard.d, relaxed) {
            guard.previous.set(Some(left));
        }
    }
}

/// Sets this thread's mode to `mode`; the mode it replaced, or none where the exchange failed
/// (only with no initialized driver, which a caller holding a `Driver` has).
fn exchange(d: &Driver, mut mode: sys::CUstreamCaptureMode) -> Option<sys::CUstreamCaptureMode> {
    // SAFETY: exchanges this thread's mode through a live local.
    let code = d.thread_exchange_capture_mode.code(|f| unsafe { f(&mut mode) });
    (code == CUresult::CUDA_SUCCESS).then_some(mode)
}

/// Whether `error` comes from a capture in progress somewhere (not from the work asked about): a
/// call made on the crate's own account reads it as "try again later", never as a result.
pub(crate) fn is_capture_interference(error: &Error) -> bool {
    let Error::Cuda(error) = error else {
        return false;
    };
    let code = sys::CUresult(error.code());
    code == CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        || code == CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        || code == CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
}
