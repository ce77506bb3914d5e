//! Streams: a wait on an event (which joins, merges or breaks captures as CUDA does), their
//! synchronize, query, priority and destroy. They are made by the runtime ([`super::runtime`]).

use super::{OK, call, id, in_flight};
use crate::model::world::{BROKEN, Code, Last, Op, source};
use cuda_event_sys as sys;
use std::ffi::{c_int, c_uint};

pub(super) unsafe extern "C" fn stream_wait_event(
    stream: sys::CUstream,
    event: sys::CUevent,
    flags: c_uint,
) -> Code {
    let (s, e) = (id(stream), id(event));
    let symbol = "cuStreamWaitEvent";
    let external = flags & sys::cudaEventWaitExternal != 0;
    in_flight(symbol, &[Op::Read(symbol, e)], |w, _| {
        let Some(device) = w.stream(s, symbol).map(|st| st.device) else {
            return Some(BROKEN);
        };
        let Some(last) = w.event(e, symbol).map(|event| event.last) else {
            return Some(BROKEN);
        };
        if let Some(sticky) = w.sticky(device) {
            return Some(sticky);
        }
        // source::P5_ISOLATION, for each refusal below.
        let waiting_in = w.capture_of(s);
        if waiting_in.is_some_and(|c| w.captures[&c].invalidated.is_some()) {
            return Some(Code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        match (last, waiting_in) {
            (Last::InCapture(capture), _) if !w.captures[&capture].open => {
                return Some(Code::CUDA_ERROR_INVALID_VALUE);
            }
            (Last::InCapture(capture), Some(other)) if other != capture && !external => {
                for c in [capture, other] {
                    let cap = w.captures.get_mut(&c).expect("open");
                    cap.invalidated.get_or_insert_with(|| {
                        format!("{symbol} merged two captures ({})", source::P5_ISOLATION)
                    });
                }
                return Some(Code::CUDA_ERROR_STREAM_CAPTURE_MERGE);
            }
            (Last::InCapture(capture), _) => {
                // CUDA's multi-stream capture: the waiting stream joins the capture.
                let st = w.streams.get_mut(&s).expect("checked");
                if st.capture.is_none() {
                    st.capture = Some(capture);
                }
            }
            (Last::OnStream { .. }, Some(other)) if !external => {
                let cap = w.captures.get_mut(&other).expect("open");
                cap.invalidated.get_or_insert_with(|| {
                    format!(
                        "{symbol}: a plain wait on an event recorded outside the capture ({})",
                        source::P5_ISOLATION
                    )
                });
                return Some(Code::CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
            }
            _ => {}
        }
        Some(OK)
    })
}

pub(super) unsafe extern "C" fn stream_synchronize(stream: sys::CUstream) -> Code {
    let s = id(stream);
    in_flight("cuStreamSynchronize", &[], |w, me| {
        if let Some(refused) = w.prohibited_by_a_capture(me, "cuStreamSynchronize") {
            return Some(refused);
        }
        let Some((device, held)) = w.stream(s, "cuStreamSynchronize").map(|st| (st.device, st.held)) else {
            return Some(BROKEN);
        };
        if let Some(sticky) = w.sticky(device) {
            return Some(sticky);
        }
        (!held).then_some(OK)
    })
}

pub(super) unsafe extern "C" fn stream_query(stream: sys::CUstream) -> Code {
    let s = id(stream);
    in_flight("cuStreamQuery", &[], |w, me| {
        if let Some(refused) = w.prohibited_by_a_capture(me, "cuStreamQuery") {
            return Some(refused);
        }
        let Some((device, held)) = w.stream(s, "cuStreamQuery").map(|st| (st.device, st.held)) else {
            return Some(BROKEN);
        };
        Some(match (w.sticky(device), held) {
            (Some(sticky), _) => sticky,
            (None, true) => Code::CUDA_ERROR_NOT_READY,
            (None, false) => OK,
        })
    })
}

pub(super) unsafe extern "C" fn stream_get_priority(stream: sys::CUstream, priority: *mut c_int) -> Code {
    call("cuStreamGetPriority", |w, _| {
        if w.stream(id(stream), "cuStreamGetPriority").is_none() {
            return BROKEN;
        }
        // SAFETY: a live out-pointer.
        unsafe { *priority = 0 };
        OK
    })
}

pub(super) unsafe extern "C" fn stream_destroy(stream: sys::CUstream) -> Code {
    let s = id(stream);
    call("cuStreamDestroy", |w, _| {
        if w.stream(s, "cuStreamDestroy").is_none() {
            return BROKEN;
        }
        w.streams.remove(&s);
        w.destroyed.insert(s);
        OK
    })
}
