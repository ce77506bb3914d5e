//! The timing kernels: the SM clock's stamp and the calibration's empty kernel, loaded from PTX
//! (the driver compiles it for the device) once per context instance and kept while measurements
//! hold them. Loading a module waits for all the work of the context (see
//! `MeasureOptions::sm_clock`), which is why both are asked for, not used by default.

use crate::context::ContextInstance;
use crate::driver::{CUresult, Driver};
use crate::error::Result;
use crate::stream::Stream;
use crate::sync::Mutex;
use cuda_event_sys as sys;
use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::time::Duration;

/// Three kernels. `stamp` (one thread per block): the block that runs on SM 0 stores the timer and
/// the cycle counter, read back to back, as one 16-byte store to `out`. `empty` returns at once,
/// and `spin` reads the GPU's nanosecond timer until `ns` have passed: launched as one thread, the
/// calibration's work (`calibration_arm.rs`).
const TIMING_PTX: &CStr = c".version 6.0
.target sm_50
.address_size 64
.visible .entry empty()
{
    ret;
}
.visible .entry spin(.param .u64 ns)
{
    .reg .u64 %n, %t0, %t, %d;
    .reg .pred %p;
    ld.param.u64 %n, [ns];
    mov.u64 %t0, %globaltimer;
AGAIN:
    mov.u64 %t, %globaltimer;
    sub.u64 %d, %t, %t0;
    setp.lt.u64 %p, %d, %n;
    @%p bra AGAIN;
    ret;
}
.visible .entry stamp(.param .u64 out)
{
    .reg .u32 %sm;
    .reg .u64 %o, %t, %c;
    .reg .pred %p;
    mov.u32 %sm, %smid;
    setp.ne.u32 %p, %sm, 0;
    @%p bra DONE;
    ld.param.u64 %o, [out];
    mov.u64 %t, %globaltimer;
    mov.u64 %c, %clock64;
    st.volatile.v2.u64 [%o], {%t, %c};
DONE:
    ret;
}
";

/// The timing kernels, loaded in one context instance (see [`instance_kernels`]). Unloaded only
/// when no measurement holds them.
pub(crate) struct TimingKernels {
    module: sys::CUmodule,
    /// The SM clock's stamp.
    stamp: sys::CUfunction,
    /// The calibration's empty kernel.
    empty: sys::CUfunction,
    /// The calibration's kernel of a given length.
    spin: sys::CUfunction,
    /// Blocks per stamp launch: one per SM, so that one of them runs on SM 0.
    blocks: u32,
    /// The device's maximum SM clock.
    pub(crate) max_mhz: f64,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread with their
// context current (every use here enters it).
unsafe impl Send for TimingKernels {}
// SAFETY: the handles never change after loading; the driver's API is thread safe, and launching
// one function from several threads at once (measurements sharing the kernel) is allowed.
unsafe impl Sync for TimingKernels {}

impl TimingKernels {
    /// Loads the kernels into the context current on this thread, that of `device`; `None` where
    /// the driver cannot compile their PTX for the device (PTX compilation disabled or missing, a
    /// PTX version or device it does not know): measurements then go on without clocks and
    /// calibration. Other errors (out of memory, a broken context) are returned, and a later
    /// measurement tries again. Called in a measurement's relaxed capture mode: loading is a call
    /// that another thread's capture in global mode forbids.
    pub(crate) fn load(d: &Driver, device: sys::CUdevice) -> Result<Option<TimingKernels>> {
        let attribute = |attribute| {
            let mut value = 0;
            // SAFETY: a device the driver handed out; writes through a live local.
            d.device_get_attribute
                .call(|f| unsafe { f(&mut value, attribute, device) })
                .map(|()| value)
        };
        let sms = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let khz = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?;
        let mut module = std::ptr::null_mut();
        let code = d.module_load_data.code(|f| {
            // SAFETY: NUL-terminated PTX text; writes the module through a live local; a context
            // is current.
            unsafe { f(&mut module, TIMING_PTX.as_ptr().cast()) }
        });
        if cannot_compile(code) {
            return Ok(None);
        }
        d.module_load_data.check(code)?;
        let function = |name: &CStr| {
            let mut function = std::ptr::null_mut();
            // SAFETY: a module just loaded, a NUL-terminated name; writes through a live local.
            d.module_get_function
                .call(|f| unsafe { f(&mut function, module, name.as_ptr()) })
                .map(|()| function)
        };
        let found = function(c"stamp").and_then(|stamp| Ok((stamp, function(c"empty")?, function(c"spin")?)));
        match found {
            Ok((stamp, empty, spin)) => Ok(Some(TimingKernels {
                module,
                stamp,
                empty,
                spin,
                blocks: u32::try_from(sms).unwrap_or(1).max(1),
                max_mhz: f64::from(khz) / 1e3,
            })),
            Err(e) => {
                // SAFETY: the module just loaded in the current context, never launched.
                let _ = d.module_unload.call(|f| unsafe { f(module) });
                Err(e)
            }
        }
    }

    /// Queues the empty kernel, one thread, on `stream`, whose context is current (a capture
    /// records it).
    pub(crate) fn launch_empty(&self, d: &Driver, stream: &Stream) -> Result<()> {
        // SAFETY: the empty kernel declares no parameter, and gets none.
        unsafe { self.launch(d, self.empty, 1, std::ptr::null_mut(), stream) }
    }

    /// Queues the spinning kernel, one thread, on `stream`, whose context is current (a capture
    /// records it): it runs until the GPU's timer has moved by `length`.
    pub(crate) fn launch_spin(&self, d: &Driver, stream: &Stream, length: Duration) -> Result<()> {
        let mut ns = u64::try_from(length.as_nanos()).unwrap_or(u64::MAX);
        let mut params = [(&raw mut ns).cast::<c_void>()];
        // SAFETY: the spin declares one 64-bit parameter, given here; the driver copies it before
        // returning.
        unsafe { self.launch(d, self.spin, 1, params.as_mut_ptr(), stream) }
    }

    /// Queues a stamp on `stream`, whose context is current (a capture records it): one block per
    /// SM, the one on SM 0 writing the timer and the cycle counter to `out`.
    ///
    /// # Safety
    /// `out` is 16 bytes of 16-byte aligned memory the device can write (mapped host memory), live
    /// until the launch has run.
    pub(crate) unsafe fn launch_stamp(
        &self,
        d: &Driver,
        stream: &Stream,
        out: sys::CUdeviceptr,
    ) -> Result<()> {
        let mut out = out;
        let mut params = [(&raw mut out).cast::<c_void>()];
        // SAFETY: the stamp declares one 64-bit parameter, given here; the driver copies it before
        // returning, and the caller vouches for the memory it points at.
        unsafe { self.launch(d, self.stamp, self.blocks, params.as_mut_ptr(), stream) }
    }

    /// Launches `function` of this module, `blocks` blocks of one thread, with `params`.
    ///
    /// # Safety
    /// `params` is what `function`'s PTX declares (null for none), each pointing at a live value.
    unsafe fn launch(
        &self,
        d: &Driver,
        function: sys::CUfunction,
        blocks: u32,
        params: *mut *mut c_void,
        stream: &Stream,
    ) -> Result<()> {
        let raw = stream.as_raw();
        // SAFETY: a function of this module, launched on a live stream with the parameters the
        // caller vouches for (where the current context is not the module's, CUDA refuses it).
        d.launch_kernel.call(|f| unsafe {
            f(
                function,
                blocks,
                1,
                1,
                1,
                1,
                1,
                0,
                raw,
                params,
                std::ptr::null_mut(),
            )
        })
    }

    /// Unloads the module (its context current on this thread, nothing queued that launches it).
    pub(crate) fn unload(self, d: &Driver) -> Result<()> {
        // SAFETY: a module loaded once in the current context, no longer launched, unloaded once.
        d.module_unload.call(|f| unsafe { f(self.module) })
    }
}

/// Whether a module load's `code` says that the driver cannot compile the PTX for this device.
fn cannot_compile(code: CUresult) -> bool {
    [
        CUresult::CUDA_ERROR_INVALID_IMAGE,
        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUresult::CUDA_ERROR_INVALID_PTX,
        CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUresult::CUDA_ERROR_JIT_COMPILATION_DISABLED,
    ]
    .contains(&code)
}

/// The timing kernels of each context instance, shared by every measurement in it (overlapping
/// ones included: loading waits for all the context's work, so it is done once per instance).
/// Unloaded by `release_measure_memory` once no measurement holds it; an earlier instance's is
/// forgotten, as the scratch memory is.
static KERNELS: Mutex<Vec<InstanceKernel>> = Mutex::new(Vec::new());

/// An entry of [`KERNELS`]: its kernel behind a lock of its own, which a first use holds while it
/// loads (so that a second waits for that load instead of loading again), and which nothing else
/// waits for.
struct InstanceKernel {
    device: i32,
    instance: ContextInstance,
    loaded: Arc<Mutex<Loaded>>,
}

/// An instance's kernels, as far as they got.
enum Loaded {
    /// Not loaded yet (or the last load failed for another reason than compiling).
    NotYet,
    /// The driver cannot compile them for the device: measurements there go without clocks and
    /// calibration.
    Cannot,
    Kernel(Arc<TimingKernels>),
}

/// The timing kernels of `instance` (of `device`, the driver's `cu_device`, whose context is
/// current), loaded on first use; `None` where the driver cannot compile them. A load that fails
/// for another reason is returned, and the next measurement tries again.
pub(crate) fn instance_kernels(
    d: &Driver,
    device: i32,
    instance: ContextInstance,
    cu_device: sys::CUdevice,
) -> Result<Option<Arc<TimingKernels>>> {
    let loaded = {
        let mut kernels = KERNELS.lock();
        kernels.retain(|k| k.device != device || k.instance == instance);
        match kernels.iter().find(|k| k.instance == instance) {
            Some(k) => Arc::clone(&k.loaded),
            None => {
                let loaded = Arc::new(Mutex::new(Loaded::NotYet));
                kernels.push(InstanceKernel {
                    device,
                    instance,
                    loaded: Arc::clone(&loaded),
                });
                loaded
            }
        }
    };
    // Only this instance's first uses wait here (the registry's lock is not held).
    let mut loaded = loaded.lock();
    if let Loaded::NotYet = *loaded {
        *loaded = match TimingKernels::load(d, cu_device)? {
            Some(kernel) => Loaded::Kernel(Arc::new(kernel)),
            None => Loaded::Cannot,
        };
    }
    Ok(match &*loaded {
        Loaded::Kernel(kernel) => Some(Arc::clone(kernel)),
        Loaded::NotYet | Loaded::Cannot => None,
    })
}

/// Unloads every kernel that no measurement holds (nor is about to take: the entry's lock is
/// shared only by the registry), each in its context instance unless a reset destroyed it;
/// returns the first failure.
pub(crate) fn unload_unused_kernels() -> Result<()> {
    let unused: Vec<(ContextInstance, TimingKernels)> = {
        let mut kernels = KERNELS.lock();
        let mut unused = Vec::new();
        kernels.retain(|k| {
            // A measurement that found the entry holds a clone of its lock until it has its
            // kernel, and then the kernel: either keeps the entry.
            if Arc::strong_count(&k.loaded) > 1 {
                return true;
            }
            let mut loaded = k.loaded.lock();
            match std::mem::replace(&mut *loaded, Loaded::NotYet) {
                Loaded::Kernel(kernel) => match Arc::try_unwrap(kernel) {
                    Ok(kernel) => {
                        unused.push((k.instance, kernel));
                        false
                    }
                    Err(kernel) => {
                        *loaded = Loaded::Kernel(kernel);
                        true
                    }
                },
                other => {
                    *loaded = other;
                    true
                }
            }
        });
        unused
    };
    let mut first_error = Ok(());
    for (instance, kernel) in unused {
        let unloaded = ContextInstance::destroy_unless_reset(Some(instance), |d| {
            let _current = instance.context()?.enter(d)?;
            kernel.unload(d)
        });
        if first_error.is_ok() {
            first_error = unloaded;
        }
    }
    first_error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_compilation_failure_leaves_measurements_without_timing_kernels() {
        assert!(cannot_compile(CUresult::CUDA_ERROR_JIT_COMPILATION_DISABLED));
        assert!(cannot_compile(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION));
        assert!(!cannot_compile(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!cannot_compile(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
        assert!(!cannot_compile(CUresult::CUDA_SUCCESS));
    }
}
