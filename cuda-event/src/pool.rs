//! A pool of CUDA events per (device, flags), so that a new [`Event`](crate::Event) costs about
//! as much as a record: an event's first record takes a CUDA event from the pool when there is one,
//! and its drop gives it back.
//!
//! Each thread keeps its own small pool (no lock, no contention between threads), bounded to
//! [`PER_THREAD`] events per (device, flags); what does not fit is destroyed, and a thread's pool is
//! destroyed with the thread. Events whose handle escaped (`into_raw`, `ipc_handle`, imported,
//! `from_raw`) never enter a pool.
//!
//! Why reuse is correct: a dropped event may still be pending, but its only possible next use is
//! the new owner's first record, which replaces whatever the event captured (`cuEventRecord`
//! semantics), and a wait issued by the old owner has already taken its own snapshot. No one can
//! query, synchronize or time the old record any more, since its `Event` is gone. A pooled event is
//! only handed to a record, never to `ipc_handle` (whose caller could observe the old record).
//! After a device reset, pooled events of the old context are dropped without a CUDA call.

use crate::context::Made;
use crate::driver::{CUevent, driver};
use crate::error::check_driver;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// How many events one thread keeps per (device, flags).
pub const PER_THREAD: usize = 32;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the event pool on or off for the whole process (on by default). Turning it off destroys
/// nothing: pooled events are used up or destroyed with their threads.
pub fn set_event_pool(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// A pooled CUDA event and the context instance it lives in.
pub(crate) struct Pooled {
    pub(crate) raw: CUevent,
    pub(crate) made: Made,
}

#[derive(Default)]
struct ThreadPool {
    /// (device, flags) and the events kept for them; a handful of keys, so a linear search.
    lists: Vec<((i32, u32), Vec<Pooled>)>,
}

thread_local! {
    static POOL: RefCell<ThreadPool> = RefCell::default();
}

/// A pooled event for a record on `device` with `flags`, if this thread has one.
#[inline]
pub(crate) fn take(device: i32, flags: u32) -> Option<Pooled> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let (_, list) = pool.lists.iter_mut().find(|(key, _)| *key == (device, flags))?;
        let pooled = list.pop()?;
        if pooled.made.still_alive() {
            return Some(pooled);
        }
        // The device was reset: every event of this list died with the old context.
        list.clear();
        None
    })
    .ok()
    .flatten()
}

/// Keeps `event` for a later record on `device` with `flags`; hands it back if the pool is off or full.
#[inline]
pub(crate) fn give(device: i32, flags: u32, event: Pooled) -> Result<(), Pooled> {
    if !ENABLED.load(Ordering::Relaxed) {
        return Err(event);
    }
    let mut event = Some(event);
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let index = match pool.lists.iter().position(|(key, _)| *key == (device, flags)) {
            Some(index) => index,
            None => {
                pool.lists.push(((device, flags), Vec::new()));
                pool.lists.len() - 1
            }
        };
        let list = &mut pool.lists[index].1;
        if list.len() < PER_THREAD {
            list.push(event.take().expect("taken once"));
        }
    });
    event.map_or(Ok(()), Err)
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        for pooled in self.lists.drain(..).flat_map(|(_, list)| list) {
            destroy(pooled.raw, Some(pooled.made));
        }
    }
}

/// Destroys a CUDA event this crate made, unless a device reset already did.
pub(crate) fn destroy(raw: CUevent, made: Option<Made>) {
    if made.is_some_and(|made| !made.still_alive()) {
        return;
    }
    let Ok(d) = driver() else { return };
    // SAFETY: the caller owns the event and gives it up; a pending event may be destroyed (CUDA
    // releases it when its work completes), and no current context is needed.
    crate::drop_errors::report(check_driver("cuEventDestroy", unsafe { (d.event_destroy)(raw) }));
}
