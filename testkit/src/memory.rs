//! Device memory for real GPU work: memsets and copies to time and to order.

use crate::calls::ok;
use cuda_event::{DeviceGuard, Stream, sys};
use std::ffi::c_void;

/// Device memory for real GPU work; freed on drop.
#[derive(Debug)]
pub struct TestBuffer {
    ptr: *mut c_void,
    len: usize,
    device: i32,
}

impl TestBuffer {
    pub fn new(device: i32, len: usize) -> TestBuffer {
        let _guard = DeviceGuard::new(device).unwrap();
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes the allocation through a live local.
        ok(unsafe { sys::cudaMalloc(&mut ptr, len) });
        TestBuffer { ptr, len, device }
    }

    /// Queues a cudaMemsetAsync over the whole buffer.
    pub fn memset(&self, stream: &Stream, value: u8) {
        // SAFETY: the buffer is len bytes of device memory that outlives the queued work (drop syncs).
        ok(unsafe { sys::cudaMemsetAsync(self.ptr, value.into(), self.len, stream.as_raw()) });
    }

    /// Queues a device-to-device copy of `other` (no longer than this buffer) into this buffer.
    pub fn copy_from(&self, other: &TestBuffer, stream: &Stream) {
        assert!(other.len <= self.len);
        // SAFETY: both are live allocations of at least other.len bytes, outliving the work.
        ok(unsafe {
            sys::cudaMemcpyAsync(
                self.ptr,
                other.ptr,
                other.len,
                sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                stream.as_raw(),
            )
        });
    }

    /// Copies the first `n` bytes back to the host (synchronously).
    pub fn read(&self, n: usize) -> Vec<u8> {
        let mut host = vec![0u8; n];
        let _guard = DeviceGuard::new(self.device).unwrap();
        // SAFETY: both regions are at least n bytes; the legacy stream orders after prior work.
        ok(unsafe {
            sys::cudaMemcpyAsync(
                host.as_mut_ptr().cast(),
                self.ptr,
                n,
                sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                sys::cudaStreamLegacy,
            )
        });
        // SAFETY: the legacy default stream of the current device, which always exists.
        ok(unsafe { sys::cudaStreamSynchronize(sys::cudaStreamLegacy) });
        host
    }
}

impl Drop for TestBuffer {
    fn drop(&mut self) {
        let _guard = DeviceGuard::new(self.device).unwrap();
        // SAFETY: frees the allocation made in new, after all work on the device is done. Errors
        // (a context poisoned on purpose by a fault test) leave nothing to free.
        unsafe {
            let _ = sys::cudaDeviceSynchronize();
            let _ = sys::cudaFree(self.ptr);
        }
    }
}
