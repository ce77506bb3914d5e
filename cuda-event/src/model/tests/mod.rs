//! The crate's concurrency core against the driver model: each test runs in many schedules (see
//! [`check`]) and fails when the crate makes a call pattern that crashes CUDA or invalidates a
//! capture it did not make invalid itself. Run by `ci/test model`, which picks them by the
//! `model::` in their paths.
//!
//! Here the harness: how a test's body runs under the model checker. [`scenario`] is what a test
//! does to the model's world beside the crate; the tests stand in files by subject.

mod calls;
mod capture_modes;
mod captures;
mod faults;
mod futures;
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

/// Polls `future` until it is ready, letting other threads run between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::yield_now();
    }
}

/// Polls `future` once.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}
