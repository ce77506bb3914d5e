//! The flag lane's write side: a stream made with [`StreamOptions::flag_lane`](super::StreamOptions)
//! owns a slot, one 64-bit word of host memory the crate registered for the GPU, and behind each
//! record of an event on it writes the slot's next ticket (`cuStreamWriteValue64`). A thread that
//! spins on the slot sees the record complete as soon as the GPU gets there, without a driver call
//! (the scanner, `completion::scanner`).
//!
//! A ticket is a hint, never a result: the scanner queries the event before it wakes anyone. So a
//! ticket that lands late or out of place (a write that a capture begun around the record took
//! into its graph and a launch repeats; a slot given to a new stream while its last stream's writes
//! are still queued) can delay a wake-up to the reactor's pace, never make one early.
//!
//! Slots are never freed: a slot of a dropped stream goes back to its context instance's free list
//! for the next lane stream. Its page stays registered, because a graph may still hold a write into
//! it, until `Stream::release_flag_lane_memory` unregisters the pages whose slots are all free and whose
//! last tickets have all landed (for a program about to exit under a leak checker); the page's host
//! memory stays allocated even then, since an event may still point at one of its slots. A device
//! reset ends the registration with the context; the pages stay the crate's (they are registered
//! memory, not `cuMemHostAlloc`'s), so the scanner's reads stay harmless, and the next instance
//! registers pages of its own.
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
    /// The last ticket handed out. Held across the write, so that the tickets of one slot reach
    /// its stream in the order they rise; kept when the slot changes stream, so that they keep
    /// rising.
    issued: Mutex<u64>,
}

impl FlagSlot {
    /// Queues a write of the next ticket on `stream` (the slot's stream, of the context current on
    /// this thread) behind the work queued on it so far, and returns the ticket.
    pub(crate) fn mark(&self, d: &Driver, stream: sys::cudaStream_t) -> Result<u64> {
        let mut issued = self.issued.lock();
        let ticket = *issued + 1;
        d.stream_write_value64.call(|f| {
            // SAFETY: a live stream of the context current on this thread, and the device address
            // of a registered slot of that context (the crate's pages, never freed); a plain write
            // (flags 0), which CUDA orders after the work queued before it.
            unsafe { f(stream.cast(), self.device_ptr, ticket, 0) }
        })?;
        *issued = ticket;
        Ok(ticket)
    }

    /// Whether the last ticket handed out has landed: no write of its stream is pending.
    fn landed(&self) -> bool {
        self.passed(*self.issued.lock())
    }

    /// Whether the GPU has written `ticket`, or a later one, into the slot.
    #[inline]
    pub(crate) fn passed(&self, ticket: u64) -> bool {
        self.host.load(Ordering::Acquire) >= ticket
    }

    /// A slot the GPU never writes, over `host`: the scanner's tests set it by hand.
    #[cfg(test)]
    pub(crate) fn for_test(host: &'static AtomicU64) -> FlagSlot {
        FlagSlot {
            page: None,
            host,
            device_ptr: 0,
            issued: Mutex::new(0),
        }
    }
}

/// The free slots of each context instance.
static FREE: Lazy<Mutex<HashMap<ContextInstance, Vec<&'static FlagSlot>>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));

/// A slot for a new lane stream of `instance`, whose context is current on this thread: a free
/// one, or one of a page registered now.
///
/// # Errors
/// `cuMemHostRegister`'s and `cuMemHostGetDevicePointer`'s (no memory left to lock, for one).
pub(crate) fn take(d: &Driver, instance: ContextInstance) -> Result<&'static FlagSlot> {
    let mut free = FREE.get().lock();
    let slots = free.entry(instance).or_default();
    if let Some(slot) = slots.pop() {
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
            issued: Mutex::new(0),
        }))
    });
    let first = made.next().expect("a page has slots");
    slots.extend(made);
    Ok(first)
}

/// Gives a dropped lane stream's slot back for the next lane stream of `instance`.
pub(crate) fn give(instance: ContextInstance, slot: &'static FlagSlot) {
    FREE.get().lock().entry(instance).or_default().push(slot);
}

/// [`Stream::release_flag_lane_memory`](super::Stream::release_flag_lane_memory).
pub(crate) fn release_memory() -> Result<usize> {
    let Some(d) = loaded_driver() else { return Ok(0) };
    let _relaxed = RelaxedCapture::enter(d);
    let mut free = FREE.get().lock();
    let (mut kept, mut first_error) = (0, Ok(()));
    for (instance, slots) in free.iter_mut() {
        let mut pages: HashMap<*const MappedMemory, Vec<&'static FlagSlot>> = HashMap::new();
        for slot in slots.drain(..) {
            let page = slot.page.map_or(std::ptr::null(), std::ptr::from_ref);
            pages.entry(page).or_default().push(slot);
        }
        for (_, page_slots) in pages {
            let idle = page_slots.len() == SLOTS_PER_PAGE && page_slots.iter().all(|slot| slot.landed());
            let released = match (page_slots[0].page, idle) {
                (Some(page), true) => unregister(*instance, page),
                _ => Err(None),
            };
            if let Err(error) = released {
                kept += 1;
                slots.extend(page_slots);
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
        // SAFETY: registered in this context instance, with no write of any stream pending
        // (every slot free, its last ticket landed); unregistered once, as its slots leave the
        // free list with it. The host memory stays allocated for the events that point at it.
        d.mem_host_unregister.call(|f| unsafe { f(page.host) })
    })
    .map_err(Some)
}
