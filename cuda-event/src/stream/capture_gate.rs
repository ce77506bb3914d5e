//! The gates that keep the crate's own begin and end of a capture of a stream
//! ([`Stream::capture`](crate::Stream::capture)) apart from the crate's records, waits, host
//! functions and graph launches on that stream.
//!
//! A record asks whether its stream is being captured, then records: a capture that another thread
//! begins between the two swallows a record the crate believes was made on the stream, and the
//! crate's later reads of that CUDA event beside the capture's end crash (review 3's begin-capture
//! race). Each record and host-function launch holds its stream's gate shared from its check to
//! its call; the crate's begin and end of a capture hold it exclusive. So no record through the
//! crate straddles a begin or an end the crate makes. The crate's stream waits and graph launches
//! hold it shared too: on a stream being captured they add to the capture as a record does, and
//! none of them overlaps the crate's end of it. A capture begun or ended by raw CUDA calls
//! takes no gate: that race stays the caller's (the capture-safety table in the crate's docs).
//!
//! Each gate also lists the capture its stream is in, where the crate ends that capture (begun
//! there, or the stream forked into it by the crate's waits, which hold the gate exclusive too),
//! so that a record on such a stream knows where it goes without asking CUDA
//! (`cuStreamGetCaptureInfo` beside that capture's end crashes, capture_end_signals i).
//!
//! There is one gate per CUDA stream handle: every [`Stream`](crate::Stream) on one handle (an
//! owned stream and the borrowed ones on its handle, or a device's default stream made twice)
//! holds the same gate, which it finds at its making in a registry keyed by the handle, and which
//! lives as long as any of them (the default streams' three handles have gates for the process). Streams on different handles never share one: a record that CUDA
//! blocks (a full queue) holds its own stream's gate shared meanwhile, and only a begin, end or
//! fork of a capture of that same stream waits for it (the price of closing the begin-capture
//! race), never one of another stream. A default stream's handle names the stream of whichever
//! device, or for `cudaStreamPerThread` thread, uses it: those share one gate per handle.

use crate::stream::known_capture::Capture;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Lazy, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use cuda_event_sys as sys;
use std::sync::{Arc, Weak};

/// The registry's shards, each on a cache line of its own, so that streams made on several threads
/// at once rarely meet there.
const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard(Mutex<Vec<(usize, Weak<Gate>)>>);

static REGISTRY: Lazy<Vec<Shard>> =
    Lazy::new(|| (0..SHARDS).map(|_| Shard(Mutex::new(Vec::new()))).collect());

/// The gates of the default streams' handles (null, `cudaStreamLegacy`, `cudaStreamPerThread`),
/// which any thread may name at any call: kept for the process, outside the registry.
static DEFAULTS: Lazy<[Arc<Gate>; 3]> =
    Lazy::new(|| [0, 1, 2].map(|handle| Arc::new(Gate::new(handle, true))));

fn shard(handle: usize) -> &'static Shard {
    // Stream handles are pointers to allocations of at least 64 bytes: the low bits carry nothing.
    &REGISTRY.get()[(handle >> 6) % SHARDS]
}

/// The gate of one CUDA stream handle, held by every `Stream` on it.
pub(crate) struct Gate {
    handle: usize,
    /// The capture the stream is in, where the crate ends it.
    lock: RwLock<Option<Arc<Capture>>>,
    /// Whether a capture is listed, written under the lock held exclusive, read without it.
    listed: AtomicBool,
    /// Outside the registry: a default stream's, or made in a forked child (see `fork`).
    unregistered: bool,
}

impl Gate {
    /// The gate of `stream`'s handle: the one the `Stream`s alive on it hold, or a new one.
    pub(crate) fn of(stream: sys::cudaStream_t) -> Arc<Gate> {
        let handle = stream as usize;
        if let Some(default) = DEFAULTS.get().get(handle) {
            return default.clone();
        }
        if crate::fork::in_forked_child() {
            // The child takes no lock (see `fork`), and makes no CUDA call a gate would guard.
            return Arc::new(Gate::new(handle, true));
        }
        let mut gates = shard(handle).0.lock();
        // Only the handle's own entry is upgraded: an upgraded gate of another handle dropped here
        // could be its last reference, and its drop takes this lock.
        if let Some(found) = gates
            .iter()
            .find(|(h, _)| *h == handle)
            .and_then(|(_, g)| g.upgrade())
        {
            return found;
        }
        let made = Arc::new(Gate::new(handle, false));
        gates.retain(|(h, _)| *h != handle);
        gates.push((handle, Arc::downgrade(&made)));
        made
    }

    fn new(handle: usize, unregistered: bool) -> Gate {
        Gate {
            handle,
            lock: RwLock::new(None),
            listed: AtomicBool::new(false),
            unregistered,
        }
    }

    /// Held by a record, wait, host-function or graph launch on the stream from its capture check
    /// to its CUDA call.
    pub(crate) fn shared(&self) -> Shared<'_> {
        Shared(self.lock.read())
    }

    /// Held by the crate's begin and end of a capture of the stream, and by its forks into it.
    pub(crate) fn exclusive(&self) -> Exclusive<'_> {
        Exclusive(self.lock.write(), self)
    }

    /// The stream is destroyed: CUDA may give its handle to the next stream made, which is in no
    /// capture (and finds this gate while a borrowed `Stream` on the old handle holds it).
    pub(crate) fn forget(&self) {
        // No lock while nothing is listed. Nothing lists a stream being dropped meanwhile: its
        // owner is the dropping thread.
        if self.listed.load(Ordering::Acquire) {
            self.exclusive().ended();
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if self.unregistered || crate::fork::in_forked_child() {
            return; // the child takes no lock (see `fork`)
        }
        // This gate's entry, and any other of a gate gone meanwhile.
        shard(self.handle).0.lock().retain(|(_, g)| g.strong_count() > 0);
    }
}

/// Held by a record, wait, host-function or graph launch on a stream from its capture check to its
/// CUDA call.
pub(crate) struct Shared<'a>(RwLockReadGuard<'a, Option<Arc<Capture>>>);

impl Shared<'_> {
    /// The capture that the crate ends and the stream is in, if any: known without asking CUDA,
    /// and certain while this is held.
    pub(crate) fn capture(&self) -> Option<&Arc<Capture>> {
        self.0.as_ref().filter(|c| !c.is_over())
    }
}

/// Held by the crate's begin and end of a capture of a stream, and by its forks into it.
pub(crate) struct Exclusive<'a>(RwLockWriteGuard<'a, Option<Arc<Capture>>>, &'a Gate);

impl Exclusive<'_> {
    /// The stream is in `capture`, which the crate ends: the crate began it there, or forked the
    /// stream into it. (Not the per-thread stream, whose handle names another stream on every
    /// thread.)
    pub(crate) fn began(&mut self, capture: Arc<Capture>) {
        let per_thread = self.1.handle == sys::cudaStreamPerThread as usize;
        *self.0 = (!per_thread).then_some(capture);
        self.1.listed.store(self.0.is_some(), Ordering::Release);
    }

    /// The stream is in none of the crate's captures any more (it ended, or the stream is gone).
    pub(crate) fn ended(&mut self) {
        *self.0 = None;
        self.1.listed.store(false, Ordering::Release);
    }
}

/// Whether `a` and `b` hold one gate (for tests of streams on one handle and on two).
#[cfg(all(test, cuda_event_model))]
pub(crate) fn same_gate(a: &crate::Stream, b: &crate::Stream) -> bool {
    std::ptr::eq(a.gate(), b.gate())
}
