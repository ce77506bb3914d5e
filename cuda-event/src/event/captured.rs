//! The captured CUDA events (see `last_record`): which capture holds each, and when one may be
//! used again.
//!
//! CUDA crashes when a CUDA event that a capture holds is recorded into another capture, recorded
//! on a stream, waited on or destroyed beside that capture's end (review 3's probe P1, and the
//! project's "two events" results). The capture may be ended by any thread, in relaxed mode, and
//! only the thread that ends it knows when. So a captured CUDA event is bound to the capture it
//! went into (`cuStreamGetCaptureInfo`'s id, unique in the process), and goes into no other
//! capture, no stream, and no destroy until that capture is known to be over:
//! - a capture the crate ends itself ([`Stream::capture`](crate::Stream::capture)) is over once its
//!   end has returned ([`Capture::end`], which the crate's records into the capture and forks from
//!   it, each made under [`Capture::enter`], never overlap);
//! - any other capture is over once CUDA runs the destructor of a user object that the crate moved
//!   into the capture's graph: the graph, every instance of it, and so the capture, are gone.
//!
//! Until then the event waits here, held (`KEPT`); once its capture is over it is free for any
//! `Event`'s next captured record, on any thread (nothing else holds it). What is kept is so
//! bounded by the captures (and graphs) alive, not by the threads that ever ran.

use crate::driver::Driver;
use crate::error::Result;
use crate::event::handle::EventHandle;
use crate::event::pool::POOL_PER_THREAD;
use crate::stream::Stream;
pub(crate) use crate::stream::known_capture::Capture;
use crate::sync::Mutex;
use cuda_event_sys as sys;
use std::ffi::c_void;
use std::sync::Arc;

/// What a stream being captured is capturing into now.
pub(crate) enum Capturing {
    /// The capture, known to the crate.
    Into(Arc<Capture>),
    /// No capture any more (another thread ended it since the caller asked).
    Nothing,
}

/// The captures the crate has bound captured events to and that are not yet over.
static CAPTURES: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());

/// Captured CUDA events that no `Event` uses: held for their capture, or free.
struct Kept {
    held: Vec<(Arc<Capture>, u32, EventHandle)>,
    free: Vec<(u32, EventHandle)>,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    held: Vec::new(),
    free: Vec::new(),
});

/// The capture `stream` is capturing into (the caller found it capturing and holds its context).
pub(crate) fn capture_of(d: &Driver, stream: &Stream) -> Result<Capturing> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let (mut id, mut graph) = (0, std::ptr::null_mut());
    d.stream_get_capture_info.call(|f| {
        // SAFETY: a live stream; writes through live locals, and the optional out-pointers are null.
        unsafe {
            f(
                stream.as_raw(),
                &mut status,
                &mut id,
                &mut graph,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
    })?;
    if status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Ok(Capturing::Nothing);
    }
    Ok(Capturing::Into(known(d, id, graph)))
}

/// The crate's record of capture `id`, made at its first captured record: a user object moved into
/// its `graph` says when the graph is gone.
fn known(d: &Driver, id: u64, graph: sys::CUgraph) -> Arc<Capture> {
    let mut captures = CAPTURES.lock();
    captures.retain(|c| !c.is_over());
    if let Some(capture) = captures.iter().find(|c| c.id == id) {
        return capture.clone();
    }
    let capture = Arc::new(Capture::new(id));
    watch_graph(d, &capture, graph);
    captures.push(capture.clone());
    capture
}

/// Moves a user object whose destructor marks `capture` over into `graph`. Where CUDA refuses,
/// the capture is over only if the crate ends it, and its events are kept until the context ends.
fn watch_graph(d: &Driver, capture: &Arc<Capture>, graph: sys::CUgraph) {
    let data = Arc::into_raw(capture.clone()) as *mut c_void;
    let mut object = std::ptr::null_mut();
    let created = d.user_object_create.call(|f| {
        // SAFETY: writes through a live local; `data` is an `Arc` that `graph_gone` takes back,
        // once (one reference); the flag is the one CUDA requires.
        unsafe {
            f(
                &mut object,
                data,
                Some(graph_gone),
                1,
                sys::CUuserObject_flags_enum::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
            )
        }
    });
    if created.is_err() {
        // SAFETY: the reference made above, which no destructor will take.
        drop(unsafe { Arc::from_raw(data as *const Capture) });
        return;
    }
    // Where the graph does not take it, releasing our reference would run the destructor and mark
    // the capture over while it is not: the object is left alive instead (a few bytes, once per
    // such capture), so that capture is over only if the crate ends it.
    let _ = d.graph_retain_user_object.call(|f| {
        // SAFETY: the graph of an open capture, and the object just made; its one reference moves.
        unsafe {
            f(
                graph,
                object,
                1,
                sys::CUuserObjectRetain_flags_enum::CU_GRAPH_USER_OBJECT_MOVE.0,
            )
        }
    });
}

/// A user object's destructor: the graph of the capture is gone (CUDA calls it on a thread of its
/// own, and it makes no CUDA call).
unsafe extern "C" fn graph_gone(data: *mut c_void) {
    // SAFETY: the reference `watch_graph` gave the object, taken back once.
    let capture = unsafe { Arc::from_raw(data as *const Capture) };
    capture.mark_over();
}

/// A CUDA event for a captured record on `device` with `flags`: a free one whose capture is over
/// and that no device reset destroyed, if there is one.
pub(crate) fn take(d: &Driver, device: i32, flags: u32) -> Option<EventHandle> {
    let mut stale = Vec::new();
    let found = {
        let mut kept = KEPT.lock();
        free_the_ended(&mut kept);
        let mut found = None;
        while let Some(at) = kept
            .free
            .iter()
            .rposition(|(f, h)| *f == flags && h.device() == device)
        {
            let (_, handle) = kept.free.swap_remove(at);
            match handle.instance().is_none_or(|instance| instance.still_alive(d)) {
                true => {
                    found = Some(handle);
                    break;
                }
                false => stale.push(handle),
            }
        }
        found
    };
    stale.into_iter().for_each(EventHandle::destroy); // the reset destroyed them: no CUDA call
    found
}

/// Keeps `handle`, last recorded into `capture`, until that capture is over, then for the next
/// captured record; beyond [`POOL_PER_THREAD`] free ones of its kind it is destroyed (its capture
/// being over, no end can run beside the destroy).
pub(crate) fn give(capture: Arc<Capture>, flags: u32, handle: EventHandle) {
    if crate::fork::in_forked_child() {
        return; // the parent owns it; the child takes no lock (see `fork`)
    }
    let surplus = {
        let mut kept = KEPT.lock();
        kept.held.push((capture, flags, handle));
        free_the_ended(&mut kept)
    };
    surplus.into_iter().for_each(EventHandle::destroy);
}

/// Moves the held events whose capture is over to the free list; returns those beyond its bound.
fn free_the_ended(kept: &mut Kept) -> Vec<EventHandle> {
    let mut surplus = Vec::new();
    let mut at = 0;
    while at < kept.held.len() {
        if !kept.held[at].0.is_over() {
            at += 1;
            continue;
        }
        let (_, flags, handle) = kept.held.swap_remove(at);
        let same = kept
            .free
            .iter()
            .filter(|(f, h)| *f == flags && h.device() == handle.device())
            .count();
        match same < POOL_PER_THREAD {
            true => kept.free.push((flags, handle)),
            false => surplus.push(handle),
        }
    }
    surplus
}

/// How many captured CUDA events wait for their capture to be over, and how many are free.
#[cfg(test)]
#[allow(dead_code)]
pub(crate) fn kept() -> (usize, usize) {
    let kept = KEPT.lock();
    (kept.held.len(), kept.free.len())
}

/// Forgets every kept captured event without a CUDA call (a handle is plain data): the model's
/// executions end with it, as each starts with a new world in which the old handles name nothing.
#[cfg(all(cuda_event_model, test))]
pub(crate) fn forget_all() {
    let mut kept = KEPT.lock();
    kept.held.clear();
    kept.free.clear();
    CAPTURES.lock().clear();
}
