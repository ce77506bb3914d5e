//! Awaiting the GPU: events and streams as futures, and the safe host callback. Streams are held by
//! a kernel that waits on the GPU's timer (`gpu_sleep`), not by host functions (CUDA runs all host
//! functions of a context on one thread, which would hold back the tests' own host functions).
//! Tests that block that thread on purpose say so.
//!
//! The contract pinned here: a future is woken by the crate's reactor thread, which queries the
//! events futures wait on and queues nothing on any stream; a future is woken within about a
//! millisecond of its work, every pending one is confirmed by a query of its own event at least
//! once a second; `Event::completion` makes no CUDA call until first polled.

mod capture;
mod capture_race;
mod faults;
mod flag_lane;
mod host_fn;
mod lifetimes;
mod scale;
mod timeout;
mod wake;
mod wakers;

/// Why the tests that need GPU work to run while CUDA's host-function thread is blocked are skipped
/// under compute-sanitizer.
const HOST_FN_THREAD_BLOCKED: &str = "needs GPU work to run while CUDA's host-function thread is blocked, \
     and under memcheck work on other streams waits for a blocked host function to return";
