//! The bindings agree with C compiled against the same headers (no GPU needed).

use cuda_event_sys::*;
use cuda_event_systest::c_abi_table;
use std::mem::{align_of, offset_of, size_of};

/// What the Rust side says for each entry of the C table; None for a name it does not know.
fn rust_value(name: &str) -> Option<u64> {
    macro_rules! size_align {
        ($($t:ty),*) => {
            $(
                if name == concat!("sizeof ", stringify!($t)) { return Some(size_of::<$t>() as u64); }
                if name == concat!("alignof ", stringify!($t)) { return Some(align_of::<$t>() as u64); }
            )*
        };
    }
    size_align!(
        cudaIpcEventHandle_t,
        cudaEvent_t,
        cudaStream_t,
        cudaGraph_t,
        cudaGraphExec_t,
        cudaHostFn_t,
        cudaError_t
    );
    let value = match name {
        "sizeof enum cudaDeviceAttr" => size_of::<cudaDeviceAttr>() as u64,
        "alignof enum cudaDeviceAttr" => align_of::<cudaDeviceAttr>() as u64,
        "sizeof enum cudaStreamCaptureStatus" => size_of::<cudaStreamCaptureStatus>() as u64,
        "alignof enum cudaStreamCaptureStatus" => align_of::<cudaStreamCaptureStatus>() as u64,
        "offsetof cudaIpcEventHandle_t.reserved" => offset_of!(cudaIpcEventHandle_t, reserved) as u64,
        "CUDA_IPC_HANDLE_SIZE" => CUDA_IPC_HANDLE_SIZE.into(),
        "CUDART_VERSION" => CUDART_VERSION.into(),
        "cudaEventDefault" => cudaEventDefault.into(),
        "cudaEventBlockingSync" => cudaEventBlockingSync.into(),
        "cudaEventDisableTiming" => cudaEventDisableTiming.into(),
        "cudaEventInterprocess" => cudaEventInterprocess.into(),
        "cudaEventRecordDefault" => cudaEventRecordDefault.into(),
        "cudaEventRecordExternal" => cudaEventRecordExternal.into(),
        "cudaEventWaitDefault" => cudaEventWaitDefault.into(),
        "cudaEventWaitExternal" => cudaEventWaitExternal.into(),
        "cudaStreamDefault" => cudaStreamDefault.into(),
        "cudaStreamNonBlocking" => cudaStreamNonBlocking.into(),
        "cudaStreamLegacy" => cudaStreamLegacy as u64,
        "cudaStreamPerThread" => cudaStreamPerThread as u64,
        "cudaDevAttrIpcEventSupport" => cudaDeviceAttr::cudaDevAttrIpcEventSupport.0.into(),
        "cudaStreamCaptureStatusNone" => cudaStreamCaptureStatus::cudaStreamCaptureStatusNone.0.into(),
        "cudaStreamCaptureStatusActive" => cudaStreamCaptureStatus::cudaStreamCaptureStatusActive.0.into(),
        "cudaStreamCaptureStatusInvalidated" => cudaStreamCaptureStatus::cudaStreamCaptureStatusInvalidated
            .0
            .into(),
        "cudaStreamCaptureModeGlobal" => cudaStreamCaptureMode::cudaStreamCaptureModeGlobal.0.into(),
        "cudaStreamCaptureModeThreadLocal" => {
            cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal.0.into()
        }
        "cudaStreamCaptureModeRelaxed" => cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed.0.into(),
        "cudaMemcpyDeviceToHost" => cudaMemcpyKind::cudaMemcpyDeviceToHost.0.into(),
        "cudaMemcpyHostToDevice" => cudaMemcpyKind::cudaMemcpyHostToDevice.0.into(),
        error => return error_code(error),
    };
    Some(value)
}

fn error_code(name: &str) -> Option<u64> {
    let code = match name {
        "cudaSuccess" => cudaError::cudaSuccess,
        "cudaErrorInvalidValue" => cudaError::cudaErrorInvalidValue,
        "cudaErrorMemoryAllocation" => cudaError::cudaErrorMemoryAllocation,
        "cudaErrorCudartUnloading" => cudaError::cudaErrorCudartUnloading,
        "cudaErrorInsufficientDriver" => cudaError::cudaErrorInsufficientDriver,
        "cudaErrorNoDevice" => cudaError::cudaErrorNoDevice,
        "cudaErrorInvalidDevice" => cudaError::cudaErrorInvalidDevice,
        "cudaErrorDeviceUninitialized" => cudaError::cudaErrorDeviceUninitialized,
        "cudaErrorContextIsDestroyed" => cudaError::cudaErrorContextIsDestroyed,
        "cudaErrorInvalidResourceHandle" => cudaError::cudaErrorInvalidResourceHandle,
        "cudaErrorIllegalState" => cudaError::cudaErrorIllegalState,
        "cudaErrorNotReady" => cudaError::cudaErrorNotReady,
        "cudaErrorNotSupported" => cudaError::cudaErrorNotSupported,
        "cudaErrorStreamCaptureUnsupported" => cudaError::cudaErrorStreamCaptureUnsupported,
        "cudaErrorUnknown" => cudaError::cudaErrorUnknown,
        _ => return None,
    };
    Some(code.0.into())
}

#[test]
fn every_c_abi_fact_matches_the_bindings() {
    let table = c_abi_table();
    assert!(table.len() > 40, "the C table is too short: {table:?}");
    let mismatches: Vec<String> = table
        .iter()
        .filter_map(|(name, c)| match rust_value(name) {
            Some(rust) if rust == *c => None,
            Some(rust) => Some(format!("{name}: C says {c}, Rust says {rust}")),
            None => Some(format!("{name}: C reports it, the Rust side has no value for it")),
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn ipc_event_handle_is_64_opaque_bytes() {
    assert_eq!(size_of::<cudaIpcEventHandle_t>(), 64);
    assert_eq!(CUDA_IPC_HANDLE_SIZE, 64);
    assert_eq!(align_of::<cudaIpcEventHandle_t>(), 1);
}

#[test]
fn cuda_error_is_a_newtype_that_holds_unlisted_codes() {
    // A newer runtime may return a code these headers don't list: it must be representable.
    let unlisted = cudaError(123_456);
    assert_eq!(unlisted.0, 123_456);
    assert_eq!(size_of::<cudaError_t>(), size_of::<u32>());
}
