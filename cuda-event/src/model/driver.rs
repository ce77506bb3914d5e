//! The model's driver functions, with the C signatures of the `PFN_*` types the crate's table
//! holds (checked by the compiler in [`entry_point`]), and the runtime functions the crate calls
//! directly ([`runtime`]); the functions stand in files by what they act on.
//!
//! A call that reads or writes an event is *in flight* between two halves: it announces itself,
//! yields to the model checker (so that any other thread may run its own call meanwhile), then
//! checks the overlap rules against every call still in flight and takes effect.

mod captures;
mod contexts;
mod errors;
mod events;
mod graphs;
mod host_fns;
pub(crate) mod runtime;
mod streams;
mod unsupported;

pub(crate) use host_fns::run_host_fn;

use super::world::{BROKEN, Code, Op, World, with};
use cuda_event_sys as sys;
use shuttle::current::{TaskId, try_get_current_task};
use std::ffi::{CStr, c_void};

fn id<T>(pointer: *mut T) -> u64 {
    pointer as u64
}

fn handle<T>(id: u64) -> *mut T {
    id as *mut T
}

/// A call with no overlap rule.
fn call(symbol: &'static str, body: impl FnOnce(&mut World, TaskId) -> Code) -> Code {
    let Some(me) = try_get_current_task() else {
        return outside_an_execution();
    };
    with(|w| {
        w.count(symbol);
        w.note(me, format_args!("{symbol}"));
        match w.check_not_forked(me, symbol) {
            true => body(w, me),
            false => BROKEN,
        }
    })
}

/// A call in flight as `ops` (see the module's docs). `body` runs after the yield; it returns
/// `None` to wait (give other threads a turn, still in flight) and be asked again.
fn in_flight(
    symbol: &'static str,
    ops: &[Op],
    mut body: impl FnMut(&mut World, TaskId) -> Option<Code>,
) -> Code {
    let Some(me) = try_get_current_task() else {
        return outside_an_execution();
    };
    let allowed = with(|w| {
        w.count(symbol);
        w.note(me, format_args!("{symbol} begins {ops:?}"));
        w.check_not_forked(me, symbol)
    });
    if !allowed {
        return BROKEN;
    }
    with(|w| {
        for op in ops {
            w.check_overlaps(me, op);
            w.in_flight.push((me, op.clone()));
        }
    });
    loop {
        shuttle::thread::yield_now();
        let done = with(|w| {
            for op in ops {
                w.check_overlaps(me, op);
            }
            let code = body(w, me)?;
            w.note(me, format_args!("{symbol} returns {}", code.0));
            for _ in ops {
                let at = w.in_flight.iter().position(|(t, _)| *t == me).expect("announced");
                w.in_flight.remove(at);
            }
            Some(code)
        });
        if let Some(code) = done {
            return code;
        }
    }
}

const OK: Code = Code::CUDA_SUCCESS;

/// A call while the model checker drops an execution's statics (the last thread-locals' pooled
/// events): the world is made new for the next execution anyway.
fn outside_an_execution() -> Code {
    OK
}

/// The model's function for `symbol`, as the crate's table asks the runtime for it; each arm
/// names the `PFN_*` type, so a signature that differs from the table's does not compile.
pub(crate) fn entry_point(symbol: &CStr) -> *mut c_void {
    macro_rules! table {
        ($($name:literal => $pfn:ident($f:path),)*) => {
            match symbol.to_bytes() {
                $(name if name == $name.to_bytes() => {
                    let f: sys::$pfn = Some($f);
                    f.map_or(std::ptr::null_mut(), |f| f as *mut c_void)
                })*
                _ => std::ptr::null_mut(),
            }
        };
    }
    table! {
        c"cuInit" => PFN_cuInit_v2000(contexts::init),
        c"cuGetErrorName" => PFN_cuGetErrorName_v6000(errors::get_error_name),
        c"cuGetErrorString" => PFN_cuGetErrorString_v6000(errors::get_error_string),
        c"cuDeviceGet" => PFN_cuDeviceGet_v2000(contexts::device_get),
        c"cuDevicePrimaryCtxRetain" => PFN_cuDevicePrimaryCtxRetain_v7000(contexts::primary_ctx_retain),
        c"cuDevicePrimaryCtxGetState" => PFN_cuDevicePrimaryCtxGetState_v7000(contexts::primary_ctx_get_state),
        c"cuCtxGetCurrent" => PFN_cuCtxGetCurrent_v4000(contexts::ctx_get_current),
        c"cuCtxGetId" => PFN_cuCtxGetId_v12000(contexts::ctx_get_id),
        c"cuCtxPushCurrent" => PFN_cuCtxPushCurrent_v4000(contexts::ctx_push_current),
        c"cuCtxPopCurrent" => PFN_cuCtxPopCurrent_v4000(contexts::ctx_pop_current),
        c"cuEventCreate" => PFN_cuEventCreate_v2000(events::event_create),
        c"cuEventRecord" => PFN_cuEventRecord_v2000(events::event_record),
        c"cuEventRecordWithFlags" => PFN_cuEventRecordWithFlags_v11010(events::event_record_with_flags),
        c"cuEventQuery" => PFN_cuEventQuery_v2000(events::event_query),
        c"cuEventSynchronize" => PFN_cuEventSynchronize_v2000(events::event_synchronize),
        c"cuEventElapsedTime" => PFN_cuEventElapsedTime_v12080(events::event_elapsed_time),
        c"cuEventDestroy" => PFN_cuEventDestroy_v4000(events::event_destroy),
        c"cuStreamWaitEvent" => PFN_cuStreamWaitEvent_v3020(streams::stream_wait_event),
        c"cuStreamSynchronize" => PFN_cuStreamSynchronize_v2000(streams::stream_synchronize),
        c"cuStreamQuery" => PFN_cuStreamQuery_v2000(streams::stream_query),
        c"cuStreamIsCapturing" => PFN_cuStreamIsCapturing_v10000(captures::stream_is_capturing),
        c"cuStreamGetCaptureInfo" => PFN_cuStreamGetCaptureInfo_v11030(captures::stream_get_capture_info),
        c"cuUserObjectCreate" => PFN_cuUserObjectCreate_v11030(graphs::user_object_create),
        c"cuGraphRetainUserObject" => PFN_cuGraphRetainUserObject_v11030(graphs::graph_retain_user_object),
        c"cuStreamGetPriority" => PFN_cuStreamGetPriority_v5050(streams::stream_get_priority),
        c"cuStreamDestroy" => PFN_cuStreamDestroy_v4000(streams::stream_destroy),
        c"cuIpcGetEventHandle" => PFN_cuIpcGetEventHandle_v4010(events::ipc_get_event_handle),
        c"cuIpcOpenEventHandle" => PFN_cuIpcOpenEventHandle_v4010(events::ipc_open_event_handle),
        c"cuLaunchHostFunc" => PFN_cuLaunchHostFunc_v10000(host_fns::launch_host_func),
        c"cuThreadExchangeStreamCaptureMode" => PFN_cuThreadExchangeStreamCaptureMode_v10010(captures::thread_exchange_capture_mode),
        c"cuDeviceGetAttribute" => PFN_cuDeviceGetAttribute_v2000(unsupported::device_get_attribute),
        c"cuMemAlloc" => PFN_cuMemAlloc_v3020(unsupported::mem_alloc),
        c"cuMemsetD32Async" => PFN_cuMemsetD32Async_v3020(unsupported::memset_d32_async),
        c"cuMemcpyDtoDAsync" => PFN_cuMemcpyDtoDAsync_v3020(unsupported::memcpy_dtod_async),
        c"cuCtxResetPersistingL2Cache" => PFN_cuCtxResetPersistingL2Cache_v11000(unsupported::ctx_reset_persisting_l2),
        c"cuCtxGetLimit" => PFN_cuCtxGetLimit_v3010(unsupported::ctx_get_limit),
        c"cuMemHostRegister" => PFN_cuMemHostRegister_v6050(unsupported::mem_host_register),
        c"cuMemFree" => PFN_cuMemFree_v3020(unsupported::mem_free),
        c"cuMemHostUnregister" => PFN_cuMemHostUnregister_v4000(unsupported::mem_host_unregister),
        c"cuMemHostGetDevicePointer" => PFN_cuMemHostGetDevicePointer_v3020(unsupported::mem_host_get_device_pointer),
        c"cuStreamWaitValue32" => PFN_cuStreamWaitValue32_v11070(unsupported::stream_wait_value32),
        c"cuStreamWriteValue64" => PFN_cuStreamWriteValue64_v11070(unsupported::stream_write_value64),
        c"cuStreamBeginCapture" => PFN_cuStreamBeginCapture_v10010(captures::stream_begin_capture),
        c"cuStreamEndCapture" => PFN_cuStreamEndCapture_v10000(captures::stream_end_capture),
        c"cuGraphInstantiateWithFlags" => PFN_cuGraphInstantiateWithFlags_v11040(unsupported::graph_instantiate),
        c"cuGraphLaunch" => PFN_cuGraphLaunch_v10000(unsupported::graph_launch),
        c"cuGraphExecDestroy" => PFN_cuGraphExecDestroy_v10000(unsupported::graph_exec_destroy),
        c"cuGraphDestroy" => PFN_cuGraphDestroy_v10000(graphs::graph_destroy),
        c"cuModuleLoadData" => PFN_cuModuleLoadData_v2000(unsupported::module_load_data),
        c"cuModuleGetFunction" => PFN_cuModuleGetFunction_v2000(unsupported::module_get_function),
        c"cuModuleUnload" => PFN_cuModuleUnload_v2000(unsupported::module_unload),
        c"cuLaunchKernel" => PFN_cuLaunchKernel_v4000(unsupported::launch_kernel),
    }
}
