//! Stream captures made by the tests themselves (the user's own graphs), through the runtime.

use crate::calls::{driver_fn, driver_ok, ok};
use cuda_event::{Stream, sys};
use std::ffi::c_void;

/// Captures `work` on `stream` (thread-local mode) into a graph and instantiates it.
pub fn capture_graph(stream: &Stream, work: impl FnOnce()) -> Graph {
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    begin_capture(
        stream,
        sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
    );
    work();
    // SAFETY: ends the capture begun above; writes the graph and its instance through live locals.
    unsafe {
        ok(sys::cudaStreamEndCapture(stream.as_raw(), &mut graph));
        ok(sys::cudaGraphInstantiate(&mut exec, graph, 0));
    }
    Graph { graph, exec }
}

/// A captured, instantiated CUDA graph; destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    graph: sys::cudaGraph_t,
    exec: sys::cudaGraphExec_t,
}

impl Graph {
    /// How many nodes the captured graph has (`cuGraphGetNodes`).
    pub fn node_count(&self) -> usize {
        node_count(self.graph)
    }

    pub fn launch(&self, stream: &Stream) {
        // SAFETY: a live graph instance and stream.
        ok(unsafe { sys::cudaGraphLaunch(self.exec, stream.as_raw()) });
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: the graph and its instance are live and destroyed once; launches have completed
        // (cudaGraphExecDestroy waits for none, but the tests synchronize first).
        unsafe {
            ok(sys::cudaGraphExecDestroy(self.exec));
            ok(sys::cudaGraphDestroy(self.graph));
        }
    }
}

/// How many nodes a live graph has (`cuGraphGetNodes`).
fn node_count(graph: sys::cudaGraph_t) -> usize {
    type GetNodes = unsafe extern "C" fn(sys::cudaGraph_t, *mut *mut c_void, *mut usize) -> sys::CUresult;
    let get_nodes: GetNodes = driver_fn(c"cuGraphGetNodes", 10000);
    let mut count = 0;
    // SAFETY: a live graph; a null node array asks for the count only, written to a live local.
    driver_ok("cuGraphGetNodes", unsafe {
        get_nodes(graph, std::ptr::null_mut(), &mut count)
    });
    count
}

/// Sets this thread's stream-capture mode (`cuThreadExchangeStreamCaptureMode`); returns the mode
/// it had.
pub fn exchange_capture_mode(mut mode: sys::CUstreamCaptureMode) -> sys::CUstreamCaptureMode {
    let exchange: sys::PFN_cuThreadExchangeStreamCaptureMode_v10010 =
        crate::driver_fn(c"cuThreadExchangeStreamCaptureMode", 10010);
    // SAFETY: exchanges this thread's mode through a live local.
    let code = unsafe { exchange.expect("resolved")(&mut mode) };
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
    mode
}

/// This thread's stream-capture mode.
pub fn capture_mode() -> sys::CUstreamCaptureMode {
    let mode = exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
    exchange_capture_mode(mode);
    mode
}

/// Begins a capture of `stream` on this thread in `mode` (end it with [`end_capture`]).
pub fn begin_capture(stream: &Stream, mode: sys::cudaStreamCaptureMode) {
    // SAFETY: a live stream; the caller ends the capture on this thread.
    ok(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), mode) });
}

/// Ends the capture of `stream` begun on this thread: the code `cudaStreamEndCapture` returned
/// and the graph it made (none when it failed, e.g. 901 for a capture another call invalidated).
pub fn end_capture(stream: &Stream) -> (sys::cudaError_t, Option<RawGraph>) {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream under a capture begun on this thread; writes through a live local.
    let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
    (code, (!graph.is_null()).then_some(RawGraph(graph)))
}

/// A captured graph, not instantiated (so never launched); destroyed on drop.
#[derive(Debug)]
pub struct RawGraph(pub sys::cudaGraph_t);

impl RawGraph {
    pub fn node_count(&self) -> usize {
        node_count(self.0)
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: a live graph, destroyed once. (No assert: this may run while a test unwinds.)
        let _ = unsafe { sys::cudaGraphDestroy(self.0) };
    }
}

/// What a capture held beside a test's calls came to: what `cudaStreamEndCapture` returned, and
/// the node count of the graph it made (none when it failed).
#[derive(Debug, PartialEq, Eq)]
pub struct CaptureEnd {
    pub code: sys::cudaError_t,
    pub nodes: Option<usize>,
}

impl CaptureEnd {
    /// Whether the capture ended valid with the one node it was given.
    pub fn is_intact(&self) -> bool {
        self.code == sys::cudaError::cudaSuccess && self.nodes == Some(1)
    }
}

/// Runs `f` on this thread while another thread holds a capture of `captured` in global mode (the
/// default of `torch.cuda.graph` and of most C++ code) with one memset in it, as a program whose
/// other thread captures a graph meanwhile; returns what `f` returned and how the capture ended.
/// The capture ends after `f`, also when `f` panics (the panic then reaches the test); then its
/// thread synchronizes the device, so `f` must leave no work held (a [`crate::HostHold`] open).
pub fn beside_a_global_capture<R>(captured: &Stream, f: impl FnOnce() -> R) -> (R, CaptureEnd) {
    let (began, begun) = std::sync::mpsc::channel();
    let (finished, done) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let capturer = s.spawn(move || {
            // Allocated before the capture: an allocation during it would break it.
            let buffer = crate::TestBuffer::new(captured.device(), 1 << 20);
            begin_capture(captured, sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal);
            buffer.memset(captured, 0);
            began.send(()).unwrap();
            // Ended also when `f` panicked (the sender then dropped).
            let _ = done.recv();
            let (code, graph) = end_capture(captured);
            CaptureEnd {
                code,
                nodes: graph.map(|graph| graph.node_count()),
            }
        });
        begun.recv().expect("the capture began");
        let out = f();
        drop(finished);
        (out, capturer.join().unwrap())
    })
}
