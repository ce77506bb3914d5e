//! Real GPU work: the kernels of [`ptx`](crate::ptx) loaded once per device and launched on a
//! stream, to hold it for a while or to kill its context.

use crate::calls::{driver_fn, driver_ok, ok};
use crate::host_flags::HostFlags;
use crate::ptx::{Ptx, SLEEP_KERNEL, SPIN_KERNEL, TRAP_KERNEL};
use cuda_event::{DeviceGuard, Stream, sys};
use parking_lot::Mutex;
use std::ffi::c_void;
use std::time::Duration;

/// The kernel of `ptx`, loaded once per device into its primary context.
fn kernel(device: i32, ptx: Ptx) -> usize {
    static KERNELS: Mutex<Vec<(i32, &'static std::ffi::CStr, usize)>> = Mutex::new(Vec::new());
    let mut kernels = KERNELS.lock();
    if let Some(&(_, _, kernel)) = kernels.iter().find(|k| k.0 == device && k.1 == ptx.entry) {
        return kernel;
    }
    let _device = DeviceGuard::new(device).unwrap();
    // SAFETY: freeing null only makes the device's primary context current on this thread.
    ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
    let load: sys::PFN_cuModuleLoadData_v2000 = driver_fn(c"cuModuleLoadData", 2000);
    let get: sys::PFN_cuModuleGetFunction_v2000 = driver_fn(c"cuModuleGetFunction", 2000);
    let (mut module, mut kernel) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the PTX is NUL-terminated text; out-pointers are live locals. The module stays
    // loaded for the process.
    unsafe {
        driver_ok(
            "cuModuleLoadData",
            load.unwrap()(&mut module, ptx.text.as_ptr().cast()),
        );
        driver_ok(
            "cuModuleGetFunction",
            get.unwrap()(&mut kernel, module, ptx.entry.as_ptr()),
        );
    }
    kernels.push((device, ptx.entry, kernel as usize));
    kernel as usize
}

/// Launches `kernel` (one thread) on `stream` with `params` (pointers to each parameter).
fn launch(kernel: usize, stream: &Stream, params: &mut [*mut c_void]) {
    let launch: sys::PFN_cuLaunchKernel_v4000 = driver_fn(c"cuLaunchKernel", 4000);
    // The kernel's context current on this thread, as cuLaunchKernel wants it. A thread capturing
    // the stream has it current already, and must not call cudaFree (a capture refuses it). The
    // free runs in relaxed mode: in global mode CUDA refuses it (900) beside another thread's
    // global capture, and invalidates that capture.
    let _device = DeviceGuard::new(stream.device()).unwrap();
    if !stream.is_capturing().unwrap() {
        let mode = crate::exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        let code = unsafe { sys::cudaFree(std::ptr::null_mut()) };
        crate::exchange_capture_mode(mode);
        ok(code);
    }
    let params = if params.is_empty() {
        std::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: a kernel of the stream's device's primary context, launched on a live stream with
    // the parameters its PTX declares.
    let code = unsafe {
        launch.unwrap()(
            kernel as _,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream.as_raw(),
            params,
            std::ptr::null_mut(),
        )
    };
    driver_ok("cuLaunchKernel", code);
}

/// Holds `stream` for `duration` with a kernel that waits on the GPU (no host function).
pub fn gpu_sleep(stream: &Stream, duration: Duration) {
    sleep_then_set(stream, duration, 0);
}

/// Holds `stream` for `duration` with a kernel that reads the GPU's global timer in a tight loop
/// (no `nanosleep`): it ends within one pass of its loop after `duration`, the kernel for tests
/// that check a length within 1%. It keeps its warp busy the whole time; [`gpu_sleep`], whose
/// kernel sleeps between reads and so ends later than asked, is for long holds, where it spares
/// the SM. What a timer reads around either kernel also holds the GPU's starting and ending it.
pub fn gpu_spin(stream: &Stream, duration: Duration) {
    let mut ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let kernel = kernel(stream.device(), SPIN_KERNEL);
    launch(kernel, stream, &mut [(&raw mut ns).cast()]);
}

/// The sleep kernel; then, unless `flag` is 0, a store of 1 to that (device) address.
fn sleep_then_set(stream: &Stream, duration: Duration, flag: u64) {
    let (mut ns, mut flag) = (duration.as_nanos() as u64, flag);
    let kernel = kernel(stream.device(), SLEEP_KERNEL);
    launch(
        kernel,
        stream,
        &mut [(&mut ns as *mut u64).cast(), (&mut flag as *mut u64).cast()],
    );
}

/// [`gpu_sleep`], whose kernel then sets `flags`' word `i`: the host sees the work end by reading
/// memory, without a CUDA call (a reference that does not compete with the CUDA calls it times).
pub fn gpu_sleep_then_set(stream: &Stream, duration: Duration, flags: &HostFlags, i: usize) {
    sleep_then_set(stream, duration, flags.device_address(i));
}

/// Launches, on `stream`, a kernel that traps (and returns at once).
pub fn launch_trap(stream: &Stream) {
    launch(kernel(stream.device(), TRAP_KERNEL), stream, &mut []);
}

/// Launches, on `stream`, a kernel that traps, and waits until the context is dead: from then on
/// every call in the context returns the sticky error. Returns that error's code.
pub fn poison_the_context(stream: &Stream) -> u32 {
    launch_trap(stream);
    match stream.synchronize() {
        Err(cuda_event::Error::Cuda(e)) => {
            println!("the trap kernel poisoned the context: {e}");
            e.code()
        }
        other => panic!("the trap kernel did not fault: {other:?}"),
    }
}
