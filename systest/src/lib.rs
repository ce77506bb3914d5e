//! Cross-crate and C checks: the C side of c/abi.c, compiled against the same headers as the
//! bindings. The tests under `tests/` compare its ABI table with the Rust declarations and use its
//! functions to pass raw CUDA handles between C and the safe crate.

use cuda_event_sys::{cudaEvent_t, cudaStream_t};
use std::ffi::{CStr, c_char};

#[repr(C)]
struct AbiEntry {
    name: *const c_char,
    value: u64,
}

unsafe extern "C" {
    fn cuda_event_abi_table(len: *mut usize) -> *const AbiEntry;
    /// `cudaEventCreateWithFlags`, called from C.
    pub fn cuda_event_c_create(event: *mut cudaEvent_t, flags: u32) -> i32;
    /// `cudaEventRecord`, called from C.
    pub fn cuda_event_c_record(event: cudaEvent_t, stream: cudaStream_t) -> i32;
    /// `cudaEventQuery`, called from C.
    pub fn cuda_event_c_query(event: cudaEvent_t) -> i32;
    /// `cudaStreamWaitEvent`, called from C.
    pub fn cuda_event_c_stream_wait(stream: cudaStream_t, event: cudaEvent_t) -> i32;
    /// c/ipc_hold.c: exports an interprocess event recorded behind a host function that blocks until
    /// a line arrives on stdin (`hold` 0) or sleeps 2 s (`hold` 1); prints the handle, then waits.
    pub fn ipc_hold_exporter(hold: i32) -> i32;
    /// c/ipc_hold.c: opens the handle (hex), queries, prints `queried`, synchronizes, timing each.
    pub fn ipc_hold_importer(hex: *const c_char) -> i32;
}

/// What C reports: `(name, value)` for every size, alignment, offset and constant in c/abi.c.
pub fn c_abi_table() -> Vec<(String, u64)> {
    let mut len = 0;
    // SAFETY: the function writes the length of a static array and returns a pointer to it.
    let table = unsafe { std::slice::from_raw_parts(cuda_event_abi_table(&mut len), len) };
    table
        .iter()
        .map(|e| {
            // SAFETY: every name is a string literal in c/abi.c: static and NUL-terminated.
            let name = unsafe { CStr::from_ptr(e.name) };
            (name.to_string_lossy().into_owned(), e.value)
        })
        .collect()
}

/// The benchmark's raw C loops (c/bench.c): each makes `n` calls and returns the loop's wall time in
/// nanoseconds, or minus the CUDA error code.
pub mod bench_c {
    use cuda_event_sys::{cudaEvent_t, cudaStream_t};

    unsafe extern "C" {
        /// `cudaEventCreateWithFlags` + `cudaEventDestroy`.
        pub fn bench_c_create_destroy(flags: u32, n: i32) -> f64;
        /// `cudaEventCreateWithFlags` + `cudaEventRecord` + `cudaEventDestroy`.
        pub fn bench_c_lazy(stream: cudaStream_t, flags: u32, n: i32) -> f64;
        /// `cudaEventRecord`.
        pub fn bench_c_record(event: cudaEvent_t, stream: cudaStream_t, n: i32) -> f64;
        /// `cudaEventQuery`.
        pub fn bench_c_query(event: cudaEvent_t, n: i32) -> f64;
        /// `cudaStreamWaitEvent`.
        pub fn bench_c_wait(stream: cudaStream_t, event: cudaEvent_t, n: i32) -> f64;
        /// `cudaEventSynchronize`.
        pub fn bench_c_synchronize(event: cudaEvent_t, n: i32) -> f64;
        /// `cudaEventElapsedTime`.
        pub fn bench_c_elapsed(start: cudaEvent_t, end: cudaEvent_t, n: i32) -> f64;
        /// `cudaIpcGetEventHandle`.
        pub fn bench_c_ipc_handle(event: cudaEvent_t, n: i32) -> f64;
    }
}
