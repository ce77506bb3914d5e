//! Devices: how many, which is current on this thread, and a guard that sets one for a scope.

use crate::driver::runtime;
use crate::error::{Result, check_runtime};
use std::marker::PhantomData;

/// The number of CUDA devices visible to this process.
///
/// # Errors
/// Without a driver: `cudaErrorInsufficientDriver`; with a driver but no GPU: `cudaErrorNoDevice`.
#[doc(alias = "cudaGetDeviceCount")]
pub fn device_count() -> Result<i32> {
    let mut count = 0;
    crate::fork::refuse_in_forked_child()?;
    // SAFETY: writes one int through a pointer to a live local.
    check_runtime("cudaGetDeviceCount", unsafe {
        runtime::cudaGetDeviceCount(&mut count)
    })?;
    Ok(count)
}

/// The calling thread's current device (0 until set).
#[doc(alias = "cudaGetDevice")]
pub fn current_device() -> Result<i32> {
    let mut device = 0;
    crate::fork::refuse_in_forked_child()?;
    // SAFETY: writes one int through a pointer to a live local.
    check_runtime("cudaGetDevice", unsafe { runtime::cudaGetDevice(&mut device) })?;
    Ok(device)
}

/// Makes `device` the calling thread's current device (this creates its context if it had none).
#[doc(alias = "cudaSetDevice")]
pub fn set_device(device: i32) -> Result<()> {
    crate::fork::refuse_in_forked_child()?;
    // SAFETY: takes an int; an invalid ordinal is an error, not UB.
    check_runtime("cudaSetDevice", unsafe { runtime::cudaSetDevice(device) })
}

/// Sets the current device for a scope and restores the previous one when dropped, like torch's
/// `torch.cuda.device` context manager: whatever made another device current inside the scope.
/// Setting the device that is already current costs one `cudaGetDevice` and changes nothing; the
/// drop costs one more, and where the current device is not the previous one, a look at the
/// previous device's context and a `cudaSetDevice`. Where the program has not used the previous
/// device (no context of it is active, as for device 0 of a thread that never set one), the drop
/// leaves the current device as it is: making the previous one current would create a context on
/// it, which no call of this crate does on a device the program did not use.
///
/// The current device belongs to a thread, so the guard is not `Send`: dropped on another thread
/// (after an `.await`, say) it would set that thread's device instead.
///
/// ```compile_fail,E0277
/// let guard = cuda_event::DeviceGuard::new(0)?;
/// std::thread::spawn(move || drop(guard)); // error: DeviceGuard is not Send
/// # Ok::<(), cuda_event::Error>(())
/// ```
#[must_use = "the previous device is restored when the guard drops"]
#[derive(Debug)]
pub struct DeviceGuard {
    previous: i32,
    _this_thread: PhantomData<*const ()>,
}

// SAFETY: a shared reference only reads the two integers; the thread-bound part is Drop, which a
// shared reference cannot run.
unsafe impl Sync for DeviceGuard {}

impl DeviceGuard {
    /// Makes `device` current until the guard drops.
    pub fn new(device: i32) -> Result<DeviceGuard> {
        let previous = current_device()?;
        if previous != device {
            set_device(device)?;
        }
        Ok(DeviceGuard {
            previous,
            _this_thread: PhantomData,
        })
    }

    /// The device that was current before, and is again after the guard drops (unless the
    /// program never used it: see [`DeviceGuard`]).
    pub fn previous(&self) -> i32 {
        self.previous
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        // Whatever the scope made current (a `set_device`, another library's `cudaSetDevice`),
        // even where the guard's own device was already current.
        if current_device().is_ok_and(|current| current == self.previous) {
            return;
        }
        // Not where no context of the previous device is active: `cudaSetDevice` would create
        // one on a device the program never used (no stray contexts).
        let Ok(d) = crate::driver::driver("DeviceGuard::drop") else {
            return;
        };
        if crate::context::Context::primary_active(d, self.previous) {
            crate::drop_errors::report(set_device(self.previous));
        }
    }
}
