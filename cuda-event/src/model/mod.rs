//! A model of the CUDA driver, for the model's test build only (the library's unit tests under
//! `RUSTFLAGS="--cfg cuda_event_model"`, `ci/test model`; not in the published package): the crate's driver table and the runtime calls it makes point here, and the
//! model checker (shuttle, behind `crate::sync`) runs the crate's threads, the reactor's included,
//! in many interleavings against it.
//!
//! The model fails a run (a panic that names the rule and where it was measured, and shuttle
//! prints the schedule that replays it) when the crate makes a call pattern this project measured
//! to crash CUDA, or one CUDA documents as undefined; a query that CUDA answers by invalidating a
//! capture invalidates the model's capture too, which the tests see when they end it:
//!
//! - a query, synchronize, stream wait, elapsed time or IPC export of an event beside a record of
//!   it into a capture, or beside the end of a capture holding its record: crash;
//! - a query of an event whose record an open capture holds: 907, and the capture is invalidated;
//!   a record of the event on a stream before the end releases it from the capture;
//! - a record of the event on a stream, or its destroy, beside the end of a capture holding its
//!   record: crash (beside the captured record itself, or while the capture is open: neither);
//! - two records of one event into captures at once: crash;
//! - a query or synchronize not in relaxed mode while a global capture (or this thread's own) is
//!   open: refused, the capture invalidated (CUDA's documentation of capture modes);
//! - a call with a destroyed event, stream or graph (a reset destroys its context's), a destroy
//!   beside another call on the same event, a call in a forked child (CUDA's documentation).
//!
//! Each rule's source, the results folder that measured it, is in `world::source`, and every
//! failure names it. Not modeled: an external node's record (reads beside its capture did not
//! crash) and interprocess events in a capture (CUDA refuses their record; the crate refuses it
//! first), both measured in the same folders.
//!
//! It does not stand in for the GPU: only the GPU says what CUDA does. It lets every commit walk
//! interleavings that a GPU run meets only by luck.
//!
//! Work: a stream runs its work at once unless [`hold`] holds it; a record on a [`fill`]ed stream
//! blocks until [`release`].

// The helpers below are for the model tests; the driver is for every model build.
#![cfg_attr(not(test), allow(dead_code))]

pub(crate) mod driver;
mod world;

#[cfg(test)]
mod tests;

pub(crate) use driver::runtime;

use crate::stream::Stream;
use std::sync::Arc;
pub(crate) use world::CaptureMode;
use world::with;

/// Runs `body` in `iterations` random schedules and as many PCT schedules (depth 3), each a fresh
/// model world. `CUDA_EVENT_MODEL_SCALE` multiplies the count.
#[cfg(test)]
pub(crate) fn check(iterations: usize, body: impl Fn() + Send + Sync + 'static) {
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
#[cfg(test)]
pub(crate) fn check_once(body: impl Fn() + Send + Sync + 'static) {
    let _one = one_at_a_time();
    shuttle::check_random(execution(body), 1);
}

/// One model test at a time: the crate's statics (the driver, switches such as the capture
/// checks) and the model's world are the process's.
#[cfg(test)]
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One execution of `body`: a fresh world first, and the first rule broken reported after.
#[cfg(test)]
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

/// A fresh world for one execution of the model checker.
pub(crate) fn begin_execution() {
    with(|w| w.begin_execution());
    crate::fork::model_set_forked(false);
}

fn raw(stream: &Stream) -> u64 {
    stream.as_raw() as u64
}

/// Begins a capture of `stream` in `mode`, as the user's code would (`cudaStreamBeginCapture`).
pub(crate) fn begin_capture(stream: &Stream, mode: CaptureMode) {
    let d = crate::driver::driver("model").expect("the model's driver loads");
    d.stream_begin_capture
        .call(|f| {
            // SAFETY: a live stream.
            unsafe { f(stream.as_raw(), mode.to_driver()) }
        })
        .expect("the capture begins");
}

/// Ends `stream`'s capture and destroys its graph: `Err` says why the capture was invalidated.
pub(crate) fn end_capture(stream: &Stream) -> Result<(), String> {
    let s = raw(stream);
    let reason = with(|w| w.capture_of(s).and_then(|c| w.captures[&c].invalidated.clone()));
    let d = crate::driver::driver("model").expect("the model's driver loads");
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream; writes the graph through a live local.
    let code = d
        .stream_end_capture
        .code(|f| unsafe { f(stream.as_raw(), &mut graph) });
    if !graph.is_null() {
        // SAFETY: the graph the end just made.
        d.graph_destroy.call(|f| unsafe { f(graph) }).expect("destroyed");
    }
    match code {
        world::Code::CUDA_SUCCESS => Ok(()),
        code => Err(format!(
            "cuStreamEndCapture answered {}: {}",
            code.0,
            reason.unwrap_or_default()
        )),
    }
}

/// Runs `f` on this thread while another model thread holds a capture of `stream` in global mode
/// (open from before `f` until after it); returns what `f` returned and how the capture ended
/// ([`end_capture`]).
pub(crate) fn beside_a_global_capture<R>(
    stream: &Arc<Stream>,
    f: impl FnOnce() -> R,
) -> (R, Result<(), String>) {
    use crate::sync::atomic::{AtomicBool, Ordering};
    use crate::sync::thread;
    let (began, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let capturer = {
        let (stream, began, done) = (stream.clone(), began.clone(), done.clone());
        thread::spawn(move || {
            begin_capture(&stream, CaptureMode::Global);
            began.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                thread::yield_now();
            }
            end_capture(&stream)
        })
    };
    while !began.load(Ordering::Acquire) {
        thread::yield_now();
    }
    let out = f();
    done.store(true, Ordering::Release);
    (out, capturer.join().unwrap())
}

/// This thread's calls run in relaxed capture mode from now on, as a thread that reads events
/// while other threads capture must (CUDA refuses its queries, and invalidates a global capture,
/// otherwise).
pub(crate) fn relaxed_here() {
    let me = shuttle::current::me();
    with(|w| w.modes.insert(me, CaptureMode::Relaxed));
}

/// The work on `stream` does not complete until [`release`].
pub(crate) fn hold(stream: &Stream) {
    let s = raw(stream);
    with(|w| w.streams.get_mut(&s).expect("a model stream").held = true);
}

/// The stream's queue is full: records on it block until [`release`].
pub(crate) fn fill(stream: &Stream) {
    let s = raw(stream);
    with(|w| w.streams.get_mut(&s).expect("a model stream").full = true);
}

/// The stream's work completes, its queue has room, and its queued host functions run.
pub(crate) fn release(stream: &Stream) {
    let s = raw(stream);
    let host_fns = with(|w| {
        let st = w.streams.get_mut(&s).expect("a model stream");
        st.held = false;
        st.full = false;
        let host_fns = std::mem::take(&mut st.host_fns);
        for event in w.events.values_mut() {
            if let world::Last::OnStream { stream, done } = &mut event.last
                && *stream == s
            {
                *done = true;
            }
        }
        host_fns
    });
    for (function, data) in host_fns {
        driver::run_host_fn(function, data);
    }
}

/// A kernel fault on `device`: its context's calls answer CUDA_ERROR_ILLEGAL_ADDRESS from now on.
pub(crate) fn fault(device: i32) {
    with(|w| w.contexts[device as usize].sticky = Some(world::Code::CUDA_ERROR_ILLEGAL_ADDRESS));
}

/// `cudaDeviceReset` on `device`: its context gets a new id, and its events and streams are
/// destroyed (a later call with one is a use-after-free).
pub(crate) fn reset(device: i32) {
    with(|w| {
        let context = &mut w.contexts[device as usize];
        context.id += 1;
        context.sticky = None;
        let gone_events: Vec<u64> = w
            .events
            .iter()
            .filter(|(_, e)| e.device == device)
            .map(|(k, _)| *k)
            .collect();
        let gone_streams: Vec<u64> = w
            .streams
            .iter()
            .filter(|(_, s)| s.device == device)
            .map(|(k, _)| *k)
            .collect();
        for e in gone_events {
            w.events.remove(&e);
            w.destroyed.insert(e);
        }
        for s in gone_streams {
            w.streams.remove(&s);
            w.destroyed.insert(s);
        }
    });
}

/// This thread forks: from now on it is the child (a driver call it makes fails the model), and
/// the crate sees itself in a forked child.
pub(crate) fn fork_here() {
    let me = shuttle::current::me();
    with(|w| w.forked = Some(me));
    crate::fork::model_set_forked(true);
}

/// Driver calls made so far in this execution, per symbol.
pub(crate) fn calls() -> std::collections::HashMap<&'static str, u64> {
    with(|w| w.calls.clone())
}

/// Forgets the calls counted so far.
pub(crate) fn reset_calls() {
    with(|w| w.calls.clear());
}
