//! What a scenario does to the model's world beside the crate, as the user's code or the GPU
//! would (captures begun and ended raw, work held and released, faults, resets, forks), the call
//! counts it reads, and the crate-level steps the tests share.
//!
//! The capture words ([`begin_capture`], [`end_capture`], [`beside_a_global_capture`],
//! [`capture_mode`], [`exchange_capture_mode`] and the modes [`GLOBAL`], [`THREAD_LOCAL`],
//! [`RELAXED`]) are the test kit's (testkit/src/capture.rs),
//! with the same argument types (the driver's `CUstreamCaptureMode`) and the same shapes
//! returned, so that a capture scenario reads the same against the model and on a GPU. The
//! model's world keeps its own `CaptureMode`; the driver's mode is converted at the driver's
//! entry points, as the crate's own calls are.

use crate::model::driver::run_host_fn;
use crate::model::world::{CaptureMode, Code, Last, with};
use crate::stream::Stream;
use crate::{Error, Event, sys};
use std::sync::Arc;

/// A capture that every other thread's unsafe call invalidates: the default of
/// `torch.cuda.graph` and of most C++ code.
pub(super) const GLOBAL: sys::CUstreamCaptureMode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
/// A capture that only its own thread's unsafe calls invalidate.
pub(super) const THREAD_LOCAL: sys::CUstreamCaptureMode =
    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
/// A capture that no unsafe call invalidates, and that any thread may end.
pub(super) const RELAXED: sys::CUstreamCaptureMode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

/// CUDA's answer for an event whose last record a capture holds.
const CAPTURED: u32 = 907;

fn is_captured(result: &crate::Result<impl std::fmt::Debug>) -> bool {
    matches!(result, Err(Error::Cuda(e)) if e.code() == CAPTURED)
}

/// Ok, or CUDA's answer for an event whose last record a capture holds.
pub(super) fn ok_or_captured<T: std::fmt::Debug>(what: &str, result: crate::Result<T>) {
    assert!(result.is_ok() || is_captured(&result), "{what}: {result:?}");
}

/// A model stream on device 0, to share among the test's threads.
pub(super) fn stream() -> Arc<Stream> {
    Arc::new(Stream::new(0).expect("a model stream"))
}

/// One round of a capture on `cap`: begin, record `event` into it, end; the capture must end
/// valid (no read of ours invalidated it).
pub(super) fn captured_round(cap: &Stream, event: &Event, mode: sys::CUstreamCaptureMode) {
    begin_capture(cap, mode);
    event.record(cap).expect("a record into a capture");
    end_capture(cap).expect("the capture ends valid");
}

fn raw(stream: &Stream) -> u64 {
    stream.as_raw() as u64
}

/// Begins a capture of `stream` on this thread in `mode`, as the user's code would
/// (`cuStreamBeginCapture`); end it with [`end_capture`].
pub(super) fn begin_capture(stream: &Stream, mode: sys::CUstreamCaptureMode) {
    let d = crate::driver::driver("model").expect("the model's driver loads");
    d.stream_begin_capture
        .call(|f| {
            // SAFETY: a live stream.
            unsafe { f(stream.as_raw(), mode) }
        })
        .expect("the capture begins");
}

/// Ends `stream`'s capture (`cuStreamEndCapture`): the graph it made, or, when it made none, what
/// the end answered and why the model invalidated the capture.
pub(super) fn end_capture(stream: &Stream) -> Result<RawGraph, CaptureFailed> {
    let s = raw(stream);
    let reason = with(|w| w.capture_of(s).and_then(|c| w.captures[&c].invalidated.clone()));
    let d = crate::driver::driver("model").expect("the model's driver loads");
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream; writes the graph through a live local.
    let code = d
        .stream_end_capture
        .code(|f| unsafe { f(stream.as_raw(), &mut graph) });
    // `then`, not `then_some`: a `RawGraph` of the null graph, made and dropped, would destroy it.
    let graph = (!graph.is_null()).then(|| RawGraph(graph));
    match (code, graph) {
        (Code::CUDA_SUCCESS, Some(graph)) => Ok(graph),
        (code, _) => Err(CaptureFailed {
            code: code.0,
            why: format!(
                "cuStreamEndCapture answered {}: {}",
                code.0,
                reason.unwrap_or_default()
            ),
        }),
    }
}

/// A graph a capture's end made, destroyed on drop (`cuGraphDestroy`): the test kit's `RawGraph`,
/// less its `node_count` (the model counts no nodes).
#[derive(Debug)]
pub(super) struct RawGraph(sys::CUgraph);

impl Drop for RawGraph {
    fn drop(&mut self) {
        let d = crate::driver::driver("model").expect("the model's driver loads");
        // SAFETY: the graph a capture's end made, destroyed once.
        let destroyed = d.graph_destroy.call(|f| unsafe { f(self.0) });
        if !std::thread::panicking() {
            destroyed.expect("the graph is destroyed");
        }
    }
}

/// A capture that did not end as it should: what its end answered (the driver's number: 901 for
/// a capture another call invalidated) and why. The test kit's `CaptureFailed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CaptureFailed {
    pub(super) code: u32,
    pub(super) why: String,
}

/// Runs `f` on this thread while another model thread holds a capture of `captured` in global
/// mode (open from before `f` until after it); returns what `f` returned and how the capture
/// ended: `Ok` when it ended valid. The test kit's, less the memset the kit captures (the model
/// has no memory).
pub(super) fn beside_a_global_capture<R>(
    captured: &Stream,
    f: impl FnOnce() -> R,
) -> (R, Result<(), CaptureFailed>) {
    use crate::sync::atomic::{AtomicBool, Ordering};
    use crate::sync::thread;
    let (began, done) = (AtomicBool::new(false), AtomicBool::new(false));
    thread::scope(|s| {
        let capturer = s.spawn(|| {
            begin_capture(captured, GLOBAL);
            began.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                thread::yield_now();
            }
            end_capture(captured).map(drop)
        });
        while !began.load(Ordering::Acquire) {
            thread::yield_now();
        }
        let out = f();
        done.store(true, Ordering::Release);
        (out, capturer.join().unwrap())
    })
}

/// Sets this thread's stream-capture mode (`cuThreadExchangeStreamCaptureMode`); returns the mode
/// it had. The test kit's.
pub(super) fn exchange_capture_mode(mut mode: sys::CUstreamCaptureMode) -> sys::CUstreamCaptureMode {
    let d = crate::driver::driver("model").expect("the model's driver loads");
    // SAFETY: exchanges this thread's mode through a live local.
    let code = d.thread_exchange_capture_mode.code(|f| unsafe { f(&mut mode) });
    assert_eq!(code, Code::CUDA_SUCCESS);
    mode
}

/// This thread's stream-capture mode. The test kit's.
pub(super) fn capture_mode() -> sys::CUstreamCaptureMode {
    let mode = exchange_capture_mode(RELAXED);
    exchange_capture_mode(mode);
    mode
}

/// This thread's calls run in relaxed capture mode from now on, as a thread that reads events
/// while other threads capture must (CUDA refuses its queries, and invalidates a global capture,
/// otherwise).
pub(super) fn relaxed_here() {
    let me = shuttle::current::me();
    with(|w| w.modes.insert(me, CaptureMode::Relaxed));
}

/// The work on `stream` does not complete until [`release`].
pub(super) fn hold(stream: &Stream) {
    let s = raw(stream);
    with(|w| w.streams.get_mut(&s).expect("a model stream").held = true);
}

/// A held stream and an event recorded on it: pending until [`release`] of the stream.
pub(super) fn pending_event() -> (Arc<Stream>, Event) {
    let held = stream();
    hold(&held);
    let event = Event::new();
    event.record(&held).unwrap();
    (held, event)
}

/// The stream's queue is full: records on it block until [`release`].
pub(super) fn fill(stream: &Stream) {
    let s = raw(stream);
    with(|w| w.streams.get_mut(&s).expect("a model stream").full = true);
}

/// The stream's work completes, its queue has room, and its queued host functions run.
pub(super) fn release(stream: &Stream) {
    let s = raw(stream);
    let host_fns = with(|w| {
        let st = w.streams.get_mut(&s).expect("a model stream");
        st.held = false;
        st.full = false;
        let host_fns = std::mem::take(&mut st.host_fns);
        for event in w.events.values_mut() {
            if let Last::OnStream { stream, done } = &mut event.last
                && *stream == s
            {
                *done = true;
            }
        }
        host_fns
    });
    for (function, data) in host_fns {
        run_host_fn(function, data);
    }
}

/// A kernel fault on `device`: its context's calls answer CUDA_ERROR_ILLEGAL_ADDRESS from now on.
pub(super) fn fault(device: i32) {
    with(|w| w.contexts[device as usize].sticky = Some(Code::CUDA_ERROR_ILLEGAL_ADDRESS));
}

/// `cudaDeviceReset` on `device`: its context gets a new id, and its events and streams are
/// destroyed (a later call with one is a use-after-free).
pub(super) fn reset(device: i32) {
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
pub(super) fn fork_here() {
    let me = shuttle::current::me();
    with(|w| w.forked = Some(me));
    crate::fork::model_set_forked(true);
}

/// Driver calls made so far in this execution, per symbol.
pub(super) fn calls() -> std::collections::HashMap<&'static str, u64> {
    with(|w| w.calls.clone())
}

/// Forgets the calls counted so far.
pub(super) fn reset_calls() {
    with(|w| w.calls.clear());
}
