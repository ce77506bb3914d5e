//! The CUDA driver functions this crate calls, resolved once per process through the runtime's
//! `cudaGetDriverEntryPointByVersion` (no link to libcuda needed).
//!
//! Why the driver and not the runtime: a runtime call on a thread with no current context first
//! creates one on the thread's current device (device 0 by default), which is how PyTorch made stray
//! contexts; a driver call on explicit handles never does. It also skips the runtime's bookkeeping,
//! which costs 30-40% of a record, query or wait. `cudaEvent_t` is `CUevent` and `cudaStream_t` is
//! `CUstream`, so handles pass freely between the two APIs.
//!
//! Every function's type is the `PFN_*` typedef of `cudaTypedefs.h` (bound by cuda-event-sys), and
//! the version the table asks the runtime for is the one that typedef names, checked at compile
//! time: a wrong signature does not compile. Every call goes through its [`Entry`], which names the
//! symbol in the error it returns.

use crate::error::{CudaError, Error, Result, check, runtime_strings, static_str};
use crate::sync::OnceLock;
use cuda_event_sys as sys;
use std::ffi::{CStr, c_void};

/// The driver's return code; its values (`CUresult::CUDA_ERROR_NOT_READY`...) are the one table of
/// CUDA codes this crate compares against.
pub(crate) type CUresult = sys::CUresult;

/// The function type inside a bindgen `PFN_*` typedef (an `Option` of an `extern "C" fn`).
pub(crate) trait EntryPointType {
    type Function: Copy;
}

impl<F: Copy> EntryPointType for Option<F> {
    type Function = F;
}

/// One driver function and the symbol it was resolved from.
pub(crate) struct Entry<F> {
    function: F,
    symbol: &'static str,
}

impl<F: Copy> Entry<F> {
    /// Calls the function (through `call`, which holds the `unsafe` block and its argument) and
    /// returns its code as a `Result` that names the symbol.
    #[inline]
    pub(crate) fn call(&self, call: impl FnOnce(F) -> CUresult) -> Result<()> {
        self.check(call(self.function))
    }

    /// Calls the function and returns its raw code, for callers to whom one code is an answer, not
    /// an error (`CUDA_ERROR_NOT_READY` for a query); pass the rest to [`Entry::check`].
    #[inline]
    pub(crate) fn code(&self, call: impl FnOnce(F) -> CUresult) -> CUresult {
        call(self.function)
    }

    /// A code of a function that asks whether GPU work is done, as its answer: done
    /// (`CUDA_SUCCESS`), not yet (`CUDA_ERROR_NOT_READY`, an answer, not an error), or the error.
    #[inline]
    pub(crate) fn ready(&self, code: CUresult) -> Result<bool> {
        match code {
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => self.check(code).map(|()| true),
        }
    }

    /// A code this function returned, as a `Result` naming the symbol.
    #[inline]
    pub(crate) fn check(&self, code: CUresult) -> Result<()> {
        Ok(self.checked(code)?)
    }

    /// The error `code` of this function, for a refusal made here on CUDA's behalf.
    pub(crate) fn error(&self, code: CUresult) -> Error {
        Error::Cuda(CudaError::new(self.symbol, code.0, driver_strings))
    }

    #[inline]
    fn checked(&self, code: CUresult) -> std::result::Result<(), CudaError> {
        check(self.symbol, code.0, driver_strings)
    }
}

/// Whether `pfn` is `"PFN_" + symbol + "_v" + version`: the typedef names the version asked for.
// Used only in the table's `const _` assertions, which older compilers (the rust-version among
// them) do not count as a use.
#[allow(dead_code)]
const fn names_version(pfn: &str, symbol: &CStr, version: u32) -> bool {
    let (pfn, symbol) = (pfn.as_bytes(), symbol.to_bytes());
    let mut digits = [0u8; 10];
    let (mut n, mut v) = (0, version);
    while v > 0 {
        digits[n] = b'0' + (v % 10) as u8;
        (n, v) = (n + 1, v / 10);
    }
    if pfn.len() != 4 + symbol.len() + 2 + n {
        return false;
    }
    let mut i = 0;
    while i < pfn.len() {
        let expected = if i < 4 {
            b"PFN_"[i]
        } else if i < 4 + symbol.len() {
            symbol[i - 4]
        } else if i < 4 + symbol.len() + 2 {
            b"_v"[i - 4 - symbol.len()]
        } else {
            digits[pfn.len() - 1 - i]
        };
        if pfn[i] != expected {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! driver_table {
    ($($field:ident: $pfn:ident = $symbol:literal @ $version:literal;)*) => {
        /// Driver entry points, each the function of the ABI version its `PFN_*` type names.
        pub(crate) struct Driver {
            $(pub(crate) $field: Entry<<sys::$pfn as EntryPointType>::Function>,)*
        }

        $(const _: () = assert!(
            names_version(stringify!($pfn), $symbol, $version),
            concat!(stringify!($pfn), " does not name ", stringify!($symbol), " at version ", $version),
        );)*

        fn load() -> std::result::Result<Driver, CudaError> {
            crate::fork::keep_the_registration();
            let driver = Driver {
                $($field: Entry {
                    // SAFETY: the runtime returns the driver's function for this symbol at this ABI
                    // version, which is the C type that cudaTypedefs.h declares as $pfn; an Option of
                    // a function pointer has a pointer's layout, null being None.
                    function: unsafe { std::mem::transmute::<*mut c_void, sys::$pfn>(entry_point($symbol, $version)?) }
                        .ok_or_else(symbol_not_found)?,
                    symbol: match $symbol.to_str() { Ok(s) => s, Err(_) => "cu?" },
                },)*
            };
            // SAFETY: cuInit takes flags 0 and initializes the driver without creating a context.
            driver.init.checked(driver.init.code(|f| unsafe { f(0) }))?;
            Ok(driver)
        }
    };
}

driver_table! {
    init: PFN_cuInit_v2000 = c"cuInit" @ 2000;
    get_error_name: PFN_cuGetErrorName_v6000 = c"cuGetErrorName" @ 6000;
    get_error_string: PFN_cuGetErrorString_v6000 = c"cuGetErrorString" @ 6000;
    device_get: PFN_cuDeviceGet_v2000 = c"cuDeviceGet" @ 2000;
    primary_ctx_retain: PFN_cuDevicePrimaryCtxRetain_v7000 = c"cuDevicePrimaryCtxRetain" @ 7000;
    primary_ctx_get_state: PFN_cuDevicePrimaryCtxGetState_v7000 = c"cuDevicePrimaryCtxGetState" @ 7000;
    ctx_get_current: PFN_cuCtxGetCurrent_v4000 = c"cuCtxGetCurrent" @ 4000;
    ctx_get_id: PFN_cuCtxGetId_v12000 = c"cuCtxGetId" @ 12000;
    ctx_push_current: PFN_cuCtxPushCurrent_v4000 = c"cuCtxPushCurrent" @ 4000;
    ctx_pop_current: PFN_cuCtxPopCurrent_v4000 = c"cuCtxPopCurrent" @ 4000;
    event_create: PFN_cuEventCreate_v2000 = c"cuEventCreate" @ 2000;
    event_record: PFN_cuEventRecord_v2000 = c"cuEventRecord" @ 2000;
    event_record_with_flags: PFN_cuEventRecordWithFlags_v11010 = c"cuEventRecordWithFlags" @ 11010;
    event_query: PFN_cuEventQuery_v2000 = c"cuEventQuery" @ 2000;
    event_synchronize: PFN_cuEventSynchronize_v2000 = c"cuEventSynchronize" @ 2000;
    event_elapsed_time: PFN_cuEventElapsedTime_v12080 = c"cuEventElapsedTime" @ 12080;
    event_destroy: PFN_cuEventDestroy_v4000 = c"cuEventDestroy" @ 4000;
    stream_wait_event: PFN_cuStreamWaitEvent_v3020 = c"cuStreamWaitEvent" @ 3020;
    stream_synchronize: PFN_cuStreamSynchronize_v2000 = c"cuStreamSynchronize" @ 2000;
    stream_query: PFN_cuStreamQuery_v2000 = c"cuStreamQuery" @ 2000;
    stream_is_capturing: PFN_cuStreamIsCapturing_v10000 = c"cuStreamIsCapturing" @ 10000;
    stream_get_capture_info: PFN_cuStreamGetCaptureInfo_v11030 = c"cuStreamGetCaptureInfo" @ 11030;
    user_object_create: PFN_cuUserObjectCreate_v11030 = c"cuUserObjectCreate" @ 11030;
    graph_retain_user_object: PFN_cuGraphRetainUserObject_v11030 = c"cuGraphRetainUserObject" @ 11030;
    stream_get_priority: PFN_cuStreamGetPriority_v5050 = c"cuStreamGetPriority" @ 5050;
    stream_destroy: PFN_cuStreamDestroy_v4000 = c"cuStreamDestroy" @ 4000;
    ipc_get_event_handle: PFN_cuIpcGetEventHandle_v4010 = c"cuIpcGetEventHandle" @ 4010;
    ipc_open_event_handle: PFN_cuIpcOpenEventHandle_v4010 = c"cuIpcOpenEventHandle" @ 4010;
    launch_host_func: PFN_cuLaunchHostFunc_v10000 = c"cuLaunchHostFunc" @ 10000;
    thread_exchange_capture_mode: PFN_cuThreadExchangeStreamCaptureMode_v10010 = c"cuThreadExchangeStreamCaptureMode" @ 10010;
    device_get_attribute: PFN_cuDeviceGetAttribute_v2000 = c"cuDeviceGetAttribute" @ 2000;
    mem_alloc: PFN_cuMemAlloc_v3020 = c"cuMemAlloc" @ 3020;
    memset_d32_async: PFN_cuMemsetD32Async_v3020 = c"cuMemsetD32Async" @ 3020;
    memcpy_dtod_async: PFN_cuMemcpyDtoDAsync_v3020 = c"cuMemcpyDtoDAsync" @ 3020;
    ctx_reset_persisting_l2: PFN_cuCtxResetPersistingL2Cache_v11000 = c"cuCtxResetPersistingL2Cache" @ 11000;
    ctx_get_limit: PFN_cuCtxGetLimit_v3010 = c"cuCtxGetLimit" @ 3010;
    mem_host_register: PFN_cuMemHostRegister_v6050 = c"cuMemHostRegister" @ 6050;
    mem_free: PFN_cuMemFree_v3020 = c"cuMemFree" @ 3020;
    mem_host_unregister: PFN_cuMemHostUnregister_v4000 = c"cuMemHostUnregister" @ 4000;
    mem_host_get_device_pointer: PFN_cuMemHostGetDevicePointer_v3020 = c"cuMemHostGetDevicePointer" @ 3020;
    stream_wait_value32: PFN_cuStreamWaitValue32_v11070 = c"cuStreamWaitValue32" @ 11070;
    stream_write_value64: PFN_cuStreamWriteValue64_v11070 = c"cuStreamWriteValue64" @ 11070;
    stream_begin_capture: PFN_cuStreamBeginCapture_v10010 = c"cuStreamBeginCapture" @ 10010;
    stream_end_capture: PFN_cuStreamEndCapture_v10000 = c"cuStreamEndCapture" @ 10000;
    graph_instantiate: PFN_cuGraphInstantiateWithFlags_v11040 = c"cuGraphInstantiateWithFlags" @ 11040;
    graph_launch: PFN_cuGraphLaunch_v10000 = c"cuGraphLaunch" @ 10000;
    graph_exec_destroy: PFN_cuGraphExecDestroy_v10000 = c"cuGraphExecDestroy" @ 10000;
    graph_destroy: PFN_cuGraphDestroy_v10000 = c"cuGraphDestroy" @ 10000;
    module_load_data: PFN_cuModuleLoadData_v2000 = c"cuModuleLoadData" @ 2000;
    module_get_function: PFN_cuModuleGetFunction_v2000 = c"cuModuleGetFunction" @ 2000;
    module_unload: PFN_cuModuleUnload_v2000 = c"cuModuleUnload" @ 2000;
    launch_kernel: PFN_cuLaunchKernel_v4000 = c"cuLaunchKernel" @ 4000;
}

static DRIVER: OnceLock<std::result::Result<Driver, CudaError>> = OnceLock::new();

/// The driver's functions, or why there are none (no driver installed, too old...). `operation` is
/// the crate's public function the user called: a failure to load is reported as that call's.
#[inline]
pub(crate) fn driver(operation: &'static str) -> Result<&'static Driver> {
    crate::fork::refuse_in_forked_child()?;
    match DRIVER.get_or_init(load) {
        Ok(driver) => Ok(driver),
        Err(e) => Err(Error::Cuda(e.clone().during(operation))),
    }
}

/// The driver, if it is already loaded (for `Drop`, which has nothing to do without one); none in
/// a forked child, which must not call it.
pub(crate) fn loaded_driver() -> Option<&'static Driver> {
    if crate::fork::in_forked_child() {
        return None;
    }
    DRIVER.get()?.as_ref().ok()
}

/// The driver's name and message for a code (the runtime's when the driver is not loaded: both
/// APIs share the numbers of the codes a loading failure returns).
fn driver_strings(code: u32) -> (&'static str, &'static str) {
    let Some(driver) = loaded_driver() else {
        return runtime_strings(code);
    };
    let (mut name, mut message) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both write a pointer to a static string (or fail and leave null) for any code.
    let known = unsafe {
        (driver.get_error_name.function)(sys::CUresult(code), &mut name) == CUresult::CUDA_SUCCESS
            && (driver.get_error_string.function)(sys::CUresult(code), &mut message) == CUresult::CUDA_SUCCESS
    };
    if !known {
        return runtime_strings(code);
    }
    // SAFETY: on success the driver's strings are static and NUL-terminated.
    unsafe { (static_str(name), static_str(message)) }
}

/// The runtime's "symbol not found", for a driver older than the version asked for.
fn symbol_not_found() -> CudaError {
    let code = sys::cudaError::cudaErrorSymbolNotFound.0;
    CudaError::new("cudaGetDriverEntryPointByVersion", code, runtime_strings)
}

#[cfg(all(test, cuda_event_model))]
pub(crate) use crate::model::runtime;
/// The runtime functions the crate calls directly (streams, devices): libcudart's, or the model's
/// in a model build.
#[cfg(not(all(test, cuda_event_model)))]
pub(crate) use cuda_event_sys as runtime;

#[cfg(all(test, cuda_event_model))]
fn entry_point(symbol: &CStr, _version: u32) -> std::result::Result<*mut c_void, CudaError> {
    let function = crate::model::driver::entry_point(symbol);
    if function.is_null() {
        return Err(symbol_not_found());
    }
    Ok(function)
}

#[cfg(not(all(test, cuda_event_model)))]
fn entry_point(symbol: &CStr, version: u32) -> std::result::Result<*mut c_void, CudaError> {
    let mut function = std::ptr::null_mut();
    let mut status = sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSymbolNotFound;
    // SAFETY: symbol is NUL-terminated; both out-pointers are live locals.
    let code = unsafe {
        sys::cudaGetDriverEntryPointByVersion(
            symbol.as_ptr(),
            &mut function,
            version,
            sys::cudaGetDriverEntryPointFlags::cudaEnableDefault.0.into(),
            &mut status,
        )
    };
    check("cudaGetDriverEntryPointByVersion", code.0, runtime_strings)?;
    if status != sys::cudaDriverEntryPointQueryResult::cudaDriverEntryPointSuccess || function.is_null() {
        // The driver is older than the version asked for.
        return Err(symbol_not_found());
    }
    Ok(function)
}

/// A CUDA driver function resolved the way this crate resolves its own: through the linked
/// runtime's `cudaGetDriverEntryPointByVersion`, at the ABI `version` its `PFN_*` type in
/// [`sys`] names, with no link to libcuda. For the driver calls this crate does not
/// wrap (loading a module, launching a kernel).
///
/// ```no_run
/// use cuda_event::{driver_entry_point, sys};
/// let pointer = driver_entry_point(c"cuLaunchKernel", 4000)?;
/// // SAFETY: the pointer is cuLaunchKernel at ABI version 4000, whose type is this PFN.
/// let launch: sys::PFN_cuLaunchKernel_v4000 = unsafe { std::mem::transmute(pointer) };
/// # let _ = launch;
/// # Ok::<(), cuda_event::Error>(())
/// ```
///
/// # Errors
/// Without a driver, CUDA's error; `cudaErrorSymbolNotFound` when the driver is older than
/// `version` or does not have the symbol.
#[doc(alias = "cudaGetDriverEntryPointByVersion")]
pub fn driver_entry_point(symbol: &CStr, version: u32) -> Result<std::ptr::NonNull<c_void>> {
    crate::fork::refuse_in_forked_child()?;
    let function = entry_point(symbol, version)?;
    std::ptr::NonNull::new(function).ok_or_else(|| symbol_not_found().into())
}
