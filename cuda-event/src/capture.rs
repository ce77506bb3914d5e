//! Graph capture through the crate: [`Stream::capture`] begins a capture, runs the caller's work,
//! ends it and returns the [`Graph`], which [`Graph::launch`] replays.
//!
//! The crate ends such a capture itself, so it knows the moment the end has returned: the CUDA
//! events that records made through the crate took into it (see `event::captured`) are free for
//! other captures from then on, instead of once the graph is destroyed.
//!
//! [`set_capture_checks`] (unsafe) turns off the check that every record makes of whether its stream
//! is being captured, for a program that never captures the streams it records on.

pub use crate::event::capture_checks::set_capture_checks;

use crate::capture_mode::RelaxedCapture;
use crate::context::{ContextInstance, MadeIn};
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::captured;
use crate::stream::Stream;
use crate::sync::Mutex;
use cuda_event_sys as sys;
use std::sync::Arc;

/// How a capture restricts other CUDA calls while it is open (`cudaStreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureMode {
    /// Potentially unsafe calls (synchronizes, queries, allocations...) are refused on every thread
    /// whose own mode is global (torch.cuda.graph's default).
    Global,
    /// Such calls are refused on the capturing thread only.
    ThreadLocal,
    /// No call is refused; the capture may be ended on another thread.
    Relaxed,
}

impl CaptureMode {
    fn to_driver(self) -> sys::CUstreamCaptureMode {
        match self {
            CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// A CUDA graph captured with [`Stream::capture`]: instantiated at its first launch, destroyed on
/// drop (with its instance; a launch in flight finishes first, as `cuGraphExecDestroy` allows).
#[must_use = "a captured graph does nothing until launched, and is destroyed when dropped"]
pub struct Graph {
    made_in: Option<ContextInstance>,
    device: i32,
    graph: sys::CUgraph,
    exec: Mutex<sys::CUgraphExec>,
}

// SAFETY: graph handles may be used from any thread; the instance is made and read under a lock.
unsafe impl Send for Graph {}
// SAFETY: as for Send; every method takes &self and the only mutable state is behind the lock.
unsafe impl Sync for Graph {}

impl Stream {
    /// Captures into a graph the work that `work` submits to this stream (and to the streams it
    /// forks into through the crate's waits), and returns it. The capture is ended whatever `work`
    /// returns, and if it panics; `work`'s error is returned as is.
    ///
    /// ```no_run
    /// use cuda_event::{Event, Stream};
    /// use cuda_event::capture::CaptureMode;
    /// # fn main() -> cuda_event::Result<()> {
    /// let (stream, side) = (Stream::new(0)?, Stream::new(0)?);
    /// let graph = stream.capture(CaptureMode::ThreadLocal, |s| {
    ///     // ... submit work to s.as_raw() ...
    ///     side.wait_stream(s)?;                    // fork: side joins the capture
    ///     // ... submit work to side.as_raw() ...
    ///     s.wait_stream(&side)                     // join back before the end
    /// })?;
    /// graph.launch(&stream)?;                      // replays it
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// CUDA's error when the capture cannot begin (the legacy default stream, a stream already
    /// being captured) or ends invalid (the work made a call the mode forbids, or did not join a
    /// forked stream back); [`Error::DeviceWasReset`] where a reset (made by the work, say)
    /// destroyed the stream before the end, which is then not made.
    #[doc(alias = "cudaStreamBeginCapture")]
    #[doc(alias = "cudaStreamEndCapture")]
    pub fn capture(&self, mode: CaptureMode, work: impl FnOnce(&Stream) -> Result<()>) -> Result<Graph> {
        let d = driver("Stream::capture")?;
        self.made_in().ensure_alive(d, None)?;
        let made_in = ContextInstance::of_primary(d, self.device()).ok();
        self.in_context(d, || {
            // A borrowed or per-thread stream has no instance of its own: the primary context's
            // stands in, as for measure's.
            let instance = self.made_in().instance().or(made_in);
            let capture =
                CrateCapture::begin(d, self, MadeIn::new(self.device(), instance), mode.to_driver())
                    .map_err(|code| d.stream_begin_capture.error(code))?;
            let worked = work(self);
            let mut graph = std::ptr::null_mut();
            let ended = capture
                .end(&mut graph)
                .and_then(|code| d.stream_end_capture.check(code))
                .map(|()| graph);
            let graph = ended.map(|graph| Graph {
                made_in,
                device: self.device(),
                graph,
                exec: Mutex::new(std::ptr::null_mut()),
            });
            worked?;
            graph
        })
    }
}

/// A capture of a stream that the crate begins and ends ([`Stream::capture`], `measure`'s graph
/// mode): listed in the stream's capture gate from its begin to its end, so that the crate's
/// records on the stream and forks from it (`Event::wait`) know it without asking CUDA, and ended
/// apart from them and from records into it, so that none overlaps the end. Ended on drop if not
/// before (the captured work failed or panicked), its graph then destroyed.
pub(crate) struct CrateCapture<'s> {
    d: &'static Driver,
    stream: &'s Stream,
    /// Where the stream was made, for the check that no device reset destroyed it before the end.
    made_in: MadeIn,
    /// The capture as the crate's captured events know it (none where CUDA would not say).
    capture: Option<Arc<captured::Capture>>,
    /// [`end`](Self::end) ran: nothing for the drop to do.
    ended: bool,
}

impl<'s> CrateCapture<'s> {
    /// Begins a capture of `stream` (a live stream whose context is current, made in `made_in`,
    /// which a device reset destroys) in `mode`; CUDA's code where it would not begin.
    pub(crate) fn begin(
        d: &'static Driver,
        stream: &'s Stream,
        made_in: MadeIn,
        mode: sys::CUstreamCaptureMode,
    ) -> std::result::Result<CrateCapture<'s>, sys::CUresult> {
        let raw = stream.as_raw();
        // No record the crate makes on the stream straddles the begin.
        let mut alone = stream.gate().exclusive();
        // SAFETY: a live stream; capture only changes how later work on it is queued.
        let code = d.stream_begin_capture.code(|f| unsafe { f(raw, mode) });
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(code);
        }
        let capture = match captured::capture_of(d, stream) {
            Ok(captured::Capturing::Into(capture)) => {
                capture.to_be_ended_by_the_crate();
                alone.began(capture.clone());
                Some(capture)
            }
            _ => None,
        };
        Ok(CrateCapture {
            d,
            stream,
            made_in,
            capture,
            ended: false,
        })
    }

    /// Ends the capture, writing the graph through `graph` (null if the capture failed), apart
    /// from the crate's records on its stream (the stream's gate) and into it or forks from it on
    /// any stream (the capture's own); CUDA's code. [`Error::DeviceWasReset`] where a reset (made
    /// by the captured work, say) destroyed the stream and the capture with it: then no CUDA call,
    /// the stream leaves its gate and the capture is over.
    pub(crate) fn end(mut self, graph: &mut sys::CUgraph) -> Result<sys::CUresult> {
        self.ended = true;
        self.end_into(graph)
    }

    fn end_into(&self, graph: &mut sys::CUgraph) -> Result<sys::CUresult> {
        // The captured work forked, and this is the child: no lock, no CUDA call (see `fork`).
        crate::fork::refuse_in_forked_child()?;
        let (d, stream) = (self.d, self.stream.as_raw());
        let mut alone = self.stream.gate().exclusive();
        if let Err(reset) = self.made_in.ensure_alive(d, None) {
            if let Some(capture) = &self.capture {
                capture.destroyed();
            }
            alone.ended();
            return Err(reset);
        }
        let mut code = sys::CUresult::CUDA_SUCCESS;
        let mut end = || {
            // SAFETY: the stream this capture began on; writes the graph through a live reference.
            code = d.stream_end_capture.code(|f| unsafe { f(stream, graph) });
            d.stream_end_capture.check(code)
        };
        let _ = match &self.capture {
            Some(capture) => capture.end(end),
            None => end(),
        };
        alone.ended();
        Ok(code)
    }
}

impl Drop for CrateCapture<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // After a reset (a panic in the captured work can follow one) the stream is gone: the end
        // makes no CUDA call then.
        let mut graph = std::ptr::null_mut();
        if self.end_into(&mut graph).is_ok() && !graph.is_null() {
            // SAFETY: the graph just ended, never instantiated or shared; destroyed once.
            let _ = self.d.graph_destroy.code(|f| unsafe { f(graph) });
        }
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("graph", &self.graph)
            .field("device", &self.device)
            .field("instantiated", &!self.exec.lock().is_null())
            .finish()
    }
}

impl Graph {
    /// Queues one replay of the graph on `stream` (instantiating it at the first launch); await
    /// it with [`Stream::completion`] or an event recorded after it.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device; CUDA's errors otherwise.
    #[doc(alias = "cudaGraphLaunch")]
    #[doc(alias = "cudaGraphInstantiate")]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(Error::DeviceMismatch {
                event: self.device,
                stream: stream.device(),
            });
        }
        let d = driver("Graph::launch")?;
        // The graph's instance as well as the stream's: a reset destroyed the graph with it.
        let graphs = MadeIn::new(self.device, self.made_in);
        MadeIn::ensure_both_alive(d, graphs, stream.made_in(), None)?;
        let mut exec = self.exec.lock();
        if exec.is_null() {
            let (_, _current) = ContextInstance::enter_primary(d, self.device)?;
            let graph = self.graph;
            // Relaxed: beside another thread's global-mode capture, CUDA refuses an instantiation
            // made in global mode and invalidates that capture (capture_unsafe_calls).
            let _relaxed = RelaxedCapture::enter(d);
            // SAFETY: a live graph; writes the instance through a live reference.
            d.graph_instantiate.call(|f| unsafe { f(&mut *exec, graph, 0) })?;
        }
        let (exec, raw) = (*exec, stream.as_raw());
        // A launch on a stream being captured adds to the capture, as a record does: no begin or
        // end of a capture the crate makes of the stream falls beside it (`capture_gate`).
        let _gate = stream.gate().shared();
        stream.in_context(d, || {
            // SAFETY: a live instance of this graph, on a live stream of its device.
            d.graph_launch.call(|f| unsafe { f(exec, raw) })
        })
    }

    /// [`launch`](Self::launch), then a future that resolves once that replay (and all the work
    /// queued on `stream` before it) has completed, as [`Stream::completion`].
    ///
    /// ```no_run
    /// # use cuda_event::{Result, Stream, capture::Graph};
    /// # async fn example(graph: &Graph, stream: &Stream) -> Result<()> {
    /// graph.launch_completion(stream)?.await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Those of [`launch`](Self::launch); the future's, as [`Stream::completion`]'s.
    pub fn launch_completion(&self, stream: &Stream) -> Result<crate::Completion<'static>> {
        self.launch(stream)?;
        Ok(stream.completion())
    }

    /// The raw graph, for CUDA's graph API (it stays owned by this `Graph`).
    pub fn as_raw(&self) -> sys::CUgraph {
        self.graph
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let (exec, graph) = (*self.exec.get_mut(), self.graph);
        crate::drop_errors::report(ContextInstance::destroy_unless_reset(self.made_in, |d| {
            if !exec.is_null() {
                // Relaxed, as for the instantiation: a global-mode destroy breaks another
                // thread's global-mode capture.
                let _relaxed = RelaxedCapture::enter(d);
                // SAFETY: this graph's instance, destroyed once; a launch in flight completes.
                d.graph_exec_destroy.call(|f| unsafe { f(exec) })?;
            }
            // SAFETY: the graph, destroyed once, after its instance.
            d.graph_destroy.call(|f| unsafe { f(graph) })
        }));
    }
}
