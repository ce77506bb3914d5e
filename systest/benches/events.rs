//! Per-call cost of event operations, side by side: raw C (c/bench.c), raw Rust FFI
//! (cuda-event-sys, runtime API), cuda-event's safe API, cudarc (driver API), and raw driver calls
//! (the driver functions cuda-event calls, resolved as it resolves them). One process, the
//! implementations interleaved round by round (order rotated each round), a warm-up round first;
//! reports the median ns/call of each and the medians of per-round ratios against raw Rust FFI and
//! against the raw driver calls. The "record:" and "elapsed_time:" rows break a call down: the raw
//! driver column makes the driver calls named, the cuda-event column the crate's call with its
//! checks; the "checks off" rows time the crate's call without them.
//! Then thread scaling, and CPU time over a 200 ms wait.
//!
//! cargo bench -p cuda-event-systest --bench events   (writes events.md and events.json into
//! $CUDA_EVENT_BENCH_OUT, or the current folder); `-- --scaling-only` runs the thread-scaling
//! table alone, for runs that compare it across `CUDA_DEVICE_MAX_CONNECTIONS` values

// The FFI calls under measurement sit inside the table's closures and macros, where a comment
// cannot stand right above each block; every group has its SAFETY argument above it instead.
#![allow(clippy::undocumented_unsafe_blocks)]

use cuda_event_testkit as common;

use cuda_event::trace::Trace;
use cuda_event::{Event, Stream, StreamOptions, sys};
use cuda_event_systest::bench_c::*;
use std::fmt::Write as _;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ROUNDS: usize = 15;
const IMPLS: [&str; 5] = ["raw C", "raw Rust FFI", "cuda-event", "cudarc", "raw driver"];
const FFI: usize = 1;
const DRIVER: usize = 4;

/// One implementation of an operation: runs it `n` times and returns the total nanoseconds.
type Run = Box<dyn FnMut(usize) -> f64>;

struct Op {
    name: &'static str,
    calls: usize,
    /// Indexed like IMPLS; None where an implementation has no such operation.
    runs: [Option<Run>; 5],
    /// Per implementation, the ns/call of each measured round.
    samples: [Vec<f64>; 5],
}

fn ok(code: sys::cudaError_t) {
    assert_eq!(
        code,
        sys::cudaError::cudaSuccess,
        "CUDA runtime call failed: {}",
        code.0
    );
}

fn c(ns: f64) -> f64 {
    assert!(ns >= 0.0, "C loop failed with CUDA error {}", -ns);
    ns
}

fn timed(mut f: impl FnMut()) -> impl FnMut(usize) -> f64 {
    move |n| {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        start.elapsed().as_nanos() as f64
    }
}

/// Raw handles for the C and FFI implementations: streams and completed events.
#[derive(Clone, Copy)]
struct Raw {
    stream: sys::cudaStream_t,
    other: sys::cudaStream_t,
    /// Re-recorded by the record ops.
    plain: sys::cudaEvent_t,
    timing: sys::cudaEvent_t,
    /// Recorded once at set-up, so complete and untouched: for query, wait, synchronize, elapsed.
    done: sys::cudaEvent_t,
    timing_start: sys::cudaEvent_t,
    timing_end: sys::cudaEvent_t,
    ipc: sys::cudaEvent_t,
}

impl Raw {
    fn new() -> Raw {
        let mut raw = Raw {
            stream: std::ptr::null_mut(),
            other: std::ptr::null_mut(),
            plain: std::ptr::null_mut(),
            timing: std::ptr::null_mut(),
            done: std::ptr::null_mut(),
            timing_start: std::ptr::null_mut(),
            timing_end: std::ptr::null_mut(),
            ipc: std::ptr::null_mut(),
        };
        // SAFETY: out-pointers are fields of a live local; the handles live for the whole benchmark.
        unsafe {
            ok(sys::cudaSetDevice(0));
            ok(sys::cudaStreamCreateWithFlags(
                &mut raw.stream,
                sys::cudaStreamNonBlocking,
            ));
            ok(sys::cudaStreamCreateWithFlags(
                &mut raw.other,
                sys::cudaStreamNonBlocking,
            ));
            ok(sys::cudaEventCreateWithFlags(
                &mut raw.plain,
                sys::cudaEventDisableTiming,
            ));
            ok(sys::cudaEventCreateWithFlags(
                &mut raw.timing,
                sys::cudaEventDefault,
            ));
            for event in [&mut raw.timing_start, &mut raw.timing_end] {
                ok(sys::cudaEventCreateWithFlags(event, sys::cudaEventDefault));
            }
            ok(sys::cudaEventCreateWithFlags(
                &mut raw.done,
                sys::cudaEventDisableTiming,
            ));
            let ipc_flags = sys::cudaEventInterprocess | sys::cudaEventDisableTiming;
            ok(sys::cudaEventCreateWithFlags(&mut raw.ipc, ipc_flags));
            for event in [
                raw.plain,
                raw.timing,
                raw.done,
                raw.timing_start,
                raw.timing_end,
                raw.ipc,
            ] {
                ok(sys::cudaEventRecord(event, raw.stream));
            }
            ok(sys::cudaStreamSynchronize(raw.stream));
        }
        raw
    }
}

// SAFETY: CUDA handles may be used from any thread, concurrently.
unsafe impl Send for Raw {}
// SAFETY: as for Send; the struct is never mutated after creation.
unsafe impl Sync for Raw {}

impl Raw {
    /// Record `plain` on `stream` (a method, so closures capture the whole `Raw`, which is Sync).
    fn record_plain(&self) {
        // SAFETY: live handles of one device.
        ok(unsafe { sys::cudaEventRecord(self.plain, self.stream) });
    }

    fn query_done(&self) {
        // SAFETY: a live, completed event.
        ok(unsafe { sys::cudaEventQuery(self.done) });
    }
}

/// The driver functions cuda-event calls, resolved the way it resolves them.
#[derive(Clone, Copy)]
struct Driver {
    ctx_get_current: sys::PFN_cuCtxGetCurrent_v4000,
    ctx_get_id: sys::PFN_cuCtxGetId_v12000,
    event_create: sys::PFN_cuEventCreate_v2000,
    event_destroy: sys::PFN_cuEventDestroy_v4000,
    event_record: sys::PFN_cuEventRecord_v2000,
    event_query: sys::PFN_cuEventQuery_v2000,
    event_synchronize: sys::PFN_cuEventSynchronize_v2000,
    event_elapsed_time: sys::PFN_cuEventElapsedTime_v12080,
    stream_wait_event: sys::PFN_cuStreamWaitEvent_v3020,
    stream_is_capturing: sys::PFN_cuStreamIsCapturing_v10000,
    ipc_get_event_handle: sys::PFN_cuIpcGetEventHandle_v4010,
}

impl Driver {
    fn new() -> Driver {
        macro_rules! entry {
            ($pfn:ident, $symbol:literal, $version:literal) => {{
                let pointer = cuda_event::driver_entry_point($symbol, $version).unwrap();
                // SAFETY: the driver's function for this symbol at this ABI version, whose type the
                // PFN_* names; an Option of a function pointer has a pointer's layout.
                unsafe { std::mem::transmute::<*mut std::ffi::c_void, sys::$pfn>(pointer.as_ptr()) }
            }};
        }
        Driver {
            ctx_get_current: entry!(PFN_cuCtxGetCurrent_v4000, c"cuCtxGetCurrent", 4000),
            ctx_get_id: entry!(PFN_cuCtxGetId_v12000, c"cuCtxGetId", 12000),
            event_create: entry!(PFN_cuEventCreate_v2000, c"cuEventCreate", 2000),
            event_destroy: entry!(PFN_cuEventDestroy_v4000, c"cuEventDestroy", 4000),
            event_record: entry!(PFN_cuEventRecord_v2000, c"cuEventRecord", 2000),
            event_query: entry!(PFN_cuEventQuery_v2000, c"cuEventQuery", 2000),
            event_synchronize: entry!(PFN_cuEventSynchronize_v2000, c"cuEventSynchronize", 2000),
            event_elapsed_time: entry!(PFN_cuEventElapsedTime_v12080, c"cuEventElapsedTime", 12080),
            stream_wait_event: entry!(PFN_cuStreamWaitEvent_v3020, c"cuStreamWaitEvent", 3020),
            stream_is_capturing: entry!(PFN_cuStreamIsCapturing_v10000, c"cuStreamIsCapturing", 10000),
            ipc_get_event_handle: entry!(PFN_cuIpcGetEventHandle_v4010, c"cuIpcGetEventHandle", 4010),
        }
    }
}

fn drv(code: sys::CUresult) {
    assert_eq!(
        code,
        sys::CUresult::CUDA_SUCCESS,
        "driver call failed: {}",
        code.0
    );
}

impl Driver {
    /// The driver calls of cuda-event's record, made raw: the reset check on `ctx` (unless null),
    /// the capture check, the record.
    ///
    /// # Safety
    /// Live handles of one device; `ctx` null or a live context.
    unsafe fn record_with_checks(
        self,
        ctx: sys::CUcontext,
        event: sys::cudaEvent_t,
        stream: sys::cudaStream_t,
    ) {
        // SAFETY: the caller's handles; out-pointers are live locals.
        unsafe {
            if !ctx.is_null() {
                let mut id = 0;
                drv(self.ctx_get_id.unwrap()(ctx, &mut id));
            }
            let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            drv(self.stream_is_capturing.unwrap()(stream, &mut status));
            drv(self.event_record.unwrap()(event, stream));
        }
    }
}

fn ops() -> Vec<Op> {
    let raw = Raw::new();
    let d = Driver::new();
    let mut ctx_raw = std::ptr::null_mut();
    // SAFETY: writes the current context (the runtime's primary context of device 0, made current
    // by Raw::new's cudaSetDevice) through a live local.
    drv(unsafe { d.ctx_get_current.unwrap()(&mut ctx_raw) });
    let ctx_raw = ctx_raw as usize;
    let stream = Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let other = Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let (stream, other) = (Arc::new(stream), Arc::new(other));
    let plain = Arc::new(Event::new());
    let timing = || Event::builder().enable_timing(true).build().unwrap();
    let (start, end, rec_timing) = (Arc::new(timing()), Arc::new(timing()), Arc::new(timing()));
    let done = Arc::new(Event::new());
    let shared = Arc::new(Event::builder().interprocess(true).build().unwrap());
    let trace = Arc::new(Trace::new());
    for event in [&plain, &done, &start, &end, &rec_timing, &shared] {
        event.record(&stream).unwrap();
    }
    stream.synchronize().unwrap();

    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let (cu_stream, cu_other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    use cudarc::driver::sys::CUevent_flags::{CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING};
    let cu_plain = Arc::new(cu_stream.record_event(Some(CU_EVENT_DISABLE_TIMING)).unwrap());
    let cu_start = Arc::new(cu_stream.record_event(Some(CU_EVENT_DEFAULT)).unwrap());
    let cu_end = Arc::new(cu_stream.record_event(Some(CU_EVENT_DEFAULT)).unwrap());
    let cu_done = Arc::new(cu_stream.record_event(Some(CU_EVENT_DISABLE_TIMING)).unwrap());
    let cu_timing = Arc::new(cu_stream.record_event(Some(CU_EVENT_DEFAULT)).unwrap());
    cu_stream.synchronize().unwrap();

    let no_timing = sys::cudaEventDisableTiming;
    let op = |name, calls, runs: [Option<Run>; 5]| Op {
        name,
        calls,
        runs,
        samples: Default::default(),
    };
    macro_rules! run {
        ($($clone:ident),* => $body:expr) => {{
            $(let $clone = $clone.clone();)*
            Some(Box::new(timed(move || { $body; })) as Run)
        }};
    }
    macro_rules! c_run {
        ($f:expr) => {
            Some(Box::new(move |n: usize| c(unsafe { $f(n as i32) })) as Run)
        };
    }
    // SAFETY (for every c_run! and FFI call below): the raw handles live for the whole benchmark.
    vec![
        op(
            "create + destroy, timing off",
            500,
            [
                c_run!(|n| bench_c_create_destroy(no_timing, n)),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    ok(sys::cudaEventCreateWithFlags(&mut e, no_timing));
                    ok(sys::cudaEventDestroy(e));
                }),
                None,
                run!(ctx => drop(ctx.new_event(Some(CU_EVENT_DISABLE_TIMING)).unwrap())),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    drv(d.event_create.unwrap()(&mut e, no_timing));
                    drv(d.event_destroy.unwrap()(e));
                }),
            ],
        ),
        op(
            "create + destroy, timing on",
            500,
            [
                c_run!(|n| bench_c_create_destroy(0, n)),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    ok(sys::cudaEventCreateWithFlags(&mut e, 0));
                    ok(sys::cudaEventDestroy(e));
                }),
                None,
                run!(ctx => drop(ctx.new_event(Some(CU_EVENT_DEFAULT)).unwrap())),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    drv(d.event_create.unwrap()(&mut e, 0));
                    drv(d.event_destroy.unwrap()(e));
                }),
            ],
        ),
        // What a new stream costs; cuda-event's includes its timing record (`Stream`'s docs).
        op(
            "stream create + destroy, non-blocking",
            200,
            [
                None,
                run!(=> unsafe {
                    let mut s = std::ptr::null_mut();
                    ok(sys::cudaStreamCreateWithFlags(&mut s, sys::cudaStreamNonBlocking));
                    ok(sys::cudaStreamDestroy(s));
                }),
                run!(=> drop(Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap())),
                run!(ctx => drop(ctx.new_stream().unwrap())),
                None,
            ],
        ),
        op(
            "new event + first record + drop",
            2000,
            [
                c_run!(|n| bench_c_lazy(raw.stream, no_timing, n)),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    ok(sys::cudaEventCreateWithFlags(&mut e, no_timing));
                    ok(sys::cudaEventRecord(e, raw.stream));
                    ok(sys::cudaEventDestroy(e));
                }),
                run!(stream => { let e = Event::new(); e.record(&stream).unwrap(); }),
                run!(cu_stream => drop(cu_stream.record_event(None).unwrap())),
                run!(=> unsafe {
                    let mut e = std::ptr::null_mut();
                    drv(d.event_create.unwrap()(&mut e, no_timing));
                    drv(d.event_record.unwrap()(e, raw.stream));
                    drv(d.event_destroy.unwrap()(e));
                }),
            ],
        ),
        op(
            "record, timing off",
            2000,
            [
                c_run!(|n| bench_c_record(raw.plain, raw.stream, n)),
                run!(=> unsafe { ok(sys::cudaEventRecord(raw.plain, raw.stream)) }),
                run!(plain, stream => plain.record(&stream).unwrap()),
                run!(cu_plain, cu_stream => cu_plain.record(&cu_stream).unwrap()),
                run!(=> unsafe { drv(d.event_record.unwrap()(raw.plain, raw.stream)) }),
            ],
        ),
        op(
            "record: + capture check (driver: cuStreamIsCapturing, cuEventRecord)",
            2000,
            [
                None,
                None,
                run!(plain, stream => plain.record(&stream).unwrap()),
                None,
                run!(=> unsafe { d.record_with_checks(std::ptr::null_mut(), raw.plain, raw.stream) }),
            ],
        ),
        op(
            "record: + reset check (driver: cuCtxGetId, cuStreamIsCapturing, cuEventRecord)",
            2000,
            [
                None,
                None,
                run!(plain, stream => plain.record(&stream).unwrap()),
                None,
                run!(=> unsafe { d.record_with_checks(ctx_raw as sys::CUcontext, raw.plain, raw.stream) }),
            ],
        ),
        op(
            "record: the same driver calls on cuda-event's own event and stream",
            2000,
            [
                None,
                None,
                run!(plain, stream => plain.record(&stream).unwrap()),
                None,
                {
                    let (event, raw_stream) = (plain.as_raw().unwrap() as usize, stream.as_raw() as usize);
                    run!(=> unsafe {
                        let (event, raw_stream) = (event as sys::cudaEvent_t, raw_stream as sys::cudaStream_t);
                        d.record_with_checks(ctx_raw as sys::CUcontext, event, raw_stream)
                    })
                },
            ],
        ),
        op(
            "record on the baseline's stream (cuda-event: a borrowed stream, its own event)",
            2000,
            [
                c_run!(|n| bench_c_record(raw.plain, raw.stream, n)),
                run!(=> unsafe { ok(sys::cudaEventRecord(raw.plain, raw.stream)) }),
                {
                    // SAFETY: the baseline's stream, alive for the whole benchmark.
                    let borrowed = Arc::new(unsafe { Stream::from_raw_borrowed(raw.stream, 0) }.unwrap());
                    let event = Arc::new(Event::new());
                    event.record(&borrowed).unwrap();
                    run!(event, borrowed => event.record(&borrowed).unwrap())
                },
                None,
                run!(=> unsafe { drv(d.event_record.unwrap()(raw.plain, raw.stream)) }),
            ],
        ),
        op(
            "record, capture checks off (set_capture_checks)",
            2000,
            [
                c_run!(|n| bench_c_record(raw.plain, raw.stream, n)),
                run!(=> unsafe { ok(sys::cudaEventRecord(raw.plain, raw.stream)) }),
                {
                    let (plain, stream) = (plain.clone(), stream.clone());
                    with_checks_off(false, move || plain.record(&stream).unwrap())
                },
                run!(cu_plain, cu_stream => cu_plain.record(&cu_stream).unwrap()),
                run!(=> unsafe { drv(d.event_record.unwrap()(raw.plain, raw.stream)) }),
            ],
        ),
        // The crate's own cost: no check that makes a driver call, so against the raw driver
        // column (one cuEventRecord) the difference is the crate's code alone.
        op(
            "record, capture and reset checks off",
            2000,
            [
                None,
                run!(=> unsafe { ok(sys::cudaEventRecord(raw.plain, raw.stream)) }),
                {
                    let (plain, stream) = (plain.clone(), stream.clone());
                    with_checks_off(true, move || plain.record(&stream).unwrap())
                },
                None,
                run!(=> unsafe { drv(d.event_record.unwrap()(raw.plain, raw.stream)) }),
            ],
        ),
        op(
            "record, timing on",
            2000,
            [
                c_run!(|n| bench_c_record(raw.timing, raw.stream, n)),
                run!(=> unsafe { ok(sys::cudaEventRecord(raw.timing, raw.stream)) }),
                run!(rec_timing, stream => rec_timing.record(&stream).unwrap()),
                run!(cu_timing, cu_stream => cu_timing.record(&cu_stream).unwrap()),
                run!(=> unsafe { drv(d.event_record.unwrap()(raw.timing, raw.stream)) }),
            ],
        ),
        op(
            // A GPU range of a Trace: its open and its close, each a timing event's record; the
            // baselines are two records of timing events. The trace is read after each round,
            // outside the timed loop (the next row times that read).
            "trace range: open + close (baselines: two timing records)",
            2000,
            [
                None,
                run!(=> unsafe {
                    ok(sys::cudaEventRecord(raw.timing_start, raw.stream));
                    ok(sys::cudaEventRecord(raw.timing_end, raw.stream));
                }),
                Some(Box::new({
                    let (trace, stream) = (trace.clone(), stream.clone());
                    move |n: usize| {
                        let start = Instant::now();
                        for _ in 0..n {
                            trace.range(&stream, "range").unwrap().end().unwrap();
                        }
                        let ns = start.elapsed().as_nanos() as f64;
                        stream.synchronize().unwrap();
                        assert_eq!(trace.take_complete().ranges.len(), n);
                        ns
                    }
                }) as Run),
                run!(cu_start, cu_end, cu_stream => {
                    cu_start.record(&cu_stream).unwrap();
                    cu_end.record(&cu_stream).unwrap();
                }),
                run!(=> unsafe {
                    drv(d.event_record.unwrap()(raw.timing_start, raw.stream));
                    drv(d.event_record.unwrap()(raw.timing_end, raw.stream));
                }),
            ],
        ),
        op(
            // Reading a trace of that many complete ranges, per range (an anchor included).
            "trace read, per range (cuda-event column only)",
            2000,
            [
                None,
                None,
                Some(Box::new({
                    let (trace, stream) = (trace.clone(), stream.clone());
                    move |n: usize| {
                        for _ in 0..n {
                            trace.range(&stream, "range").unwrap().end().unwrap();
                        }
                        stream.synchronize().unwrap();
                        let start = Instant::now();
                        let read = trace.take_complete();
                        let ns = start.elapsed().as_nanos() as f64;
                        assert_eq!(read.ranges.len(), n);
                        ns
                    }
                }) as Run),
                None,
                None,
            ],
        ),
        op(
            "query (complete)",
            5000,
            [
                c_run!(|n| bench_c_query(raw.done, n)),
                run!(=> unsafe { ok(sys::cudaEventQuery(raw.done)) }),
                run!(done => assert!(done.query().unwrap())),
                run!(cu_done => assert!(cu_done.try_is_complete().unwrap())),
                run!(=> unsafe { drv(d.event_query.unwrap()(raw.done)) }),
            ],
        ),
        op(
            "stream wait event",
            2000,
            [
                c_run!(|n| bench_c_wait(raw.other, raw.done, n)),
                run!(=> unsafe { ok(sys::cudaStreamWaitEvent(raw.other, raw.done, 0)) }),
                run!(done, other => done.wait(&other).unwrap()),
                run!(cu_done, cu_other => cu_other.wait(&cu_done).unwrap()),
                run!(=> unsafe { drv(d.stream_wait_event.unwrap()(raw.other, raw.done, 0)) }),
            ],
        ),
        op(
            "synchronize (complete)",
            5000,
            [
                c_run!(|n| bench_c_synchronize(raw.done, n)),
                run!(=> unsafe { ok(sys::cudaEventSynchronize(raw.done)) }),
                run!(done => done.synchronize().unwrap()),
                run!(cu_done => cu_done.synchronize().unwrap()),
                run!(=> unsafe { drv(d.event_synchronize.unwrap()(raw.done)) }),
            ],
        ),
        op(
            "elapsed_time",
            5000,
            [
                c_run!(|n| bench_c_elapsed(raw.timing_start, raw.timing_end, n)),
                run!(=> unsafe {
                    let mut ms = 0.0;
                    ok(sys::cudaEventElapsedTime(&mut ms, raw.timing_start, raw.timing_end));
                }),
                run!(start, end => start.elapsed_time(&end).unwrap()),
                run!(cu_start, cu_end => cu_start.elapsed_ms(&cu_end).unwrap()),
                run!(=> unsafe {
                    let mut ms = 0.0;
                    drv(d.event_elapsed_time.unwrap()(&mut ms, raw.timing_start, raw.timing_end));
                }),
            ],
        ),
        // elapsed_time's one check: the reset check's cuCtxGetId (both events of one context
        // instance), then the raw driver's call; and the crate with it off, its own code alone.
        op(
            "elapsed_time: + reset check (driver: cuCtxGetId, cuEventElapsedTime)",
            5000,
            [
                None,
                None,
                run!(start, end => start.elapsed_time(&end).unwrap()),
                None,
                run!(=> unsafe {
                    let (mut id, mut ms) = (0, 0.0);
                    drv(d.ctx_get_id.unwrap()(ctx_raw as sys::CUcontext, &mut id));
                    drv(d.event_elapsed_time.unwrap()(&mut ms, raw.timing_start, raw.timing_end));
                }),
            ],
        ),
        op(
            "elapsed_time, reset checks off",
            5000,
            [
                None,
                run!(=> unsafe {
                    let mut ms = 0.0;
                    ok(sys::cudaEventElapsedTime(&mut ms, raw.timing_start, raw.timing_end));
                }),
                {
                    let (start, end) = (start.clone(), end.clone());
                    with_checks_off(true, move || {
                        start.elapsed_time(&end).unwrap();
                    })
                },
                None,
                run!(=> unsafe {
                    let mut ms = 0.0;
                    drv(d.event_elapsed_time.unwrap()(&mut ms, raw.timing_start, raw.timing_end));
                }),
            ],
        ),
        op(
            "ipc_handle",
            5000,
            [
                c_run!(|n| bench_c_ipc_handle(raw.ipc, n)),
                run!(=> unsafe {
                    let mut h = sys::cudaIpcEventHandle_t::default();
                    ok(sys::cudaIpcGetEventHandle(&mut h, raw.ipc));
                }),
                run!(shared => shared.ipc_handle().unwrap()),
                None,
                run!(=> unsafe {
                    let mut h = sys::CUipcEventHandle::default();
                    drv(d.ipc_get_event_handle.unwrap()(&mut h, raw.ipc));
                }),
            ],
        ),
    ]
}

/// Median ns/call of `f` over the rounds, 5000 calls a round.
fn component_ns(mut f: impl FnMut()) -> f64 {
    let mut run = timed(&mut f);
    let rounds: Vec<f64> = (0..=ROUNDS).map(|_| run(5000) / 5000.0).skip(1).collect();
    median(&rounds)
}

/// The parts of cuda-event's path for a new event's first record beyond the record itself, each
/// measured alone: `cuCtxGetId` (the pool's check that no device reset destroyed the event it
/// reuses), an uncontended lock and unlock (creation is serialized), and building and dropping an
/// `Event` that is never created (no CUDA call).
fn pool_path_components() -> [(&'static str, f64); 4] {
    let (mut function, mut status) = (std::ptr::null_mut(), sys::cudaDriverEntryPointQueryResult(0));
    let mut resolve = |symbol: &std::ffi::CStr, version: u32| {
        // SAFETY: resolves a driver symbol at the version its PFN type names; out-pointers are live.
        ok(unsafe {
            sys::cudaGetDriverEntryPointByVersion(symbol.as_ptr(), &mut function, version, 0, &mut status)
        });
        function
    };
    // SAFETY: each pointer is the driver's function for the PFN type it is read as.
    let (get_id, get_state) = unsafe {
        (
            std::mem::transmute::<*mut std::ffi::c_void, sys::PFN_cuCtxGetId_v12000>(resolve(
                c"cuCtxGetId",
                12000,
            ))
            .unwrap(),
            std::mem::transmute::<*mut std::ffi::c_void, sys::PFN_cuDevicePrimaryCtxGetState_v7000>(resolve(
                c"cuDevicePrimaryCtxGetState",
                7000,
            ))
            .unwrap(),
        )
    };
    let mut id = 0;
    // SAFETY: a null context means the current one, which Raw::new made current on this thread;
    // writes through a live local.
    let context_id = component_ns(|| {
        assert_eq!(
            unsafe { get_id(std::ptr::null_mut(), &mut id) },
            sys::CUresult::CUDA_SUCCESS
        )
    });
    let (mut flags, mut active) = (0, 0);
    // SAFETY: device 0 exists; writes through live locals.
    let context_state = component_ns(|| {
        assert_eq!(
            unsafe { get_state(0, &mut flags, &mut active) },
            sys::CUresult::CUDA_SUCCESS
        )
    });
    let lock = parking_lot::Mutex::new(());
    let locking = component_ns(|| drop(std::hint::black_box(&lock).lock()));
    let building = component_ns(|| drop(std::hint::black_box(Event::new())));
    [
        ("cuCtxGetId", context_id),
        ("cuDevicePrimaryCtxGetState", context_state),
        ("lock + unlock", locking),
        ("Event::new + drop, never created", building),
    ]
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Median over rounds of `of[i] / base[i]`.
fn median_ratio(of: &[f64], base: &[f64]) -> f64 {
    median(&of.iter().zip(base).map(|(a, b)| a / b).collect::<Vec<_>>())
}

fn measure(ops: &mut [Op]) {
    for round in 0..=ROUNDS {
        for op in ops.iter_mut() {
            for k in 0..IMPLS.len() {
                let i = (k + round) % IMPLS.len(); // rotate who goes first
                if let Some(run) = op.runs[i].as_mut() {
                    let ns = run(op.calls) / op.calls as f64;
                    if round > 0 {
                        op.samples[i].push(ns); // round 0 is the warm-up
                    }
                }
            }
        }
    }
}

/// A cuda-event call (a record, an `elapsed_time`), timed with the capture checks off, and the
/// device-reset checks too where `reset_too`; both are on again after.
fn with_checks_off(reset_too: bool, mut call: impl FnMut() + 'static) -> Option<Run> {
    Some(Box::new(move |n: usize| {
        // SAFETY: no stream is captured and no device is reset in this benchmark.
        unsafe {
            cuda_event::capture::set_capture_checks(false);
            cuda_event::set_device_reset_checks(!reset_too);
        }
        let ns = timed(&mut call)(n);
        // SAFETY: turning the checks (back) on is always sound.
        unsafe {
            cuda_event::capture::set_capture_checks(true);
            cuda_event::set_device_reset_checks(true);
        }
        ns
    }))
}

/// Work of one benchmark thread: (thread index, calls).
type Work<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Aggregate calls per second of `threads` threads, each running `work` (given its index) `n` times.
/// With `set_device`, each thread first makes device 0 current, as most GPU programs' threads have;
/// without, it starts with no current context.
fn throughput(threads: usize, n: usize, set_device: bool, work: Work) -> f64 {
    let barrier = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                if set_device {
                    cuda_event::set_device(0).unwrap();
                }
                barrier.wait();
                work(t, n);
            });
        }
        barrier.wait();
        Instant::now()
    });
    (threads * n) as f64 / elapsed.elapsed().as_secs_f64()
}

/// Implementations in the thread-scaling table: raw runtime API calls (the baseline); the same
/// driver functions cuda-event calls (resolved with `cudaGetDriverEntryPointByVersion`) called raw,
/// alone and each after the `cuCtxGetId` that is cuda-event's device-reset check; cuda-event, with
/// its reset checks on (the default) and off (`set_device_reset_checks(false)`); cudarc.
const SCALING_IMPLS: [&str; 8] = [
    "raw runtime FFI",
    "raw driver FFI",
    "raw driver FFI + cuCtxGetId",
    "cuda-event",
    "cuda-event, reset checks off",
    "cudarc",
    "raw driver FFI on cuda-event's event and stream",
    "cuda-event on a runtime-made stream",
];

struct Scaling {
    name: String,
    threads: usize,
    /// Per implementation (as SCALING_IMPLS): calls/s of each round.
    samples: [Vec<f64>; 8],
}

/// Per thread: a stream, an event re-recorded on it, a completed event it queries and waits on, and
/// two completed timing events it reads the elapsed time of.
struct ThreadObjects {
    raw: Raw,
    safe: (Stream, Event, Event),
    safe_timing: (Event, Event),
    /// `raw.stream` (made by the runtime) as a cuda-event Stream.
    runtime_stream: Stream,
    cudarc: (
        Arc<cudarc::driver::CudaStream>,
        cudarc::driver::CudaEvent,
        cudarc::driver::CudaEvent,
    ),
    cudarc_timing: (cudarc::driver::CudaEvent, cudarc::driver::CudaEvent),
}

/// The index in SCALING_IMPLS of cuda-event with its device-reset checks off.
const CHECKS_OFF: usize = 4;

fn scaling() -> Vec<Scaling> {
    const N: usize = 20_000;
    let record: sys::PFN_cuEventRecord_v2000 = common::driver_fn(c"cuEventRecord", 2000);
    let query: sys::PFN_cuEventQuery_v2000 = common::driver_fn(c"cuEventQuery", 2000);
    let wait: sys::PFN_cuStreamWaitEvent_v3020 = common::driver_fn(c"cuStreamWaitEvent", 3020);
    let get_id: sys::PFN_cuCtxGetId_v12000 = common::driver_fn(c"cuCtxGetId", 12000);
    let elapsed: sys::PFN_cuEventElapsedTime_v12080 = common::driver_fn(c"cuEventElapsedTime", 12080);
    let (record, query, wait, get_id) = (record.unwrap(), query.unwrap(), wait.unwrap(), get_id.unwrap());
    let elapsed = elapsed.unwrap();
    // The context cuda-event checks: device 0's primary context, which its objects live in.
    let mut primary = std::ptr::null_mut();
    let retain: sys::PFN_cuDevicePrimaryCtxRetain_v7000 =
        common::driver_fn(c"cuDevicePrimaryCtxRetain", 7000);
    // SAFETY: device 0 exists; writes the context through a live local (retained for the run).
    assert_eq!(
        unsafe { retain.unwrap()(&mut primary, 0) },
        sys::CUresult::CUDA_SUCCESS
    );
    let primary = primary as usize;
    let check = move || {
        let mut id = 0;
        // SAFETY: a retained context; writes through a live local.
        assert_eq!(
            unsafe { get_id(primary as sys::CUcontext, &mut id) },
            sys::CUresult::CUDA_SUCCESS
        );
    };
    let success = sys::CUresult::CUDA_SUCCESS;
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let mut rows = Vec::new();
    for threads in [1, 2, 4, 8] {
        // Each thread's streams are made in an order rotated by thread: where a stream falls in
        // the order of creation decides which hardware queue it shares (records from threads whose
        // streams share a queue contend: systest/examples/stream_placement.rs), and a fixed order
        // gave one implementation's streams the same few queues at every thread count.
        let objects: Vec<ThreadObjects> = (0..threads)
            .map(|t| {
                let (mut safe, mut cudarc, mut raw) = (None, None, None);
                let (mut safe_timing, mut cudarc_timing) = (None, None);
                for maker in (0..3).map(|k| (k + t) % 3) {
                    match maker {
                        0 => {
                            let s =
                                Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
                            let (e, done) = (Event::new(), Event::new());
                            let timing = || Event::builder().enable_timing(true).build().unwrap();
                            let (start, end) = (timing(), timing());
                            e.record(&s).unwrap();
                            for event in [&start, &end, &done] {
                                event.record(&s).unwrap();
                            }
                            done.synchronize().unwrap(); // and so start and end, recorded before it
                            safe = Some((s, e, done));
                            safe_timing = Some((start, end));
                        }
                        1 => {
                            let cs = ctx.new_stream().unwrap();
                            let ce = cs.record_event(None).unwrap();
                            let cdone = cs.record_event(None).unwrap();
                            cdone.synchronize().unwrap();
                            cudarc = Some((cs, ce, cdone));
                            // Recorded below on a stream of their own: a timing record on `cs`
                            // would make its later records faster (`Stream`'s docs), which would
                            // move cudarc's record column against earlier runs.
                            let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
                            cudarc_timing =
                                Some((ctx.new_event(timing).unwrap(), ctx.new_event(timing).unwrap()));
                        }
                        _ => raw = Some(Raw::new()),
                    }
                }
                let (safe, cudarc, raw) = (safe.unwrap(), cudarc.unwrap(), raw.unwrap());
                // SAFETY: a live stream of device 0 that outlives the borrowing Stream.
                let runtime_stream = unsafe { Stream::from_raw_borrowed(raw.stream, 0) }.unwrap();
                ThreadObjects {
                    raw,
                    runtime_stream,
                    safe,
                    safe_timing: safe_timing.unwrap(),
                    cudarc,
                    cudarc_timing: cudarc_timing.unwrap(),
                }
            })
            .collect();
        // cudarc's timing events, recorded on one stream made after every thread's objects.
        let timing_stream = ctx.new_stream().unwrap();
        for o in &objects {
            o.cudarc_timing.0.record(&timing_stream).unwrap();
            o.cudarc_timing.1.record(&timing_stream).unwrap();
        }
        timing_stream.synchronize().unwrap();
        let o = &objects;
        // SAFETY (every raw call below): live handles of device 0, used by their own thread.
        let safe_record = |t: usize, n: usize| (0..n).for_each(|_| o[t].safe.1.record(&o[t].safe.0).unwrap());
        let safe_query = |t: usize, n: usize| (0..n).for_each(|_| assert!(o[t].safe.2.query().unwrap()));
        let safe_wait = |t: usize, n: usize| (0..n).for_each(|_| o[t].safe.2.wait(&o[t].safe.0).unwrap());
        let records: [Work; 8] = [
            &|t, n| (0..n).for_each(|_| o[t].raw.record_plain()),
            &|t, n| {
                let (e, s) = (o[t].raw.plain.cast(), o[t].raw.stream.cast());
                (0..n).for_each(|_| assert_eq!(unsafe { record(e, s) }, success))
            },
            &|t, n| {
                let (e, s) = (o[t].raw.plain.cast(), o[t].raw.stream.cast());
                (0..n).for_each(|_| {
                    check();
                    assert_eq!(unsafe { record(e, s) }, success)
                })
            },
            &safe_record,
            &safe_record, // with the checks off: see the round loop
            &|t, n| (0..n).for_each(|_| o[t].cudarc.1.record(&o[t].cudarc.0).unwrap()),
            &|t, n| {
                let (e, s) = (o[t].safe.1.as_raw().unwrap().cast(), o[t].safe.0.as_raw().cast());
                (0..n).for_each(|_| assert_eq!(unsafe { record(e, s) }, success))
            },
            &|t, n| (0..n).for_each(|_| o[t].safe.1.record(&o[t].runtime_stream).unwrap()),
        ];
        let queries: [Work; 8] = [
            &|t, n| (0..n).for_each(|_| o[t].raw.query_done()),
            &|t, n| {
                let e = o[t].raw.done.cast();
                (0..n).for_each(|_| assert_eq!(unsafe { query(e) }, success))
            },
            &|t, n| {
                let e = o[t].raw.done.cast();
                (0..n).for_each(|_| {
                    check();
                    assert_eq!(unsafe { query(e) }, success)
                })
            },
            &safe_query,
            &safe_query, // with the checks off
            &|t, n| (0..n).for_each(|_| assert!(o[t].cudarc.2.try_is_complete().unwrap())),
            &|t, n| {
                let e = o[t].safe.2.as_raw().unwrap().cast();
                (0..n).for_each(|_| assert_eq!(unsafe { query(e) }, success))
            },
            &safe_query, // no stream involved: the same as cuda-event
        ];
        let waits: [Work; 8] = [
            &|t, n| {
                let (s, e) = (o[t].raw.other, o[t].raw.done);
                (0..n).for_each(|_| ok(unsafe { sys::cudaStreamWaitEvent(s, e, 0) }))
            },
            &|t, n| {
                let (s, e) = (o[t].raw.other.cast(), o[t].raw.done.cast());
                (0..n).for_each(|_| assert_eq!(unsafe { wait(s, e, 0) }, success))
            },
            &|t, n| {
                let (s, e) = (o[t].raw.other.cast(), o[t].raw.done.cast());
                (0..n).for_each(|_| {
                    check();
                    assert_eq!(unsafe { wait(s, e, 0) }, success)
                })
            },
            &safe_wait,
            &safe_wait, // with the checks off
            &|t, n| (0..n).for_each(|_| o[t].cudarc.0.wait(&o[t].cudarc.2).unwrap()),
            &|t, n| {
                let (s, e) = (o[t].safe.0.as_raw().cast(), o[t].safe.2.as_raw().unwrap().cast());
                (0..n).for_each(|_| assert_eq!(unsafe { wait(s, e, 0) }, success))
            },
            &|t, n| (0..n).for_each(|_| o[t].safe.2.wait(&o[t].runtime_stream).unwrap()),
        ];
        let safe_elapsed = |t: usize, n: usize| {
            let (start, end) = &o[t].safe_timing;
            (0..n).for_each(|_| assert!(start.elapsed_time(end).unwrap() >= 0.0))
        };
        let raw_elapsed = |n: usize, start: sys::cudaEvent_t, end: sys::cudaEvent_t| {
            let (start, end) = (start.cast(), end.cast());
            let mut ms = 0.0;
            (0..n).for_each(|_| assert_eq!(unsafe { elapsed(&mut ms, start, end) }, success));
        };
        let elapsed_times: [Work; 8] = [
            &|t, n| {
                let (start, end) = (o[t].raw.timing_start, o[t].raw.timing_end);
                let mut ms = 0.0;
                (0..n).for_each(|_| ok(unsafe { sys::cudaEventElapsedTime(&mut ms, start, end) }))
            },
            &|t, n| raw_elapsed(n, o[t].raw.timing_start, o[t].raw.timing_end),
            &|t, n| {
                let (start, end) = (o[t].raw.timing_start.cast(), o[t].raw.timing_end.cast());
                let mut ms = 0.0;
                (0..n).for_each(|_| {
                    check();
                    assert_eq!(unsafe { elapsed(&mut ms, start, end) }, success)
                })
            },
            &safe_elapsed,
            &safe_elapsed, // with the checks off
            // cudarc's elapsed_ms also binds its context to the thread and synchronizes both
            // events before it reads the time: its API's cost, measured as it is.
            &|t, n| {
                let (start, end) = &o[t].cudarc_timing;
                (0..n).for_each(|_| assert!(start.elapsed_ms(end).unwrap() >= 0.0))
            },
            &|t, n| {
                let (start, end) = &o[t].safe_timing;
                raw_elapsed(n, start.as_raw().unwrap(), end.as_raw().unwrap())
            },
            &safe_elapsed, // no stream involved: the same as cuda-event
        ];
        let ops: [(&str, &[Work; 8]); 4] = [
            ("record", &records),
            ("query (complete)", &queries),
            ("stream wait event", &waits),
            ("elapsed_time (complete)", &elapsed_times),
        ];
        let mut measured: Vec<(Scaling, bool, &[Work; 8])> = Vec::new();
        for (op, works) in ops {
            for set_device in [false, true] {
                let threads_kind = if set_device {
                    "threads with a current device"
                } else {
                    "fresh threads"
                };
                let scaling = Scaling {
                    name: format!("{op}, own stream and events, {threads_kind}"),
                    threads,
                    samples: Default::default(),
                };
                measured.push((scaling, set_device, works));
            }
        }
        for round in 0..=ROUNDS {
            for (row, set_device, works) in measured.iter_mut() {
                for k in 0..SCALING_IMPLS.len() {
                    let i = (k + round) % SCALING_IMPLS.len(); // rotate who goes first
                    // SAFETY: no device is reset during the benchmark.
                    unsafe { cuda_event::set_device_reset_checks(i != CHECKS_OFF) };
                    let calls_per_s = throughput(threads, N, *set_device, works[i]);
                    // SAFETY: turning the checks (back) on is always sound.
                    unsafe { cuda_event::set_device_reset_checks(true) };
                    if round > 0 {
                        row.samples[i].push(calls_per_s);
                    }
                }
            }
        }
        // SAFETY: each stream is idle once synchronized.
        objects
            .iter()
            .for_each(|o| ok(unsafe { sys::cudaStreamSynchronize(o.raw.stream) }));
        rows.extend(measured.into_iter().map(|(row, _, _)| row));
    }
    rows
}

fn main() {
    // `cargo bench` passes --bench; a test runner that runs every test binary (the GPU machine's
    // runner does) passes test flags instead: this is no test, so it does nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the events benchmark runs with --bench (cargo bench passes it)");
        return;
    }
    if let Err(e) = cuda_event::device_count() {
        eprintln!("events benchmark: needs a CUDA GPU: {e}");
        std::process::exit(1);
    }
    let out_dir = std::env::var("CUDA_EVENT_BENCH_OUT").unwrap_or_else(|_| ".".into());
    let (mut runtime, mut driver) = (0, 0);
    // SAFETY: write one int each through live locals.
    unsafe {
        ok(sys::cudaRuntimeGetVersion(&mut runtime));
        ok(sys::cudaDriverGetVersion(&mut driver));
    }
    let scaling_only = std::env::args().any(|a| a == "--scaling-only");
    let mut ops = if scaling_only { Vec::new() } else { ops() };
    measure(&mut ops);
    let scaling = scaling();
    if scaling_only {
        let connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "unset".into());
        println!("CUDA runtime {runtime}, driver {driver}; CUDA_DEVICE_MAX_CONNECTIONS={connections}");
        print!("{}", scaling_table(&scaling).0);
        return;
    }
    let components = pool_path_components();
    let blocking = [
        common::cpu_and_wall_of_a_200ms_synchronize(true),
        common::cpu_and_wall_of_a_200ms_synchronize(true),
        common::cpu_and_wall_of_a_200ms_synchronize(true),
    ];
    let spinning = [
        common::cpu_and_wall_of_a_200ms_synchronize(false),
        common::cpu_and_wall_of_a_200ms_synchronize(false),
        common::cpu_and_wall_of_a_200ms_synchronize(false),
    ];

    let mut md = String::new();
    let mut json = String::new();
    let _ = writeln!(
        md,
        "CUDA runtime {runtime}, driver {driver}; {ROUNDS} rounds after a warm-up, interleaved.\n"
    );
    let _ = writeln!(
        md,
        "| operation | calls/round | {} | cuda-event / raw FFI | cudarc / raw FFI | raw C / raw FFI | cuda-event / raw driver |",
        IMPLS.map(|i| format!("{i} ns")).join(" | ")
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    let _ = write!(
        json,
        "{{\"runtime\":{runtime},\"driver\":{driver},\"rounds\":{ROUNDS},\"ops\":["
    );
    for (k, op) in ops.iter().enumerate() {
        let ns = |i: usize| (!op.samples[i].is_empty()).then(|| median(&op.samples[i]));
        let ratio = |i: usize| {
            (!op.samples[i].is_empty() && !op.samples[FFI].is_empty())
                .then(|| median_ratio(&op.samples[i], &op.samples[FFI]))
        };
        let vs_driver = (!op.samples[2].is_empty() && !op.samples[DRIVER].is_empty())
            .then(|| median_ratio(&op.samples[2], &op.samples[DRIVER]));
        let cell = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            op.name,
            op.calls,
            cell(ns(0), 0),
            cell(ns(1), 0),
            cell(ns(2), 0),
            cell(ns(3), 0),
            cell(ns(DRIVER), 0),
            cell(ratio(2), 2),
            cell(ratio(3), 2),
            cell(ratio(0), 2),
            cell(vs_driver, 2)
        );
        let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
        let _ = write!(
            json,
            "{}{{\"op\":\"{}\",\"calls\":{},\"ns\":{{{}}},\"ratio_vs_ffi\":{{{}}},\"cuda_event_vs_driver\":{}}}",
            if k > 0 { "," } else { "" },
            op.name,
            op.calls,
            IMPLS
                .iter()
                .enumerate()
                .map(|(i, n)| format!("\"{n}\":{}", num(ns(i))))
                .collect::<Vec<_>>()
                .join(","),
            IMPLS
                .iter()
                .enumerate()
                .map(|(i, n)| format!("\"{n}\":{}", num(ratio(i))))
                .collect::<Vec<_>>()
                .join(","),
            num(vs_driver)
        );
    }
    let (table, scaling_json) = scaling_table(&scaling);
    md.push_str(&table);
    let _ = write!(json, "],\"scaling\":[{scaling_json}");
    let share = |runs: &[(Duration, Duration)]| {
        median(
            &runs
                .iter()
                .map(|(cpu, wall)| cpu.as_secs_f64() / wall.as_secs_f64())
                .collect::<Vec<_>>(),
        )
    };
    let (b, s) = (share(&blocking), share(&spinning));
    let _ = writeln!(
        md,
        "\nCPU time / wall time over a 200 ms synchronize (median of 3): blocking {:.3}%, spinning {:.1}%",
        b * 100.0,
        s * 100.0
    );
    let parts: Vec<String> = components
        .iter()
        .map(|(name, ns)| format!("{name} {ns:.0} ns"))
        .collect();
    let _ = writeln!(
        md,
        "\nParts of cuda-event's first-record path, each alone: {}",
        parts.join(", ")
    );
    let parts: Vec<String> = components
        .iter()
        .map(|(name, ns)| format!("\"{name}\":{ns:.1}"))
        .collect();
    let _ = writeln!(
        json,
        "],\"wait_cpu_share\":{{\"blocking\":{b:.5},\"spinning\":{s:.5}}},\"first_record_parts_ns\":{{{}}}}}",
        parts.join(",")
    );

    print!("{md}");
    std::fs::write(format!("{out_dir}/events.md"), &md).unwrap();
    std::fs::write(format!("{out_dir}/events.json"), &json).unwrap();
}

/// The thread-scaling rows as a markdown table (after a blank line) and as JSON array items.
fn scaling_table(scaling: &[Scaling]) -> (String, String) {
    let (mut md, mut json) = (String::new(), String::new());
    let _ = writeln!(
        md,
        "\n| threads | operation | {} | {} |",
        SCALING_IMPLS.map(|i| format!("{i} calls/s")).join(" | "),
        SCALING_IMPLS[1..]
            .iter()
            .map(|i| format!("{i} / raw runtime FFI"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(2 * SCALING_IMPLS.len() - 1));
    for (k, row) in scaling.iter().enumerate() {
        let calls: Vec<f64> = row.samples.iter().map(|s| median(s)).collect();
        let ratios: Vec<f64> = (1..SCALING_IMPLS.len())
            .map(|i| median_ratio(&row.samples[i], &row.samples[0]))
            .collect();
        let cells = |values: &[f64], digits: usize| {
            values
                .iter()
                .map(|v| format!("{v:.digits$}"))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            row.threads,
            row.name,
            cells(&calls, 0),
            cells(&ratios, 2)
        );
        let _ = write!(
            json,
            "{}{{\"op\":\"{}\",\"threads\":{},\"calls_per_s\":{{{}}},\"ratio_vs_runtime_ffi\":{{{}}}}}",
            if k > 0 { "," } else { "" },
            row.name,
            row.threads,
            SCALING_IMPLS
                .iter()
                .zip(&calls)
                .map(|(n, v)| format!("\"{n}\":{v:.0}"))
                .collect::<Vec<_>>()
                .join(","),
            SCALING_IMPLS[1..]
                .iter()
                .zip(&ratios)
                .map(|(n, v)| format!("\"{n}\":{v:.3}"))
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    (md, json)
}
