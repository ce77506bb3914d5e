//! The reactor: one thread that learns of completions by querying the CUDA events that futures
//! wait on. Nothing the crate does to wake a future runs on the GPU or on CUDA's host-function
//! thread: no host function, no wait queued on any stream, so a future cannot be held up by a
//! blocking host function, cannot hold up another stream, cannot be swallowed by a capture, and
//! is not lost after a fault (when CUDA runs no host function).
//!
//! It knows query targets and wait cells, nothing of `Event`, `Stream` or futures. A wait is
//! registered once ([`register`]), either
//! - **in a lane** ([`Order`]): the waits on events recorded on one stream complete in the order
//!   they were recorded, so a sweep queries each lane from its oldest wait until one is still
//!   pending, which costs one query per busy stream however many waits it has; or
//! - **unordered** (an event recorded on a default stream or by other code, an imported one):
//!   queried in chunks of [`CHUNK`], paced to about 1/[`CPU_SHARE`] of a core.
//!
//! Sweeps follow each other closely after news (a wait registered, a completion found) and back
//! off as time passes without any, from [`FASTEST`] to [`SLOWEST`] apart: short waits are seen
//! quickly, long ones cost little, and no wait in a lane is seen later than about [`SLOWEST`]
//! after its event completes. A wait behind its lane's front cannot be complete before the front
//! is, unless its event's order was not its stream's (the front's event was recorded again on
//! another stream, or two threads recorded on one stream at once): every wait is also queried
//! at least every [`BEHIND_FRONT`], by a slow walk over all of them.
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

use crate::capture_mode::{RelaxedCapture, is_capture_interference};
use crate::context::{ContextInstance, MadeIn};
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::handle::{EventHandle, query_handle};
use crate::event::ipc::Exporter;
use crate::stream::{Stream, StreamOptions};
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The longest an unordered wait goes without a query of its own event.
const BACKSTOP: Duration = Duration::from_millis(100);
/// The longest a wait in a lane goes without a query of its own event.
const BEHIND_FRONT: Duration = Duration::from_secs(1);
/// The shortest pause between two sweeps, right after news.
const FASTEST: Duration = Duration::from_micros(5);
/// The longest pause between two sweeps while a lane has waits: the latency a wait in a lane can
/// see at worst, however long it has waited.
const SLOWEST: Duration = Duration::from_micros(500);
/// The pause between sweeps is the time since the last news divided by this: a wait is seen at
/// most about 1/PATIENCE of its own duration late.
const PATIENCE: u32 = 32;
/// A sweep of the lanes costs at most about 1/(1 + LANE_CPU) of a core, whatever the pause says.
const LANE_CPU: u32 = 3;
/// The pause after a registration above which the thread is woken for it.
const WAKE_FOR_NEWS: Duration = Duration::from_micros(100);
/// Polling unordered waits costs about 1/CPU_SHARE of a core, unless [`BACKSTOP`] needs more.
const CPU_SHARE: u32 = 200;
/// The shortest pause between two polling steps over unordered waits.
const MIN_POLL: Duration = Duration::from_micros(50);
/// Unordered queries in one step.
const CHUNK: usize = 256;

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

/// Where a wait stands among others whose events complete in order: `lane` names the stream its
/// event was recorded on (any number, the same for one stream), `stamp` when it was recorded
/// (later records, larger stamps).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Order {
    pub(crate) lane: u64,
    pub(crate) stamp: u64,
}

/// What a wait's owner and the reactor share.
#[derive(Default)]
pub(crate) struct WaitCell {
    state: Mutex<WaitState>,
    /// Held while the reactor queries the target; `true` once the owner gave up. Apart from
    /// `state`, so that a poll never waits for a query.
    target_in_use: Mutex<bool>,
}

#[derive(Default)]
struct WaitState {
    /// The wait's result, once known.
    result: Option<Result<()>>,
    waker: Option<Waker>,
    /// The owner gave up: the target may no longer be queried.
    abandoned: bool,
}

impl WaitCell {
    /// Stores `waker` (unless it would wake the same task); the result, once known.
    pub(crate) fn look(&self, waker: &Waker) -> Option<Result<()>> {
        let mut state = self.state.lock();
        if let Some(result) = &state.result {
            return Some(result.clone());
        }
        match &mut state.waker {
            Some(stored) if stored.will_wake(waker) => {}
            stored => *stored = Some(waker.clone()),
        }
        None
    }

    fn finish(&self, result: Result<()>) {
        let waker = {
            let mut state = self.state.lock();
            if state.abandoned {
                return;
            }
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

    /// Runs `call`, which uses the target, unless the owner gave up or the result is known; the
    /// owner's [`abandon`](Self::abandon) waits for it.
    fn while_watched<R>(&self, call: impl FnOnce() -> R) -> Option<R> {
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
    /// Completion of the target is believed only while its context's canary is healthy: after a
    /// fault that has shown, CUDA reports the events of the work it killed as complete.
    confirm_context: bool,
}

/// A new wait, sent to the thread.
struct Registered {
    wait: Wait,
    order: Option<Order>,
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

/// Registers a wait on `target`, in `order`'s lane if it has one. The thread finishes `cell` with
/// the target's result (an error of the work, or `Ok` once complete); `confirm_context` asks it to
/// check the context before believing a completion it finds.
///
/// # Errors
/// [`Error::ReactorUnavailable`] if the thread could not be started; nothing was registered.
pub(crate) fn register(
    target: QueryTarget,
    cell: Arc<WaitCell>,
    order: Option<Order>,
    confirm_context: bool,
) -> Result<()> {
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
        },
        order,
    });
    let now = Instant::now();
    if inbox
        .sleeping_until
        .is_none_or(|until| until > now + WAKE_FOR_NEWS)
    {
        inbox.sleeping_until = Some(now);
        this.changed.notify_one();
    }
    Ok(())
}

/// The thread's own state: no one else touches it.
struct Waits {
    /// Waits in lanes, each lane in record order (stamp, then arrival).
    lanes: HashMap<u64, BTreeMap<(u64, u64), Wait>>,
    /// Arrivals so far, to order waits of one stamp.
    arrivals: u64,
    /// Unordered waits, walked a chunk a step.
    polled: Vec<Wait>,
    /// Where the walk over `polled` is.
    next: usize,
    /// When a wait was last registered or finished.
    last_news: Instant,
    /// The walk that queries every wait in the lanes, not only those in front.
    walk: Walk,
}

/// A walk over every wait in the lanes, a chunk at a time: one starts every [`BEHIND_FRONT`]/2
/// (or as soon as the last one ended, if later) with the waits there are then and is paced to end
/// within [`BEHIND_FRONT`]/2, so that a wait waits for the next walk and then through it,
/// [`BEHIND_FRONT`] at most.
struct Walk {
    started: Instant,
    /// The lanes as they were at the start, and how many waits they held.
    lanes: Vec<u64>,
    total: usize,
    /// Where it is: a lane, and the first key not yet queried in it.
    at: usize,
    from: (u64, u64),
    queried: usize,
}

impl Walk {
    fn new(now: Instant) -> Walk {
        Walk {
            started: now,
            lanes: Vec::new(),
            total: 0,
            at: 0,
            from: (0, 0),
            queried: 0,
        }
    }
}

/// One canary per context instance that a wait confirms completions in: made by the reactor
/// thread and read by it. The lock is held for a lookup and one query, never while a canary is
/// made.
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
    Pending,
    Forget,
}

impl Reactor {
    fn run(&self) {
        let Ok(d) = driver("the reactor thread") else {
            return;
        };
        RelaxedCapture::enter(d).forever();
        precise_sleeps();
        let now = Instant::now();
        let mut waits = Waits {
            lanes: HashMap::new(),
            arrivals: 0,
            polled: Vec::new(),
            next: 0,
            last_news: now,
            walk: Walk::new(now),
        };
        let mut last_cpu = thread_cpu_time();
        let mut next_poll = None;
        loop {
            let registered = std::mem::take(&mut self.inbox.lock().registered);
            waits.take(d, registered);
            let sweep_start = Instant::now();
            waits.sweep_lanes(d);
            let sweep_cost = sweep_start.elapsed();
            waits.walk_a_chunk(d);
            if next_poll.is_none_or(|at| at <= Instant::now()) {
                // Each polling step, its wait and wake-up included, costs about 1/CPU_SHARE of a
                // core, but a whole walk over the unordered waits takes at most BACKSTOP.
                let chunks = waits.poll_chunk(d);
                let cpu = thread_cpu_time();
                let cost = cpu.saturating_sub(last_cpu);
                last_cpu = cpu;
                next_poll = chunks.map(|chunks| {
                    let paced = (cost * CPU_SHARE).max(MIN_POLL);
                    Instant::now() + paced.min(BACKSTOP / chunks.max(1) as u32)
                });
            }
            let next_sweep = waits.next_sweep(sweep_cost);
            let deadline = match (next_sweep, next_poll) {
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
    /// Files newly registered waits.
    fn take(&mut self, d: &Driver, registered: Vec<Registered>) {
        if registered.is_empty() {
            return;
        }
        self.last_news = Instant::now();
        for Registered { wait, order } in registered {
            if wait.confirm_context {
                make_canary(d, wait.target.made_in);
            }
            match order {
                Some(order) => {
                    self.arrivals += 1;
                    self.lanes
                        .entry(order.lane)
                        .or_default()
                        .insert((order.stamp, self.arrivals), wait);
                }
                None => self.polled.push(wait),
            }
        }
    }

    /// Queries each lane from its front until a wait is still pending; finishes or forgets the
    /// waits it can.
    fn sweep_lanes(&mut self, d: &Driver) {
        let mut news = false;
        let mut gone = Vec::new();
        self.lanes.retain(|_, lane| {
            for (key, wait) in lane.iter() {
                match check(d, wait) {
                    Outcome::Pending => break,
                    Outcome::Finished(result) => {
                        wait.cell.finish(result);
                        news = true;
                        gone.push(*key);
                    }
                    Outcome::Forget => gone.push(*key),
                }
            }
            for key in gone.drain(..) {
                lane.remove(&key);
            }
            !lane.is_empty()
        });
        if news {
            self.last_news = Instant::now();
        }
    }

    /// Queries up to [`CHUNK`] waits of the walk over all waits in the lanes, if it is behind its
    /// pace.
    fn walk_a_chunk(&mut self, d: &Driver) {
        let now = Instant::now();
        let walk = &mut self.walk;
        if walk.at >= walk.lanes.len() {
            if now < walk.started + BEHIND_FRONT / 2 || self.lanes.is_empty() {
                return;
            }
            *walk = Walk::new(now);
            walk.lanes = self.lanes.keys().copied().collect();
            walk.total = self.lanes.values().map(BTreeMap::len).sum();
        }
        let elapsed = now.saturating_duration_since(walk.started);
        let due = (walk.total as f64 * (2.0 * elapsed.as_secs_f64() / BEHIND_FRONT.as_secs_f64())) as usize;
        if walk.queried > due {
            return;
        }
        let mut news = false;
        let mut budget = CHUNK;
        let mut gone = Vec::new();
        while budget > 0 && walk.at < walk.lanes.len() {
            let Some(lane) = self.lanes.get_mut(&walk.lanes[walk.at]) else {
                walk.at += 1;
                walk.from = (0, 0);
                continue;
            };
            let mut rest = None;
            for (key, wait) in lane.range(walk.from..) {
                if budget == 0 {
                    rest = Some(*key);
                    break;
                }
                budget -= 1;
                walk.queried += 1;
                match check(d, wait) {
                    Outcome::Pending => {}
                    Outcome::Finished(result) => {
                        wait.cell.finish(result);
                        news = true;
                        gone.push(*key);
                    }
                    Outcome::Forget => gone.push(*key),
                }
            }
            for key in gone.drain(..) {
                lane.remove(&key);
            }
            if lane.is_empty() {
                self.lanes.remove(&walk.lanes[walk.at]);
            }
            match rest {
                Some(key) => walk.from = key,
                None => {
                    walk.at += 1;
                    walk.from = (0, 0);
                }
            }
        }
        if news {
            self.last_news = Instant::now();
        }
    }

    /// When the lanes are swept next (`None` when they are empty): soon after news, later as time
    /// passes without any, and never so often that sweeping takes most of a core.
    fn next_sweep(&self, sweep_cost: Duration) -> Option<Instant> {
        if self.lanes.is_empty() {
            return None;
        }
        let now = Instant::now();
        let quiet = now.saturating_duration_since(self.last_news);
        let pause = (quiet / PATIENCE)
            .clamp(FASTEST, SLOWEST)
            .max(sweep_cost * LANE_CPU);
        Some(now + pause)
    }

    /// Queries the next chunk of unordered waits; returns how many chunks a walk over them takes,
    /// or `None` when there are none.
    fn poll_chunk(&mut self, d: &Driver) -> Option<usize> {
        let mut at = self.next.min(self.polled.len());
        let mut queried = 0;
        while at < self.polled.len() && queried < CHUNK {
            queried += 1;
            match check(d, &self.polled[at]) {
                Outcome::Pending => at += 1,
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
    let answer = match answer {
        Ok(true) if wait.confirm_context => context_health(d, wait.target.made_in),
        Ok(true) => Ok(()),
        Ok(false) => return Outcome::Pending,
        Err(e) => Err(e),
    };
    match answer {
        Err(e) if is_capture_interference(&e) => Outcome::Pending,
        answer => Outcome::Finished(answer),
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
fn context_health(d: &Driver, made_in: MadeIn) -> Result<()> {
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

/// Pauses of the reactor thread as short as asked: Linux lets a thread's timed sleeps run up to
/// 50 us late by default, longer than the pause right after news.
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong);
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
    fn an_abandoned_cell_is_neither_finished_nor_queried_and_its_waker_is_dropped() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let cell = WaitCell::default();
        assert!(cell.look(&Waker::from(count.clone())).is_none());
        cell.abandon();
        cell.finish(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "woken after it was abandoned");
        assert_eq!(Arc::strong_count(&count), 1, "the cell still holds the waker");
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after abandon") })
                .is_none()
        );
    }

    #[test]
    fn a_result_wakes_once_and_ends_the_queries() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let cell = WaitCell::default();
        assert!(cell.look(&waker).is_none());
        assert_eq!(cell.while_watched(|| 7), Some(7));
        cell.finish(Ok(()));
        cell.finish(Err(Error::ReactorUnavailable {
            reason: "a second answer".into(),
        }));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(matches!(cell.look(&waker), Some(Ok(()))));
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
        assert!(matches!(cell.look(&Waker::noop().clone()), Some(Ok(()))));
    }

    #[test]
    fn sweeps_come_quickly_after_news_and_back_off_to_the_slowest_pause() {
        let now = Instant::now();
        let mut waits = Waits {
            lanes: HashMap::new(),
            arrivals: 0,
            polled: Vec::new(),
            next: 0,
            last_news: now,
            walk: Walk::new(now),
        };
        assert!(waits.next_sweep(Duration::ZERO).is_none(), "no lanes, no sweeps");
        let target = QueryTarget {
            raw: std::ptr::null_mut(),
            made_in: MadeIn::new(0, None),
            exporter: None,
        };
        let wait = Wait {
            target,
            cell: Arc::default(),
            confirm_context: false,
        };
        waits.lanes.entry(1).or_default().insert((1, 1), wait);
        let pause = |waits: &Waits, cost| waits.next_sweep(cost).unwrap() - Instant::now();
        assert!(pause(&waits, Duration::ZERO) <= FASTEST + Duration::from_micros(5));
        waits.last_news = now - Duration::from_secs(1);
        let slow = pause(&waits, Duration::ZERO);
        assert!(
            slow <= SLOWEST && slow > SLOWEST - Duration::from_micros(50),
            "{slow:?}"
        );
        waits.last_news = now - Duration::from_micros(800);
        let middle = pause(&waits, Duration::ZERO);
        assert!(middle > FASTEST && middle < SLOWEST, "{middle:?}");
        let costly = pause(&waits, Duration::from_millis(1));
        assert!(
            costly >= Duration::from_millis(1) * LANE_CPU - Duration::from_micros(50),
            "{costly:?}"
        );
    }
}
