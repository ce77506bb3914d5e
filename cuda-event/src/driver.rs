//! The CUDA driver functions this crate calls, resolved once per process through the runtime's
//! `cudaGetDriverEntryPointByVersion` (no link to libcuda needed).
//!
//! Why the driver and not the runtime: a runtime call on a thread with no current context first
//! creates one on the thread's current device (device 0 by default), which is how PyTorch made stray
//! contexts; a driver call on explicit handles never does. It also skips the runtime's bookkeeping,
//! which costs 30-40% of a record, query or wait. `cudaEvent_t` is `CUevent` and `cudaStream_t` is
//! `CUstream`, so handles pass freely between the two APIs.

use crate::error::{Api, CudaError, Error, Result, check, static_str};
use cuda_event_sys as sys;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

pub(crate) type CUresult = c_uint;
pub(crate) type CUcontext = *mut c_void;
pub(crate) type CUdevice = c_int;
pub(crate) type CUevent = sys::cudaEvent_t;
pub(crate) type CUstream = sys::cudaStream_t;

/// `CUDA_ERROR_NOT_READY`: the work is not complete yet (not an error for a query).
pub(crate) const NOT_READY: CUresult = 600;
/// `CUDA_ERROR_DEINITIALIZED`: the driver is shutting down, at process exit.
pub(crate) const DEINITIALIZED: CUresult = 4;

macro_rules! driver_table {
    ($($field:ident = $symbol:literal: fn($($arg:ty),*);)*) => {
        /// Driver entry points; each field is the function the symbol names for this runtime's version.
        pub(crate) struct Driver {
            $(pub(crate) $field: unsafe extern "C" fn($($arg),*) -> CUresult,)*
        }

        fn load() -> std::result::Result<Driver, CudaError> {
            let mut version = 0;
            // SAFETY: writes one int through a pointer to a live local; needs no driver.
            check(Api::Runtime, "cudaRuntimeGetVersion", unsafe { sys::cudaRuntimeGetVersion(&mut version) }.0)?;
            let driver = Driver {
                $(
                    // SAFETY: the runtime returns the driver's function for this symbol at this CUDA
                    // version, whose C signature is the one declared here (cuda.h, cudaTypedefs.h).
                    $field: unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(
                        entry_point($symbol, version)?,
                    ) },
                )*
            };
            // SAFETY: cuInit takes flags 0 and initializes the driver without creating a context.
            check(Api::Driver, "cuInit", unsafe { (driver.init)(0) })?;
            Ok(driver)
        }
    };
}

driver_table! {
    init = c"cuInit": fn(c_uint);
    get_error_name = c"cuGetErrorName": fn(CUresult, *mut *const c_char);
    get_error_string = c"cuGetErrorString": fn(CUresult, *mut *const c_char);
    device_get = c"cuDeviceGet": fn(*mut CUdevice, c_int);
    primary_ctx_retain = c"cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    ctx_get_current = c"cuCtxGetCurrent": fn(*mut CUcontext);
    ctx_get_id = c"cuCtxGetId": fn(CUcontext, *mut u64);
    ctx_push_current = c"cuCtxPushCurrent": fn(CUcontext);
    ctx_pop_current = c"cuCtxPopCurrent": fn(*mut CUcontext);
    event_create = c"cuEventCreate": fn(*mut CUevent, c_uint);
    event_record = c"cuEventRecord": fn(CUevent, CUstream);
    event_record_with_flags = c"cuEventRecordWithFlags": fn(CUevent, CUstream, c_uint);
    event_query = c"cuEventQuery": fn(CUevent);
    event_synchronize = c"cuEventSynchronize": fn(CUevent);
    event_elapsed_time = c"cuEventElapsedTime": fn(*mut f32, CUevent, CUevent);
    event_destroy = c"cuEventDestroy": fn(CUevent);
    stream_create_with_priority = c"cuStreamCreateWithPriority": fn(*mut CUstream, c_uint, c_int);
    stream_wait_event = c"cuStreamWaitEvent": fn(CUstream, CUevent, c_uint);
    stream_synchronize = c"cuStreamSynchronize": fn(CUstream);
    stream_query = c"cuStreamQuery": fn(CUstream);
    stream_is_capturing = c"cuStreamIsCapturing": fn(CUstream, *mut sys::cudaStreamCaptureStatus);
    stream_get_priority = c"cuStreamGetPriority": fn(CUstream, *mut c_int);
    stream_destroy = c"cuStreamDestroy": fn(CUstream);
    ipc_get_event_handle = c"cuIpcGetEventHandle": fn(*mut sys::cudaIpcEventHandle_t, CUevent);
    ipc_open_event_handle = c"cuIpcOpenEventHandle": fn(*mut CUevent, sys::cudaIpcEventHandle_t);
}

static DRIVER: OnceLock<std::result::Result<Driver, CudaError>> = OnceLock::new();

/// The driver's functions, or why there are none (no driver installed, too old, no device...).
#[inline]
pub(crate) fn driver() -> Result<&'static Driver> {
    match DRIVER.get_or_init(load) {
        Ok(driver) => Ok(driver),
        Err(e) => Err(Error::Cuda(e.clone())),
    }
}

/// The driver's name and message for a code, once the driver is loaded.
pub(crate) fn error_strings(code: CUresult) -> Option<(&'static str, &'static str)> {
    let driver = DRIVER.get()?.as_ref().ok()?;
    let (mut name, mut message) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both write a pointer to a static string (or fail and leave null) for any code.
    let known = unsafe {
        (driver.get_error_name)(code, &mut name) == 0 && (driver.get_error_string)(code, &mut message) == 0
    };
    // SAFETY: on success the driver's strings are static and NUL-terminated.
    known.then(|| unsafe { (static_str(name), static_str(message)) })
}

fn entry_point(symbol: &CStr, version: c_int) -> std::result::Result<*mut c_void, CudaError> {
    let mut function = std::ptr::null_mut();
    let mut status = sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSymbolNotFound;
    // SAFETY: symbol is NUL-terminated; both out-pointers are live locals.
    let code = unsafe {
        sys::cudaGetDriverEntryPointByVersion(
            symbol.as_ptr(),
            &mut function,
            version as c_uint,
            sys::cudaGetDriverEntryPointFlags::cudaEnableDefault.0.into(),
            &mut status,
        )
    };
    check(Api::Runtime, "cudaGetDriverEntryPointByVersion", code.0)?;
    if status != sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSuccess || function.is_null() {
        // The driver is older than the runtime: report it as CUDA's own "symbol not found".
        let code = sys::cudaError::cudaErrorSymbolNotFound.0;
        check(Api::Runtime, "cudaGetDriverEntryPointByVersion", code)?;
    }
    Ok(function)
}
