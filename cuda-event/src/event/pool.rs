//! A pool of CUDA events per (device, flags), so that a new [`Event`](crate::Event) costs about
//! as much as a record: an event's first record takes a CUDA event from the pool when there is one,
//! and its drop gives it back.
//!
//! Each thread keeps its own small pool (no lock, no contention between threads), bounded to
//! [`POOL_PER_THREAD`] events per (device, flags); what does not fit is destroyed, and a thread's
//! pool is destroyed with the thread or by [`empty_event_pool`].
//!
//! Why reuse is correct: a dropped event may still be pending, but its only possible next use is
//! the new owner's first record, which replaces whatever the event captured (`cuEventRecord`
//! semantics), and a wait issued by the old owner has already taken its own snapshot. No one can
//! query, synchronize or time the old record any more, since its `Event` is gone, and if the new
//! owner's first record fails the CUDA event goes back here instead of to the new owner. A pooled
//! event is only handed to a record, never to `ipc_handle` (whose caller could observe the old
//! record). Events whose handle escaped never enter a pool: the rule is in `Event`'s docs.
//! After a device reset, pooled events of the old context are dropped without a CUDA call.

use crate::context::ContextInstance;
use crate::driver::Driver;
use crate::event::handle::EventHandle;
use crate::sync::atomic::{AtomicBool, Ordering};
use std::cell::RefCell;

/// How many CUDA events one thread keeps per (device, flags) for reuse.
pub const POOL_PER_THREAD: usize = 32;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the event pool on or off for the whole process (on by default). Turning it off destroys
/// nothing: call [`empty_event_pool`] on each thread for that.
pub fn set_event_pool(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Destroys the CUDA events the calling thread keeps for reuse and returns how many there were
/// (PyTorch's `EventPool::empty_cache`). Each thread's pool is its own: other threads' pools are
/// emptied when those threads call this or end. The CUDA events that records into graph captures
/// used are not in it: they are kept, by capture, until their capture is over (see `Event`'s
/// "Recorded into a graph capture").
pub fn empty_event_pool() -> usize {
    let lists = POOL
        .try_with(|pool| std::mem::take(&mut pool.borrow_mut().lists))
        .unwrap_or_default();
    let mut count = 0;
    for handle in lists.into_iter().flat_map(|(_, list)| list) {
        handle.destroy();
        count += 1;
    }
    count
}

struct ThreadPool {
    /// (device, flags) and the events kept for them; a handful of keys, so a linear search.
    lists: Vec<((i32, u32), Vec<EventHandle>)>,
}

crate::sync::thread_local! {
    // A const initializer: no lazy-initialization check on each take and give (the hot path of a
    // new event).
    static POOL: RefCell<ThreadPool> = const { RefCell::new(ThreadPool { lists: Vec::new() }) };
}

/// A pooled event for a record on `device` with `flags`, if this thread has one. `known_alive` is
/// a context instance the caller just found alive (the stream's): an event made in it needs no
/// check, any other is checked (two driver calls) against a device reset.
#[inline]
pub(crate) fn take(
    d: &Driver,
    device: i32,
    flags: u32,
    known_alive: Option<ContextInstance>,
) -> Option<EventHandle> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    let handle = POOL
        .try_with(|pool| {
            let mut pool = pool.borrow_mut();
            let (_, list) = pool.lists.iter_mut().find(|(key, _)| *key == (device, flags))?;
            let handle = list.pop()?;
            let known = known_alive.is_some() && handle.instance() == known_alive;
            Some((handle, known))
        })
        .ok()
        .flatten()?;
    match handle {
        (handle, true) => Some(handle),
        (handle, false) => checked(d, handle, (device, flags)),
    }
}

/// `handle` if a device reset has not destroyed it; otherwise every event of its list died with the
/// old context: forgets them all (destroy finds them dead and makes no CUDA call).
#[cold]
fn checked(d: &Driver, handle: EventHandle, key: (i32, u32)) -> Option<EventHandle> {
    if handle.instance().is_some_and(|instance| instance.still_alive(d)) {
        return Some(handle);
    }
    let stale = POOL
        .try_with(|pool| {
            let mut pool = pool.borrow_mut();
            pool.lists
                .iter_mut()
                .find(|(k, _)| *k == key)
                .map(|(_, list)| std::mem::take(list))
                .unwrap_or_default()
        })
        .unwrap_or_default();
    handle.destroy();
    stale.into_iter().for_each(EventHandle::destroy);
    None
}

/// Keeps `handle` for a later record on its device with `flags`; hands it back if the pool is off or
/// full.
#[inline]
pub(crate) fn give(flags: u32, handle: EventHandle) -> Result<(), EventHandle> {
    if !ENABLED.load(Ordering::Relaxed) {
        return Err(handle);
    }
    let mut handle = Some(handle);
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let Some(key) = handle.as_ref().map(|h| (h.device(), flags)) else {
            return;
        };
        let index = match pool.lists.iter().position(|(k, _)| *k == key) {
            Some(index) => index,
            None => {
                pool.lists.push((key, Vec::new()));
                pool.lists.len() - 1
            }
        };
        let list = &mut pool.lists[index].1;
        if list.len() < POOL_PER_THREAD
            && let Some(handle) = handle.take()
        {
            list.push(handle);
        }
    });
    handle.map_or(Ok(()), Err)
}

/// Gives `handle` to the pool, or destroys it if the pool does not take it.
pub(crate) fn give_or_destroy(flags: u32, handle: EventHandle) {
    if let Err(handle) = give(flags, handle) {
        handle.destroy();
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        for handle in self.lists.drain(..).flat_map(|(_, list)| list) {
            handle.destroy();
        }
    }
}
