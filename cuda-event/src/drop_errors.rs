//! Errors from `Drop`, which cannot return them: kept for the caller to read, and printed only when
//! asked. Errors of the runtime shutting down at process exit are expected and not kept.

use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use cuda_event_sys as sys;
use std::collections::VecDeque;
use std::io::Write as _;

/// How many drop errors are kept; older ones are counted in [`DropErrors::lost`], not kept.
const KEPT: usize = 64;

static ERRORS: Mutex<VecDeque<Error>> = Mutex::new(VecDeque::new());
static LOST: AtomicU64 = AtomicU64::new(0);
static PRINT: AtomicBool = AtomicBool::new(false);

/// What [`take_drop_errors`] returns: the errors that `Drop` of events and streams met, oldest
/// first, and how many more were dropped because more than 64 piled up unread.
#[derive(Debug, Default, Clone, PartialEq)]
#[non_exhaustive]
pub struct DropErrors {
    /// The errors kept, oldest first.
    pub errors: Vec<Error>,
    /// How many errors were not kept.
    pub lost: u64,
}

/// Takes the errors met by `Drop` of events and streams since the last call (destroying an event
/// after a device reset, say). `Drop` never panics and never prints unless
/// [`print_drop_errors`] asked it to.
pub fn take_drop_errors() -> DropErrors {
    if crate::fork::in_forked_child() {
        // The parent's errors, behind a lock another thread may have held at the fork.
        return DropErrors::default();
    }
    DropErrors {
        errors: ERRORS.lock().drain(..).collect(),
        lost: LOST.swap(0, Ordering::Relaxed),
    }
}

/// Also prints each drop error to stderr as it happens (off by default).
pub fn print_drop_errors(on: bool) {
    PRINT.store(on, Ordering::Relaxed);
}

/// Keeps the error of a drop, if any; shutdown errors at process exit are expected and skipped.
pub(crate) fn report(result: Result<()>) {
    let Err(error) = result else { return };
    if error == Error::ForkedChild {
        return; // a drop in a forked child releases nothing by design, and must not lock
    }
    if let Error::Cuda(e) = &error {
        // CUDA_ERROR_DEINITIALIZED and cudaErrorCudartUnloading share code 4.
        if e.code() == sys::CUresult::CUDA_ERROR_DEINITIALIZED.0 {
            return;
        }
    }
    if PRINT.load(Ordering::Relaxed) {
        // Not eprintln!, which panics when stderr is gone (a closed pipe): Drop must never panic.
        let _ = writeln!(std::io::stderr(), "cuda-event: error in drop: {error}");
    }
    let mut errors = ERRORS.lock();
    if errors.len() == KEPT {
        errors.pop_front();
        LOST.fetch_add(1, Ordering::Relaxed);
    }
    errors.push_back(error);
}
