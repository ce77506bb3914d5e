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
//! Each gate also lists the streams of its set that are in a capture the crate ends (begun there,
//! or forked into it by the crate's waits, which hold the gate exclusive too), with their
//! captures, so that a record on such a stream knows where it goes without asking CUDA
//! (`cuStreamGetCaptureInfo` beside that capture's end crashes, capture_end_signals i).
//!
//! The gates are a fixed set, picked by the stream's raw handle (two `Stream`s borrowing one CUDA
//! stream share a gate), each on a cache line of its own so that threads on different streams
//! rarely meet. Unrelated streams of one set do meet where CUDA blocks a record or a host
//! function's launch (a full queue): it holds the gate shared meanwhile, and a begin, an end or a
//! fork of a capture on another stream of the set waits for it. A stream's drop takes no lock
//! while no stream of its gate is listed (a count beside the gate says so), and the gate exclusive
//! only where it is listed itself, so that it does not wait for such a record.

use crate::stream::known_capture::Capture;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Lazy, RwLock, RwLockReadGuard, RwLockWriteGuard};
use cuda_event_sys as sys;
use std::sync::Arc;

const GATES: usize = 64;

/// The streams of this gate that are in a capture the crate ends, with that capture.
type Listed = Vec<(usize, Arc<Capture>)>;

#[repr(align(128))]
struct Gate {
    lock: RwLock<Listed>,
    /// How many entries the list has, written under the lock held exclusive, read without it.
    listed: AtomicUsize,
}

static ALL: Lazy<Vec<Gate>> = Lazy::new(|| {
    (0..GATES)
        .map(|_| Gate {
            lock: RwLock::new(Vec::new()),
            listed: AtomicUsize::new(0),
        })
        .collect()
});

fn gate(stream: sys::cudaStream_t) -> &'static Gate {
    // Stream handles are pointers to allocations of at least 64 bytes: the low bits carry nothing.
    let at = ((stream as usize) >> 6) % GATES;
    &ALL.get()[at]
}

/// Held by a record, wait, host-function or graph launch on a stream from its capture check to its
/// CUDA call.
pub(crate) struct Shared(RwLockReadGuard<'static, Listed>);

impl Shared {
    fn lists(&self, stream: sys::cudaStream_t) -> bool {
        self.0.iter().any(|(s, _)| *s == stream as usize)
    }

    /// The capture that the crate ends and `stream` is in, if any: known without asking CUDA,
    /// and certain while this is held.
    pub(crate) fn capture_of(&self, stream: sys::cudaStream_t) -> Option<&Arc<Capture>> {
        self.0
            .iter()
            .find(|(s, c)| *s == stream as usize && !c.is_over())
            .map(|(_, c)| c)
    }
}

/// Held by the crate's begin and end of a capture of a stream, and by its forks into it.
pub(crate) struct Exclusive(RwLockWriteGuard<'static, Listed>, &'static AtomicUsize);

impl Exclusive {
    /// `stream` is in `capture`, which the crate ends: the crate began it there, or forked the
    /// stream into it. (Not the per-thread stream, whose handle names another stream on every
    /// thread.) Entries of captures that are over go, here and as ends and drops find them.
    pub(crate) fn began(&mut self, stream: sys::cudaStream_t, capture: Arc<Capture>) {
        self.0.retain(|(s, c)| *s != stream as usize && !c.is_over());
        if stream != sys::cudaStreamPerThread {
            self.0.push((stream as usize, capture));
        }
        self.1.store(self.0.len(), Ordering::Release);
    }

    /// `stream` is in none of the crate's captures any more (it ended, or the stream is gone);
    /// nor is any stream whose capture is over.
    pub(crate) fn ended(&mut self, stream: sys::cudaStream_t) {
        self.0.retain(|(s, c)| *s != stream as usize && !c.is_over());
        self.1.store(self.0.len(), Ordering::Release);
    }
}

/// Whether `a`'s and `b`'s calls share one gate (for tests that need two streams apart).
#[cfg(all(test, cuda_event_model))]
pub(crate) fn same_gate(a: sys::cudaStream_t, b: sys::cudaStream_t) -> bool {
    std::ptr::eq(gate(a), gate(b))
}

/// Held by a record, wait, host-function or graph launch on `stream` from its capture check to its
/// CUDA call.
pub(crate) fn shared(stream: sys::cudaStream_t) -> Shared {
    Shared(gate(stream).lock.read())
}

/// Held by the crate's begin and end of a capture of `stream`, and by its forks into `stream`.
pub(crate) fn exclusive(stream: sys::cudaStream_t) -> Exclusive {
    let gate = gate(stream);
    Exclusive(gate.lock.write(), &gate.listed)
}

/// `stream` is destroyed: CUDA may give its handle to the next stream made, which is in no capture.
pub(crate) fn forget(stream: sys::cudaStream_t) {
    // No lock while nothing of this gate is listed, and exclusive only where this stream is: a
    // record on another stream of the gate holds it shared for as long as CUDA blocks that record
    // (a full queue), and a drop waiting for it could be what would have freed the queue. (Where
    // the gate lists another stream, the look queues behind a begin, end or fork of a capture
    // that waits for such a record.) Nothing lists a stream being dropped meanwhile: its owner is
    // the dropping thread.
    if gate(stream).listed.load(Ordering::Acquire) > 0 && shared(stream).lists(stream) {
        exclusive(stream).ended(stream);
    }
}
