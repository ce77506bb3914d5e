//! CUDA's answers checked, and the driver's functions reached, the way a test wants them: a failed
//! call fails the test, naming the call.

use cuda_event::sys;
use std::ffi::{CStr, c_void};

/// Fails the test unless a runtime call succeeded.
pub fn ok(code: sys::cudaError_t) {
    assert_eq!(
        code,
        sys::cudaError::cudaSuccess,
        "CUDA runtime call failed: {}",
        code.0
    );
}

/// Fails the test unless the driver call `call` succeeded.
pub(crate) fn driver_ok(call: &str, code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{call} failed: {}", code.0);
}

/// A driver function: `F` is its `PFN_*` type from cudaTypedefs.h, and `version` the one that type
/// names.
pub fn driver_fn<F>(symbol: &CStr, version: u32) -> F {
    let function = cuda_event::driver_entry_point(symbol, version).unwrap();
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: F is the PFN type of this symbol at this version (the caller's promise), a function
    // pointer (or an Option of one) of a pointer's size.
    unsafe { std::mem::transmute_copy(&function) }
}
