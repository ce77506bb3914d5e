//! What cuda-event's tests, benchmarks and validation example and the system tests share:
//! serializing GPU tests, holding a stream, real GPU work, child processes, captures, futures
//! driven without a runtime. A crate of its own (not published) instead of files each test crate
//! includes by path; what cuda-event packages is what needs none of it. Each module is one concept;
//! everything is re-exported here, so a test names `cuda_event_testkit::gpu`, not the module.

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
mod wakers;

pub use calls::{driver_fn, ok};
pub use capture::{
    CaptureEnd, Graph, RawGraph, begin_capture, beside_a_global_capture, capture_graph, capture_mode,
    end_capture, exchange_capture_mode,
};
pub use checks::{check_wait_orders_b_after_a, cpu_and_wall_of_a_200ms_synchronize, timed};
pub use child::{
    ROLE, RUNNER, child_command, example_binary, in_a_child, role, run_child, run_example, spawn_child,
};
pub use clock::{monotonic_ns, process_cpu_time, resident_kib, thread_cpu_time};
pub use deadline::{Deadline, deadline, deadline_for};
pub use environment::{driver_library_present, required, skip_under_sanitizer};
pub use hold::{HostHold, block_the_host_fn_thread, hold, log_on, sleep_on};
pub use host_flags::HostFlags;
pub use kernels::{gpu_sleep, gpu_sleep_then_set, gpu_spin, launch_trap, poison_the_context};
pub use memory::TestBuffer;
pub use ptx::{Ptx, SPIN_KERNEL};
pub use serial::{
    GpuTest, MeasuringGpuTest, gpu, gpu_for, measuring_gpu, measuring_gpu_for, two_gpus, two_gpus_for,
};
pub use stop::SetOnDrop;
pub use wakers::{
    CountingWaker, block_on, block_on_timeout, counting_waker, panicking_waker, poll_once, poll_with,
};
