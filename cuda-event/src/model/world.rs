//! The model's state: contexts, events, streams, captures and graphs, the calls in flight, and the
//! rules a call pattern breaks. Kept under one std lock that is never held across a scheduling
//! point, so the model checker's threads interleave only where a call yields.

use cuda_event_sys as sys;
use shuttle::current::TaskId;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub(crate) type Code = sys::CUresult;

/// What a call that broke a rule answers (the failure itself is reported by `model::tests::check`).
pub(crate) const BROKEN: Code = Code::CUDA_ERROR_UNKNOWN;

/// Devices in the model.
pub(crate) const DEVICES: i32 = 2;

/// How many of the last driver calls a failure prints.
const LOG_SHOWN: usize = 40;

/// Where each rule comes from: the results folder that measured it, or CUDA's documentation.
pub(crate) mod source {
    /// A read of an event beside a record of it into a capture, or beside the end of a capture
    /// that holds its record, crashed in the reading thread; a query while the capture is open
    /// answered 907 and invalidated it; a record on a stream before the end releases the event.
    pub(crate) const CAPPHASE: &str = "bench/results/2026-12-01-h200-captured-records (1-probes/capphase.txt, capfail-synchronize-wait.txt, capphase-rerecorded-before-the-end.txt)";
    /// A record of an event on a stream, and a destroy of it, beside the end of a capture that
    /// holds its record crashed (every run); both beside the captured record, or while the capture
    /// is open, did not; reads beside an external node's capture did not.
    pub(crate) const TWO_EVENTS: &str = "bench/results/2026-12-02-h200-two-events (1-probes/probe_plain_vs_captured.txt, probe_destroy_ipc.txt)";
    /// Two threads' records of one event into their own captures at once crashed inside the
    /// captured record (the session's review, probe_plain_vs_captured.c with the plain record made
    /// a captured one; output not kept, see that folder's README).
    pub(crate) const TWO_CAPTURES: &str = "bench/results/2026-12-02-h200-two-events (README, section 6)";
    /// A CUDA event recorded into one capture, recorded again into another capture beside the
    /// first one's end, crashed at round 2 (review 3's probe P1, case r).
    pub(crate) const P1_REUSE: &str = "bench/results/2026-12-06-h100-review-probes (probes-P1-P5.txt, P1 r)";
    /// Beside another thread's global-mode capture, a caller in global mode is refused (900) the
    /// potentially unsafe calls (queries, synchronizes, allocations, graph instantiation and
    /// instance destroy) and the capture is invalidated; callers in thread-local or relaxed mode
    /// are not (`capture_unsafe_calls.txt`). A caller's own capture restricts it in global and
    /// thread-local mode (CUDA's documentation of `cudaStreamCaptureMode`).
    pub(crate) const UNSAFE_CALLS: &str =
        "bench/results/2026-12-06-h100-review-probes (capture_unsafe_calls.txt)";
    /// In a capture: a plain wait on an event recorded outside it answers 905 and invalidates it
    /// (P5 a); a wait on another capture's record answers 902 and invalidates both (P5 b); work
    /// into an invalidated capture answers 901 (P5 c); a wait on an ended capture's record answers
    /// invalid value (P5 d). Review 3's probe P5.
    pub(crate) const P5_ISOLATION: &str =
        "bench/results/2026-12-06-h100-review-probes (probes-P1-P5.txt, P5)";
    /// `cudaStreamGetCaptureInfo` of a stream, and a record of a fresh event on it, beside another
    /// thread's end of that stream's capture crashed (probe capture_end_signals, i and e);
    /// `cudaStreamIsCapturing` there did not (q).
    pub(crate) const INTO_THE_END: &str =
        "bench/results/2026-12-06-h100-capture-signals (capture_end_signals-iqe.txt, i and e)";
    /// Undefined behaviour by CUDA's documentation.
    pub(crate) const CUDA_DOCS: &str = "CUDA driver API documentation (undefined behaviour)";
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CaptureMode {
    Global,
    ThreadLocal,
    Relaxed,
}

impl CaptureMode {
    pub(crate) fn from_driver(mode: sys::CUstreamCaptureMode) -> CaptureMode {
        match mode {
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL => CaptureMode::Global,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => CaptureMode::ThreadLocal,
            _ => CaptureMode::Relaxed,
        }
    }

    pub(crate) fn to_driver(self) -> sys::CUstreamCaptureMode {
        match self {
            CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// An event's last record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Last {
    Never,
    /// On a stream; complete once the stream's work up to it is.
    OnStream {
        stream: u64,
        done: bool,
    },
    /// A plain record into a capture (open or ended).
    InCapture(u64),
}

/// A CUDA event as the model holds it (`State`: the crate's own `Event` is another thing).
pub(crate) struct EventState {
    pub(crate) device: i32,
    pub(crate) flags: u32,
    pub(crate) last: Last,
}

/// A stream as the model holds it.
pub(crate) struct StreamState {
    pub(crate) device: i32,
    /// Work on it does not complete until released (a host function that waits, a spin kernel).
    pub(crate) held: bool,
    /// Its queue is full: a record blocks until released.
    pub(crate) full: bool,
    pub(crate) capture: Option<u64>,
    /// Host functions queued behind the hold.
    pub(crate) host_fns: Vec<(usize, usize)>,
}

pub(crate) struct Capture {
    pub(crate) origin: u64,
    pub(crate) mode: CaptureMode,
    pub(crate) thread: TaskId,
    /// Events whose last record is this capture's.
    pub(crate) holds: HashSet<u64>,
    pub(crate) open: bool,
    /// Why it was invalidated, if it was.
    pub(crate) invalidated: Option<String>,
    /// The graph it builds (`cuStreamGetCaptureInfo`'s), which its end hands over.
    pub(crate) graph: u64,
}

/// A user object: its destructor and the references to it (the caller's and the graphs').
pub(crate) struct UserObject {
    pub(crate) destroy: unsafe extern "C" fn(*mut std::ffi::c_void),
    pub(crate) data: usize,
    pub(crate) references: u32,
}

/// A device's primary context as the model holds it: an id that a reset changes, and the sticky
/// error of a fault.
pub(crate) struct ContextState {
    pub(crate) id: u64,
    pub(crate) sticky: Option<Code>,
}

/// A call in flight, for the overlap rules (the names and ids are for the failure's message).
#[derive(Clone, Debug)]
#[allow(dead_code)]
pub(crate) enum Op {
    /// Reads the event's state: query, synchronize, stream wait, elapsed time, IPC export.
    Read(&'static str, u64),
    /// A plain record of the event into an open capture.
    RecordCaptured(u64),
    /// A record of the event on a stream.
    RecordPlain(u64),
    /// An external record of the event into an open capture (a node of the graph).
    RecordExternal(u64),
    /// A call into an open capture (by its id): a record into it, a read of its capture info.
    IntoCapture(u64),
    /// The end of a capture, with the events it held when it began to end.
    EndCapture(u64, Vec<u64>),
    Destroy(u64),
}

#[derive(Default)]
pub(crate) struct World {
    pub(crate) next_handle: u64,
    pub(crate) contexts: Vec<ContextState>,
    pub(crate) events: HashMap<u64, EventState>,
    pub(crate) streams: HashMap<u64, StreamState>,
    pub(crate) captures: HashMap<u64, Capture>,
    pub(crate) graphs: HashSet<u64>,
    pub(crate) user_objects: HashMap<u64, UserObject>,
    /// The user objects each graph (open capture's or ended) holds a reference to.
    pub(crate) graph_objects: HashMap<u64, Vec<u64>>,
    /// Handles destroyed by the crate or by a reset: a later use is a use-after-free.
    pub(crate) destroyed: HashSet<u64>,
    pub(crate) in_flight: Vec<(TaskId, Op)>,
    pub(crate) modes: HashMap<TaskId, CaptureMode>,
    pub(crate) context_stack: HashMap<TaskId, Vec<i32>>,
    pub(crate) current_device: HashMap<TaskId, i32>,
    /// The thread that forked: every driver call it makes after is a child's.
    pub(crate) forked: Option<TaskId>,
    /// Driver calls per symbol, for the call-count tests.
    pub(crate) calls: HashMap<&'static str, u64>,
    /// The first rule broken in this execution (reported when the test's body returns: a panic
    /// cannot cross the driver functions' C ABI).
    pub(crate) failure: Option<String>,
    /// The driver calls of this execution so far, in the order the model checker ran them: the
    /// interleaving a failure prints.
    pub(crate) log: Vec<String>,
}

/// Contexts persist from one execution to the next (as the crate's cache of them does); the rest
/// is made new at the start of each execution.
static WORLD: Mutex<Option<World>> = Mutex::new(None);

pub(crate) fn world() -> MutexGuard<'static, Option<World>> {
    WORLD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` on the world (made on first use).
pub(crate) fn with<R>(f: impl FnOnce(&mut World) -> R) -> R {
    let mut world = world();
    let world = world.get_or_insert_with(World::new);
    f(world)
}

impl World {
    fn new() -> World {
        World {
            next_handle: 0x1000,
            contexts: (0..DEVICES)
                .map(|_| ContextState { id: 1, sticky: None })
                .collect(),
            ..World::default()
        }
    }

    /// A new execution: everything but the contexts (whose ids only grow) and the handle counter
    /// (so that a handle of an earlier execution never names a new object) starts empty.
    pub(crate) fn begin_execution(&mut self) {
        let contexts = std::mem::take(&mut self.contexts);
        let next_handle = self.next_handle;
        *self = World {
            contexts,
            next_handle,
            ..World::default()
        };
        for context in &mut self.contexts {
            context.sticky = None;
        }
    }

    pub(crate) fn new_handle(&mut self) -> u64 {
        self.next_handle += 0x10;
        self.next_handle
    }

    /// A model failure: the crate made a call this rule forbids. Kept, and reported when the
    /// test's body returns (`model::tests::check`); the call answers [`BROKEN`].
    pub(crate) fn fail(&mut self, rule: &str, source: &str, detail: String) {
        if self.failure.is_some() {
            return;
        }
        let shown = self.log.len().saturating_sub(LOG_SHOWN);
        let message = format!(
            "driver model: {rule} ({detail}) [measured in: {source}]\nthe driver calls so far, in order (last {}):\n  {}",
            self.log.len() - shown,
            self.log[shown..].join("\n  ")
        );
        eprintln!("{message}");
        self.failure = Some(message);
    }

    /// Notes a driver call (or a call's second half, after its yield) in the interleaving.
    pub(crate) fn note(&mut self, me: TaskId, what: std::fmt::Arguments<'_>) {
        self.log.push(format!("{me:?}: {what}"));
    }

    pub(crate) fn count(&mut self, symbol: &'static str) {
        *self.calls.entry(symbol).or_default() += 1;
    }

    /// Whether `me` may call the driver (not a forked child).
    pub(crate) fn check_not_forked(&mut self, me: TaskId, symbol: &str) -> bool {
        if self.forked == Some(me) {
            self.fail(
                "a driver call in a forked child",
                source::CUDA_DOCS,
                format!("{symbol} after fork"),
            );
            return false;
        }
        true
    }

    /// The event `raw`, or `None` (a failure) when it was destroyed or never made.
    pub(crate) fn event(&mut self, raw: u64, symbol: &str) -> Option<&mut EventState> {
        let present = self.events.contains_key(&raw);
        self.fail_unless_known(present, "event", raw, symbol);
        self.events.get_mut(&raw)
    }

    /// The stream `raw`, or `None` (a failure) when it was destroyed or never made.
    pub(crate) fn stream(&mut self, raw: u64, symbol: &str) -> Option<&mut StreamState> {
        let present = self.streams.contains_key(&raw);
        self.fail_unless_known(present, "stream", raw, symbol);
        self.streams.get_mut(&raw)
    }

    /// A use of a destroyed or unknown `kind` of handle fails the run.
    fn fail_unless_known(&mut self, present: bool, kind: &str, raw: u64, symbol: &str) {
        if !present {
            let destroyed = self.destroyed.contains(&raw);
            self.fail(
                &format!("use of a destroyed or unknown {kind}"),
                source::CUDA_DOCS,
                format!("{symbol}({raw:#x}), destroyed: {destroyed}"),
            );
        }
    }

    /// The sticky error of the context an object lives in, if any.
    pub(crate) fn sticky(&self, device: i32) -> Option<Code> {
        self.contexts[device as usize].sticky
    }

    /// The open capture `stream` belongs to.
    pub(crate) fn capture_of(&self, stream: u64) -> Option<u64> {
        self.streams
            .get(&stream)?
            .capture
            .filter(|c| self.captures[c].open)
    }

    /// The overlap rules: `op`, in flight on `me`, against every other thread's call in flight.
    pub(crate) fn check_overlaps(&mut self, me: TaskId, op: &Op) {
        let broken: Vec<_> = self
            .in_flight
            .iter()
            .filter(|(other, _)| *other != me)
            .filter_map(|(other, theirs)| {
                let (rule, source) = conflict(op, theirs).or_else(|| conflict(theirs, op))?;
                Some((
                    rule,
                    source,
                    format!("{op:?} on {me:?} beside {theirs:?} on {other:?}"),
                ))
            })
            .collect();
        for (rule, source, detail) in broken {
            self.fail(rule, source, detail);
        }
    }

    /// A potentially unsafe call (a query or synchronize) on a thread that is not in relaxed
    /// capture mode, while a global capture is open on any thread or a capture of this thread's is
    /// not relaxed: CUDA refuses it and invalidates those captures (CUDA's documentation of
    /// `cuThreadExchangeStreamCaptureMode`).
    pub(crate) fn prohibited_by_a_capture(&mut self, me: TaskId, symbol: &str) -> Option<Code> {
        // A global-mode caller is restricted by every global capture, any
        // caller but a relaxed one by its own captures that are not relaxed.
        let mine = self.modes.get(&me).copied().unwrap_or(CaptureMode::Global);
        if mine == CaptureMode::Relaxed {
            return None;
        }
        let mut refused = false;
        for capture in self.captures.values_mut().filter(|c| c.open) {
            let prohibits = (capture.mode == CaptureMode::Global && mine == CaptureMode::Global)
                || (capture.thread == me && capture.mode != CaptureMode::Relaxed);
            if prohibits {
                refused = true;
                capture.invalidated.get_or_insert_with(|| {
                    format!(
                        "{symbol} on {me:?}, not in relaxed capture mode ({})",
                        source::UNSAFE_CALLS
                    )
                });
            }
        }
        refused.then_some(Code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Drops a reference to each user object in `objects`, and returns the destructors of those
    /// that have none left, to run once the world is unlocked (they may take the crate's locks).
    pub(crate) fn release_objects(
        &mut self,
        objects: &[u64],
    ) -> Vec<(unsafe extern "C" fn(*mut std::ffi::c_void), usize)> {
        let mut destructors = Vec::new();
        for object in objects {
            let Some(o) = self.user_objects.get_mut(object) else {
                continue;
            };
            o.references -= 1;
            if o.references == 0 {
                let o = self.user_objects.remove(object).expect("present");
                destructors.push((o.destroy, o.data));
            }
        }
        destructors
    }
}

/// Runs user objects' destructors (CUDA runs them on a thread of its own once the last reference
/// goes; the model runs them on the releasing thread, after the call).
pub(crate) fn run_destructors(destructors: Vec<(unsafe extern "C" fn(*mut std::ffi::c_void), usize)>) {
    for (destroy, data) in destructors {
        // SAFETY: the destructor and data the object was created with, run once.
        unsafe { destroy(data as *mut std::ffi::c_void) };
    }
}

/// Whether `a` in flight beside `b` is a pattern that crashes (or was not probed and is treated
/// as one), and the rule's source.
fn conflict(a: &Op, b: &Op) -> Option<(&'static str, &'static str)> {
    match (a, b) {
        (Op::Read(_, e), Op::RecordCaptured(f)) if e == f => Some((
            "a read of an event beside a record of it into a capture (SIGSEGV)",
            source::CAPPHASE,
        )),
        (Op::Read(_, e), Op::EndCapture(_, held)) if held.contains(e) => Some((
            "a read of an event beside the end of a capture that holds its record (SIGSEGV)",
            source::CAPPHASE,
        )),
        (Op::RecordCaptured(e), Op::RecordCaptured(f)) if e == f => Some((
            "two records of one event into captures at once (SIGSEGV)",
            source::TWO_CAPTURES,
        )),
        (Op::RecordCaptured(e), Op::EndCapture(_, held)) if held.contains(e) => Some((
            "a record of an event into a capture beside the end of a capture that holds its record (SIGSEGV)",
            source::P1_REUSE,
        )),
        (Op::RecordPlain(e), Op::EndCapture(_, held)) if held.contains(e) => Some((
            "a record of an event on a stream beside the end of a capture that holds its record (SIGSEGV)",
            source::TWO_EVENTS,
        )),
        (Op::IntoCapture(c), Op::EndCapture(d, _)) if c == d => Some((
            "a call into a capture (a record, its capture info) beside that capture's end (SIGSEGV)",
            source::INTO_THE_END,
        )),
        (Op::Destroy(e), Op::EndCapture(_, held)) if held.contains(e) => Some((
            "a destroy of an event beside the end of a capture that holds its record (SIGSEGV)",
            source::TWO_EVENTS,
        )),
        (Op::Destroy(e), Op::RecordCaptured(f) | Op::RecordPlain(f) | Op::Read(_, f)) if e == f => Some((
            "a destroy of an event beside another call on it",
            source::CUDA_DOCS,
        )),
        _ => None,
    }
}
