//! Memory the timing code needs of its own: a device buffer (the L2 flush) and a word of mapped
//! host memory (the gate's flag). Each is made in its device's primary context, which the caller
//! has made current, and freed on drop unless a device reset already freed it.

use crate::context::ContextInstance;
use crate::driver::{Driver, loaded_driver};
use crate::error::Result;
use cuda_event_sys as sys;
use std::ffi::c_void;
use std::sync::atomic::AtomicU32;

/// Device memory (`cuMemAlloc`).
pub(crate) struct DeviceBuffer {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) bytes: usize,
    instance: ContextInstance,
}

impl DeviceBuffer {
    /// `bytes` of device memory in `instance`, which is current on this thread.
    pub(crate) fn new(d: &Driver, instance: ContextInstance, bytes: usize) -> Result<DeviceBuffer> {
        let mut ptr = 0;
        // SAFETY: writes the allocation through a live local; a context is current.
        d.mem_alloc.call(|f| unsafe { f(&mut ptr, bytes) })?;
        Ok(DeviceBuffer { ptr, bytes, instance })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let ptr = self.ptr;
        free_in(self.instance, |d| {
            // SAFETY: frees this allocation once, in its context; cuMemFree waits for work still
            // using it.
            d.mem_free.call(|f| unsafe { f(ptr) })
        });
    }
}

/// One 32-bit word of page-locked host memory mapped into the device's address space
/// (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`): the host writes it, the GPU reads it.
pub(crate) struct MappedWord {
    host: *mut c_void,
    pub(crate) device_ptr: sys::CUdeviceptr,
    instance: ContextInstance,
}

// SAFETY: the pointer is to page-locked memory owned by this struct; it is only read and written as
// an AtomicU32, which any thread may do.
unsafe impl Send for MappedWord {}
// SAFETY: as for Send.
unsafe impl Sync for MappedWord {}

impl MappedWord {
    /// A word set to 0, in `instance`, which is current on this thread.
    pub(crate) fn new(d: &Driver, instance: ContextInstance) -> Result<MappedWord> {
        let mut host = std::ptr::null_mut();
        let bytes = std::mem::size_of::<u32>();
        // SAFETY: writes the allocation through a live local; a context is current.
        d.mem_host_alloc
            .call(|f| unsafe { f(&mut host, bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) })?;
        let mut word = MappedWord {
            host,
            device_ptr: 0,
            instance,
        };
        word.value().store(0, std::sync::atomic::Ordering::Release);
        let mut device_ptr = 0;
        // SAFETY: `host` is mapped memory just allocated in the current context; flags must be 0.
        d.mem_host_get_device_pointer
            .call(|f| unsafe { f(&mut device_ptr, host, 0) })?;
        word.device_ptr = device_ptr;
        Ok(word)
    }

    /// The word, as the host sees it.
    pub(crate) fn value(&self) -> &AtomicU32 {
        // SAFETY: `host` is a live, page-aligned allocation of at least 4 bytes owned by self; the
        // GPU only reads it.
        unsafe { &*self.host.cast::<AtomicU32>() }
    }
}

impl Drop for MappedWord {
    fn drop(&mut self) {
        let host = self.host;
        free_in(self.instance, |d| {
            // SAFETY: frees this allocation once, in its context; the owner released every wait on
            // it and synchronized the stream before dropping it.
            d.mem_free_host.call(|f| unsafe { f(host) })
        });
    }
}

/// Runs `free` with `instance` current, unless a device reset already freed everything of it; its
/// error is kept for `take_drop_errors`.
fn free_in(instance: ContextInstance, free: impl FnOnce(&Driver) -> Result<()>) {
    let Some(d) = loaded_driver().filter(|d| instance.still_alive(d)) else {
        return;
    };
    crate::drop_errors::report(
        instance
            .context()
            .and_then(|context| context.enter(d))
            .and_then(|_current| free(d)),
    );
}
