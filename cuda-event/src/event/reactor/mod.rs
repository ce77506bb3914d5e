//! The reactor: one thread that confirms pending waits by querying their CUDA events, so that a
//! wait never depends on CUDA's host-function thread alone.
//!
//! It knows query targets and wait cells, nothing of `Event`, `Stream` or futures. A wait is
//! registered once ([`register`]) and is checked in one of two ways:
//! - **backed by a wake-up** (a host function on a wake stream will ring its cell): its event is
//!   still queried every [`BACKSTOP`], in case the wake-up never comes (CUDA's host-function thread
//!   is busy with someone's blocking host function, the context failed, a launch was refused);
//! - **polled** (no wake-up could be queued: an event recorded on a default stream or by other
//!   code, an imported one): queried in chunks of [`CHUNK`], paced to about 1/[`CPU_SHARE`] of a
//!   core, and each at least every [`BACKSTOP`] however many there are.
//!
//! The thread runs in relaxed capture mode, so that its queries never invalidate a capture that
//! another thread makes in global mode; an answer that comes from such a capture is read as "not
//! yet", never as the wait's result.
//!
//! Nothing waits for the thread. A wait's owner (a future) gives up by marking its cell
//! ([`WaitCell::abandon`]); the thread queries a target only under its cell's lock and after
//! checking that mark, so an abandoned target is never queried again, and the thread forgets
//! abandoned and finished waits the next time it meets them. Wakers run outside every lock, each
//! in `catch_unwind`, so a panicking waker does not stop the thread.

pub(crate) mod wake_streams;

use crate::capture_mode::{RelaxedCapture, is_capture_interference};
use crate::context::{ContextInstance, MadeIn};
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::handle::{EventHandle, query_handle};
use crate::event::ipc::Exporter;
use crate::stream::{Stream, StreamOptions};
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The longest a pending wait goes without a query of its own event.
pub(crate) const BACKSTOP: Duration = Duration::from_millis(100);
/// The shortest wait between two polling steps.
const MIN_POLL: Duration = Duration::from_micros(50);
/// Polling costs about 1/CPU_SHARE of a core, unless [`BACKSTOP`] needs more.
const CPU_SHARE: u32 = 200;
/// Queries in one step.
const CHUNK: usize = 256;
/// How soon a query that a capture elsewhere interfered with is tried again.
const RETRY: Duration = Duration::from_millis(1);

/// What a wait queries: a CUDA event, where it was made, and, for an imported one, its exporter.
#[derive(Clone, Copy)]
pub(crate) struct QueryTarget {
    pub(crate) raw: sys::cudaEvent_t,
    pub(crate) made_in: MadeIn,
    pub(crate) exporter: Option<Exporter>,
}

// SAFETY: the raw event handle is an opaque CUDA handle any thread may use; it is only queried
// under its wait cell's lock while the cell is not abandoned, and the owner of the event abandons
// every cell on it before the event goes away.
unsafe impl Send for QueryTarget {}
// SAFETY: as for Send; it is only read.
unsafe impl Sync for QueryTarget {}

impl QueryTarget {
    /// `cuEventQuery` as `Event::query` reads it, in relaxed capture mode.
    pub(crate) fn query(&self, d: &Driver) -> Result<bool> {
        query_handle(d, self.raw, self.made_in, self.exporter)
    }
}

/// What a wait's owner, the host function that rings for it and the reactor share.
#[derive(Default)]
pub(crate) struct WaitCell {
    state: Mutex<WaitState>,
    /// Held while a thread of the crate's uses the target (a query, a wait queued on a wake
    /// stream), which may block in CUDA; `true` once the owner gave up. Apart from `state`, so that
    /// a ring (on CUDA's host-function thread) or a poll never waits for such a call.
    target_in_use: Mutex<bool>,
}

#[derive(Default)]
struct WaitState {
    /// The wait's result, once known.
    result: Option<Result<()>>,
    /// A wake-up ran: the target's record has completed, or was replaced by a later one.
    rung: bool,
    waker: Option<Waker>,
    /// The owner gave up: the target may no longer be queried.
    abandoned: bool,
}

/// What the owner learns when it looks at its cell.
pub(crate) enum Seen {
    /// The result, once known.
    Done(Result<()>),
    /// A wake-up ran: confirm with a query.
    Rung,
    /// Nothing yet; the waker is stored.
    Pending,
}

impl WaitCell {
    /// Stores `waker` (unless it would wake the same task) and says what is known.
    pub(crate) fn look(&self, waker: &Waker) -> Seen {
        let mut state = self.state.lock();
        if let Some(result) = &state.result {
            return Seen::Done(result.clone());
        }
        match &mut state.waker {
            Some(stored) if stored.will_wake(waker) => {}
            stored => *stored = Some(waker.clone()),
        }
        if std::mem::take(&mut state.rung) {
            Seen::Rung
        } else {
            Seen::Pending
        }
    }

    /// Called from CUDA's host-function thread: no CUDA call here.
    pub(crate) fn ring(&self) {
        let waker = {
            let mut state = self.state.lock();
            if state.abandoned {
                return;
            }
            state.rung = true;
            state.waker.take()
        };
        wake(waker);
    }

    fn finish(&self, result: Result<()>) {
        let waker = {
            let mut state = self.state.lock();
            state.result.get_or_insert(result);
            state.waker.take()
        };
        wake(waker);
    }

    /// The owner stops waiting: the waker goes, and once this returns the target is never queried
    /// again (a query in flight holds the lock this takes).
    pub(crate) fn abandon(&self) {
        let waker = {
            let mut state = self.state.lock();
            state.abandoned = true;
            state.waker.take()
        };
        drop(waker);
        *self.target_in_use.lock() = true;
    }

    /// The owner gave up or the result is known: nothing needs to ring it any more.
    pub(crate) fn settled(&self) -> bool {
        let state = self.state.lock();
        state.abandoned || state.result.is_some()
    }

    /// Runs `call`, which uses the target, unless the owner gave up or the result is known; the
    /// owner's [`abandon`](Self::abandon) waits for it.
    pub(crate) fn while_watched<R>(&self, call: impl FnOnce() -> R) -> Option<R> {
        let abandoned = self.target_in_use.lock();
        if *abandoned {
            return None;
        }
        {
            let state = self.state.lock();
            if state.abandoned || state.result.is_some() {
                return None;
            }
        }
        let answer = call();
        drop(abandoned);
        Some(answer)
    }
}

/// Wakes a task outside every lock; a panicking waker is contained.
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
    }
}

/// One registered wait.
struct Wait {
    target: QueryTarget,
    cell: Arc<WaitCell>,
    /// Completion of the target is confirmed with its context's canary before it is believed:
    /// after a kernel fault CUDA reports the events of the work it killed as complete.
    confirm_context: bool,
    /// When it is due for a query.
    due: Instant,
    /// A query found its target complete with no wake-up come (a `confirm_context` wait believes
    /// that only when it is seen twice, [`BACKSTOP`] apart: right after a kernel fault, the killed
    /// work's events read complete before the fault shows anywhere).
    seen_complete: bool,
}

/// A new wait, sent to the thread.
struct Registered {
    wait: Wait,
    backed: bool,
}

#[derive(Default)]
struct Inbox {
    registered: Vec<Registered>,
    /// The thread runs.
    running: bool,
    /// When the thread comes back by itself (`None`: only when told).
    sleeping_until: Option<Instant>,
}

struct Reactor {
    inbox: Mutex<Inbox>,
    changed: Condvar,
}

fn reactor() -> &'static Reactor {
    static REACTOR: OnceLock<Reactor> = OnceLock::new();
    REACTOR.get_or_init(|| Reactor {
        inbox: Mutex::new(Inbox::default()),
        changed: Condvar::new(),
    })
}

/// Registers a wait on `target`: `backed` when a wake-up was queued that will ring `cell`. The
/// thread finishes `cell` with the target's result (an error of the work, or `Ok` once complete)
/// if no wake-up comes first; `confirm_context` asks it to check the context before believing a
/// completion it finds.
///
/// # Errors
/// [`Error::ReactorUnavailable`] if the thread could not be started; nothing was registered.
pub(crate) fn register(
    target: QueryTarget,
    cell: Arc<WaitCell>,
    backed: bool,
    confirm_context: bool,
) -> Result<()> {
    let now = Instant::now();
    let due = now + if backed { BACKSTOP } else { MIN_POLL };
    let this = reactor();
    let mut inbox = this.inbox.lock();
    if !inbox.running {
        std::thread::Builder::new()
            .name("cuda-event-reactor".into())
            .spawn(|| reactor().run())
            .map_err(|e| Error::ReactorUnavailable {
                reason: e.to_string(),
            })?;
        inbox.running = true;
    }
    inbox.registered.push(Registered {
        wait: Wait {
            target,
            cell,
            confirm_context,
            due,
            seen_complete: false,
        },
        backed,
    });
    if inbox.sleeping_until.is_none_or(|until| until > due) {
        inbox.sleeping_until = Some(now);
        this.changed.notify_one();
    }
    Ok(())
}

/// The thread's own state: no one else touches it.
#[derive(Default)]
struct Waits {
    /// Backed waits in the order they are due.
    backed: VecDeque<Wait>,
    /// Polled waits, walked a chunk a step.
    polled: Vec<Wait>,
    /// Where the walk over `polled` is.
    next: usize,
}

/// One canary per context instance that a wait confirms completions in: made by the reactor
/// thread, read by it and by a future confirming a wake-up. The lock is held for a lookup and one
/// query, never while a canary is made.
static CANARIES: LazyLock<Mutex<HashMap<ContextInstance, Canary>>> = LazyLock::new(Default::default);

/// A CUDA event of the thread's own in a context, recorded once: once the context has failed,
/// querying it returns the error, unlike the events of the work a fault killed.
struct Canary {
    _stream: Stream,
    event: Option<EventHandle>,
}

impl Canary {
    fn new(d: &Driver, device: i32) -> Result<Canary> {
        let stream = Stream::unregistered(device, StreamOptions::default().non_blocking(true))?;
        let event = EventHandle::create(d, device, sys::cudaEventDisableTiming)?;
        let canary = Canary {
            _stream: stream,
            event: Some(event),
        };
        let (raw, stream) = (canary.raw(), canary._stream.as_raw());
        // SAFETY: a live event and stream of one device, both just made here.
        d.event_record.call(|f| unsafe { f(raw, stream) })?;
        Ok(canary)
    }

    fn raw(&self) -> sys::cudaEvent_t {
        self.event
            .as_ref()
            .map_or(std::ptr::null_mut(), |event| event.raw)
    }

    /// `Ok` unless its context has failed (or a reset ended it).
    fn health(&self, d: &Driver) -> Result<()> {
        match &self.event {
            Some(event) => query_handle(d, event.raw, event.made_in(), None).map(drop),
            None => Ok(()),
        }
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            event.destroy();
        }
    }
}

/// What a query of a wait's target decided.
enum Outcome {
    Finished(Result<()>),
    Again(Instant),
    /// Complete, to be believed at the next check.
    SeenComplete(Instant),
    Forget,
}

impl Reactor {
    fn run(&self) {
        let Ok(d) = driver("the reactor thread") else {
            return;
        };
        RelaxedCapture::enter(d).forever();
        let mut waits = Waits::default();
        let mut last_cpu = thread_cpu_time();
        loop {
            let registered = std::mem::take(&mut self.inbox.lock().registered);
            for new in registered {
                if new.wait.confirm_context {
                    make_canary(d, new.wait.target.made_in);
                }
                if new.backed {
                    waits.backed.push_back(new.wait);
                } else {
                    waits.polled.push(new.wait);
                }
            }
            let now = Instant::now();
            let next_backed = waits.check_backed(d, now);
            let polled_chunk = waits.poll_chunk(d);
            // Each polling step, its wait and wake-up included, costs about 1/CPU_SHARE of a core,
            // but a whole walk over the polled waits takes at most BACKSTOP.
            let cpu = thread_cpu_time();
            let cost = cpu.saturating_sub(last_cpu);
            last_cpu = cpu;
            let next_poll = polled_chunk.map(|chunks| {
                let paced = (cost * CPU_SHARE).max(MIN_POLL);
                let bound = BACKSTOP / chunks.max(1) as u32;
                Instant::now() + paced.min(bound)
            });
            let deadline = match (next_backed, next_poll) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let mut inbox = self.inbox.lock();
            if inbox.registered.is_empty() {
                inbox.sleeping_until = deadline;
                match deadline {
                    Some(deadline) => drop(self.changed.wait_until(&mut inbox, deadline)),
                    None => self.changed.wait(&mut inbox),
                }
            }
            inbox.sleeping_until = Some(Instant::now());
        }
    }
}

impl Waits {
    /// Queries the backed waits that are due (a chunk at a time, all of them if need be);
    /// returns when the next one is due.
    fn check_backed(&mut self, d: &Driver, now: Instant) -> Option<Instant> {
        let mut again = Vec::new();
        while let Some(wait) = self.backed.front() {
            if wait.due > now {
                break;
            }
            let wait = self.backed.pop_front().expect("just seen");
            match check(d, &wait) {
                Outcome::Again(due) => again.push(Wait { due, ..wait }),
                Outcome::SeenComplete(due) => again.push(Wait {
                    due,
                    seen_complete: true,
                    ..wait
                }),
                Outcome::Finished(result) => wait.cell.finish(result),
                Outcome::Forget => {}
            }
        }
        // Those queried again are due after every wait still queued (each was due by now).
        again.sort_by_key(|wait| wait.due);
        self.backed.extend(again);
        self.backed.front().map(|wait| wait.due)
    }

    /// Queries the next chunk of polled waits; returns how many chunks a walk over them takes, or
    /// `None` when there are none.
    fn poll_chunk(&mut self, d: &Driver) -> Option<usize> {
        let mut at = self.next.min(self.polled.len());
        let mut queried = 0;
        while at < self.polled.len() && queried < CHUNK {
            queried += 1;
            match check(d, &self.polled[at]) {
                Outcome::Again(_) => at += 1,
                Outcome::SeenComplete(_) => {
                    self.polled[at].seen_complete = true;
                    at += 1;
                }
                Outcome::Finished(result) => self.polled.swap_remove(at).cell.finish(result),
                Outcome::Forget => drop(self.polled.swap_remove(at)),
            }
        }
        self.next = if at < self.polled.len() { at } else { 0 };
        (!self.polled.is_empty()).then(|| self.polled.len().div_ceil(CHUNK))
    }
}

/// Queries `wait`'s target and decides what happens to it.
fn check(d: &Driver, wait: &Wait) -> Outcome {
    let Some(answer) = wait.cell.while_watched(|| wait.target.query(d)) else {
        return Outcome::Forget;
    };
    let now = Instant::now();
    match answer {
        Ok(false) => Outcome::Again(now + BACKSTOP),
        Ok(true) if wait.confirm_context => match context_health(d, wait.target.made_in) {
            Ok(()) if wait.seen_complete => Outcome::Finished(Ok(())),
            Ok(()) => Outcome::SeenComplete(now + BACKSTOP),
            Err(e) if is_capture_interference(&e) => Outcome::Again(now + RETRY),
            Err(e) => Outcome::Finished(Err(e)),
        },
        Ok(true) => Outcome::Finished(Ok(())),
        Err(e) if is_capture_interference(&e) => Outcome::Again(now + RETRY),
        Err(e) => Outcome::Finished(Err(e)),
    }
}

/// Makes the canary of the context `made_in` names, if it has none: a stream of the thread's own
/// with one record on it, never synchronized (a canary still pending is a healthy one). A failure
/// is not a failed context: the next wait that needs one tries again.
fn make_canary(d: &Driver, made_in: MadeIn) {
    let Some(instance) = made_in.instance() else {
        return;
    };
    if CANARIES.lock().contains_key(&instance) {
        return;
    }
    let Ok(canary) = Canary::new(d, made_in.device) else {
        return;
    };
    let mut canaries = CANARIES.lock();
    // Canaries of contexts that a device reset ended go, so that one per live instance stays.
    canaries.retain(|instance, _| instance.still_alive(d));
    canaries.entry(instance).or_insert(canary);
}

/// `Ok` unless the context that `made_in` names has failed, by its canary: what a stream's future
/// checks before it believes a completion (CUDA reports the events of work a fault killed as
/// complete). Without a canary nothing is known, which reads as `Ok`.
pub(crate) fn context_health(d: &Driver, made_in: MadeIn) -> Result<()> {
    let Some(instance) = made_in.instance() else {
        return Ok(());
    };
    let canaries = CANARIES.lock();
    let Some(canary) = canaries.get(&instance) else {
        return Ok(());
    };
    match canary.health(d) {
        // The wait's own target was made in the same instance, so its query says so first.
        Err(Error::DeviceWasReset { .. }) => Ok(()),
        other => other,
    }
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec through a pointer to a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    struct Panics;

    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("a waker that panics");
        }
    }

    #[test]
    fn an_abandoned_cell_is_neither_rung_nor_queried_and_its_waker_is_dropped() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let cell = WaitCell::default();
        assert!(matches!(cell.look(&Waker::from(count.clone())), Seen::Pending));
        cell.abandon();
        cell.ring();
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "woken after it was abandoned");
        assert_eq!(Arc::strong_count(&count), 1, "the cell still holds the waker");
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after abandon") })
                .is_none()
        );
    }

    #[test]
    fn a_ring_wakes_once_and_is_seen_once() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let cell = WaitCell::default();
        assert!(matches!(cell.look(&waker), Seen::Pending));
        cell.ring();
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(matches!(cell.look(&waker), Seen::Rung));
        assert!(matches!(cell.look(&waker), Seen::Pending));
        cell.finish(Ok(()));
        assert!(matches!(cell.look(&waker), Seen::Done(Ok(()))));
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after its result") })
                .is_none()
        );
    }

    #[test]
    fn a_panicking_waker_is_contained() {
        let cell = WaitCell::default();
        let _ = cell.look(&Waker::from(Arc::new(Panics)));
        cell.finish(Ok(()));
        assert!(matches!(cell.look(&Waker::noop().clone()), Seen::Done(Ok(()))));
    }
}
