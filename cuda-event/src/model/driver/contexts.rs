//! `cuInit`, the model's devices and their primary contexts: retained, pushed and popped per
//! thread, and their ids (which a reset changes).

use super::{OK, call, handle, id};
use crate::model::world::{Code, DEVICES};
use cuda_event_sys as sys;
use std::ffi::{c_int, c_uint, c_ulonglong};

pub(super) unsafe extern "C" fn init(_flags: c_uint) -> Code {
    OK
}

pub(super) unsafe extern "C" fn device_get(device: *mut sys::CUdevice_v1, ordinal: c_int) -> Code {
    call("cuDeviceGet", |_, _| {
        if !(0..DEVICES).contains(&ordinal) {
            return Code::CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: a live out-pointer.
        unsafe { *device = ordinal };
        OK
    })
}

/// Each device's primary context: a fixed handle, which a reset keeps (its id changes).
fn context_handle(device: i32) -> u64 {
    0x100 * (device as u64 + 1)
}

fn device_of_context(ctx: sys::CUcontext) -> Option<i32> {
    (0..DEVICES).find(|&d| context_handle(d) == id(ctx))
}

pub(super) unsafe extern "C" fn primary_ctx_retain(
    ctx: *mut sys::CUcontext,
    device: sys::CUdevice_v1,
) -> Code {
    call("cuDevicePrimaryCtxRetain", |_, _| {
        // SAFETY: a live out-pointer.
        unsafe { *ctx = handle(context_handle(device)) };
        OK
    })
}

pub(super) unsafe extern "C" fn primary_ctx_get_state(
    _device: sys::CUdevice_v1,
    flags: *mut c_uint,
    active: *mut c_int,
) -> Code {
    call("cuDevicePrimaryCtxGetState", |_, _| {
        // SAFETY: live out-pointers.
        unsafe { (*flags, *active) = (0, 1) };
        OK
    })
}

pub(super) unsafe extern "C" fn ctx_get_current(ctx: *mut sys::CUcontext) -> Code {
    call("cuCtxGetCurrent", |w, me| {
        let top = w.context_stack.get(&me).and_then(|stack| stack.last().copied());
        // SAFETY: a live out-pointer.
        unsafe { *ctx = top.map_or(std::ptr::null_mut(), |d| handle(context_handle(d))) };
        OK
    })
}

pub(super) unsafe extern "C" fn ctx_get_id(ctx: sys::CUcontext, ctx_id: *mut c_ulonglong) -> Code {
    call("cuCtxGetId", |w, _| {
        let Some(device) = device_of_context(ctx) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        // SAFETY: a live out-pointer.
        unsafe { *ctx_id = w.contexts[device as usize].id };
        OK
    })
}

pub(super) unsafe extern "C" fn ctx_push_current(ctx: sys::CUcontext) -> Code {
    call("cuCtxPushCurrent", |w, me| {
        let Some(device) = device_of_context(ctx) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        w.context_stack.entry(me).or_default().push(device);
        OK
    })
}

pub(super) unsafe extern "C" fn ctx_pop_current(ctx: *mut sys::CUcontext) -> Code {
    call("cuCtxPopCurrent", |w, me| {
        let Some(device) = w.context_stack.entry(me).or_default().pop() else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        if !ctx.is_null() {
            // SAFETY: a live out-pointer.
            unsafe { *ctx = handle(context_handle(device)) };
        }
        OK
    })
}
