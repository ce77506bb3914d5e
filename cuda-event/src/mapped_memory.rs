//! Host memory the crate owns and registers for the GPU: timing's gate word and clock stamps, and
//! the flag lane's slots.

use crate::context::ContextInstance;
use crate::driver::{CUresult, Driver};
use crate::error::Result;
use crate::sync::atomic::AtomicU64;
use cuda_event_sys as sys;
use std::ffi::c_void;

/// Host memory the crate owns (page-aligned, from the C allocator), page-locked and mapped into
/// the device's address space with `cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP)`, zeroed: the
/// host and the GPU both read and write it. Its owner unregisters and frees it
/// ([`release`](Self::release)), or keeps it for the process.
///
/// Not `cuMemHostAlloc` memory: a device reset that another thread makes frees that with the
/// context, and the host's next store into it (a gate's release, a clear of the stamps) is a
/// SIGSEGV. The pages of registered memory stay the crate's whatever a reset does (review 3's
/// probe P3), so such a store after a reset is harmless.
pub(crate) struct MappedMemory {
    pub(crate) host: *mut c_void,
    pub(crate) device_ptr: sys::CUdeviceptr,
    pub(crate) bytes: usize,
}

// SAFETY: the pointer is to memory owned by this struct; it is only read and written through
// atomics, which any thread may do.
unsafe impl Send for MappedMemory {}
// SAFETY: as for Send.
unsafe impl Sync for MappedMemory {}

impl MappedMemory {
    /// `bytes` (a multiple of 8, at least 8) set to 0, registered in the context current on this
    /// thread.
    pub(crate) fn new(d: &Driver, bytes: usize) -> Result<MappedMemory> {
        debug_assert!(bytes >= 8 && bytes.is_multiple_of(8));
        let page = page_size();
        let whole = bytes.div_ceil(page) * page; // registration is by whole pages
        let mut host = std::ptr::null_mut();
        // SAFETY: writes the allocation through a live local; the alignment is a power of two and
        // a multiple of the pointer size.
        if unsafe { libc::posix_memalign(&mut host, page, whole) } != 0 {
            return Err(d.mem_host_register.error(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        }
        // SAFETY: `whole` bytes just allocated, written before CUDA or any thread sees them.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, whole) };
        let registered = d.mem_host_register.call(|f| {
            // SAFETY: page-aligned memory of whole pages, owned here, and a context is current.
            unsafe { f(host, whole, sys::CU_MEMHOSTREGISTER_DEVICEMAP) }
        });
        let (mut device_ptr, was_registered) = (0, registered.is_ok());
        let mapped = registered.and_then(|()| {
            // SAFETY: `host` was just registered mapped in the current context; flags must be 0.
            d.mem_host_get_device_pointer
                .call(|f| unsafe { f(&mut device_ptr, host, 0) })
        });
        if let Err(e) = mapped {
            if was_registered {
                // SAFETY: the registration just made, undone once; nothing has used the memory.
                let _ = d.mem_host_unregister.call(|f| unsafe { f(host) });
            }
            // SAFETY: the allocation above, freed once; CUDA no longer maps it.
            unsafe { libc::free(host) };
            return Err(e);
        }
        Ok(MappedMemory {
            host,
            device_ptr,
            bytes,
        })
    }

    /// The memory as 64-bit words, as the host sees them.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `host` is a live, page-aligned allocation of at least `bytes` (a multiple of
        // 8), the crate's own: freed only out of the idle cache, never while a lease (this
        // memory's owner) holds it, and still the crate's after a device reset. The GPU writes it
        // only with aligned stores of whole words.
        unsafe { std::slice::from_raw_parts(self.host.cast::<AtomicU64>(), self.bytes / 8) }
    }
}

impl MappedMemory {
    /// Unregisters the memory (unless a reset of `instance` did) and frees it; idle memory only.
    /// Where CUDA refuses the unregister, the pages are left (freeing pages that CUDA may still
    /// map is not the crate's to risk).
    pub(crate) fn release(self, instance: ContextInstance) -> Result<()> {
        ContextInstance::destroy_unless_reset(Some(instance), |d| {
            let _current = instance.context()?.enter(d)?;
            // SAFETY: registered in this context instance, idle, unregistered once.
            d.mem_host_unregister.call(|f| unsafe { f(self.host) })
        })?;
        // SAFETY: the allocation `new` made, no longer registered (or its context gone), freed once.
        unsafe { libc::free(self.host) };
        Ok(())
    }
}

/// The host's page size (registration is by whole pages).
fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).ok().filter(|p| *p >= 4096).unwrap_or(4096)
}
