//! A child process forked from one that used CUDA through this crate. CUDA does not support a
//! child using its parent's CUDA state, and the crate's locks stay as the parent's other threads
//! held them at the fork (those threads do not exist in the child), so in such a child the crate
//! makes no CUDA call and takes none of its locks: calls return [`Error::ForkedChild`], futures
//! resolve to it, and drops release nothing (the parent still owns what they would release).
//!
//! A fork before the crate's first CUDA call leaves the child free to use CUDA as a new process
//! would.

use crate::error::{Error, Result};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

static FORKED: AtomicBool = AtomicBool::new(false);
static MARK_CHILDREN: Once = Once::new();

extern "C" fn mark_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether this process is a child forked after the driver was loaded.
#[inline]
pub(crate) fn in_forked_child() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// The check before every CUDA call the crate makes on a caller's behalf: `Err(ForkedChild)` in a
/// forked child; elsewhere it makes sure that children forked from now on will know they are.
#[inline]
pub(crate) fn refuse_in_forked_child() -> Result<()> {
    if in_forked_child() {
        return Err(Error::ForkedChild);
    }
    MARK_CHILDREN.call_once(|| {
        // SAFETY: registers a child handler only (no prepare or parent handler). It stores to an
        // atomic, which is async-signal-safe as a handler run in the child of a multithreaded
        // process must be. A failure (out of memory) leaves children unmarked, as before.
        unsafe { libc::pthread_atfork(None, None, Some(mark_child)) };
    });
    Ok(())
}
