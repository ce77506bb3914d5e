//! What the run's environment asks of a test: variables that require what a test would otherwise
//! skip, the sanitizer's run that skips what it cannot judge, and whether the machine has a driver.

use std::process::Command;

/// Whether the environment variable `name` is set to `value`: a run that requires what a test would
/// otherwise skip without (`CUDA_EVENT_TEST_GPUS=2`, `CUDA_EVENT_TEST_TORCH=1`).
pub fn required(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

/// Set to 1 by `ci/sanitize`, which runs the suite under compute-sanitizer and fails on any CUDA
/// error it reports.
const UNDER_SANITIZER: &str = "CUDA_EVENT_UNDER_SANITIZER";

/// Whether this test is to be skipped because it runs under compute-sanitizer (`ci/sanitize`); if
/// so, says so on stdout with `why`. For a test whose point is an error CUDA reports, or whose
/// bounds the sanitizer's instrumentation breaks: the reason stands beside the test it excuses.
/// Such a test starts `if skip_under_sanitizer("why") { return; }`.
pub fn skip_under_sanitizer(why: &str) -> bool {
    let skip = under_sanitizer();
    if skip {
        let name = std::thread::current().name().unwrap_or("this test").to_string();
        println!("skipped under compute-sanitizer: {name}: {why}");
    }
    skip
}

/// Whether this run is under compute-sanitizer (`ci/sanitize`), for a test that keeps its checks
/// there but one bound that memcheck's instrumentation stretches (it says which beside it).
pub fn under_sanitizer() -> bool {
    required(UNDER_SANITIZER, "1")
}

/// Whether the system's loader knows a CUDA driver library (`ldconfig -p` lists `libcuda.so.1`):
/// asked apart from the crate, which asks `dlopen`.
pub fn driver_library_present() -> bool {
    let listed = Command::new("ldconfig").arg("-p").output();
    listed.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so.1"))
}
