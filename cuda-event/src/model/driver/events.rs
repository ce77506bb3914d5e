//! Events: their creation, records (on a stream, into a capture, external), reads (query,
//! synchronize, elapsed time, IPC export) and destroy; each record and read is in flight (see
//! [`super`]).

use super::{OK, call, handle, id, in_flight};
use crate::model::world::{BROKEN, Code, EventState, Last, Op, World, source, with};
use cuda_event_sys as sys;
use shuttle::current::TaskId;
use std::ffi::{c_char, c_uint};

pub(super) unsafe extern "C" fn event_create(event: *mut sys::CUevent, flags: c_uint) -> Code {
    call("cuEventCreate", |w, me| {
        let Some(&device) = w.context_stack.get(&me).and_then(|stack| stack.last()) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        if let Some(sticky) = w.sticky(device) {
            return sticky;
        }
        let raw = w.new_handle();
        w.events.insert(
            raw,
            EventState {
                device,
                flags,
                last: Last::Never,
            },
        );
        // SAFETY: a live out-pointer.
        unsafe { *event = handle(raw) };
        OK
    })
}

/// The op a record of `event` on `stream` is, decided when it is called.
fn record_ops(event: u64, stream: u64, external: bool) -> Vec<Op> {
    with(|w| match w.capture_of(stream) {
        Some(c) if external => vec![Op::RecordExternal(event), Op::IntoCapture(c)],
        Some(c) => vec![Op::RecordCaptured(event), Op::IntoCapture(c)],
        None => vec![Op::RecordPlain(event)],
    })
}

fn record(symbol: &'static str, event: sys::CUevent, stream: sys::CUstream, external: bool) -> Code {
    let (e, s) = (id(event), id(stream));
    let ops = record_ops(e, s, external);
    in_flight(symbol, &ops, |w, _| {
        let Some(st) = w.stream(s, symbol) else {
            return Some(BROKEN);
        };
        let (device, full, held) = (st.device, st.full, st.held);
        let Some(event) = w.event(e, symbol) else {
            return Some(BROKEN);
        };
        let (event_device, flags) = (event.device, event.flags);
        if event_device != device {
            return Some(Code::CUDA_ERROR_INVALID_HANDLE);
        }
        if let Some(sticky) = w.sticky(device) {
            return Some(sticky);
        }
        let interprocess = flags & sys::cudaEventInterprocess != 0;
        if w.capture_of(s)
            .is_some_and(|c| w.captures[&c].invalidated.is_some())
        {
            return Some(Code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); // source::P5_ISOLATION (c)
        }
        match w.capture_of(s) {
            // Refused, the capture left valid (two-events, probe_destroy_ipc.txt).
            Some(_) if interprocess && !external => return Some(Code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
            Some(_) if external => {} // a node of the graph: the event itself is untouched
            Some(capture) => {
                // An earlier capture may go on holding it (not probed): kept in its holds.
                w.captures.get_mut(&capture).expect("open").holds.insert(e);
                w.events.get_mut(&e).expect("checked").last = Last::InCapture(capture);
            }
            None if full => return None, // blocks until the queue has room
            None => {
                // A record outside the capture releases the event from it (capphase-rerecorded-before-the-end).
                for other in w.captures.values_mut() {
                    other.holds.remove(&e);
                }
                w.events.get_mut(&e).expect("checked").last = Last::OnStream {
                    stream: s,
                    done: !held,
                };
            }
        }
        Some(OK)
    })
}

pub(super) unsafe extern "C" fn event_record(event: sys::CUevent, stream: sys::CUstream) -> Code {
    record("cuEventRecord", event, stream, false)
}

pub(super) unsafe extern "C" fn event_record_with_flags(
    event: sys::CUevent,
    stream: sys::CUstream,
    flags: c_uint,
) -> Code {
    let external = flags & sys::cudaEventRecordExternal != 0;
    record("cuEventRecordWithFlags", event, stream, external)
}

/// What a query of `e` answers, and its effect on an open capture holding it.
fn query_answer(w: &mut World, e: u64, me: TaskId, symbol: &'static str) -> Code {
    let Some(event) = w.event(e, symbol) else {
        return BROKEN;
    };
    let (device, last) = (event.device, event.last);
    if let Some(sticky) = w.sticky(device) {
        return sticky;
    }
    match last {
        Last::Never | Last::OnStream { done: true, .. } => OK,
        Last::OnStream { done: false, .. } => Code::CUDA_ERROR_NOT_READY,
        Last::InCapture(capture) => {
            let capture = w.captures.get_mut(&capture).expect("kept");
            if !capture.open {
                return Code::CUDA_ERROR_INVALID_VALUE;
            }
            capture.invalidated.get_or_insert_with(|| {
                format!(
                    "{symbol} on {me:?} of an event whose record the open capture holds [{}]",
                    source::CAPPHASE
                )
            });
            Code::CUDA_ERROR_CAPTURED_EVENT
        }
    }
}

pub(super) unsafe extern "C" fn event_query(event: sys::CUevent) -> Code {
    let e = id(event);
    in_flight("cuEventQuery", &[Op::Read("cuEventQuery", e)], |w, me| {
        if let Some(refused) = w.prohibited_by_a_capture(me, "cuEventQuery") {
            return Some(refused);
        }
        Some(query_answer(w, e, me, "cuEventQuery"))
    })
}

pub(super) unsafe extern "C" fn event_synchronize(event: sys::CUevent) -> Code {
    let e = id(event);
    in_flight(
        "cuEventSynchronize",
        &[Op::Read("cuEventSynchronize", e)],
        |w, me| {
            if let Some(refused) = w.prohibited_by_a_capture(me, "cuEventSynchronize") {
                return Some(refused);
            }
            match query_answer(w, e, me, "cuEventSynchronize") {
                Code::CUDA_ERROR_NOT_READY => None,
                code => Some(code),
            }
        },
    )
}

pub(super) unsafe extern "C" fn event_elapsed_time(
    ms: *mut f32,
    start: sys::CUevent,
    end: sys::CUevent,
) -> Code {
    let (a, b) = (id(start), id(end));
    let symbol = "cuEventElapsedTime";
    in_flight(symbol, &[Op::Read(symbol, a), Op::Read(symbol, b)], |w, me| {
        for e in [a, b] {
            match w.event(e, symbol) {
                None => return Some(BROKEN),
                Some(event) if event.flags & sys::cudaEventDisableTiming != 0 => {
                    return Some(Code::CUDA_ERROR_INVALID_HANDLE);
                }
                Some(_) => {}
            }
        }
        for e in [a, b] {
            match query_answer(w, e, me, symbol) {
                OK => {}
                code => return Some(code),
            }
        }
        // SAFETY: a live out-pointer.
        unsafe { *ms = 0.5 };
        Some(OK)
    })
}

pub(super) unsafe extern "C" fn event_destroy(event: sys::CUevent) -> Code {
    let e = id(event);
    in_flight("cuEventDestroy", &[Op::Destroy(e)], |w, _| {
        if w.event(e, "cuEventDestroy").is_none() {
            return Some(BROKEN);
        }
        w.events.remove(&e);
        w.destroyed.insert(e);
        for capture in w.captures.values_mut() {
            capture.holds.remove(&e);
        }
        Some(OK)
    })
}

pub(super) unsafe extern "C" fn ipc_get_event_handle(
    ipc: *mut sys::CUipcEventHandle_v1,
    event: sys::CUevent,
) -> Code {
    let e = id(event);
    let symbol = "cuIpcGetEventHandle";
    in_flight(symbol, &[Op::Read(symbol, e)], |w, _| {
        match w.event(e, symbol) {
            None => return Some(BROKEN),
            Some(event) if event.flags & sys::cudaEventInterprocess == 0 => {
                return Some(Code::CUDA_ERROR_INVALID_VALUE);
            }
            Some(_) => {}
        }
        let mut bytes = [0 as c_char; 64];
        for (i, byte) in e.to_le_bytes().iter().enumerate() {
            bytes[8 + i] = *byte as c_char;
        }
        // SAFETY: a live out-pointer.
        unsafe { (*ipc).reserved = bytes };
        Some(OK)
    })
}

pub(super) unsafe extern "C" fn ipc_open_event_handle(
    _event: *mut sys::CUevent,
    _ipc: sys::CUipcEventHandle_v1,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
