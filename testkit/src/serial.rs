//! Starting a GPU test: one at a time in a test binary, each under a [`Deadline`].

use crate::deadline::{Deadline, TEST_TIME_LIMIT, deadline_for};
use crate::environment::required;
use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

/// Held by a running GPU test: it serializes the GPU tests of one binary (CUDA runs a context's host
/// functions on one thread, so a held stream of one test would delay another's timing) and ends the
/// process if the test outlives its time limit.
#[derive(Debug)]
pub struct GpuTest {
    _serial: MutexGuard<'static, ()>,
    _deadline: Deadline,
}

/// Starts a GPU test: checks that a GPU is there and serializes it with the binary's others.
pub fn gpu() -> GpuTest {
    gpu_for(TEST_TIME_LIMIT)
}

/// [`gpu`] for a test that may run up to `limit`.
pub fn gpu_for(limit: Duration) -> GpuTest {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock();
    let name = std::thread::current().name().unwrap_or("a GPU test").to_string();
    let count = cuda_event::device_count().unwrap_or_else(|e| panic!("this GPU test needs a CUDA GPU: {e}"));
    assert!(count >= 1, "this GPU test needs a CUDA GPU, found none");
    GpuTest {
        _serial: serial,
        _deadline: deadline_for(&name, limit),
    }
}

/// A GPU test of `measure` and its kin: when it ends, the memory `measure` keeps per device is
/// freed, so that the binary exits with nothing of it allocated (`ci/sanitize` runs it with a leak
/// check).
#[derive(Debug)]
pub struct MeasuringGpuTest(#[allow(dead_code)] GpuTest);

impl Drop for MeasuringGpuTest {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            cuda_event::timing::release_measure_memory().expect("freeing measure's memory");
        }
    }
}

/// [`gpu_for`] for a test of `measure` ([`MeasuringGpuTest`]).
pub fn measuring_gpu_for(limit: Duration) -> MeasuringGpuTest {
    MeasuringGpuTest(gpu_for(limit))
}

/// [`measuring_gpu_for`] of the default limit.
pub fn measuring_gpu() -> MeasuringGpuTest {
    measuring_gpu_for(TEST_TIME_LIMIT)
}

/// Like [`gpu`], for the tests that need two GPUs: `None` with fewer, after saying on stdout that
/// the test was skipped (it then passes: a machine with one GPU runs the rest of the suite green),
/// unless `CUDA_EVENT_TEST_GPUS=2` (a run on two GPUs) requires them: then it fails.
pub fn two_gpus() -> Option<GpuTest> {
    two_gpus_for(TEST_TIME_LIMIT)
}

/// [`two_gpus`] for a test that may run up to `limit`.
pub fn two_gpus_for(limit: Duration) -> Option<GpuTest> {
    let test = gpu_for(limit);
    let count = cuda_event::device_count().unwrap();
    if count < 2 {
        let name = std::thread::current().name().unwrap_or("this test").to_string();
        assert!(
            !required("CUDA_EVENT_TEST_GPUS", "2"),
            "{name} needs two GPUs, {count} visible, and CUDA_EVENT_TEST_GPUS=2 requires them"
        );
        println!("skipped: {name} needs two GPUs, {count} visible");
        return None;
    }
    Some(test)
}
