//! Memory the timing code needs of its own: a device buffer (the L2 flush) and a word of mapped
//! host memory (the gate's flag), made in a device's primary context and kept for the next
//! measurement instead of freed.
//!
//! Why kept: `cuMemFree` (and possibly `cuMemFreeHost`) waits for the work of every stream of the
//! device, so a measurement that freed its buffers would not return while another stream of the
//! device is held (by a `cuStreamWaitValue32`, a host function, a long kernel) however idle the
//! measured stream is. Allocating does not wait, so the first measurement in a context instance
//! allocates, later ones reuse, and nothing on the measuring path frees.
//!
//! Kept per context instance: a device reset destroys the instance and, with it, everything
//! allocated in it, so the memory of an earlier instance is forgotten (never freed, never touched)
//! and the next measurement on that device allocates anew. A set is taken out of the cache for one
//! measurement and put back after it, so two measurements on one device at once each have their
//! own (the cache then keeps both).

use crate::context::ContextInstance;
use crate::driver::Driver;
use crate::error::Result;
use cuda_event_sys as sys;
use parking_lot::Mutex;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// Device memory (`cuMemAlloc`). Freed only by [`release_measure_memory`], while idle (see the
/// module's docs).
pub(crate) struct DeviceBuffer {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) bytes: usize,
}

impl DeviceBuffer {
    /// `bytes` of device memory in the context current on this thread.
    fn new(d: &Driver, bytes: usize) -> Result<DeviceBuffer> {
        let mut ptr = 0;
        // SAFETY: writes the allocation through a live local; a context is current.
        d.mem_alloc.call(|f| unsafe { f(&mut ptr, bytes) })?;
        Ok(DeviceBuffer { ptr, bytes })
    }
}

/// One 32-bit word of page-locked host memory mapped into the device's address space
/// (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`): the host writes it, the GPU reads it.
/// Freed only by [`release_measure_memory`], while idle (see the module's docs); it keeps the last
/// value written, which the next gate on it starts from.
pub(crate) struct MappedWord {
    host: *mut c_void,
    pub(crate) device_ptr: sys::CUdeviceptr,
}

// SAFETY: the pointer is to page-locked memory owned by this struct; it is only read and written as
// an AtomicU32, which any thread may do.
unsafe impl Send for MappedWord {}
// SAFETY: as for Send.
unsafe impl Sync for MappedWord {}

impl MappedWord {
    /// A word set to 0, in the context current on this thread.
    fn new(d: &Driver) -> Result<MappedWord> {
        let mut host = std::ptr::null_mut();
        let bytes = std::mem::size_of::<u32>();
        d.mem_host_alloc.call(|f| {
            // SAFETY: writes the allocation through a live local; a context is current.
            unsafe { f(&mut host, bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
        })?;
        let mut device_ptr = 0;
        // SAFETY: `host` is mapped memory just allocated in the current context; flags must be 0.
        let mapped = d
            .mem_host_get_device_pointer
            .call(|f| unsafe { f(&mut device_ptr, host, 0) });
        if let Err(e) = mapped {
            // Only on this failure, never on the measuring path: nothing has used the word yet.
            // SAFETY: frees the allocation just made, once, in the current context.
            let _ = d.mem_free_host.call(|f| unsafe { f(host) });
            return Err(e);
        }
        let word = MappedWord { host, device_ptr };
        word.value().store(0, Ordering::Release);
        Ok(word)
    }

    /// The word, as the host sees it.
    pub(crate) fn value(&self) -> &AtomicU32 {
        // SAFETY: `host` is a live, page-aligned allocation of at least 4 bytes: freed only out of
        // the idle cache, never while a lease (this word's owner) holds it, and never touched once
        // its context instance is gone (the cache forgets an earlier instance's); the GPU only
        // reads it.
        unsafe { &*self.host.cast::<AtomicU32>() }
    }
}

/// The scratch memory of one context instance, made as measurements first need each part.
struct Scratch {
    device: i32,
    instance: ContextInstance,
    flush: Option<DeviceBuffer>,
    word: Option<MappedWord>,
}

/// Idle scratch memory, by device and context instance: a handful of entries (one per device, more
/// only while measurements on one device overlap), so a linear search.
static IDLE: Mutex<Vec<Scratch>> = Mutex::new(Vec::new());

/// Scratch memory taken out of the cache for one measurement. Dropping it puts it back, unless
/// [`in_use`](Self::in_use) says the GPU may still use it: then it is forgotten (never freed),
/// so that nothing ever writes memory another measurement is using.
pub(crate) struct ScratchLease {
    scratch: Option<Scratch>,
    in_use: Cell<bool>,
}

impl ScratchLease {
    /// The scratch memory of `instance` (the current instance of `device`'s primary context), out
    /// of the cache, or an empty one. Forgets the memory of `device`'s earlier instances, which a
    /// device reset destroyed.
    pub(crate) fn take(device: i32, instance: ContextInstance) -> ScratchLease {
        let mut idle = IDLE.lock();
        idle.retain(|s| s.device != device || s.instance == instance);
        let scratch = match idle.iter().position(|s| s.instance == instance) {
            Some(i) => idle.swap_remove(i),
            None => Scratch {
                device,
                instance,
                flush: None,
                word: None,
            },
        };
        ScratchLease {
            scratch: Some(scratch),
            in_use: Cell::new(false),
        }
    }

    /// Makes what is missing: a flush buffer of at least `flush_bytes` (if given) and the gate's
    /// word (if `word`), in the instance's context, which is current on this thread. Allocating
    /// does not wait for other streams.
    pub(crate) fn prepare(&mut self, d: &Driver, flush_bytes: Option<usize>, word: bool) -> Result<()> {
        let scratch = self
            .scratch
            .as_mut()
            .expect("a lease holds its scratch until dropped");
        if let Some(bytes) = flush_bytes
            && scratch.flush.as_ref().is_none_or(|b| b.bytes < bytes)
        {
            // A smaller buffer already there (the size depends on the device alone, so not
            // expected) is forgotten, not freed: freeing would wait for the whole device.
            scratch.flush = Some(DeviceBuffer::new(d, bytes)?);
        }
        if word && scratch.word.is_none() {
            scratch.word = Some(MappedWord::new(d)?);
        }
        Ok(())
    }

    /// The flush buffer, once [`prepare`](Self::prepare) made it.
    pub(crate) fn flush(&self) -> Option<&DeviceBuffer> {
        self.scratch.as_ref()?.flush.as_ref()
    }

    /// The gate's word, once [`prepare`](Self::prepare) made it.
    pub(crate) fn word(&self) -> Option<&MappedWord> {
        self.scratch.as_ref()?.word.as_ref()
    }

    /// Says whether work that may use this memory could still be queued on the GPU: set before the
    /// first use, cleared once the stream is known drained.
    pub(crate) fn in_use(&self, in_use: bool) {
        self.in_use.set(in_use);
    }
}

impl Drop for ScratchLease {
    fn drop(&mut self) {
        if self.in_use.get() {
            return; // forgotten: the GPU may still write it, and another measurement must not
        }
        if let Some(scratch) = self.scratch.take() {
            IDLE.lock().push(scratch);
        }
    }
}

/// Frees the memory that [`measure`](crate::measure) keeps per device for the next measurement
/// (an L2-sized flush buffer, a word of mapped host memory), for a program done measuring or about
/// to exit under a leak checker. Measurements under way keep theirs; a later one allocates anew.
///
/// It waits for all work of each device it frees memory on (`cuMemFree` does), which is why the
/// measurements themselves never free: call it when no measurement runs on those devices (never
/// from `measure`'s `work`), or it waits for that measurement's held stream.
///
/// # Errors
/// The first failure of a free; the memory of that context instance is forgotten.
pub fn release_measure_memory() -> Result<()> {
    if crate::driver::loaded_driver().is_none() {
        return Ok(()); // nothing was ever allocated (or a forked child, which frees nothing)
    }
    let idle = std::mem::take(&mut *IDLE.lock());
    let mut first_error = Ok(());
    for scratch in idle {
        let freed = free(scratch);
        if first_error.is_ok() {
            first_error = freed;
        }
    }
    first_error
}

/// Frees one context instance's scratch memory, unless a device reset already did.
fn free(scratch: Scratch) -> Result<()> {
    ContextInstance::destroy_unless_reset(Some(scratch.instance), |d| {
        let _current = scratch.instance.context()?.enter(d)?;
        if let Some(buffer) = scratch.flush {
            // SAFETY: device memory allocated in this context instance, idle (out of the cache, so
            // no measurement uses it), freed once.
            d.mem_free.call(|f| unsafe { f(buffer.ptr) })?;
        }
        if let Some(word) = scratch.word {
            // SAFETY: mapped host memory allocated in this context instance, idle, freed once.
            d.mem_free_host.call(|f| unsafe { f(word.host) })?;
        }
        Ok(())
    })
}
