//! Stream captures made by the tests themselves (the user's own graphs), through the runtime.
//!
//! [`begin_capture`], [`end_capture`], [`beside_a_global_capture`] and the modes ([`GLOBAL`],
//! [`THREAD_LOCAL`], [`RELAXED`]: the driver's `CUstreamCaptureMode`) are also the words of the
//! driver model's scenario kit (cuda-event/src/model/tests/scenario.rs), with the same argument
//! types and the same shapes returned, so that a capture scenario reads the same against the model
//! and on a GPU.

use crate::calls::{driver_fn, driver_ok, ok};
use cuda_event::{Stream, sys};
use std::ffi::c_void;

/// Captures `work` on `stream` (thread-local mode) into a graph and instantiates it.
pub fn capture_graph(stream: &Stream, work: impl FnOnce()) -> Graph {
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    begin_capture(stream, THREAD_LOCAL);
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

/// A capture that every other thread's unsafe call invalidates (a query, an allocation): the
/// default of `torch.cuda.graph` and of most C++ code.
pub const GLOBAL: sys::CUstreamCaptureMode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
/// A capture that only its own thread's unsafe calls invalidate.
pub const THREAD_LOCAL: sys::CUstreamCaptureMode =
    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
/// A capture that no unsafe call invalidates, and that any thread may end.
pub const RELAXED: sys::CUstreamCaptureMode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

/// Begins a capture of `stream` on this thread in `mode` (end it with [`end_capture`]).
///
/// The mode is the driver's type, as the driver model's scenario kit takes it
/// (cuda-event/src/model/tests/scenario.rs), so that a capture scenario reads the same against the
/// model and on a GPU; the call is the runtime's (`cudaStreamBeginCapture`), converted at this seam.
pub fn begin_capture(stream: &Stream, mode: sys::CUstreamCaptureMode) {
    // SAFETY: a live stream; the caller ends the capture on this thread.
    ok(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), runtime_mode(mode)) });
}

/// The runtime's name for a driver capture mode.
fn runtime_mode(mode: sys::CUstreamCaptureMode) -> sys::cudaStreamCaptureMode {
    use sys::cudaStreamCaptureMode as Runtime;
    match mode {
        GLOBAL => Runtime::cudaStreamCaptureModeGlobal,
        THREAD_LOCAL => Runtime::cudaStreamCaptureModeThreadLocal,
        RELAXED => Runtime::cudaStreamCaptureModeRelaxed,
        other => panic!("no such capture mode: {}", other.0),
    }
}

/// Ends the capture of `stream` begun on this thread (`cudaStreamEndCapture`): the graph it made,
/// or, when it made none, what the end answered (901 for a capture another call invalidated).
/// The same shape as the model's scenario kit's.
pub fn end_capture(stream: &Stream) -> Result<RawGraph, CaptureFailed> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream under a capture begun on this thread; writes through a live local.
    let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
    // `then`, not `then_some`: a `RawGraph` of the null graph, made and dropped, would destroy it.
    let graph = (!graph.is_null()).then(|| RawGraph(graph));
    match (code, graph) {
        (sys::cudaError::cudaSuccess, Some(graph)) => Ok(graph),
        (code, _) => Err(CaptureFailed {
            code: code.0,
            why: format!("cudaStreamEndCapture answered {}", error_name(code)),
        }),
    }
}

/// The runtime's name of an error code (`cudaGetErrorName`).
fn error_name(code: sys::cudaError_t) -> String {
    // SAFETY: cudaGetErrorName returns a static string for any code.
    let name = unsafe { sys::cudaGetErrorName(code) };
    if name.is_null() {
        return format!("error {}", code.0);
    }
    // SAFETY: a NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// A capture that did not end as it should: made no graph, or (beside [`beside_a_global_capture`])
/// not the graph it was given. The same shape as the model's scenario kit's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureFailed {
    /// What the capture's end answered: CUDA's number, which the runtime and the driver share for
    /// the capture errors (901 for a capture another call invalidated, 908 for an end on the wrong
    /// thread); 0 when the end succeeded with a graph other than the one captured.
    pub code: u32,
    /// Why, in words.
    pub why: String,
}

impl std::fmt::Display for CaptureFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.why, self.code)
    }
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

/// Runs `f` on this thread while another thread holds a capture of `captured` in global mode (the
/// default of `torch.cuda.graph` and of most C++ code) with one memset in it, as a program whose
/// other thread captures a graph meanwhile; returns what `f` returned and how the capture ended:
/// `Ok` when it ended valid with that one memset as its graph. The same shape as the model's
/// scenario kit's. The capture ends after `f`, also when `f` panics (the panic then reaches the
/// test); then its thread synchronizes the device, so `f` must leave no work held (a
/// [`crate::HostHold`] open).
pub fn beside_a_global_capture<R>(
    captured: &Stream,
    f: impl FnOnce() -> R,
) -> (R, Result<(), CaptureFailed>) {
    let (began, begun) = std::sync::mpsc::channel();
    let (finished, done) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let capturer = s.spawn(move || {
            // Allocated before the capture: an allocation during it would break it.
            let buffer = crate::TestBuffer::new(captured.device(), 1 << 20);
            begin_capture(captured, GLOBAL);
            buffer.memset(captured, 0);
            began.send(()).unwrap();
            // Ended also when `f` panicked (the sender then dropped).
            let _ = done.recv();
            end_capture(captured).and_then(|graph| match graph.node_count() {
                1 => Ok(()),
                nodes => Err(CaptureFailed {
                    code: 0,
                    why: format!("the capture ended valid with {nodes} nodes, not its one memset"),
                }),
            })
        });
        begun.recv().expect("the capture began");
        let out = f();
        drop(finished);
        (out, capturer.join().unwrap())
    })
}
