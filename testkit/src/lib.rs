//! What cuda-event's tests, benchmarks and validation example and the system tests share:
//! serializing GPU tests, holding a stream, real GPU work, child processes, captures, futures
//! driven without a runtime. A crate of its own (not published) instead of files each test crate
//! includes by path; what cuda-event packages is what needs none of it. Each module is one concept;
//! everything is re-exported here, so a test names `cuda_event_testkit::gpu`, not the module.
//!
//! # Where a test goes
//!
//! By what it needs. A GPU test's file is named by its subject (the pool's in pool.rs, graph
//! capture's in capture/), not by what it needs; a subject with several parts is a folder with a
//! `main.rs` and a file per part, as cuda-event/tests/completion/ and capture/ are.
//!
//! | The test needs | It goes in | It starts with |
//! |---|---|---|
//! | no CUDA | inline: a `#[cfg(test)] mod tests` in the module it tests; `all(test, not(cuda_event_model))` where it uses the crate's locks, atomics or threads (in the model build they are the model checker's, which work only inside a model execution) | nothing of this kit |
//! | the concurrency core (the crate's threads meeting in records, reads, futures, captures, the pool) | cuda-event/src/model/tests/`<subject>`.rs, against the driver model (`ci/test model`) | `check(iterations, ...)` or `check_once(...)`; its scenario kit (scenario.rs) speaks this kit's capture words: [`begin_capture`], [`end_capture`], [`beside_a_global_capture`] |
//! | one GPU | cuda-event/tests/`<subject>`.rs (or `<subject>`/main.rs) | `#[ignore = "needs a CUDA GPU"]`, then `let _gpu = gpu();` ([`gpu`]; [`gpu_for`] for a longer time limit, [`measuring_gpu`] for a test of `measure`) |
//! | two GPUs | cuda-event/tests/multi_gpu.rs, or beside its subject's one-GPU tests; named `multi_gpu_*` | `let Some(_gpu) = two_gpus() else { return; };` ([`two_gpus`]: with one GPU it says it was skipped and passes, unless `CUDA_EVENT_TEST_GPUS=2`) |
//! | its own process (a device reset, a dead context, an exit) | beside its subject's GPU tests | `if in_a_child(this_test!(), "role").is_none() { return; }` ([`in_a_child`]: the parent runs the test again as a child, under [`gpu`]) |
//! | a CUDA error as its point | beside its subject's GPU tests | `if skip_under_sanitizer("why") { return; }`, first ([`skip_under_sanitizer`]: `ci/sanitize` fails on any error CUDA reports) |

mod calls;
mod capture;
mod checks;
mod child;
mod clock;
mod deadline;
mod environment;
mod hold;
mod host_flags;
mod kernels;
mod memory;
mod ptx;
mod serial;
mod stop;
mod waits;
mod wakers;

pub use calls::{driver_fn, ok};
pub use capture::{
    CaptureFailed, GLOBAL, Graph, RELAXED, RawGraph, THREAD_LOCAL, begin_capture, beside_a_global_capture,
    capture_graph, capture_mode, end_capture, exchange_capture_mode,
};
pub use checks::{check_wait_orders_b_after_a, cpu_and_wall_of_a_200ms_synchronize, timed};
pub use child::{
    ROLE, RUNNER, child_command, example_binary, in_a_child, role, run_child, run_example, spawn_child,
};
pub use clock::{monotonic_ns, process_cpu_time, resident_kib, thread_cpu_time};
pub use deadline::{Deadline, deadline, deadline_for};
pub use environment::{driver_library_present, required, skip_under_sanitizer, under_sanitizer};
pub use hold::{HostHold, block_the_host_fn_thread, hold, log_on, sleep_on};
pub use host_flags::HostFlags;
pub use kernels::{gpu_sleep, gpu_sleep_then_set, gpu_spin, launch_trap, poison_the_context};
pub use memory::TestBuffer;
pub use ptx::{Ptx, SPIN_KERNEL};
pub use serial::{
    GpuTest, MeasuringGpuTest, gpu, gpu_for, measuring_gpu, measuring_gpu_for, two_gpus, two_gpus_for,
};
pub use stop::SetOnDrop;
pub use waits::every_wait;
pub use wakers::{
    CountingWaker, block_on, block_on_timeout, counting_waker, panicking_waker, poll_once, poll_with,
};
