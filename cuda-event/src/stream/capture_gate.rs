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
//! owned stream and the borrowed ones on its handle) holds the same gate, which it finds at its
//! making in a registry keyed by the handle (one registry per fork the process descends from), and
//! which lives as long as any of them. Streams on different handles never share one: a record that
//! CUDA blocks (a full queue) holds its own stream's gate shared meanwhile, and only a begin, end
//! or fork of a capture of that same stream waits for it (the price of closing the begin-capture
//! race), never one of another stream. The null and legacy default streams' handles, which name
//! one device's stream or another's by the context current, have a gate each for the process; a
//! per-thread default `Stream` (`cudaStreamPerThread`, another stream on every thread) has one of
//! its own, since all its calls are made on its thread.

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

/// The process's registry, until it forks.
static REGISTRY: Lazy<Vec<Shard>> = Lazy::new(new_registry);

/// A forked child's registry, and the fork count it is for: a parent's thread that did not fork may
/// hold a lock of the parent's (a child of a process that used CUDA through the crate makes no
/// stream at all, but one forked before that first use is served in full). Made without a lock, and
/// never freed: one per fork a process descends from.
#[cfg(not(cuda_event_model))]
static FORKED_REGISTRY: std::sync::atomic::AtomicPtr<(u64, Vec<Shard>)> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

fn new_registry() -> Vec<Shard> {
    (0..SHARDS).map(|_| Shard(Mutex::new(Vec::new()))).collect()
}

/// The registry of this process since its last fork (`forks`, `fork::forks`).
fn registry(forks: u64) -> &'static [Shard] {
    #[cfg(not(cuda_event_model))]
    if forks != 0 {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let current = FORKED_REGISTRY.load(Acquire);
        // SAFETY: a registry, once published, is never freed.
        if let Some((of, shards)) = unsafe { current.as_ref() }
            && *of == forks
        {
            return shards;
        }
        let made = Box::into_raw(Box::new((forks, new_registry())));
        let published = match FORKED_REGISTRY.compare_exchange(current, made, AcqRel, Acquire) {
            Ok(_) => made,
            Err(other) => {
                // SAFETY: `made` was never published: this thread owns it.
                drop(unsafe { Box::from_raw(made) });
                other
            }
        };
        // SAFETY: as above; another thread's registry is of this fork count too (the count only
        // changes in a new child, whose one thread is this one).
        return unsafe { &(*published).1 };
    }
    let _ = forks;
    REGISTRY.get()
}

fn shard(shards: &'static [Shard], handle: usize) -> &'static Shard {
    // Stream handles are pointers to allocations of at least 64 bytes: the low bits carry nothing.
    &shards[(handle >> 6) % SHARDS]
}

/// The gates of the null and legacy default streams' handles, which any thread may name at any
/// call: kept for the process, outside the registry. (`cudaStreamPerThread` names a stream of
/// each thread's own: each such `Stream` gets a gate of its own.)
static DEFAULTS: Lazy<[Arc<Gate>; 2]> = Lazy::new(|| [0, 1].map(|handle| Arc::new(Gate::new(handle, None))));

/// The gate of one CUDA stream handle, held by every `Stream` on it.
pub(crate) struct Gate {
    handle: usize,
    /// The capture the stream is in, where the crate ends it.
    lock: RwLock<Option<Arc<Capture>>>,
    /// Whether a capture is listed, written under the lock held exclusive, read without it.
    listed: AtomicBool,
    /// The fork count of the registry that lists it (`fork::forks`); `None` outside any: a default
    /// stream's.
    registered: Option<u64>,
}

impl Gate {
    /// The gate of `stream`'s handle: the one the `Stream`s alive on it hold, or a new one.
    pub(crate) fn of(stream: sys::cudaStream_t) -> Arc<Gate> {
        let handle = stream as usize;
        if let Some(default) = DEFAULTS.get().get(handle) {
            return default.clone();
        }
        if stream == sys::cudaStreamPerThread {
            // Its calls are all made on its own thread, one at a time (`Stream::per_thread`).
            return Arc::new(Gate::new(handle, None));
        }
        let forks = crate::fork::forks();
        let mut gates = shard(registry(forks), handle).0.lock();
        // Only the handle's own entry is upgraded: an upgraded gate of another handle dropped here
        // could be its last reference, and its drop takes this lock.
        if let Some(found) = gates
            .iter()
            .find(|(h, _)| *h == handle)
            .and_then(|(_, g)| g.upgrade())
        {
            return found;
        }
        let made = Arc::new(Gate::new(handle, Some(forks)));
        gates.retain(|(h, _)| *h != handle);
        gates.push((handle, Arc::downgrade(&made)));
        made
    }

    fn new(handle: usize, registered: Option<u64>) -> Gate {
        Gate {
            handle,
            lock: RwLock::new(None),
            listed: AtomicBool::new(false),
            registered,
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
        // Not in a child forked since it was made: the parent's registry, whose lock a thread that
        // did not fork may hold (see `fork`).
        let Some(forks) = self.registered.filter(|&forks| !crate::fork::forked_since(forks)) else {
            return;
        };
        // This gate's entry, and any other of a gate gone meanwhile.
        shard(registry(forks), self.handle)
            .0
            .lock()
            .retain(|(_, g)| g.strong_count() > 0);
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

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::*;

    /// A child forked while another thread of the parent held a shard of the registry (making or
    /// dropping a `Stream`) makes and drops streams in a registry of its own: the parent's lock
    /// stays held in the child. (It blocked before, in a child forked before the crate's first
    /// CUDA call, which the crate serves in full.)
    #[test]
    fn a_child_forked_while_another_thread_holds_a_registry_shard_never_blocks() {
        let handle = 0x7f00_0000_1000usize;
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            // As another thread's `Gate::of` or `Gate::drop` would hold it.
            let _shard = shard(registry(crate::fork::forks()), handle).0.lock();
            held_tx.send(()).unwrap();
            let _ = done_rx.recv();
        });
        held_rx.recv().unwrap();
        // SAFETY: the child makes and drops a borrowed stream (no CUDA call) and calls
        // async-signal-safe libc functions, then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: async-signal-safe; a blocked child dies of the alarm.
            unsafe { libc::alarm(3) };
            // SAFETY: no call is made on it.
            let borrowed = unsafe { crate::Stream::from_raw_borrowed(handle as sys::cudaStream_t, 0) };
            drop(borrowed);
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above, writing through a live local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child ended with status {status:#x} (it blocked on the registry's lock)"
        );
    }
}
