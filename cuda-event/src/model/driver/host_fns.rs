//! Host functions: run at once on a thread of their own, or queued behind a held stream until it
//! is released.

use super::{OK, call, id};
use crate::model::world::{BROKEN, Code};
use cuda_event_sys as sys;
use std::ffi::c_void;

/// A host function and its argument, run on a thread of its own as CUDA's host-function thread
/// would.
pub(crate) fn run_host_fn(function: usize, data: usize) {
    shuttle::thread::spawn(move || {
        // SAFETY: the pointer the crate passed to cuLaunchHostFunc, with its own argument.
        let function: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(function) };
        // SAFETY: as above: CUDA calls it once with its argument.
        unsafe { function(data as *mut c_void) };
    });
}

pub(super) unsafe extern "C" fn launch_host_func(
    stream: sys::CUstream,
    function: sys::CUhostFn,
    data: *mut c_void,
) -> Code {
    let s = id(stream);
    let Some(function) = function else {
        return Code::CUDA_ERROR_INVALID_VALUE;
    };
    let run = call("cuLaunchHostFunc", |w, _| {
        let Some(held) = w.stream(s, "cuLaunchHostFunc").map(|st| st.held) else {
            return BROKEN;
        };
        if w.capture_of(s).is_some() {
            return Code::CUDA_ERROR_NOT_SUPPORTED; // a graph node: not run by the model
        }
        if held {
            w.streams
                .get_mut(&s)
                .expect("checked")
                .host_fns
                .push((function as usize, data as usize));
            return Code::CUDA_ERROR_NOT_READY;
        }
        OK
    });
    match run {
        OK => {
            run_host_fn(function as usize, data as usize);
            OK
        }
        Code::CUDA_ERROR_NOT_READY => OK,
        code => code,
    }
}
