//! Stream captures: a thread's capture mode, a capture's begin and end, and what CUDA answers of a
//! stream's capture (`cuStreamIsCapturing`, `cuStreamGetCaptureInfo`).

use super::{OK, call, handle, id, in_flight};
use crate::model::world::{BROKEN, Capture, CaptureMode, Code, Op, run_destructors, with};
use cuda_event_sys as sys;

pub(super) unsafe extern "C" fn stream_is_capturing(
    stream: sys::CUstream,
    status: *mut sys::CUstreamCaptureStatus,
) -> Code {
    let s = id(stream);
    call("cuStreamIsCapturing", |w, _| {
        let Some(capture) = w.stream(s, "cuStreamIsCapturing").map(|st| st.capture) else {
            return BROKEN;
        };
        let answer = match capture.map(|c| &w.captures[&c]) {
            Some(capture) if capture.open && capture.invalidated.is_some() => {
                sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
            }
            Some(capture) if capture.open => sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
            _ => sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
        };
        // SAFETY: a live out-pointer.
        unsafe { *status = answer };
        OK
    })
}

pub(super) unsafe extern "C" fn thread_exchange_capture_mode(mode: *mut sys::CUstreamCaptureMode) -> Code {
    call("cuThreadExchangeStreamCaptureMode", |w, me| {
        // SAFETY: a live in-out pointer.
        let asked = CaptureMode::from_driver(unsafe { *mode });
        let old = w.modes.insert(me, asked).unwrap_or(CaptureMode::Global);
        // SAFETY: as above.
        unsafe { *mode = old.to_driver() };
        OK
    })
}

pub(super) unsafe extern "C" fn stream_begin_capture(
    stream: sys::CUstream,
    mode: sys::CUstreamCaptureMode,
) -> Code {
    let s = id(stream);
    call("cuStreamBeginCapture", |w, me| {
        if w.stream(s, "cuStreamBeginCapture").is_none() {
            return BROKEN;
        }
        if w.capture_of(s).is_some() {
            return Code::CUDA_ERROR_ILLEGAL_STATE;
        }
        let capture = w.new_handle();
        let graph = w.new_handle();
        w.captures.insert(
            capture,
            Capture {
                origin: s,
                mode: CaptureMode::from_driver(mode),
                thread: me,
                holds: Default::default(),
                open: true,
                invalidated: None,
                graph,
            },
        );
        w.streams.get_mut(&s).expect("checked").capture = Some(capture);
        OK
    })
}

pub(super) unsafe extern "C" fn stream_end_capture(stream: sys::CUstream, graph: *mut sys::CUgraph) -> Code {
    let s = id(stream);
    let Some(capture) = with(|w| w.capture_of(s)) else {
        return Code::CUDA_ERROR_ILLEGAL_STATE;
    };
    let held: Vec<u64> = with(|w| w.captures[&capture].holds.iter().copied().collect());
    let mut destructors = Vec::new();
    let code = in_flight("cuStreamEndCapture", &[Op::EndCapture(capture, held)], |w, me| {
        let cap = w.captures.get_mut(&capture).expect("kept");
        if cap.origin != s {
            return Some(Code::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
        }
        if cap.mode != CaptureMode::Relaxed && cap.thread != me {
            return Some(Code::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        }
        cap.open = false;
        let (invalidated, g) = (cap.invalidated.is_some(), cap.graph);
        for st in w.streams.values_mut().filter(|st| st.capture == Some(capture)) {
            st.capture = None;
        }
        if invalidated {
            // The graph is destroyed with the failed end.
            let objects = w.graph_objects.remove(&g).unwrap_or_default();
            destructors = w.release_objects(&objects);
            // SAFETY: a live out-pointer.
            unsafe { *graph = std::ptr::null_mut() };
            return Some(Code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        w.graphs.insert(g);
        // SAFETY: a live out-pointer.
        unsafe { *graph = handle(g) };
        Some(OK)
    });
    run_destructors(destructors);
    code
}

pub(super) unsafe extern "C" fn stream_get_capture_info(
    stream: sys::CUstream,
    status: *mut sys::CUstreamCaptureStatus,
    capture_id: *mut sys::cuuint64_t,
    graph: *mut sys::CUgraph,
    dependencies: *mut *const sys::CUgraphNode,
    count: *mut usize,
) -> Code {
    let s = id(stream);
    let symbol = "cuStreamGetCaptureInfo";
    let ops: Vec<Op> = with(|w| w.capture_of(s))
        .map(Op::IntoCapture)
        .into_iter()
        .collect();
    in_flight(symbol, &ops, |w, _| {
        let Some(capture) = w.stream(s, symbol).map(|st| st.capture) else {
            return Some(BROKEN);
        };
        let (answer, c, g) = match capture.map(|c| (c, &w.captures[&c])) {
            Some((c, capture)) if capture.open && capture.invalidated.is_some() => (
                sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED,
                c,
                capture.graph,
            ),
            Some((c, capture)) if capture.open => (
                sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
                c,
                capture.graph,
            ),
            _ => (sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE, 0, 0),
        };
        // SAFETY: live out-pointers (the optional ones checked for null).
        unsafe {
            *status = answer;
            if !capture_id.is_null() {
                *capture_id = c;
            }
            if !graph.is_null() {
                *graph = handle(g);
            }
            if !dependencies.is_null() {
                *dependencies = std::ptr::null();
            }
            if !count.is_null() {
                *count = 0;
            }
        }
        Some(OK)
    })
}
