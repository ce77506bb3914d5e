//! The driver's names for its error codes (`cuGetErrorName`, `cuGetErrorString`): the codes the
//! model answers by their names, any other as the model's.

use super::OK;
use crate::model::world::Code;
use std::ffi::{CStr, c_char};

pub(super) unsafe extern "C" fn get_error_name(code: Code, name: *mut *const c_char) -> Code {
    let text: &'static CStr = match code {
        Code::CUDA_SUCCESS => c"CUDA_SUCCESS",
        Code::CUDA_ERROR_NOT_READY => c"CUDA_ERROR_NOT_READY",
        Code::CUDA_ERROR_CAPTURED_EVENT => c"CUDA_ERROR_CAPTURED_EVENT",
        Code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        Code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED => c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        Code::CUDA_ERROR_ILLEGAL_ADDRESS => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        _ => c"CUDA_ERROR_MODEL",
    };
    // SAFETY: the crate passes a live out-pointer.
    unsafe { *name = text.as_ptr() };
    OK
}

pub(super) unsafe extern "C" fn get_error_string(code: Code, message: *mut *const c_char) -> Code {
    // SAFETY: as in get_error_name.
    unsafe { get_error_name(code, message) }
}
