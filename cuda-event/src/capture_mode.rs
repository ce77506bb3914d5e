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

    /// Runs `f` in the mode this guard replaced, then relaxed mode again (also when `f` panics, so
    /// that the crate's cleanup while unwinding runs relaxed): the caller's own calls within a span
    /// of the crate's (the work `measure` times) keep the caller's mode.
    pub(crate) fn in_callers_mode<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.mode.previous {
            Some(callers) => {
                let _callers = ModeGuard::set(self.mode.d, callers);
                f()
            }
            None => f(),
        }
    }

    /// Keeps relaxed mode for the rest of the thread's life (the reactor thread's).
    pub(crate) fn forever(self) {
        std::mem::forget(self);
    }
}

/// `mode` on this thread until dropped, then the mode it replaced (none to restore where the
/// exchange failed).
struct ModeGuard<'d> {
    d: &'d Driver,
    previous: Option<sys::CUstreamCaptureMode>,
}

impl<'d> ModeGuard<'d> {
    fn set(d: &'d Driver, mut mode: sys::CUstreamCaptureMode) -> ModeGuard<'d> {
        // SAFETY: exchanges this thread's mode through a live local.
        let code = d.thread_exchange_capture_mode.code(|f| unsafe { f(&mut mode) });
        ModeGuard {
            d,
            previous: (code == CUresult::CUDA_SUCCESS).then_some(mode),
        }
    }
}

impl Drop for ModeGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut mode) = self.previous {
            // SAFETY: as in `set`; restores the mode this guard replaced.
            let _ = self
                .d
                .thread_exchange_capture_mode
                .code(|f| unsafe { f(&mut mode) });
        }
    }
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
