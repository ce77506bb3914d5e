//! Words of pinned host memory that kernels set and the host reads without a CUDA call.

use crate::calls::{driver_fn, driver_ok, ok};
use cuda_event::{DeviceGuard, sys};

/// Words of pinned host memory that kernels set ([`gpu_sleep_then_set`](crate::gpu_sleep_then_set))
/// and the host reads without a CUDA call; all zero at first.
#[derive(Debug)]
pub struct HostFlags {
    host: *mut u32,
    device: u64,
    len: usize,
}

// SAFETY: the memory is plain pinned host memory, read and written only through volatile accesses
// of whole words; it lives until the value is dropped.
unsafe impl Send for HostFlags {}
// SAFETY: as for Send.
unsafe impl Sync for HostFlags {}

impl HostFlags {
    /// `len` flags, allocated in device 0's primary context (portable and mapped: with unified
    /// addressing, kernels of any device can set them).
    pub fn new(len: usize) -> HostFlags {
        let alloc: sys::PFN_cuMemHostAlloc_v2020 = driver_fn(c"cuMemHostAlloc", 2020);
        let map: sys::PFN_cuMemHostGetDevicePointer_v3020 = driver_fn(c"cuMemHostGetDevicePointer", 3020);
        let _device = DeviceGuard::new(0).unwrap();
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
        let (mut host, mut device) = (std::ptr::null_mut(), 0);
        const PORTABLE_AND_MAPPED: u32 = 0x01 | 0x02;
        // SAFETY: out-pointers are live locals; the allocation is zeroed before any use and freed
        // by Drop.
        unsafe {
            driver_ok(
                "cuMemHostAlloc",
                alloc.unwrap()(&mut host, len.max(1) * 4, PORTABLE_AND_MAPPED),
            );
            std::ptr::write_bytes(host.cast::<u32>(), 0, len.max(1));
            driver_ok("cuMemHostGetDevicePointer", map.unwrap()(&mut device, host, 0));
        }
        HostFlags {
            host: host.cast(),
            device,
            len,
        }
    }

    /// Whether flag `i` was set.
    pub fn is_set(&self, i: usize) -> bool {
        assert!(i < self.len);
        // SAFETY: in bounds of the live allocation; a volatile read of a word the GPU may write.
        unsafe { std::ptr::read_volatile(self.host.add(i)) != 0 }
    }

    /// The address of flag `i` for a kernel to write.
    pub(crate) fn device_address(&self, i: usize) -> u64 {
        assert!(i < self.len);
        self.device + 4 * i as u64
    }
}

impl Drop for HostFlags {
    /// Frees the memory; the owner waits first for every kernel that sets a flag (CUDA's free of
    /// pinned memory is not documented to wait for them). Errors are ignored: a drop during a
    /// panic must not panic again.
    fn drop(&mut self) {
        let free: sys::PFN_cuMemFreeHost_v2000 = driver_fn(c"cuMemFreeHost", 2000);
        let Ok(_device) = DeviceGuard::new(0) else {
            return;
        };
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        let _ = unsafe { sys::cudaFree(std::ptr::null_mut()) };
        // SAFETY: the allocation made in new, freed once, in the context it was made in.
        let _ = unsafe { free.unwrap()(self.host.cast()) };
    }
}
