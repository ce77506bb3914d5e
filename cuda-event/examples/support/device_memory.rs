//! Device memory for the examples (cudaMalloc / cudaFree), freed on drop.

use cuda_event::{DeviceGuard, sys};
use std::ffi::c_void;

/// Device memory for the examples, freed on drop.
pub(crate) struct DeviceMemory(pub *mut c_void);

impl DeviceMemory {
    pub(crate) fn new(device: i32, bytes: usize) -> cuda_event::Result<DeviceMemory> {
        let _device = DeviceGuard::new(device)?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes the allocation through a live local.
        cuda_event::check_runtime("cudaMalloc", unsafe { sys::cudaMalloc(&mut ptr, bytes) })?;
        Ok(DeviceMemory(ptr))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: frees the allocation made in new; the work using it has completed.
        let freed = unsafe { sys::cudaFree(self.0) };
        // A Drop cannot return the error: say it, as the crate's own drops can.
        if let Err(e) = cuda_event::check_runtime("cudaFree", freed) {
            eprintln!("{e}");
        }
    }
}

// SAFETY: a device address is plain data; CUDA's memory calls on it are thread safe.
unsafe impl Send for DeviceMemory {}
// SAFETY: as for Send; the struct is never mutated.
unsafe impl Sync for DeviceMemory {}
