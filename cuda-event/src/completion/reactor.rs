//! The reactor: one thread that learns of completions by querying the CUDA events that futures
//! wait on. Nothing the crate does to wake a future runs on the GPU or on CUDA's host-function
//! thread: no host function, no wait queued on any stream, so a future cannot be held up by a
//! blocking host function, cannot hold up another stream, cannot be swallowed by a capture, and
//! is not lost after a fault (when CUDA runs no host function).
//!
//! It knows query targets and wait cells, nothing of `Event`, `Stream` or futures. A wait is
//! registered once ([`register`]) and filed by [`Waits`], which says what to query and when (see
//! [`lanes`](super::lanes)). This file is the thread: its inbox, its loop, and how much of a core
//! it spends: sweeps of the lanes about 1/(1 + [`LANE_CPU`]), and as much the walk over every wait
//! in them while it is behind its pace, the polling of unordered waits about 1/[`CPU_SHARE`],
//! unless [`BACKSTOP`] needs more.
//!
//! The thread runs in relaxed capture mode, so that its queries never invalidate a capture that
//! another thread makes in global mode; an answer that comes from such a capture is read as "not
//! yet", never as the wait's result.
//!
//! Nothing waits for the thread. A wait's owner (a future) gives up by marking its cell
//! ([`WaitCell::abandon`](crate::event::watchers::WaitCell::abandon)); the thread queries a target
//! only under its cell's lock and after checking that mark, so an abandoned target is never
//! queried again, and the thread forgets abandoned and finished waits the next time it meets them.
//! Wakers run outside every lock, each in `catch_unwind`, so a panicking waker does not stop the
//! thread.

use crate::capture_mode::RelaxedCapture;
use crate::completion::lanes::{Outcome, Registered, SLOWEST, STEPPING, Wait, Waits, check};
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::handle::QueryTarget;
use crate::event::watchers::{Order, WaitCell};
use crate::sync::{Condvar, Lazy, Mutex};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest an unordered wait goes without a query of its own event.
const BACKSTOP: Duration = Duration::from_millis(100);
/// A sweep of the lanes costs at most about 1/(1 + LANE_CPU) of a core, unless that would leave a
/// lane unswept for longer than [`STEPPING`]; so does the walk over every wait in the lanes while
/// it is behind its pace.
const LANE_CPU: u32 = 3;
/// The pause after a registration above which the thread is woken for it.
const WAKE_FOR_NEWS: Duration = Duration::from_micros(100);
/// Polling unordered waits costs about 1/CPU_SHARE of a core, unless [`BACKSTOP`] needs more.
const CPU_SHARE: u32 = 200;
/// The shortest pause between two polling steps over unordered waits.
const MIN_POLL: Duration = Duration::from_micros(50);

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
    static REACTOR: Lazy<Reactor> = Lazy::new(|| Reactor {
        inbox: Mutex::new(Inbox::default()),
        changed: Condvar::new(),
    });
    REACTOR.get()
}

/// Registers a wait on `target`, in `order`'s lane if it has one. The thread finishes `cell` with
/// the target's result: an error of the work, or `Ok` once complete.
///
/// # Errors
/// [`Error::ReactorUnavailable`] if the thread could not be started, or CUDA's error if the driver
/// could not be loaded for it; nothing was registered.
pub(crate) fn register(target: QueryTarget, cell: Arc<WaitCell>, order: Option<Order>) -> Result<()> {
    let this = reactor();
    let mut inbox = this.inbox.lock();
    if !inbox.running {
        let d = driver("the reactor thread")?;
        crate::sync::thread::Builder::new()
            .name("cuda-event-reactor".into())
            .spawn(move || reactor().run(d))
            .map_err(|e| Error::ReactorUnavailable {
                reason: e.to_string(),
            })?;
        inbox.running = true;
    }
    inbox.registered.push(Registered {
        wait: Wait { target, cell },
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

/// Ends the waits of a reactor thread that ends (it only ends by a panic): each future gets an
/// error instead of waiting forever, and the next registration starts a new thread.
struct Running<'a> {
    reactor: &'a Reactor,
    waits: Waits,
    /// The model's idle reactor ended on its own (see `run`): what was registered since is the
    /// next thread's, which the registration started.
    #[cfg(all(test, cuda_event_model))]
    idle: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        #[cfg(all(test, cuda_event_model))]
        if self.idle {
            for wait in self.waits.drain() {
                wait.cell.finish(Err(Error::ReactorUnavailable {
                    reason: "the reactor thread ended idle".into(),
                }));
            }
            return;
        }
        let registered = {
            let mut inbox = self.reactor.inbox.lock();
            inbox.running = false;
            inbox.sleeping_until = None;
            std::mem::take(&mut inbox.registered)
        };
        let left = registered.into_iter().map(|new| new.wait);
        for wait in self.waits.drain().chain(left) {
            wait.cell.finish(Err(Error::ReactorUnavailable {
                reason: "the reactor thread panicked".into(),
            }));
        }
    }
}

impl Reactor {
    fn run(&self, d: &'static Driver) {
        let mut running = Running {
            reactor: self,
            waits: Waits::new(Instant::now()),
            #[cfg(all(test, cuda_event_model))]
            idle: false,
        };
        RelaxedCapture::enter(d).forever();
        precise_sleeps();
        super::mark_waking_thread();
        let waits = &mut running.waits;
        let alive = RefCell::new(Vec::new());
        let check = |wait: &Wait| check(d, wait, &alive);
        let mut pacing = Pacing::default();
        loop {
            alive.borrow_mut().clear();
            let registered = std::mem::take(&mut self.inbox.lock().registered);
            waits.take(registered);
            // Each phase of a turn (the sweeps, the walk, the poll) makes its own reset checks
            // (`alive` emptied between them): a short window.
            let deadline = pacing.turn(waits, &check, || alive.borrow_mut().clear());
            let mut inbox = self.inbox.lock();
            if inbox.registered.is_empty() {
                inbox.sleeping_until = deadline;
                match deadline {
                    Some(deadline) => drop(self.changed.wait_until(&mut inbox, deadline)),
                    // A model execution ends only once every thread has: an idle reactor ends
                    // there, and the next wait starts it again.
                    #[cfg(all(test, cuda_event_model))]
                    None => {
                        inbox.running = false;
                        drop(inbox);
                        running.idle = true;
                        return;
                    }
                    #[cfg(not(all(test, cuda_event_model)))]
                    None => self.changed.wait(&mut inbox),
                }
            }
            inbox.sleeping_until = Some(Instant::now());
        }
    }
}

/// When the thread's work is next due, between its turns: one turn sweeps the lanes that are due,
/// takes a step of the walk over every wait in them and a step of the polling of unordered waits,
/// each when its own time has come, whatever woke the thread.
#[derive(Default)]
pub(super) struct Pacing {
    next_poll: Option<Instant>,
    pub(super) next_walk: Option<Instant>,
    /// The thread's CPU time when its last turn ended.
    cpu_at_rest: Option<Duration>,
}

impl Pacing {
    /// One turn of the thread over `waits`, `new_phase` called between the sweeps, the walk and
    /// the poll; returns when the next is due (`None`: only when told).
    pub(super) fn turn(
        &mut self,
        waits: &mut Waits,
        check: &impl Fn(&Wait) -> Outcome,
        new_phase: impl Fn(),
    ) -> Option<Instant> {
        // What the thread spent between turns, its sleep and wake-up: charged to the polling,
        // which is what wakes it while only unordered waits are pending. At most MIN_POLL: more
        // is the inbox's work (a burst of registrations), not a wake-up's.
        let woke = thread_cpu_time();
        let between = self
            .cpu_at_rest
            .map_or(Duration::ZERO, |at| woke.saturating_sub(at))
            .min(MIN_POLL);
        let sweep_start = Instant::now();
        let stepping = waits.sweep_lanes(check);
        new_phase();
        // Sweeps take at most about 1/(1 + LANE_CPU) of a core, unless that would leave a lane
        // unswept for longer than its bound (STEPPING while one is stepping).
        let longest = if stepping { STEPPING } else { SLOWEST };
        let rest = (sweep_start.elapsed() * LANE_CPU).min(longest);
        if self.next_walk.is_none_or(|at| at <= Instant::now()) {
            // A walk still behind its pace takes its next step after resting LANE_CPU times as
            // long as this one took.
            let walk_start = Instant::now();
            self.next_walk = waits
                .walk_a_chunk(check)
                .then(|| Instant::now() + walk_start.elapsed() * LANE_CPU);
        }
        new_phase();
        if self.next_poll.is_none_or(|at| at <= Instant::now()) {
            // Each polling step costs about 1/CPU_SHARE of a core, its wake-up included, but the
            // pauses of a pass over the unordered waits add up to BACKSTOP at most (each its
            // step's share).
            let before = thread_cpu_time();
            let share = waits.poll_chunk(check);
            let cost = thread_cpu_time().saturating_sub(before) + between;
            self.next_poll = share.map(|share| {
                let paced = (cost * CPU_SHARE).max(MIN_POLL);
                Instant::now() + paced.min(BACKSTOP.mul_f64(share))
            });
        }
        let next_sweep = waits.next_sweep().map(|due| due.max(Instant::now() + rest));
        self.cpu_at_rest = Some(thread_cpu_time());
        [next_sweep, self.next_poll, self.next_walk]
            .into_iter()
            .flatten()
            .min()
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
pub(super) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec through a pointer to a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
