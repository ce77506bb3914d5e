//! The streams an event's future may queue its wake-up on: every owned or borrowed [`Stream`] that
//! has not been dropped, by id. An [`Event`](crate::Event) remembers the id of the stream it was
//! last recorded on; its future then queues a host function there instead of waiting for the
//! reactor's polling, which sees an event complete milliseconds late (seconds among thousands).
//!
//! Default streams are left out: a host function on the legacy stream would also wait for (and
//! hold back) every blocking stream of the device, and a per-thread handle means another stream on
//! each thread.

use crate::driver::Driver;
use crate::stream::Stream;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

/// Wake-ups queued on one stream and not run yet, beyond which futures fall back to polling:
/// thousands of futures on a stream held by long work would otherwise queue thousands of host
/// functions behind it (and CUDA may block a launch once a stream's queue is full).
const MAX_QUEUED_PER_STREAM: usize = 32;

struct Live {
    /// The stream's fields, never dropped: the `Stream` itself destroys it, after unregistering.
    stream: ManuallyDrop<Stream>,
    /// Read while a wake-up is queued on it; written (false) by the stream's drop, which so waits
    /// for a launch in flight on this stream alone.
    alive: RwLock<bool>,
    queued: Arc<AtomicUsize>,
}

/// The registry's lock is held only to find or change an entry, never across a CUDA call.
static LIVE: LazyLock<Mutex<HashMap<u64, Arc<Live>>>> = LazyLock::new(Default::default);

/// Ids start at 1: 0 means "no such stream" (a default stream, or an event never recorded).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Makes `stream` (an owned or borrowed one, just built) findable by the id returned, until
/// [`unregister`].
pub(crate) fn register(stream: &Stream) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let live = Arc::new(Live {
        stream: stream.alias(),
        alive: RwLock::new(true),
        queued: Arc::new(AtomicUsize::new(0)),
    });
    LIVE.lock().insert(id, live);
    id
}

/// The stream `id` is being dropped: from now on nothing is queued on it.
pub(crate) fn unregister(id: u64) {
    let removed = LIVE.lock().remove(&id);
    if let Some(live) = removed {
        *live.alive.write() = false;
    }
}

/// Queues `wake` on the stream `id` as a host function (it runs once everything submitted to the
/// stream so far has completed), unless the stream was dropped, is being captured into a graph, is
/// dead, or has [`MAX_QUEUED_PER_STREAM`] wake-ups pending. Returns whether it was queued; the
/// caller has another way to learn of completion, so a refusal is never an error.
pub(crate) fn queue_wake(d: &Driver, id: u64, wake: impl FnOnce() + Send + 'static) -> bool {
    if id == 0 {
        return false;
    }
    let Some(entry) = LIVE.lock().get(&id).cloned() else {
        return false;
    };
    // Held while queuing: the stream's drop waits for it, so the stream outlives the launch.
    let alive = entry.alive.read();
    if !*alive {
        return false;
    }
    if entry.queued.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED_PER_STREAM {
        entry.queued.fetch_sub(1, Ordering::Relaxed);
        return false;
    }
    let (stream, queued) = (&entry.stream, entry.queued.clone());
    let launched = stream.in_context_alive(d, || {
        if stream.is_capturing_with(d)? {
            // It would become a graph node, run at every launch.
            return Ok(false);
        }
        stream.queue_host_fn(d, move || {
            queued.fetch_sub(1, Ordering::Relaxed);
            wake();
        })?;
        Ok(true)
    });
    let launched = launched.unwrap_or(false);
    if !launched {
        entry.queued.fetch_sub(1, Ordering::Relaxed);
    }
    launched
}
