//! What the model does not run (memory, graphs' launch, modules, kernels): the crate's timing and
//! clock paths, which no model test takes. Each answers `CUDA_ERROR_NOT_SUPPORTED`.

use crate::model::world::Code;
use cuda_event_sys as sys;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

pub(super) unsafe extern "C" fn device_get_attribute(
    _: *mut c_int,
    _: sys::CUdevice_attribute,
    _: sys::CUdevice_v1,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn mem_alloc(_: *mut sys::CUdeviceptr_v2, _: usize) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn memset_d32_async(
    _: sys::CUdeviceptr_v2,
    _: c_uint,
    _: usize,
    _: sys::CUstream,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn memcpy_dtod_async(
    _: sys::CUdeviceptr_v2,
    _: sys::CUdeviceptr_v2,
    _: usize,
    _: sys::CUstream,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn ctx_reset_persisting_l2() -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn ctx_get_limit(_: *mut usize, _: sys::CUlimit) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn mem_host_register(_: *mut c_void, _: usize, _: c_uint) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn mem_free(_: sys::CUdeviceptr_v2) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn mem_host_unregister(_: *mut c_void) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn mem_host_get_device_pointer(
    _: *mut sys::CUdeviceptr_v2,
    _: *mut c_void,
    _: c_uint,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn stream_wait_value32(
    _: sys::CUstream,
    _: sys::CUdeviceptr_v2,
    _: sys::cuuint32_t,
    _: c_uint,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn stream_write_value64(
    _: sys::CUstream,
    _: sys::CUdeviceptr_v2,
    _: sys::cuuint64_t,
    _: c_uint,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn graph_instantiate(
    _: *mut sys::CUgraphExec,
    _: sys::CUgraph,
    _: c_ulonglong,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn graph_launch(_: sys::CUgraphExec, _: sys::CUstream) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn graph_exec_destroy(_: sys::CUgraphExec) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn module_load_data(_: *mut sys::CUmodule, _: *const c_void) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn module_get_function(
    _: *mut sys::CUfunction,
    _: sys::CUmodule,
    _: *const c_char,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
pub(super) unsafe extern "C" fn module_unload(_: sys::CUmodule) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn launch_kernel(
    _: sys::CUfunction,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: sys::CUstream,
    _: *mut *mut c_void,
    _: *mut *mut c_void,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
