//! Awaiting the GPU: an event's or a stream's completion as a `Future`, for any async runtime (only
//! `std::task::Waker` is used).
//!
//! How a pending future learns that the GPU got there:
//! - a stream's completion ([`Stream::completion`]) records an event and queues a host function
//!   right after it, which wakes the future from CUDA's thread: no polling, and no head-of-line
//!   blocking (each stream wakes its own futures, in its own order);
//! - an event's completion ([`Event::completion`]) queues a host function on the stream the event
//!   was last recorded on, when that is a [`Stream`] of this crate (owned or borrowed, not a default
//!   stream) still alive, not capturing, and with fewer than 32 such wake-ups queued: it runs after
//!   everything submitted to that stream so far, and prompts the future to query its event (which
//!   may have been recorded again elsewhere since). The reactor thread also polls every pending
//!   event (`cuEventQuery`), the only way for imported events, events recorded on default streams
//!   or by other code, and the fallback for the rest, with a budget of about 0.5% of a core: it
//!   queries the pending events 256 at a time, and after each such step waits 200 times as long as
//!   the step cost in CPU time, and at least [`MIN_POLL`]. Measured on an H200 (polling alone): a
//!   pending event is seen complete 1.5-2.2 ms late (median) alone, and 3.3-3.7 s late among 10,000
//!   (a query costs about 1.3 us; a step with one entry ~10-15 us, mostly the thread's sleep and
//!   wake-up);
//! - futures and events never wait for the reactor's queries: they send it commands (add, remove,
//!   forget an event) that it applies before each step; an awaited `Event`'s drop waits out at
//!   most the step in flight;
//! - every [`ERROR_CHECK`] while futures wait for host functions, the reactor checks each of their
//!   devices by a canary (an event of its own that completed long ago), because CUDA never runs a
//!   host function after its context failed (a kernel fault): such futures resolve to the error
//!   instead of hanging. One query per device, however many futures wait.
//!
//! After a kernel fault, CUDA itself (driver 580) reports the events of the work it killed as
//! complete: `cuEventQuery` succeeds 16 us after the trap for an event behind a 5 s kernel, and
//! keeps succeeding after the error is reported elsewhere (about 0.6 s later). An event's future
//! answers what the query answers, so it may resolve to `Ok` for killed work; a stream's future
//! never does, because CUDA does not run the host function behind killed work.

use crate::context::MadeIn;
use crate::driver::{Driver, driver, loaded_driver};
use crate::error::{Error, Result};
use crate::event::{Event, query_handle};
use crate::ipc::Exporter;
use crate::live_streams;
use crate::stream::Stream;
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The shortest wait between two polling rounds of the reactor.
const MIN_POLL: Duration = Duration::from_micros(50);
/// The reactor's polling costs at most about 1/CPU_SHARE of a core: half the 1%, since a
/// step's cost is measured, not known ahead.
const CPU_SHARE: u32 = 200;
/// How often a future that a host function will wake is checked for errors anyway.
const ERROR_CHECK: Duration = Duration::from_millis(100);

/// The completion of an event's or a stream's work, as a `Future` whose output is the CUDA error
/// of that work, if any. Made by [`Event::completion`], [`Stream::completion`], or `.await` on
/// `&Event` / `&Stream`.
///
/// Dropping it does not cancel the GPU work; it only stops waiting. Its waker is called from
/// CUDA's host-function thread or from this crate's reactor thread.
#[must_use = "a Completion does nothing unless awaited"]
pub struct Completion<'a> {
    state: State,
    _borrows: PhantomData<&'a ()>,
}

enum State {
    /// Ready with this result (again, if polled again).
    Done(Result<()>),
    Waiting {
        id: u64,
        shared: Arc<Shared>,
        /// What a host function's ring is confirmed with.
        target: QueryTarget,
        /// The event a stream's completion recorded, kept alive for `target` (None for an event's
        /// completion, whose event the future borrows).
        _recorded: Option<Event>,
    },
}

impl Completion<'_> {
    fn done(result: Result<()>) -> Self {
        Completion {
            state: State::Done(result),
            _borrows: PhantomData,
        }
    }

    fn stop_waiting(&mut self) {
        if let State::Waiting { id, .. } = self.state {
            reactor().remove(id);
        }
    }
}

impl Future for Completion<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let (shared, target) = match &this.state {
            State::Done(result) => return Poll::Ready(result.clone()),
            State::Waiting { shared, target, .. } => (shared, *target),
        };
        let mut wake = shared.wake.lock();
        let result = match wake.result.take() {
            Some(result) => result,
            // A host function ran after the event's record: confirm, and read its error. An event
            // recorded again elsewhere since may still be pending: the reactor's polling has it.
            None if wake.rung => match driver("Completion::poll").and_then(|d| query(d, target)) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    wake.rung = false;
                    wake.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Err(e) => Err(e),
            },
            None => {
                match &mut wake.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    waker => *waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
        };
        drop(wake);
        this.stop_waiting();
        this.state = State::Done(result.clone());
        Poll::Ready(result)
    }
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        // Before `_recorded` drops: the reactor never queries an event after its Event is gone.
        self.stop_waiting();
    }
}

impl Event {
    /// The completion of the work this event captured, as a future: `Ok(())` once it is complete,
    /// at once for an event never recorded (as [`synchronize`](Self::synchronize) returns at
    /// once), or the error [`query`](Self::query) would return (a CUDA error of the work, an
    /// event recorded during a graph capture, [`Error::ExporterGone`]...). `(&event).await` does
    /// the same.
    ///
    /// How it learns of completion:
    /// - **a host function on the stream the event was last recorded on**, when that is a
    ///   [`Stream`] of this crate ([`Stream::new`], [`Stream::with_options`] or
    ///   [`Stream::from_raw_borrowed`] of a non-default stream) still alive and not being captured:
    ///   as for [`Stream::completion`], it runs after *everything submitted to that stream so far*
    ///   (work queued after the record delays the wake-up) and blocks the stream's later work for
    ///   the moment it takes. At most 32 such host functions wait on one stream; futures beyond
    ///   that rely on the polling below. Measured on an H200: p50 39-55 us from the stream
    ///   reaching the record to `Ready`, as for a stream's future.
    /// - **the reactor thread's polling**, for every pending event: the only way for imported
    ///   events and events recorded on default streams or by other code, and the fallback for the
    ///   rest (an event recorded again elsewhere, a dropped stream). Its budget is about 0.5% of a
    ///   core, so it sees an event complete 1.5-2.2 ms late alone, 3.3-3.7 s late among 10,000
    ///   pending (measured on an H200).
    ///
    /// After a kernel fault CUDA reports the events of the work it killed as complete (driver
    /// 580), so this future, like [`query`](Self::query), may then resolve to `Ok`; a stream's
    /// future resolves to the error.
    #[doc(alias = "synchronize_async")]
    pub fn completion(&self) -> Completion<'_> {
        let Some(target) = self.query_target() else {
            return Completion::done(Ok(()));
        };
        let d = match driver("Event::completion") {
            Ok(d) => d,
            Err(e) => return Completion::done(Err(e)),
        };
        match query(d, target) {
            Ok(true) => Completion::done(Ok(())),
            Err(e) => Completion::done(Err(e)),
            Ok(false) => reactor().wait(d, self, target),
        }
    }
}

impl<'a> IntoFuture for &'a Event {
    type Output = Result<()>;
    type IntoFuture = Completion<'a>;

    fn into_future(self) -> Completion<'a> {
        self.completion()
    }
}

impl Stream {
    /// The completion of all work submitted to this stream so far, as a future: `Ok(())` once it
    /// is complete, or the CUDA error of that work. `(&stream).await` does the same.
    ///
    /// It records an event and queues a host function after it ([`Stream::launch_host_fn`]) that
    /// wakes the future from CUDA's thread: so the stream gets one tiny host function, which blocks
    /// its later work for the moment it takes to run. After a kernel fault CUDA runs no host
    /// function; the reactor's error check resolves the future to the error within about
    /// 100 ms.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] while the stream is being captured into a graph.
    #[doc(alias = "synchronize_async")]
    pub fn completion(&self) -> Completion<'_> {
        match self.queue_completion() {
            Ok(completion) => completion,
            Err(e) => Completion::done(Err(e)),
        }
    }

    fn queue_completion(&self) -> Result<Completion<'static>> {
        if self.is_capturing()? {
            return Err(Error::StreamCapturing);
        }
        let recorded = self.record_event()?;
        let target = recorded.query_target().expect("a recorded event exists");
        let shared = Arc::new(Shared::default());
        let bell = shared.clone();
        // The record just checked that the stream is alive, and capture was checked before it.
        let d = driver("Stream::completion")?;
        self.in_context(d, || self.queue_host_fn(d, move || bell.ring()))?;
        Ok(reactor().wait_with(target, shared, Some(recorded), true))
    }
}

impl<'a> IntoFuture for &'a Stream {
    type Output = Result<()>;
    type IntoFuture = Completion<'a>;

    fn into_future(self) -> Completion<'a> {
        self.completion()
    }
}

/// What the reactor queries for one future: a CUDA event (for a polled wait kept alive by its
/// `Event`, which deregisters it before it goes, see [`forget_event`]), where it was made, and its
/// exporter.
#[derive(Clone, Copy)]
pub(crate) struct QueryTarget {
    pub(crate) raw: sys::cudaEvent_t,
    pub(crate) made_in: MadeIn,
    pub(crate) exporter: Option<Exporter>,
}

// SAFETY: the raw event handle is an opaque CUDA handle any thread may use; it is only queried while
// its `Event` lives: a future borrows it or owns it, and a reactor entry is stopped by the Event's
// drop (see [`forget_event`]) before the handle goes away.
unsafe impl Send for QueryTarget {}
// SAFETY: as for Send; it is only read.
unsafe impl Sync for QueryTarget {}

/// Between a future, the host function that rings for it, and the reactor.
#[derive(Default)]
struct Shared {
    wake: Mutex<Wake>,
}

#[derive(Default)]
struct Wake {
    result: Option<Result<()>>,
    /// The host function ran.
    rung: bool,
    waker: Option<Waker>,
}

impl Shared {
    /// Called from CUDA's host-function thread: no CUDA call here.
    fn ring(&self) {
        let waker = {
            let mut wake = self.wake.lock();
            wake.rung = true;
            wake.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn finish(&self, result: Result<()>) {
        let waker = {
            let mut wake = self.wake.lock();
            wake.result.get_or_insert(result);
            wake.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

struct Entry {
    target: QueryTarget,
    shared: Arc<Shared>,
    /// Its result went to the future (which removes the entry when it sees it).
    finished: bool,
}

/// Per device, a CUDA event of the reactor's that completed long ago: once its context has failed,
/// querying it returns the error (unlike the events of the work a fault killed, which CUDA reports
/// complete).
struct Canary {
    _stream: Stream,
    event: Event,
}

/// What futures and events ask of the reactor; it applies them in order at the start of each chunk
/// of queries, so that no caller ever waits for a polling round (10,000 queries take milliseconds).
enum Command {
    Add {
        id: u64,
        entry: Entry,
        rings: bool,
    },
    Remove(u64),
    /// An `Event` is going away: no entry may query its CUDA event any more.
    Forget(sys::cudaEvent_t),
}

// SAFETY: as for Entry; a Forget's handle is only compared, never used.
unsafe impl Send for Command {}

/// The commands not yet applied, and what the reactor is doing, so that a command wakes it only
/// when it would not come back soon anyway.
#[derive(Default)]
struct Inbox {
    commands: Vec<Command>,
    next_id: u64,
    thread: bool,
    /// It has polled entries: it comes back within its polling interval.
    polling: bool,
    /// It has ringing entries: it comes back at its next error check.
    checking: bool,
    /// A command came that needs it now: it does not sleep.
    wake: bool,
}

/// Commands queued past this many wake the reactor, so that removals it has no other reason to
/// apply stay bounded.
const MAX_QUEUED: usize = 4096;
/// Queries in one chunk: the reactor holds its entries for one chunk at a time, and an `Event`'s
/// drop waits for at most one chunk (about 1.3 us a query on an H200).
const CHUNK: usize = 256;

/// The reactor's entries: only the reactor thread touches them, except an `Event`'s drop, which
/// takes them to wait out a chunk of queries in flight.
#[derive(Default)]
struct Entries {
    /// Futures on events, queried once a pass, in a vector that a pass walks a chunk a step;
    /// removal swaps the last one in.
    polled: Vec<(u64, Entry)>,
    /// Where each polled entry is in `polled`.
    position: HashMap<u64, usize>,
    /// Polled entries on each CUDA event, so that a `Forget` of an event with none costs nothing.
    on_event: HashMap<usize, usize>,
    /// Polled entries not finished yet.
    active_polled: usize,
    /// Futures that a host function will ring: only their device's canary is queried, every
    /// [`ERROR_CHECK`].
    ringing: HashMap<u64, Entry>,
    /// Unfinished ringing entries per device: the error check queries these devices' canaries
    /// without walking the entries (10,000 of them cost ~0.2 ms a check, which the pacing then
    /// multiplied into a long pause of the polled entries).
    ringing_on_device: HashMap<i32, usize>,
    next_error_check: Option<Instant>,
    canaries: HashMap<i32, Canary>,
}

impl Entries {
    /// Applies `commands` in order; returns the entries removed, for the caller to drop once it has
    /// let go of the entries (the last reference to a task's waker may go with one).
    #[must_use]
    fn apply(&mut self, commands: Vec<Command>) -> Vec<Entry> {
        let mut removed = Vec::new();
        for command in commands {
            match command {
                Command::Add {
                    id,
                    entry,
                    rings: true,
                } => {
                    *self
                        .ringing_on_device
                        .entry(entry.target.made_in.device)
                        .or_default() += 1;
                    self.ringing.insert(id, entry);
                }
                Command::Add {
                    id,
                    entry,
                    rings: false,
                } => {
                    *self.on_event.entry(entry.target.raw as usize).or_default() += 1;
                    self.active_polled += 1;
                    self.position.insert(id, self.polled.len());
                    self.polled.push((id, entry));
                }
                Command::Remove(id) => match self.position.get(&id) {
                    Some(&at) => removed.push(self.remove_polled(at)),
                    None => removed.extend(self.remove_ringing(id)),
                },
                Command::Forget(raw) => {
                    let mut at = 0;
                    while self.on_event.contains_key(&(raw as usize)) && at < self.polled.len() {
                        if self.polled[at].1.target.raw == raw {
                            removed.push(self.remove_polled(at));
                        } else {
                            at += 1;
                        }
                    }
                }
            }
        }
        removed
    }

    fn remove_ringing(&mut self, id: u64) -> Option<Entry> {
        let entry = self.ringing.remove(&id)?;
        if !entry.finished {
            self.unring(entry.target.made_in.device, 1);
        }
        Some(entry)
    }

    /// `count` ringing entries of `device` finished or went.
    fn unring(&mut self, device: i32, count: usize) {
        if let Some(left) = self.ringing_on_device.get_mut(&device) {
            *left = left.saturating_sub(count);
            if *left == 0 {
                self.ringing_on_device.remove(&device);
            }
        }
    }

    fn remove_polled(&mut self, at: usize) -> Entry {
        let (id, entry) = self.polled.swap_remove(at);
        self.position.remove(&id);
        if let Some(&(moved, _)) = self.polled.get(at) {
            self.position.insert(moved, at);
        }
        if !entry.finished {
            self.active_polled -= 1;
        }
        let key = entry.target.raw as usize;
        match self.on_event.get_mut(&key) {
            Some(1) => drop(self.on_event.remove(&key)),
            Some(count) => *count -= 1,
            None => {}
        }
        entry
    }

    /// Queries the polled entries in `range`; those that finished go to `finished`.
    fn poll(&mut self, d: &Driver, range: std::ops::Range<usize>, finished: &mut Finished) {
        for (_, entry) in &mut self.polled[range] {
            if entry.finished {
                continue;
            }
            match query(d, entry.target) {
                Ok(false) => {}
                result => {
                    entry.finished = true;
                    self.active_polled -= 1;
                    finished.push((entry.shared.clone(), result.map(drop)));
                }
            }
        }
    }

    /// Every [`ERROR_CHECK`], the canary of each device that ringing entries wait on: a failed
    /// context finishes them with its error.
    fn check_errors(&mut self, now: Instant, finished: &mut Finished) {
        if self.ringing.is_empty() {
            self.next_error_check = None;
            return;
        }
        if self.next_error_check.is_some_and(|check| now < check) {
            return;
        }
        self.next_error_check = Some(now + ERROR_CHECK);
        let devices: Vec<i32> = self.ringing_on_device.keys().copied().collect();
        for device in devices {
            if let Err(e) = canary_health(&mut self.canaries, device) {
                let mut count = 0;
                for entry in self
                    .ringing
                    .values_mut()
                    .filter(|e| !e.finished && e.target.made_in.device == device)
                {
                    entry.finished = true;
                    finished.push((entry.shared.clone(), Err(e.clone())));
                    count += 1;
                }
                self.unring(device, count);
            }
        }
    }
}

type Finished = Vec<(Arc<Shared>, Result<()>)>;

/// The one reactor thread of the process, started by the first future that has to wait.
struct Reactor {
    inbox: Mutex<Inbox>,
    /// Wakes the reactor; waited on with `inbox`.
    changed: Condvar,
    entries: Mutex<Entries>,
}

fn reactor() -> &'static Reactor {
    static REACTOR: OnceLock<Reactor> = OnceLock::new();
    REACTOR.get_or_init(|| Reactor {
        inbox: Mutex::new(Inbox::default()),
        changed: Condvar::new(),
        entries: Mutex::new(Entries::default()),
    })
}

/// Stops every polled wait on the CUDA event `raw`: its `Event` is going away. Left alone, a future
/// that was leaked (`mem::forget`) would have the reactor query a destroyed or reused event.
pub(crate) fn forget_event(raw: sys::cudaEvent_t) {
    let reactor = reactor();
    reactor.send(Command::Forget(raw), false);
    // A chunk in flight may have been given its entries before the Forget: wait it out. Every later
    // chunk applies the Forget before it queries.
    drop(reactor.entries.lock());
}

impl Reactor {
    /// A polled wait on `target`, an event of `event`'s, whose drop then stops it; woken earlier
    /// by a host function on the stream `event` was last recorded on, where one can be queued.
    fn wait<'a>(&self, d: &Driver, event: &Event, target: QueryTarget) -> Completion<'a> {
        event.mark_awaited();
        let shared = Arc::new(Shared::default());
        let bell = shared.clone();
        live_streams::queue_wake(d, event.last_stream(), move || bell.ring());
        self.wait_with(target, shared, None, false)
    }

    /// A wait on `target`: polled, or (`rings`) only error-checked because a host function will
    /// ring `shared` after `recorded`'s work.
    fn wait_with<'a>(
        &self,
        target: QueryTarget,
        shared: Arc<Shared>,
        recorded: Option<Event>,
        rings: bool,
    ) -> Completion<'a> {
        // A ringing entry's event is never queried (only its device's canary is), so its drop
        // need not tell the reactor: only polled events are marked.
        let entry = Entry {
            target,
            shared: shared.clone(),
            finished: false,
        };
        let id = self.send_with(
            |id| Command::Add { id, entry, rings },
            |inbox| {
                if rings { !inbox.checking } else { !inbox.polling }
            },
        );
        Completion {
            state: State::Waiting {
                id,
                shared,
                target,
                _recorded: recorded,
            },
            _borrows: PhantomData,
        }
    }

    fn remove(&self, id: u64) {
        self.send(Command::Remove(id), false);
    }

    fn send(&self, command: Command, urgent: bool) {
        self.send_with(|_| command, |_| urgent);
    }

    /// Queues the command made with a new id, wakes the reactor if `urgent` says it must act now
    /// (or too many wait), and starts it on first use. Returns the id.
    fn send_with(&self, command: impl FnOnce(u64) -> Command, urgent: impl FnOnce(&Inbox) -> bool) -> u64 {
        let mut inbox = self.inbox.lock();
        let id = inbox.next_id;
        inbox.next_id += 1;
        inbox.commands.push(command(id));
        if urgent(&inbox) || inbox.commands.len() >= MAX_QUEUED {
            inbox.wake = true;
            self.changed.notify_one();
        }
        if !inbox.thread {
            inbox.thread = true;
            std::thread::Builder::new()
                .name("cuda-event-reactor".into())
                .spawn(|| reactor().run())
                .expect("spawn the reactor thread");
        }
        id
    }

    fn take_commands(&self) -> Vec<Command> {
        std::mem::take(&mut self.inbox.lock().commands)
    }

    /// The reactor thread: a step at a time, each a chunk of the polled entries (the next one of
    /// a pass over them all) and the error check when due, then a wait, so that the CPU it uses is
    /// spread evenly (a pass over 10,000 entries costs about 13 ms on an H200: in one piece, that
    /// would be over 1% of any second it falls in).
    fn run(&self) {
        let d = loaded_driver().expect("a future waits only on a recorded event: the driver is loaded");
        let mut finished = Vec::new();
        let mut next = 0;
        let mut last_step = thread_cpu_time();
        loop {
            let mut entries = self.entries.lock();
            let removed = entries.apply(self.take_commands());
            // Removals since the last step may have shrunk the entries below where the pass was.
            let start = next.min(entries.polled.len());
            let end = entries.polled.len().min(start + CHUNK);
            entries.poll(d, start..end, &mut finished);
            next = if end < entries.polled.len() { end } else { 0 };
            entries.check_errors(Instant::now(), &mut finished);
            let (polling, next_check) = (entries.active_polled > 0, entries.next_error_check);
            drop(entries);
            // Wake, and drop what was removed, outside the locks: a waker may run the task right
            // here, and its Event's drop takes `entries`.
            drop(removed);
            for (shared, result) in finished.drain(..) {
                shared.finish(result);
            }
            // Each step, its wait and wake-up included, costs about 1/CPU_SHARE of a core.
            let now_cpu = thread_cpu_time();
            let cost = now_cpu.saturating_sub(last_step);
            last_step = now_cpu;
            let deadline = if polling {
                let poll = Instant::now() + (cost * CPU_SHARE).max(MIN_POLL);
                Some(next_check.map_or(poll, |check| check.min(poll)))
            } else {
                next_check
            };
            let mut inbox = self.inbox.lock();
            (inbox.polling, inbox.checking) = (polling, next_check.is_some());
            // A command sent since this step took the inbox may need acting on under the state
            // just published (a polled wait added after the last entry finished).
            let needs_step = inbox.commands.iter().any(|command| match command {
                Command::Add { rings: true, .. } => !inbox.checking,
                Command::Add { rings: false, .. } => !inbox.polling,
                _ => false,
            });
            if !std::mem::take(&mut inbox.wake) && !needs_step {
                match deadline {
                    Some(deadline) => drop(self.changed.wait_until(&mut inbox, deadline)),
                    None => self.changed.wait(&mut inbox),
                }
            }
            inbox.wake = false;
        }
    }
}

/// Whether `device`'s context still works, by its canary (made on first use).
fn canary_health(canaries: &mut HashMap<i32, Canary>, device: i32) -> Result<()> {
    if let std::collections::hash_map::Entry::Vacant(vacant) = canaries.entry(device) {
        let stream = Stream::with_options(device, crate::StreamOptions::default().non_blocking(true))?;
        let event = stream.record_event()?;
        event.synchronize()?;
        vacant.insert(Canary {
            _stream: stream,
            event,
        });
    }
    canaries[&device].event.query().map(drop)
}

fn query(d: &Driver, target: QueryTarget) -> Result<bool> {
    query_handle(d, target.raw, target.made_in, target.exporter)
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

    /// A polled or ringing entry on the CUDA event `raw` (never queried here: no CUDA needed).
    fn add(id: u64, raw: usize, rings: bool) -> Command {
        let entry = Entry {
            target: QueryTarget {
                raw: raw as sys::cudaEvent_t,
                made_in: MadeIn::new(0, None),
                exporter: None,
            },
            shared: Arc::new(Shared::default()),
            finished: false,
        };
        Command::Add { id, entry, rings }
    }

    /// The reactor's bookkeeping agrees with its entries.
    fn assert_consistent(entries: &Entries) {
        for (at, (id, _)) in entries.polled.iter().enumerate() {
            assert_eq!(entries.position.get(id), Some(&at), "position of entry {id}");
        }
        assert_eq!(entries.position.len(), entries.polled.len());
        let mut per_event = HashMap::new();
        for (_, entry) in &entries.polled {
            *per_event.entry(entry.target.raw as usize).or_insert(0) += 1;
        }
        assert_eq!(per_event, entries.on_event);
        let active = entries.polled.iter().filter(|(_, e)| !e.finished).count();
        assert_eq!(active, entries.active_polled);
        let mut ringing = HashMap::new();
        for entry in entries.ringing.values().filter(|e| !e.finished) {
            *ringing.entry(entry.target.made_in.device).or_insert(0) += 1;
        }
        assert_eq!(ringing, entries.ringing_on_device);
    }

    fn ids(entries: &Entries) -> Vec<u64> {
        let mut ids: Vec<u64> = entries.polled.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn removals_and_forgets_keep_the_reactors_bookkeeping_consistent() {
        let mut entries = Entries::default();
        let commands = vec![
            add(0, 0x10, false),
            add(1, 0x10, false),
            add(2, 0x20, false),
            add(3, 0x30, false),
            add(4, 0x30, false),
            add(5, 0x40, true),
            add(6, 0x50, true),
        ];
        assert!(entries.apply(commands).is_empty());
        assert_consistent(&entries);
        assert_eq!((entries.polled.len(), entries.ringing.len()), (5, 2));

        // The first entry goes: the last one is swapped into its place.
        assert_eq!(entries.apply(vec![Command::Remove(0)]).len(), 1);
        assert_consistent(&entries);
        assert_eq!(ids(&entries), [1, 2, 3, 4]);

        // A finished entry leaves the active count alone when removed.
        let at = entries.position[&2];
        entries.polled[at].1.finished = true;
        entries.active_polled -= 1;
        assert_eq!(entries.apply(vec![Command::Remove(2)]).len(), 1);
        assert_consistent(&entries);

        // An event's drop stops every entry on it, wherever they are; one with none costs nothing.
        let removed = entries.apply(vec![Command::Forget(0x30 as sys::cudaEvent_t)]);
        assert_eq!(removed.len(), 2);
        assert_consistent(&entries);
        assert_eq!(ids(&entries), [1]);
        assert!(
            entries
                .apply(vec![Command::Forget(0x99 as sys::cudaEvent_t)])
                .is_empty()
        );

        // Ringing entries go by id; an unknown id (already removed) is no error.
        assert_eq!(
            entries.apply(vec![Command::Remove(5), Command::Remove(0)]).len(),
            1
        );
        assert_eq!(entries.ringing.len(), 1);
        assert_consistent(&entries);

        // A ringing entry that the error check finished no longer counts for its device's check.
        assert!(entries.apply(vec![add(8, 0x60, true)]).is_empty());
        entries.ringing.get_mut(&8).unwrap().finished = true;
        entries.unring(0, 1);
        assert_consistent(&entries);
        assert_eq!(entries.apply(vec![Command::Remove(8)]).len(), 1);
        assert_consistent(&entries);
        assert_eq!(entries.apply(vec![Command::Remove(6)]).len(), 1);
        assert!(entries.ringing_on_device.is_empty());

        // An add and its removal in the same batch, as when a future drops before the reactor ran.
        assert_eq!(
            entries.apply(vec![add(7, 0x10, false), Command::Remove(7)]).len(),
            1
        );
        assert_consistent(&entries);
        assert_eq!(ids(&entries), [1]);
    }
}
