//! Graph mode of `measure`: a batch of repetitions captured once into a CUDA graph (each its L2
//! flush, a start event, the work, an end event) and replayed, so that the GPU runs them back to
//! back with no launch gap and the flush stays outside every interval.

use crate::capture::CrateCapture;
use crate::capture_mode::is_capture_interference;
use crate::context::{ContextInstance, MadeIn};
use crate::driver::{Driver, Entry};
use crate::error::{Error, MeasureError, Result};
use crate::stream::Stream;
use crate::timing::timer::from_ms;
use cuda_event_sys as sys;
use std::time::Duration;

/// A CUDA event of the timing module's own, recorded only as an external node of its graph;
/// destroyed with the batch, after the graph is.
struct GraphEvent(sys::CUevent);

/// A captured, instantiated batch of timed repetitions. Dropping it destroys the graph, then the
/// events: the owner drains the stream first, so no launch still uses them.
pub(crate) struct GraphBatch {
    d: &'static Driver,
    /// The context instance its graph and events were made in: a device reset destroys them, and
    /// the drop then leaves them alone.
    made_in: Option<ContextInstance>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The intervals' events, in the order the caller recorded them.
    events: Vec<(GraphEvent, GraphEvent)>,
}

/// What a capture's recorder gets: the start and end event of the next interval, to record around
/// that interval's work with [`GraphBatch::record`].
pub(crate) struct Interval {
    start: sys::CUevent,
    end: sys::CUevent,
}

impl GraphBatch {
    /// Captures on `stream` (thread-local mode: other threads' CUDA calls cannot invalidate it)
    /// what `queue` submits, given `intervals` pairs of events to record, and instantiates it.
    /// The caller's context is current. Returns `queue`'s error as is (after ending the capture,
    /// unless a device reset destroyed the stream), or [`MeasureError::NotCapturable`] when CUDA refused the capture.
    pub(crate) fn capture<E: From<Error>>(
        d: &'static Driver,
        stream: &Stream,
        intervals: usize,
        queue: impl FnOnce(&[Interval]) -> std::result::Result<(), E>,
    ) -> std::result::Result<GraphBatch, E> {
        let made_in = ContextInstance::of_primary(d, stream.device()).ok();
        let mut batch = GraphBatch {
            d,
            made_in,
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            events: Vec::with_capacity(intervals),
        };
        for _ in 0..intervals {
            let start = GraphEvent::new(d)?;
            match GraphEvent::new(d) {
                Ok(end) => batch.events.push((start, end)),
                Err(e) => {
                    start.destroy(made_in);
                    return Err(e.into());
                }
            }
        }
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // As `Stream::capture`'s: the crate's records on the stream and forks from it (the work's
        // `Event::wait`s) know it, and none overlaps its end.
        // The device's primary context's instance: a borrowed stream has none of its own.
        let capture = match CrateCapture::begin(d, stream, MadeIn::new(stream.device(), made_in), mode) {
            Ok(capture) => capture,
            Err(code) => {
                let hint = "the legacy default stream cannot be captured: use a created stream";
                let refused = check_step(&d.stream_begin_capture, "beginning the capture", code, hint);
                return Err(refused
                    .err()
                    .unwrap_or_else(|| d.stream_begin_capture.error(code))
                    .into());
            }
        };
        let recorded: Vec<Interval> = batch
            .events
            .iter()
            .map(|(start, end)| Interval {
                start: start.0,
                end: end.0,
            })
            .collect();
        // Ended whatever happens, a panic in `queue` included, so that the stream is usable again.
        if let Err(e) = queue(&recorded) {
            // The drop ends the capture and destroys its graph, unless a device reset in the
            // caller's work (the error the check after that work returns) destroyed the stream:
            // ending it then would be a call on a freed stream.
            drop(capture);
            return Err(e);
        }
        let code = capture.end(&mut batch.graph)?;
        check_step(
            &d.stream_end_capture,
            "ending the capture",
            code,
            "the work waited on the host, used another stream without joining it back, or made a \
             call that a capture does not allow",
        )?;
        // SAFETY: instantiates the graph just captured; writes the instance through a field of a
        // live local.
        let code = d
            .graph_instantiate
            .code(|f| unsafe { f(&mut batch.exec, batch.graph, 0) });
        check_step(&d.graph_instantiate, "instantiating the graph", code, "")?;
        Ok(batch)
    }

    /// Records, during the capture, `interval`'s start (`end: false`) or end event on `stream` as
    /// an external node: every launch of the graph records it.
    pub(crate) fn record(d: &Driver, interval: &Interval, end: bool, stream: &Stream) -> Result<()> {
        let event = if end { interval.end } else { interval.start };
        let raw = stream.as_raw();
        let recorded = d.event_record_with_flags.call(|f| {
            // SAFETY: an event of the batch and the stream being captured, of one context; the
            // flag is a record flag.
            unsafe { f(event, raw, sys::cudaEventRecordExternal) }
        });
        in_capture(recorded, "recording a timing event")
    }

    /// How many intervals each replay times.
    pub(crate) fn intervals(&self) -> usize {
        self.events.len()
    }

    /// Queues one replay of the batch on `stream`.
    pub(crate) fn launch(&self, stream: &Stream) -> Result<()> {
        let raw = stream.as_raw();
        // As `Graph::launch`'s: no begin or end of a capture the crate makes of the stream beside it.
        let _gate = stream.gate().shared();
        // SAFETY: a live instance of this batch's graph, launched on the stream it was captured on.
        self.d.graph_launch.call(|f| unsafe { f(self.exec, raw) })
    }

    /// Interval `i`'s GPU time in the last replay, which has completed.
    pub(crate) fn elapsed(&self, i: usize) -> Result<Duration> {
        let (start, end) = (&self.events[i].0, &self.events[i].1);
        let mut ms = 0.0;
        self.d.event_elapsed_time.call(|f| {
            // SAFETY: two events of this batch, recorded by the completed replay; writes through
            // a live local.
            unsafe { f(&mut ms, start.0, end.0) }
        })?;
        Ok(from_ms(ms))
    }
}

impl Drop for GraphBatch {
    fn drop(&mut self) {
        // Errors here are the context's own (a fault), which the measurement reported; after a
        // reset nothing is destroyed again.
        let (exec, graph, events) = (self.exec, self.graph, std::mem::take(&mut self.events));
        let _ = ContextInstance::destroy_unless_reset(self.made_in, |d| {
            if !exec.is_null() {
                // SAFETY: the instance made in capture, destroyed once; no launch is pending: its
                // sampler keeps it until the stream is drained (where the drain failed, the
                // context is dead and runs nothing).
                let _ = d.graph_exec_destroy.code(|f| unsafe { f(exec) });
            }
            if !graph.is_null() {
                // SAFETY: the graph made in capture, destroyed once, after its instance.
                let _ = d.graph_destroy.code(|f| unsafe { f(graph) });
            }
            for (start, end) in events {
                start.destroy_in(d);
                end.destroy_in(d);
            }
            Ok(())
        });
    }
}

impl GraphEvent {
    /// A timing event in the current context.
    fn new(d: &Driver) -> Result<GraphEvent> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one handle through a live local; flags 0 make a timing event.
        d.event_create.call(|f| unsafe { f(&mut raw, 0) })?;
        Ok(GraphEvent(raw))
    }

    /// Destroys it unless a device reset already did.
    fn destroy(self, made_in: Option<ContextInstance>) {
        let _ = ContextInstance::destroy_unless_reset(made_in, |d| {
            self.destroy_in(d);
            Ok(())
        });
    }

    /// Destroys it; the caller checked that no reset did.
    fn destroy_in(self, d: &Driver) {
        // SAFETY: an event made by `new`, destroyed once, after every graph that held it.
        let _ = d.event_destroy.code(|f| unsafe { f(self.0) });
    }
}

/// The result of one of the sampler's own steps (`step`): in a capture (`capturing`), an error
/// that the capture caused is [`MeasureError::NotCapturable`] ([`in_capture`]).
pub(crate) fn our_step(capturing: bool, result: Result<()>, step: &str) -> Result<()> {
    match capturing {
        true => in_capture(result, step),
        false => result,
    }
}

/// `result` of the crate's own call inside the capture (a timing event's record, the flush): an
/// error that the capture caused (an earlier call in the work broke it) as
/// [`MeasureError::NotCapturable`].
fn in_capture(result: Result<()>, step: &str) -> Result<()> {
    match result {
        Err(Error::Cuda(e)) if is_capture_interference(&Error::Cuda(e.clone())) => {
            Err(MeasureError::NotCapturable {
                reason: format!(
                    "{step}: {e} (a call earlier in the work broke the capture: one that a capture \
                 refuses, such as a query or a synchronize, whose error the work did not return)"
                ),
            }
            .into())
        }
        other => other,
    }
}

/// `code` of a capture step (a call of `entry`) as [`MeasureError::NotCapturable`], naming the step,
/// CUDA's answer and what usually causes it.
fn check_step<F: Copy>(entry: &Entry<F>, step: &str, code: sys::CUresult, hint: &str) -> Result<()> {
    match entry.check(code) {
        Err(Error::Cuda(e)) if hint.is_empty() => Err(MeasureError::NotCapturable {
            reason: format!("{step}: {e}"),
        }
        .into()),
        Err(Error::Cuda(e)) => Err(MeasureError::NotCapturable {
            reason: format!("{step}: {e} ({hint})"),
        }
        .into()),
        other => other,
    }
}
