//! Stopping a test's helper threads when the thread that drives the test ends, also by a panic.

use std::sync::atomic::{AtomicBool, Ordering};

/// Sets the flag when dropped: helper threads that run until the flag is set stop even if the
/// thread holding this panics, so the test ends with the panic's message instead of a thread scope
/// that never joins.
#[derive(Debug)]
pub struct SetOnDrop<'a>(pub &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
