//! The runtime functions the crate calls directly (streams, devices), in the model: what
//! `crate::driver::runtime` names in the model build.
// The C runtime's names, so that the crate's calls read the same in both builds.
#![allow(non_snake_case)]

use super::{OK, call, handle};
use crate::model::world::{Code, DEVICES, StreamState, with};
use cuda_event_sys as sys;
use std::ffi::{c_int, c_uint};

fn runtime_code(code: Code) -> sys::cudaError_t {
    match code {
        OK => sys::cudaError::cudaSuccess,
        _ => sys::cudaError::cudaErrorInvalidValue,
    }
}

pub(crate) unsafe fn cudaStreamCreateWithPriority(
    stream: *mut sys::cudaStream_t,
    _flags: c_uint,
    _priority: c_int,
) -> sys::cudaError_t {
    runtime_code(call("cudaStreamCreateWithPriority", |w, me| {
        let Some(&device) = w.context_stack.get(&me).and_then(|stack| stack.last()) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        let raw = w.new_handle();
        w.streams.insert(
            raw,
            StreamState {
                device,
                held: false,
                full: false,
                capture: None,
                host_fns: Vec::new(),
            },
        );
        // SAFETY: a live out-pointer.
        unsafe { *stream = handle(raw) };
        OK
    }))
}

pub(crate) unsafe fn cudaGetDeviceCount(count: *mut c_int) -> sys::cudaError_t {
    // SAFETY: a live out-pointer.
    unsafe { *count = DEVICES };
    sys::cudaError::cudaSuccess
}

pub(crate) unsafe fn cudaGetDevice(device: *mut c_int) -> sys::cudaError_t {
    let current = with(|w| {
        w.current_device
            .get(&shuttle::current::me())
            .copied()
            .unwrap_or(0)
    });
    // SAFETY: a live out-pointer.
    unsafe { *device = current };
    sys::cudaError::cudaSuccess
}

pub(crate) unsafe fn cudaSetDevice(device: c_int) -> sys::cudaError_t {
    if !(0..DEVICES).contains(&device) {
        return sys::cudaError::cudaErrorInvalidDevice;
    }
    with(|w| w.current_device.insert(shuttle::current::me(), device));
    sys::cudaError::cudaSuccess
}
