//! Memory the timing code needs of its own: device buffers (the L2 flush and its check), a word of
//! mapped host memory (the gate's flag) and the SM clock's stamp slots (mapped host memory), with
//! the timing kernels, made in a device's primary context and kept for the next measurement
//! instead of freed.
//!
//! Why kept: `cuMemFree` (and possibly `cuMemFreeHost`) waits for the work of every stream of the
//! device, so a measurement that freed its buffers would not return while another stream of the
//! device is held (by a `cuStreamWaitValue32`, a host function, a long kernel) however idle the
//! measured stream is. Allocating does not wait, so the first measurement in a context instance
//! allocates, later ones reuse, and nothing on the measuring path frees. (Loading the timing
//! kernels does wait, which is why only measurements that ask for the clock or the calibration
//! load them.)
//!
//! Kept per context instance: a device reset destroys the instance and, with it, everything
//! allocated in it, so the memory of an earlier instance is forgotten (never freed, never touched)
//! and the next measurement on that device allocates anew. A set is taken out of the cache for one
//! measurement and put back after it, so two measurements on one device at once each have their
//! own (the cache then keeps both).

use crate::capture_mode::relaxed_if_loaded;
use crate::context::ContextInstance;
use crate::driver::{CUresult, Driver};
use crate::error::Result;
use crate::mapped_memory::MappedMemory;
use crate::sync::Mutex;
use crate::sync::atomic::AtomicU32;
use crate::timing::engine::kernels::{TimingKernels, instance_kernels, unload_unused_kernels};
use crate::timing::engine::sm_clock::{ClockStamps, SLOT_BYTES};
use cuda_event_sys as sys;
use std::cell::Cell;
use std::sync::Arc;

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

    /// As [`new`](Self::new), but `None` where the device has no room for it; other errors (a
    /// broken context, a fault) are still errors.
    fn unless_full(d: &Driver, bytes: usize) -> Result<Option<DeviceBuffer>> {
        let mut ptr = 0;
        // SAFETY: as in `new`.
        let code = d.mem_alloc.code(|f| unsafe { f(&mut ptr, bytes) });
        if code == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Ok(None);
        }
        d.mem_alloc.check(code)?;
        Ok(Some(DeviceBuffer { ptr, bytes }))
    }
}

/// One 32-bit word of mapped host memory: the host writes it, the GPU reads it (the gate's flag).
/// It keeps the last value written, which the next gate on it starts from.
pub(crate) struct MappedWord {
    memory: MappedMemory,
}

impl MappedWord {
    /// A word set to 0, in the context current on this thread.
    fn new(d: &Driver) -> Result<MappedWord> {
        Ok(MappedWord {
            memory: MappedMemory::new(d, 8)?,
        })
    }

    /// The word's device address.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.memory.device_ptr
    }

    /// The word, as the host sees it.
    pub(crate) fn value(&self) -> &AtomicU32 {
        // SAFETY: the first 4 bytes of a live, 8-byte-aligned 8-byte allocation (see
        // `MappedMemory::words`); the GPU only reads it.
        unsafe { &*self.memory.host.cast::<AtomicU32>() }
    }
}

/// The scratch memory of one context instance, made as measurements first need each part.
struct Scratch {
    device: i32,
    instance: ContextInstance,
    flush: Option<DeviceBuffer>,
    /// The flush check's buffers.
    probe: Option<DeviceBuffer>,
    word: Option<MappedWord>,
    /// The timing kernels of this instance, once a measurement asked for them and the driver
    /// could compile them.
    kernels: Option<Arc<TimingKernels>>,
    /// The clock stamps' slots; smaller ones that measurements outgrew are kept (freeing waits)
    /// until [`release_measure_memory`].
    stamps: Option<MappedMemory>,
    outgrown: Vec<MappedMemory>,
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

/// What a measurement needs of its scratch memory ([`ScratchLease::prepare`]).
pub(crate) struct Needs {
    /// A flush buffer of at least this many bytes.
    pub(crate) flush_bytes: Option<usize>,
    /// The flush check's buffers, at least this many bytes.
    pub(crate) probe_bytes: Option<usize>,
    /// The gate's word.
    pub(crate) word: bool,
    /// The timing kernels (for the calibration).
    pub(crate) kernels: bool,
    /// The SM clock's stamp slots, this many (and the kernels, for the stamp).
    pub(crate) stamp_slots: usize,
}

impl ScratchLease {
    /// The scratch memory of `instance` (the current instance of `device`'s primary context), out
    /// of the cache, or an empty one. Forgets the memory of `device`'s earlier instances, which a
    /// device reset destroyed.
    pub(crate) fn take(device: i32, instance: ContextInstance) -> ScratchLease {
        let mut idle = IDLE.lock();
        let (earlier, kept) = std::mem::take(&mut *idle)
            .into_iter()
            .partition(|s| s.device == device && s.instance != instance);
        *idle = kept;
        let found = idle
            .iter()
            .position(|s| s.instance == instance)
            .map(|i| idle.swap_remove(i));
        drop(idle);
        // Their context is gone: only the host pages the crate owns are left to free.
        earlier
            .into_iter()
            .for_each(|scratch: Scratch| drop(free(scratch)));
        let scratch = match found {
            Some(scratch) => scratch,
            None => Scratch {
                device,
                instance,
                flush: None,
                probe: None,
                word: None,
                kernels: None,
                stamps: None,
                outgrown: Vec::new(),
            },
        };
        ScratchLease {
            scratch: Some(scratch),
            in_use: Cell::new(false),
        }
    }

    /// Makes what is missing of `needs`, in the instance's context, which is current on this
    /// thread (in relaxed capture mode: allocating is a call that another thread's capture in
    /// global mode forbids). A kernel the driver cannot compile leaves the measurement without
    /// clocks and calibration. Allocating does not wait for other streams; loading the kernels
    /// does (see `MeasureOptions::sm_clock`).
    pub(crate) fn prepare(&mut self, d: &Driver, needs: &Needs) -> Result<()> {
        let scratch = self
            .scratch
            .as_mut()
            .expect("a lease holds its scratch until dropped");
        // A smaller buffer already there (the sizes depend on the device alone, so not expected)
        // is forgotten, not freed: freeing would wait for the whole device.
        if let Some(bytes) = needs.flush_bytes
            && scratch.flush.as_ref().is_none_or(|b| b.bytes < bytes)
        {
            scratch.flush = Some(DeviceBuffer::new(d, bytes)?);
        }
        if let Some(bytes) = needs.probe_bytes
            && scratch.probe.as_ref().is_none_or(|b| b.bytes < bytes)
        {
            // The check is worth less than the measurement: a device too full for its buffers
            // measures without it (and tries again next time).
            scratch.probe = DeviceBuffer::unless_full(d, bytes)?;
        }
        if needs.word && scratch.word.is_none() {
            scratch.word = Some(MappedWord::new(d)?);
        }
        if (needs.kernels || needs.stamp_slots > 0) && scratch.kernels.is_none() {
            let device = scratch.instance.context()?.cu_device();
            scratch.kernels = instance_kernels(d, scratch.device, scratch.instance, device)?;
        }
        if needs.stamp_slots > 0 {
            let short = scratch
                .stamps
                .as_ref()
                .is_none_or(|m| m.bytes < needs.stamp_slots * SLOT_BYTES);
            if scratch.kernels.is_some() && short {
                let bytes = needs.stamp_slots.next_power_of_two().max(256) * SLOT_BYTES;
                let grown = MappedMemory::new(d, bytes)?;
                scratch.outgrown.extend(scratch.stamps.replace(grown));
            }
        }
        Ok(())
    }

    /// The timing kernels, once [`prepare`](Self::prepare) loaded them.
    pub(crate) fn kernels(&self) -> Option<&TimingKernels> {
        self.scratch.as_ref()?.kernels.as_deref()
    }

    /// The flush check's buffers, once [`prepare`](Self::prepare) made them.
    pub(crate) fn probe(&self) -> Option<&DeviceBuffer> {
        self.scratch.as_ref()?.probe.as_ref()
    }

    /// The SM clock's kernel and stamp slots, once [`prepare`](Self::prepare) made them.
    pub(crate) fn clock_stamps(&self) -> Option<ClockStamps<'_>> {
        let scratch = self.scratch.as_ref()?;
        let kernel = scratch.kernels.as_deref()?;
        let stamps = scratch.stamps.as_ref()?;
        Some(ClockStamps::new(kernel, stamps.words(), stamps.device_ptr))
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
            // Forgotten: the GPU may still write it (and launch the clock's kernel), and another
            // measurement must not. Forgetting keeps its hold on the kernel too, never unloaded.
            std::mem::forget(self.scratch.take());
            return;
        }
        if let Some(scratch) = self.scratch.take() {
            IDLE.lock().push(scratch);
        }
    }
}

/// Frees the memory that [`measure`](crate::timing::measure) keeps per device for the next measurement
/// (a flush buffer twice the L2's size and the flush check's three quarters of it, a word of
/// mapped host memory, the SM clock's stamp slots and the module of the timing kernels), for a
/// program done measuring or about to exit under a leak checker.
/// Measurements under way keep theirs; a later one allocates anew.
///
/// It waits for all work of each device it frees memory on (`cuMemFree` does), which is why the
/// measurements themselves never free: call it when no measurement runs on those devices (never
/// from `measure`'s `work`), or it waits for that measurement's held stream. It frees in relaxed
/// capture mode, as the memory was made: in this thread's global mode, CUDA would refuse the frees
/// while another thread captures a stream in global mode, and invalidate that capture.
///
/// # Errors
/// The first failure of a free; the memory of that context instance is forgotten.
pub fn release_measure_memory() -> Result<()> {
    let Some(_relaxed) = relaxed_if_loaded() else {
        return Ok(()); // nothing was ever allocated (or a forked child, which frees nothing)
    };
    let idle = std::mem::take(&mut *IDLE.lock());
    let mut first_error = Ok(());
    for scratch in idle {
        let freed = free(scratch);
        if first_error.is_ok() {
            first_error = freed;
        }
    }
    // The kernels that no measurement holds any more (the idle scratch memory's references went
    // with it).
    let unloaded = unload_unused_kernels();
    if first_error.is_ok() {
        first_error = unloaded;
    }
    first_error
}

/// Frees one context instance's scratch memory, unless a device reset already did.
fn free(scratch: Scratch) -> Result<()> {
    ContextInstance::destroy_unless_reset(Some(scratch.instance), |d| {
        let _current = scratch.instance.context()?.enter(d)?;
        for buffer in scratch.flush.into_iter().chain(scratch.probe) {
            // SAFETY: device memory allocated in this context instance, idle (out of the cache, so
            // no measurement uses it), freed once.
            d.mem_free.call(|f| unsafe { f(buffer.ptr) })?;
        }
        Ok(())
    })?;
    let word = scratch.word.map(|word| word.memory);
    for memory in word.into_iter().chain(scratch.stamps).chain(scratch.outgrown) {
        memory.release(scratch.instance)?;
    }
    Ok(())
}
