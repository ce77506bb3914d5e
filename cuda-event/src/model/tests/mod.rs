//! The crate's concurrency core against the driver model: each test runs in many schedules (see
//! [`check`]) and fails when the crate makes a call pattern that crashes CUDA or invalidates a
//! capture it did not make invalid itself. Run by `ci/test model`, which picks them by the
//! `model::` in their paths.
//!
//! Here the harness: how a test's body runs under the model checker, and how it drives a future.
//! [`scenario`] is what a test does to the model's world beside the crate, in the test kit's
//! words where the two worlds share one; the tests stand in files by subject.

mod calls;
mod capture_modes;
mod captures;
mod devices;
mod faults;
mod futures;
mod ipc;
mod lane_scanner;
mod pool;
mod reads;
mod records;
mod rules;
mod scenario;
mod trace;

use crate::model::begin_execution;
use crate::model::world::with;
use crate::sync::thread;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

// Polls a future once with a waker that does nothing: the test kit's own, the same word in both
// worlds (generic over the future, it needs nothing of the kit's build of the crate).
use cuda_event_testkit::poll_once;

/// Runs `body` in `iterations` random schedules and as many PCT schedules (depth 3), each a fresh
/// model world. `CUDA_EVENT_MODEL_SCALE` multiplies the count.
fn check(iterations: usize, body: impl Fn() + Send + Sync + 'static) {
    let _one = one_at_a_time();
    let scale: f64 = std::env::var("CUDA_EVENT_MODEL_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let iterations = ((iterations as f64 * scale) as usize).max(1);
    let run = execution(body);
    shuttle::check_random(run.clone(), iterations);
    shuttle::check_pct(run, iterations, 3);
}

/// Runs `body` once, in a fresh model world: for a test on one thread (PCT needs two).
fn check_once(body: impl Fn() + Send + Sync + 'static) {
    let _one = one_at_a_time();
    shuttle::check_random(execution(body), 1);
}

/// One model test at a time: the crate's statics (the driver, switches such as the capture
/// checks) and the model's world are the process's.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One execution of `body`: a fresh world first, and the first rule broken reported after.
fn execution(body: impl Fn() + Send + Sync + 'static) -> impl Fn() + Clone + Send + Sync + 'static {
    let body = std::sync::Arc::new(body);
    move || {
        begin_execution();
        body();
        // Now, not when the model checker tears the execution down, where the crate's atomics
        // can no longer be read.
        crate::pool::empty_event_pool();
        crate::event::captured::forget_all();
        if let Some(failure) = with(|w| w.failure.take()) {
            panic!("{failure}");
        }
    }
}

/// Polls `future` until it is ready, with a waker that does nothing, letting the other model
/// threads run between polls.
///
/// Not named `block_on` as the test kit's is, because it does not do what that one does: the
/// kit's parks the thread until the future's waker unparks it, so it also checks that the crate
/// wakes the future (a lost wake-up hangs it, and the test's deadline fails it). A model test
/// cannot park: the model checker runs every model thread on one thread of the process, which a
/// park would stop, and no model thread would then wake it. So this one yields to the model
/// checker instead, and checks only that the future becomes ready, not that it is woken.
fn poll_until_ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::yield_now();
    }
}
