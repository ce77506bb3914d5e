//! What the run's environment asks of a test: variables that require what a test would otherwise
//! skip, and whether the machine has a driver.

use std::process::Command;

/// Whether the environment variable `name` is set to `value`: a run that requires what a test would
/// otherwise skip without (`CUDA_EVENT_TEST_GPUS=2`, `CUDA_EVENT_TEST_TORCH=1`).
pub fn required(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

/// Whether the system's loader knows a CUDA driver library (`ldconfig -p` lists `libcuda.so.1`):
/// asked apart from the crate, which asks `dlopen`.
pub fn driver_library_present() -> bool {
    let listed = Command::new("ldconfig").arg("-p").output();
    listed.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so.1"))
}
