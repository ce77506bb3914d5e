//! The flag lane's write side: a stream made with [`StreamOptions::flag_lane`](super::StreamOptions)
//! owns a slot, one 64-bit word of host memory the crate registered for the GPU, and behind each
//! record of a timing-disabled event on it writes the slot's next ticket (`cuStreamWriteValue64`).
//! A thread that spins on the slot sees the record complete as soon as the GPU gets there, without
//! a driver call (the scanner, `completion::scanner`).
//!
//! A ticket is a hint, never a result: the scanner queries the event before it wakes anyone. So a
//! ticket that lands late or out of place (a write that a capture begun around the record took
//! into its graph and a launch repeats) can delay a wake-up to the reactor's pace, never make one
//! early.
//!
//! A dropped stream's slot waits in quarantine until its last ticket has landed (for ever, if it
//! never lands: a stuck stream, a broken context), then goes back to its context instance's free
//! list for the next lane stream: so a free slot has no stream's write queued (a graph's launch
//! may still write an old ticket into it, which only delays a wake-up). Slots are never freed.
//! Their pages stay registered, because a graph may still hold a write into them, until
//! `Stream::release_flag_lane_memory` (unsafe: the caller vouches for the graphs) unregisters the
//! pages whose slots are all free; a page's host memory stays allocated even then, since an event
//! may still point at one of its slots. A device reset
//! ends the registration with the context; the pages stay the crate's (registered memory, not
//! `cuMemHostAlloc`'s), so the scanner's reads stay harmless, and the next instance registers
//! pages of its own.
//!
//! Pages are registered in relaxed capture mode: beside another thread's global-mode capture, CUDA
//! refuses a global-mode caller's `cuMemHostRegister` and `cuMemHostUnregister` and invalidates
//! that capture (`bench/probes/capture_unsafe_calls.c`), and a stream's creation must not do that.

use crate::capture_mode::RelaxedCapture;
use crate::context::ContextInstance;
use crate::driver::{Driver, loaded_driver};
use crate::error::Result;
use crate::mapped_memory::MappedMemory;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Lazy, Mutex};
use cuda_event_sys as sys;
use std::collections::HashMap;

/// Words per slot: one slot per cache line, so that the GPU's writes to one slot do not touch the
/// line the scanner reads for another.
const SLOT_WORDS: usize = 8;
/// Slots registered at once.
const SLOTS_PER_PAGE: usize = 64;

/// One lane stream's word of registered host memory and the tickets written to it.
pub(crate) struct FlagSlot {
    /// The registered page it lies in (`None` in the scanner's tests).
    page: Option<&'static MappedMemory>,
    /// The host's view of the slot: the last ticket the GPU wrote into it.
    host: &'static AtomicU64,
    device_ptr: sys::CUdeviceptr,
    /// Held across a ticket's write, so that the tickets of one slot reach its stream in the
    /// order they rise.
    writing: Mutex<()>,
    /// The last ticket handed out, stored once its write is queued (read without `writing`, which
    /// a write that blocks on a full queue holds); kept when the slot changes stream, so that the
    /// tickets keep rising.
    issued: AtomicU64,
}

impl FlagSlot {
    /// Queues a write of the next ticket on `stream` (the slot's stream, owned by the crate)
    /// behind the work queued on it so far, and returns the ticket.
    pub(crate) fn mark(&self, d: &Driver, stream: sys::cudaStream_t) -> Result<u64> {
        let _writing = self.writing.lock();
        let ticket = self.issued.load(Ordering::Relaxed) + 1;
        d.stream_write_value64.call(|f| {
            // SAFETY: a live stream the crate made, whose own context the call uses, and the
            // device address of a slot registered in that context: its page stays registered
            // while the slot is the stream's (released only once free); a plain write (flags 0),
            // which CUDA orders after the work queued before it.
            unsafe { f(stream.cast(), self.device_ptr, ticket, 0) }
        })?;
        self.issued.store(ticket, Ordering::Release);
        Ok(ticket)
    }

    /// The last ticket handed out, without waiting for a write under way.
    pub(crate) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Acquire)
    }

    /// Whether the last ticket handed out has landed: no write of its stream is pending.
    fn landed(&self) -> bool {
        self.passed(self.issued())
    }

    /// Whether the GPU has written `ticket`, or a later one, into the slot.
    #[inline]
    pub(crate) fn passed(&self, ticket: u64) -> bool {
        self.host.load(Ordering::Acquire) >= ticket
    }

    /// As if tickets up to `ticket` had been handed out: for the scanner's tests.
    #[cfg(test)]
    pub(crate) fn issue_for_test(&self, ticket: u64) {
        self.issued.store(ticket, Ordering::Release);
    }

    /// A slot the GPU never writes, over `host`: the scanner's tests set it by hand.
    #[cfg(test)]
    pub(crate) fn for_test(host: &'static AtomicU64) -> FlagSlot {
        FlagSlot {
            page: None,
            host,
            device_ptr: 0,
            writing: Mutex::new(()),
            issued: AtomicU64::new(0),
        }
    }
}

/// The slots of each context instance that no stream holds.
#[derive(Default)]
struct Spare {
    /// Free: no write queued. Handed out last in, first out.
    free: Vec<&'static FlagSlot>,
    /// Given back by a dropped stream whose last ticket had not landed yet.
    quarantined: Vec<&'static FlagSlot>,
}

impl Spare {
    /// Frees the quarantined slots whose last ticket has landed.
    fn free_landed(&mut self) {
        let (landed, pending): (Vec<_>, Vec<_>) = self.quarantined.drain(..).partition(|slot| slot.landed());
        self.free.extend(landed);
        self.quarantined = pending;
    }
}

static SPARE: Lazy<Mutex<HashMap<ContextInstance, Spare>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// A slot for a new lane stream of `instance`, whose context is current on this thread: a free
/// one, or one of a page registered now.
///
/// # Errors
/// `cuMemHostRegister`'s and `cuMemHostGetDevicePointer`'s (no memory left to lock, for one).
pub(crate) fn take(d: &Driver, instance: ContextInstance) -> Result<&'static FlagSlot> {
    let mut spare = SPARE.get().lock();
    let spare = spare.entry(instance).or_default();
    spare.free_landed();
    if let Some(slot) = spare.free.pop() {
        return Ok(slot);
    }
    let memory = {
        let _relaxed = RelaxedCapture::enter(d);
        MappedMemory::new(d, SLOT_WORDS * SLOTS_PER_PAGE * size_of::<u64>())?
    };
    let page: &'static MappedMemory = Box::leak(Box::new(memory));
    let words = page.words();
    let mut made = (0..SLOTS_PER_PAGE).map(|i| -> &'static FlagSlot {
        Box::leak(Box::new(FlagSlot {
            page: Some(page),
            host: &words[i * SLOT_WORDS],
            device_ptr: page.device_ptr + (i * SLOT_WORDS * size_of::<u64>()) as sys::CUdeviceptr,
            writing: Mutex::new(()),
            issued: AtomicU64::new(0),
        }))
    });
    let first = made.next().expect("a page has slots");
    spare.free.extend(made);
    Ok(first)
}

/// Gives a dropped lane stream's slot back for the next lane stream of `instance`, once its last
/// ticket has landed.
pub(crate) fn give(instance: ContextInstance, slot: &'static FlagSlot) {
    SPARE
        .get()
        .lock()
        .entry(instance)
        .or_default()
        .quarantined
        .push(slot);
}

/// [`Stream::release_flag_lane_memory`](super::Stream::release_flag_lane_memory).
///
/// # Safety
/// As that function's.
pub(crate) unsafe fn release_memory() -> Result<usize> {
    let Some(d) = loaded_driver() else { return Ok(0) };
    let _relaxed = RelaxedCapture::enter(d);
    let mut spares = SPARE.get().lock();
    // A reset instance's pages went with its context, and its queued writes will never land.
    spares.retain(|instance, _| instance.still_alive(d));
    let (mut kept, mut first_error) = (0, Ok(()));
    for (instance, spare) in spares.iter_mut() {
        spare.free_landed();
        // Each page with a spare slot, and its free slots: a page with a quarantined slot has
        // fewer than all, and stays with the others that some stream holds.
        let page_of = |slot: &FlagSlot| slot.page.map_or(std::ptr::null(), std::ptr::from_ref);
        let mut pages: HashMap<*const MappedMemory, Vec<&'static FlagSlot>> = HashMap::new();
        for slot in spare.free.drain(..) {
            pages.entry(page_of(slot)).or_default().push(slot);
        }
        for slot in &spare.quarantined {
            pages.entry(page_of(slot)).or_default();
        }
        for (_, free) in pages {
            let released = match free.first().and_then(|slot| slot.page) {
                Some(page) if free.len() == SLOTS_PER_PAGE => unregister(*instance, page),
                _ => Err(None), // some slot of it is a stream's, or quarantined
            };
            if let Err(error) = released {
                kept += 1;
                spare.free.extend(free);
                if let (Some(error), Ok(())) = (error, &first_error) {
                    first_error = Err(error);
                }
            }
        }
    }
    first_error.map(|()| kept)
}

/// Unregisters `page` in `instance`'s context, unless a reset of it already did; CUDA's error
/// otherwise.
fn unregister(
    instance: ContextInstance,
    page: &MappedMemory,
) -> std::result::Result<(), Option<crate::Error>> {
    ContextInstance::destroy_unless_reset(Some(instance), |d| {
        let _current = instance.context()?.enter(d)?;
        // SAFETY: registered in this context instance, with no write of any stream queued (every
        // slot free: its last ticket landed) and, as the caller vouches, none in a graph whose
        // launch is pending or to come; unregistered once, as its slots leave the free list with
        // it. The host memory stays allocated for the events that point at it.
        d.mem_host_unregister.call(|f| unsafe { f(page.host) })
    })
    .map_err(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(landed: u64, issued: u64) -> (&'static AtomicU64, &'static FlagSlot) {
        let host: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(landed)));
        let slot: &'static FlagSlot = Box::leak(Box::new(FlagSlot::for_test(host)));
        slot.issue_for_test(issued);
        (host, slot)
    }

    #[test]
    fn a_dropped_streams_slot_is_free_again_only_once_its_last_ticket_lands() {
        let (host, pending) = slot(3, 5);
        let (_, landed) = slot(7, 7);
        let mut spare = Spare::default();
        spare.quarantined.extend([pending, landed]);
        spare.free_landed();
        assert_eq!(
            spare.free.len(),
            1,
            "only the slot whose last ticket landed is free"
        );
        assert!(std::ptr::eq(spare.free[0], landed));
        assert_eq!(spare.quarantined.len(), 1);
        host.store(5, Ordering::Release);
        spare.free_landed();
        assert_eq!(spare.free.len(), 2);
        assert!(spare.quarantined.is_empty());
    }
}
