//! The model's driver functions, with the C signatures of the `PFN_*` types the crate's table
//! holds (checked by the compiler in [`entry_point`]), and the runtime functions the crate calls
//! directly ([`runtime`]).
//!
//! A call that reads or writes an event is *in flight* between two halves: it announces itself,
//! yields to the model checker (so that any other thread may run its own call meanwhile), then
//! checks the overlap rules against every call still in flight and takes effect.

use super::world::{BROKEN, CaptureMode, Code, Event, Last, Op, Stream, World, source, with};
use cuda_event_sys as sys;
use shuttle::current::{TaskId, try_get_current_task};
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

fn id<T>(pointer: *mut T) -> u64 {
    pointer as u64
}

fn handle<T>(id: u64) -> *mut T {
    id as *mut T
}

/// A call with no overlap rule.
fn call(symbol: &'static str, body: impl FnOnce(&mut World, TaskId) -> Code) -> Code {
    let Some(me) = try_get_current_task() else {
        return outside_an_execution();
    };
    with(|w| {
        w.count(symbol);
        w.note(me, format_args!("{symbol}"));
        match w.check_not_forked(me, symbol) {
            true => body(w, me),
            false => BROKEN,
        }
    })
}

/// A call in flight as `ops` (see the module's docs). `body` runs after the yield; it returns
/// `None` to wait (give other threads a turn, still in flight) and be asked again.
fn in_flight(
    symbol: &'static str,
    ops: &[Op],
    mut body: impl FnMut(&mut World, TaskId) -> Option<Code>,
) -> Code {
    let Some(me) = try_get_current_task() else {
        return outside_an_execution();
    };
    let allowed = with(|w| {
        w.count(symbol);
        w.note(me, format_args!("{symbol} begins {ops:?}"));
        w.check_not_forked(me, symbol)
    });
    if !allowed {
        return BROKEN;
    }
    with(|w| {
        for op in ops {
            w.check_overlaps(me, op);
            w.in_flight.push((me, op.clone()));
        }
    });
    loop {
        shuttle::thread::yield_now();
        let done = with(|w| {
            for op in ops {
                w.check_overlaps(me, op);
            }
            let code = body(w, me)?;
            w.note(me, format_args!("{symbol} returns {}", code.0));
            for _ in ops {
                let at = w.in_flight.iter().position(|(t, _)| *t == me).expect("announced");
                w.in_flight.remove(at);
            }
            Some(code)
        });
        if let Some(code) = done {
            return code;
        }
    }
}

const OK: Code = Code::CUDA_SUCCESS;

/// A call while the model checker drops an execution's statics (the last thread-locals' pooled
/// events): the world is made new for the next execution anyway.
fn outside_an_execution() -> Code {
    OK
}

unsafe extern "C" fn init(_flags: c_uint) -> Code {
    OK
}

unsafe extern "C" fn get_error_name(code: Code, name: *mut *const c_char) -> Code {
    let text: &'static CStr = match code {
        Code::CUDA_SUCCESS => c"CUDA_SUCCESS",
        Code::CUDA_ERROR_NOT_READY => c"CUDA_ERROR_NOT_READY",
        Code::CUDA_ERROR_CAPTURED_EVENT => c"CUDA_ERROR_CAPTURED_EVENT",
        Code::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        Code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED => c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        Code::CUDA_ERROR_ILLEGAL_ADDRESS => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        _ => c"CUDA_ERROR_MODEL",
    };
    // SAFETY: the crate passes a live out-pointer.
    unsafe { *name = text.as_ptr() };
    OK
}

unsafe extern "C" fn get_error_string(code: Code, message: *mut *const c_char) -> Code {
    // SAFETY: as in get_error_name.
    unsafe { get_error_name(code, message) }
}

unsafe extern "C" fn device_get(device: *mut sys::CUdevice_v1, ordinal: c_int) -> Code {
    call("cuDeviceGet", |_, _| {
        if !(0..super::world::DEVICES).contains(&ordinal) {
            return Code::CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: a live out-pointer.
        unsafe { *device = ordinal };
        OK
    })
}

/// Each device's primary context: a fixed handle, which a reset keeps (its id changes).
fn context_handle(device: i32) -> u64 {
    0x100 * (device as u64 + 1)
}

fn device_of_context(ctx: sys::CUcontext) -> Option<i32> {
    (0..super::world::DEVICES).find(|&d| context_handle(d) == id(ctx))
}

unsafe extern "C" fn primary_ctx_retain(ctx: *mut sys::CUcontext, device: sys::CUdevice_v1) -> Code {
    call("cuDevicePrimaryCtxRetain", |_, _| {
        // SAFETY: a live out-pointer.
        unsafe { *ctx = handle(context_handle(device)) };
        OK
    })
}

unsafe extern "C" fn primary_ctx_get_state(
    _device: sys::CUdevice_v1,
    flags: *mut c_uint,
    active: *mut c_int,
) -> Code {
    call("cuDevicePrimaryCtxGetState", |_, _| {
        // SAFETY: live out-pointers.
        unsafe { (*flags, *active) = (0, 1) };
        OK
    })
}

unsafe extern "C" fn ctx_get_current(ctx: *mut sys::CUcontext) -> Code {
    call("cuCtxGetCurrent", |w, me| {
        let top = w.context_stack.get(&me).and_then(|stack| stack.last().copied());
        // SAFETY: a live out-pointer.
        unsafe { *ctx = top.map_or(std::ptr::null_mut(), |d| handle(context_handle(d))) };
        OK
    })
}

unsafe extern "C" fn ctx_get_id(ctx: sys::CUcontext, ctx_id: *mut c_ulonglong) -> Code {
    call("cuCtxGetId", |w, _| {
        let Some(device) = device_of_context(ctx) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        // SAFETY: a live out-pointer.
        unsafe { *ctx_id = w.contexts[device as usize].id };
        OK
    })
}

unsafe extern "C" fn ctx_push_current(ctx: sys::CUcontext) -> Code {
    call("cuCtxPushCurrent", |w, me| {
        let Some(device) = device_of_context(ctx) else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        w.context_stack.entry(me).or_default().push(device);
        OK
    })
}

unsafe extern "C" fn ctx_pop_current(ctx: *mut sys::CUcontext) -> Code {
    call("cuCtxPopCurrent", |w, me| {
        let Some(device) = w.context_stack.entry(me).or_default().pop() else {
            return Code::CUDA_ERROR_INVALID_CONTEXT;
        };
        if !ctx.is_null() {
            // SAFETY: a live out-pointer.
            unsafe { *ctx = handle(context_handle(device)) };
        }
        OK
    })
}

unsafe extern "C" fn event_create(event: *mut sys::CUevent, flags: c_uint) -> Code {
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
            Event {
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

unsafe extern "C" fn event_record(event: sys::CUevent, stream: sys::CUstream) -> Code {
    record("cuEventRecord", event, stream, false)
}

unsafe extern "C" fn event_record_with_flags(
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

unsafe extern "C" fn event_query(event: sys::CUevent) -> Code {
    let e = id(event);
    in_flight("cuEventQuery", &[Op::Read("cuEventQuery", e)], |w, me| {
        if let Some(refused) = w.prohibited_by_a_capture(me, "cuEventQuery") {
            return Some(refused);
        }
        Some(query_answer(w, e, me, "cuEventQuery"))
    })
}

unsafe extern "C" fn event_synchronize(event: sys::CUevent) -> Code {
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

unsafe extern "C" fn event_elapsed_time(ms: *mut f32, start: sys::CUevent, end: sys::CUevent) -> Code {
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

unsafe extern "C" fn event_destroy(event: sys::CUevent) -> Code {
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

unsafe extern "C" fn stream_wait_event(stream: sys::CUstream, event: sys::CUevent, flags: c_uint) -> Code {
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

unsafe extern "C" fn stream_synchronize(stream: sys::CUstream) -> Code {
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

unsafe extern "C" fn stream_query(stream: sys::CUstream) -> Code {
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

unsafe extern "C" fn stream_is_capturing(
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

unsafe extern "C" fn stream_get_priority(stream: sys::CUstream, priority: *mut c_int) -> Code {
    call("cuStreamGetPriority", |w, _| {
        if w.stream(id(stream), "cuStreamGetPriority").is_none() {
            return BROKEN;
        }
        // SAFETY: a live out-pointer.
        unsafe { *priority = 0 };
        OK
    })
}

unsafe extern "C" fn stream_destroy(stream: sys::CUstream) -> Code {
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

unsafe extern "C" fn ipc_get_event_handle(ipc: *mut sys::CUipcEventHandle_v1, event: sys::CUevent) -> Code {
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

unsafe extern "C" fn ipc_open_event_handle(
    _event: *mut sys::CUevent,
    _ipc: sys::CUipcEventHandle_v1,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}

/// A host function and its argument, run on a thread of its own as CUDA's host-function thread
/// would.
pub(crate) fn run_host_fn(function: usize, data: usize) {
    shuttle::thread::spawn(move || {
        // SAFETY: the pointer the crate passed to cuLaunchHostFunc, with its own argument.
        let function: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(function) };
        // SAFETY: as above: CUDA calls it once with its argument.
        unsafe { function(data as *mut c_void) };
    });
}

unsafe extern "C" fn launch_host_func(
    stream: sys::CUstream,
    function: sys::CUhostFn,
    data: *mut c_void,
) -> Code {
    let s = id(stream);
    let Some(function) = function else {
        return Code::CUDA_ERROR_INVALID_VALUE;
    };
    let run = call("cuLaunchHostFunc", |w, _| {
        let Some(held) = w.stream(s, "cuLaunchHostFunc").map(|st| st.held) else {
            return BROKEN;
        };
        if w.capture_of(s).is_some() {
            return Code::CUDA_ERROR_NOT_SUPPORTED; // a graph node: not run by the model
        }
        if held {
            w.streams
                .get_mut(&s)
                .expect("checked")
                .host_fns
                .push((function as usize, data as usize));
            return Code::CUDA_ERROR_NOT_READY;
        }
        OK
    });
    match run {
        OK => {
            run_host_fn(function as usize, data as usize);
            OK
        }
        Code::CUDA_ERROR_NOT_READY => OK,
        code => code,
    }
}

unsafe extern "C" fn thread_exchange_capture_mode(mode: *mut sys::CUstreamCaptureMode) -> Code {
    call("cuThreadExchangeStreamCaptureMode", |w, me| {
        // SAFETY: a live in-out pointer.
        let asked = CaptureMode::from_driver(unsafe { *mode });
        let old = w.modes.insert(me, asked).unwrap_or(CaptureMode::Global);
        // SAFETY: as above.
        unsafe { *mode = old.to_driver() };
        OK
    })
}

unsafe extern "C" fn stream_begin_capture(stream: sys::CUstream, mode: sys::CUstreamCaptureMode) -> Code {
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
            super::world::Capture {
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

unsafe extern "C" fn stream_end_capture(stream: sys::CUstream, graph: *mut sys::CUgraph) -> Code {
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
    super::world::run_destructors(destructors);
    code
}

unsafe extern "C" fn graph_destroy(graph: sys::CUgraph) -> Code {
    let mut destructors = Vec::new();
    let code = call("cuGraphDestroy", |w, _| {
        if !w.graphs.remove(&id(graph)) {
            w.fail(
                "use of a destroyed or unknown graph",
                source::CUDA_DOCS,
                format!("{graph:?}"),
            );
            return BROKEN;
        }
        let objects = w.graph_objects.remove(&id(graph)).unwrap_or_default();
        destructors = w.release_objects(&objects);
        OK
    });
    super::world::run_destructors(destructors);
    code
}

unsafe extern "C" fn stream_get_capture_info(
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

unsafe extern "C" fn user_object_create(
    object: *mut sys::CUuserObject,
    data: *mut c_void,
    destroy: sys::CUhostFn,
    references: c_uint,
    _flags: c_uint,
) -> Code {
    call("cuUserObjectCreate", |w, _| {
        let Some(destroy) = destroy else {
            return Code::CUDA_ERROR_INVALID_VALUE;
        };
        let o = w.new_handle();
        w.user_objects.insert(
            o,
            super::world::UserObject {
                destroy,
                data: data as usize,
                references,
            },
        );
        // SAFETY: a live out-pointer.
        unsafe { *object = handle(o) };
        OK
    })
}

unsafe extern "C" fn graph_retain_user_object(
    graph: sys::CUgraph,
    object: sys::CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> Code {
    call("cuGraphRetainUserObject", |w, _| {
        let (g, o) = (id(graph), id(object));
        let open = w.captures.values().any(|c| c.open && c.graph == g);
        if !open && !w.graphs.contains(&g) {
            return Code::CUDA_ERROR_INVALID_VALUE;
        }
        let Some(object) = w.user_objects.get_mut(&o) else {
            return Code::CUDA_ERROR_INVALID_VALUE;
        };
        if flags & 1 == 0 {
            object.references += count; // not moved: new references
        }
        w.graph_objects
            .entry(g)
            .or_default()
            .extend(std::iter::repeat_n(o, count as usize));
        OK
    })
}

// What the model does not run (memory, graphs' launch, modules, kernels): the crate's timing and
// clock paths, which no model test takes.
unsafe extern "C" fn device_get_attribute(
    _: *mut c_int,
    _: sys::CUdevice_attribute,
    _: sys::CUdevice_v1,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn mem_alloc(_: *mut sys::CUdeviceptr_v2, _: usize) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn memset_d32_async(_: sys::CUdeviceptr_v2, _: c_uint, _: usize, _: sys::CUstream) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn memcpy_dtod_async(
    _: sys::CUdeviceptr_v2,
    _: sys::CUdeviceptr_v2,
    _: usize,
    _: sys::CUstream,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn ctx_reset_persisting_l2() -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn ctx_get_limit(_: *mut usize, _: sys::CUlimit) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn mem_host_register(_: *mut c_void, _: usize, _: c_uint) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn mem_free(_: sys::CUdeviceptr_v2) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn mem_host_unregister(_: *mut c_void) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn mem_host_get_device_pointer(
    _: *mut sys::CUdeviceptr_v2,
    _: *mut c_void,
    _: c_uint,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn stream_wait_value32(
    _: sys::CUstream,
    _: sys::CUdeviceptr_v2,
    _: sys::cuuint32_t,
    _: c_uint,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn graph_instantiate(_: *mut sys::CUgraphExec, _: sys::CUgraph, _: c_ulonglong) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn graph_launch(_: sys::CUgraphExec, _: sys::CUstream) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn graph_exec_destroy(_: sys::CUgraphExec) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn module_load_data(_: *mut sys::CUmodule, _: *const c_void) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn module_get_function(
    _: *mut sys::CUfunction,
    _: sys::CUmodule,
    _: *const c_char,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn module_unload(_: sys::CUmodule) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn launch_kernel(
    _: sys::CUfunction,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: c_uint,
    _: sys::CUstream,
    _: *mut *mut c_void,
    _: *mut *mut c_void,
) -> Code {
    Code::CUDA_ERROR_NOT_SUPPORTED
}

/// The model's function for `symbol`, as the crate's table asks the runtime for it; each arm
/// names the `PFN_*` type, so a signature that differs from the table's does not compile.
pub(crate) fn entry_point(symbol: &CStr) -> *mut c_void {
    macro_rules! table {
        ($($name:literal => $pfn:ident($f:ident),)*) => {
            match symbol.to_bytes() {
                $(name if name == $name.to_bytes() => {
                    let f: sys::$pfn = Some($f);
                    f.map_or(std::ptr::null_mut(), |f| f as *mut c_void)
                })*
                _ => std::ptr::null_mut(),
            }
        };
    }
    table! {
        c"cuInit" => PFN_cuInit_v2000(init),
        c"cuGetErrorName" => PFN_cuGetErrorName_v6000(get_error_name),
        c"cuGetErrorString" => PFN_cuGetErrorString_v6000(get_error_string),
        c"cuDeviceGet" => PFN_cuDeviceGet_v2000(device_get),
        c"cuDevicePrimaryCtxRetain" => PFN_cuDevicePrimaryCtxRetain_v7000(primary_ctx_retain),
        c"cuDevicePrimaryCtxGetState" => PFN_cuDevicePrimaryCtxGetState_v7000(primary_ctx_get_state),
        c"cuCtxGetCurrent" => PFN_cuCtxGetCurrent_v4000(ctx_get_current),
        c"cuCtxGetId" => PFN_cuCtxGetId_v12000(ctx_get_id),
        c"cuCtxPushCurrent" => PFN_cuCtxPushCurrent_v4000(ctx_push_current),
        c"cuCtxPopCurrent" => PFN_cuCtxPopCurrent_v4000(ctx_pop_current),
        c"cuEventCreate" => PFN_cuEventCreate_v2000(event_create),
        c"cuEventRecord" => PFN_cuEventRecord_v2000(event_record),
        c"cuEventRecordWithFlags" => PFN_cuEventRecordWithFlags_v11010(event_record_with_flags),
        c"cuEventQuery" => PFN_cuEventQuery_v2000(event_query),
        c"cuEventSynchronize" => PFN_cuEventSynchronize_v2000(event_synchronize),
        c"cuEventElapsedTime" => PFN_cuEventElapsedTime_v12080(event_elapsed_time),
        c"cuEventDestroy" => PFN_cuEventDestroy_v4000(event_destroy),
        c"cuStreamWaitEvent" => PFN_cuStreamWaitEvent_v3020(stream_wait_event),
        c"cuStreamSynchronize" => PFN_cuStreamSynchronize_v2000(stream_synchronize),
        c"cuStreamQuery" => PFN_cuStreamQuery_v2000(stream_query),
        c"cuStreamIsCapturing" => PFN_cuStreamIsCapturing_v10000(stream_is_capturing),
        c"cuStreamGetCaptureInfo" => PFN_cuStreamGetCaptureInfo_v11030(stream_get_capture_info),
        c"cuUserObjectCreate" => PFN_cuUserObjectCreate_v11030(user_object_create),
        c"cuGraphRetainUserObject" => PFN_cuGraphRetainUserObject_v11030(graph_retain_user_object),
        c"cuStreamGetPriority" => PFN_cuStreamGetPriority_v5050(stream_get_priority),
        c"cuStreamDestroy" => PFN_cuStreamDestroy_v4000(stream_destroy),
        c"cuIpcGetEventHandle" => PFN_cuIpcGetEventHandle_v4010(ipc_get_event_handle),
        c"cuIpcOpenEventHandle" => PFN_cuIpcOpenEventHandle_v4010(ipc_open_event_handle),
        c"cuLaunchHostFunc" => PFN_cuLaunchHostFunc_v10000(launch_host_func),
        c"cuThreadExchangeStreamCaptureMode" => PFN_cuThreadExchangeStreamCaptureMode_v10010(thread_exchange_capture_mode),
        c"cuDeviceGetAttribute" => PFN_cuDeviceGetAttribute_v2000(device_get_attribute),
        c"cuMemAlloc" => PFN_cuMemAlloc_v3020(mem_alloc),
        c"cuMemsetD32Async" => PFN_cuMemsetD32Async_v3020(memset_d32_async),
        c"cuMemcpyDtoDAsync" => PFN_cuMemcpyDtoDAsync_v3020(memcpy_dtod_async),
        c"cuCtxResetPersistingL2Cache" => PFN_cuCtxResetPersistingL2Cache_v11000(ctx_reset_persisting_l2),
        c"cuCtxGetLimit" => PFN_cuCtxGetLimit_v3010(ctx_get_limit),
        c"cuMemHostRegister" => PFN_cuMemHostRegister_v6050(mem_host_register),
        c"cuMemFree" => PFN_cuMemFree_v3020(mem_free),
        c"cuMemHostUnregister" => PFN_cuMemHostUnregister_v4000(mem_host_unregister),
        c"cuMemHostGetDevicePointer" => PFN_cuMemHostGetDevicePointer_v3020(mem_host_get_device_pointer),
        c"cuStreamWaitValue32" => PFN_cuStreamWaitValue32_v11070(stream_wait_value32),
        c"cuStreamBeginCapture" => PFN_cuStreamBeginCapture_v10010(stream_begin_capture),
        c"cuStreamEndCapture" => PFN_cuStreamEndCapture_v10000(stream_end_capture),
        c"cuGraphInstantiateWithFlags" => PFN_cuGraphInstantiateWithFlags_v11040(graph_instantiate),
        c"cuGraphLaunch" => PFN_cuGraphLaunch_v10000(graph_launch),
        c"cuGraphExecDestroy" => PFN_cuGraphExecDestroy_v10000(graph_exec_destroy),
        c"cuGraphDestroy" => PFN_cuGraphDestroy_v10000(graph_destroy),
        c"cuModuleLoadData" => PFN_cuModuleLoadData_v2000(module_load_data),
        c"cuModuleGetFunction" => PFN_cuModuleGetFunction_v2000(module_get_function),
        c"cuModuleUnload" => PFN_cuModuleUnload_v2000(module_unload),
        c"cuLaunchKernel" => PFN_cuLaunchKernel_v4000(launch_kernel),
    }
}

/// The runtime functions the crate calls directly, in the model.
#[allow(non_snake_case)]
pub(crate) mod runtime {
    use super::{Code, OK, Stream, call, handle};
    use cuda_event_sys as sys;
    use std::ffi::{c_int, c_uint};

    fn runtime_code(code: Code) -> sys::cudaError_t {
        match code {
            OK => sys::cudaError::cudaSuccess,
            _ => sys::cudaError::cudaErrorInvalidValue,
        }
    }

    pub(crate) unsafe fn cudaStreamCreateWithPriority(
        stream: *mut sys::cudaStream_t,
        _flags: c_uint,
        _priority: c_int,
    ) -> sys::cudaError_t {
        runtime_code(call("cudaStreamCreateWithPriority", |w, me| {
            let Some(&device) = w.context_stack.get(&me).and_then(|stack| stack.last()) else {
                return Code::CUDA_ERROR_INVALID_CONTEXT;
            };
            let raw = w.new_handle();
            w.streams.insert(
                raw,
                Stream {
                    device,
                    held: false,
                    full: false,
                    capture: None,
                    host_fns: Vec::new(),
                },
            );
            // SAFETY: a live out-pointer.
            unsafe { *stream = handle(raw) };
            OK
        }))
    }

    pub(crate) unsafe fn cudaGetDeviceCount(count: *mut c_int) -> sys::cudaError_t {
        // SAFETY: a live out-pointer.
        unsafe { *count = super::super::world::DEVICES };
        sys::cudaError::cudaSuccess
    }

    pub(crate) unsafe fn cudaGetDevice(device: *mut c_int) -> sys::cudaError_t {
        let current = super::with(|w| {
            w.current_device
                .get(&shuttle::current::me())
                .copied()
                .unwrap_or(0)
        });
        // SAFETY: a live out-pointer.
        unsafe { *device = current };
        sys::cudaError::cudaSuccess
    }

    pub(crate) unsafe fn cudaSetDevice(device: c_int) -> sys::cudaError_t {
        if !(0..super::super::world::DEVICES).contains(&device) {
            return sys::cudaError::cudaErrorInvalidDevice;
        }
        super::with(|w| w.current_device.insert(shuttle::current::me(), device));
        sys::cudaError::cudaSuccess
    }
}
