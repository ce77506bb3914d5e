//! The raw bindings drive a GPU: an event recorded on a new stream after a cudaMemsetAsync over 1 GiB
//! completes, and the memory holds what was set.

use cuda_event_sys::*;
use std::ffi::CStr;
use std::ptr;

const BYTES: usize = 1 << 30;

fn ok(call: &str, code: cudaError_t) {
    if code != cudaError::cudaSuccess {
        // SAFETY: cudaGetErrorName returns a static NUL-terminated string for any code.
        let name = unsafe { CStr::from_ptr(cudaGetErrorName(code)) };
        panic!("{call} failed: {name:?} ({})", code.0);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn event_recorded_after_a_1gib_memset_completes_and_the_memory_is_set() {
    let mut stream: cudaStream_t = ptr::null_mut();
    let mut event: cudaEvent_t = ptr::null_mut();
    let mut device_ptr: *mut libc::c_void = ptr::null_mut();
    let mut host = vec![0u8; BYTES];
    // SAFETY: every out-pointer is a live local; the device buffer is BYTES long and used only by the
    // stream's work, which the event synchronize orders before the host reads `host`; everything
    // created here is destroyed here.
    unsafe {
        ok("cudaSetDevice", cudaSetDevice(0));
        ok(
            "cudaStreamCreateWithFlags",
            cudaStreamCreateWithFlags(&mut stream, cudaStreamNonBlocking),
        );
        ok(
            "cudaEventCreateWithFlags",
            cudaEventCreateWithFlags(&mut event, cudaEventDisableTiming),
        );
        ok("cudaMalloc", cudaMalloc(&mut device_ptr, BYTES));
        ok(
            "cudaMemsetAsync",
            cudaMemsetAsync(device_ptr, 0xA5, BYTES, stream),
        );
        ok("cudaEventRecord", cudaEventRecord(event, stream));
        ok("cudaEventSynchronize", cudaEventSynchronize(event));
        ok("cudaEventQuery", cudaEventQuery(event));
        ok(
            "cudaMemcpyAsync",
            cudaMemcpyAsync(
                host.as_mut_ptr().cast(),
                device_ptr,
                BYTES,
                cudaMemcpyKind::cudaMemcpyDeviceToHost,
                stream,
            ),
        );
        ok("cudaStreamSynchronize", cudaStreamSynchronize(stream));
        ok("cudaFree", cudaFree(device_ptr));
        ok("cudaEventDestroy", cudaEventDestroy(event));
        ok("cudaStreamDestroy", cudaStreamDestroy(stream));
    }
    assert!(
        host.iter().all(|&b| b == 0xA5),
        "device memory was not set to 0xA5"
    );
}
