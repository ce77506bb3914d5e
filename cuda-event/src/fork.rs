//! A child process forked from one that used CUDA through this crate. CUDA does not support a
//! child using its parent's CUDA state, and the crate's locks stay as the parent's other threads
//! held them at the fork (those threads do not exist in the child), so in such a child the crate
//! makes no CUDA call and takes none of its locks: calls return [`Error::ForkedChild`], futures
//! resolve to it, and drops release nothing (the parent still owns what they would release).
//!
//! A fork before the crate's first CUDA call is not marked: the child may use CUDA as a new process
//! would, provided nothing else in the parent (PyTorch, cudarc, the program's own calls) had
//! initialized CUDA either; the crate knows only its own calls.

use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set by the first check before a CUDA call; a child forked after it is marked.
static USED: AtomicBool = AtomicBool::new(false);
static FORKED: AtomicBool = AtomicBool::new(false);
/// Forks this process descends from, CUDA or not: for the crate's host-only state (a `Trace`'s
/// locks), which is the child's own only where it was made after the last of them.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Registers the child handler when the program starts, before any thread can fork: registering
/// it at first use instead could leave a child that forked meanwhile with a registration half
/// done. (The entry in `.init_array` is what the C runtime calls at start-up.)
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER_AT_START: extern "C" fn() = register_child_handler;

#[cfg(target_os = "linux")]
extern "C" fn register_child_handler() {
    // SAFETY: registers a child handler only (no prepare or parent handler). It reads and stores
    // atomics, which is async-signal-safe as a handler run in the child of a multithreaded
    // process must be. A failure (out of memory) leaves children unmarked.
    unsafe { libc::pthread_atfork(None, None, Some(mark_child)) };
}

#[cfg(target_os = "linux")]
extern "C" fn mark_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    if USED.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Keeps the start-up registration in a binary that links the crate as a static library, where an
/// object file nothing refers to is left out; called once, when the driver is loaded. (Elsewhere
/// than Linux there is no registration, and a forked child is not recognized.)
pub(crate) fn keep_the_registration() {
    #[cfg(target_os = "linux")]
    // SAFETY: reads a function pointer from a static initialized at compile time.
    let _ = unsafe { std::ptr::read_volatile(&REGISTER_AT_START) };
}

/// Whether this process is a child forked after the crate's first CUDA call.
#[inline]
pub(crate) fn in_forked_child() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// How many forks this process descends from (counted from the crate's start-up registration):
/// host-only state made before the last of them (a `Trace`) may have its locks held by threads
/// that did not fork, so it takes none of them in the child; state made since is the child's own.
#[inline]
pub(crate) fn forks() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// Whether this process forked since [`forks`] answered `then`: state made then is the parent's.
#[inline]
pub(crate) fn forked_since(then: u64) -> bool {
    forks() != then
}

/// The check before every CUDA call the crate makes on a caller's behalf: `Err(ForkedChild)` in a
/// forked child; elsewhere it notes that children forked from now on inherit CUDA state.
#[inline]
pub(crate) fn refuse_in_forked_child() -> Result<()> {
    if in_forked_child() {
        return Err(Error::ForkedChild);
    }
    if !USED.load(Ordering::Relaxed) {
        USED.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// The model's fork: marks (or unmarks, between executions) this process as a forked child.
#[cfg(all(test, cuda_event_model))]
pub(crate) fn model_set_forked(on: bool) {
    FORKED.store(on, Ordering::Relaxed);
}
