//! The flag lane's read side: one thread that spins on the slots of the lane streams' pending
//! waits (see `stream::flag_lane`) while any is armed and news comes (a ticket landed, a wait
//! armed), yields and then sleeps between looks as the news grows old ([`SPIN_FOR`],
//! [`YIELD_FOR`], [`FIRST_SLEEP`] up to [`LONGEST_SLEEP`]), and sleeps whenever nothing is armed.
//!
//! A wait is armed after the reactor has it ([`arm`]), so the scanner only ever makes a wait end
//! sooner: once a wait's ticket lands, the thread queries its event (in relaxed capture mode, as
//! the reactor does) and finishes the wait with that answer; a query that says "not yet" (a ticket
//! of another record, or a stale one) drops the wait from the scanner, and the reactor, which
//! still has it, finishes it at its own pace. Waits that end otherwise (the reactor finished them,
//! their owner gave up) are forgotten at the next tidy ([`TIDY`] apart, or [`TIDY_SPACING`] times as
//! long as one takes).

use crate::capture_mode::RelaxedCapture;
use crate::completion::lanes::{Outcome, Wait, check};
use crate::driver::{Driver, driver};
use crate::event::handle::QueryTarget;
use crate::event::watchers::WaitCell;
use crate::stream::flag_lane::FlagSlot;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Condvar, Lazy, Mutex};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the thread forgets the waits that ended without it, at most...
const TIDY: Duration = Duration::from_millis(1);
/// ...and at least this many times as long apart as a tidy takes (a tidy visits every armed wait).
const TIDY_SPACING: u32 = 16;
/// How long the thread spins after news (a ticket landed, a wait armed)...
const SPIN_FOR: Duration = Duration::from_millis(2);
/// ...then yields the core between looks, until this long after the news...
const YIELD_FOR: Duration = Duration::from_millis(20);
/// ...and then sleeps between looks, this long at first, doubling up to [`LONGEST_SLEEP`] (a wait
/// on a stuck or long stream costs little; the reactor still sees it at its own pace).
const FIRST_SLEEP: Duration = Duration::from_micros(50);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// A wait on a lane stream's event: its slot, its ticket, and the wait the reactor also has.
pub(super) struct Armed {
    pub(super) slot: &'static FlagSlot,
    pub(super) ticket: u64,
    pub(super) wait: Wait,
}

/// The armed waits, by slot, each slot's sorted by ticket, the lowest first.
#[derive(Default)]
pub(super) struct Slots {
    by_slot: HashMap<*const FlagSlot, (&'static FlagSlot, VecDeque<Armed>)>,
}

// SAFETY: the raw pointers are keys only, each of a slot the map also holds by reference; slots
// are `Sync` and never freed.
unsafe impl Send for Slots {}

impl Slots {
    pub(super) fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }

    /// Files `armed`, but for the waits that already ended (a wait given up at once, as a
    /// zero-timeout wait does); returns how many it filed.
    pub(super) fn take(&mut self, armed: impl IntoIterator<Item = Armed>) -> usize {
        let mut filed = 0;
        for armed in armed {
            if armed.wait.cell.is_settled() {
                continue;
            }
            let (_, waits) = self
                .by_slot
                .entry(std::ptr::from_ref(armed.slot))
                .or_insert_with(|| (armed.slot, VecDeque::new()));
            // Mostly armed in ticket order: at the back.
            match waits.back() {
                Some(last) if last.ticket > armed.ticket => {
                    let at = waits.partition_point(|w| w.ticket <= armed.ticket);
                    waits.insert(at, armed);
                }
                _ => waits.push_back(armed),
            }
            filed += 1;
        }
        filed
    }

    /// Checks, in ticket order, each wait whose ticket its slot has passed; returns how many were
    /// checked.
    pub(super) fn scan(&mut self, check: &impl Fn(&Wait) -> Outcome) -> usize {
        let mut checked = 0;
        self.by_slot.retain(|_, (slot, waits)| {
            while let Some(armed) = waits.front()
                && slot.passed(armed.ticket)
            {
                let armed = waits.pop_front().expect("just looked");
                checked += 1;
                if let Outcome::Finished(result) = check(&armed.wait) {
                    armed.wait.cell.finish(result);
                }
            }
            !waits.is_empty()
        });
        checked
    }

    /// Forgets the waits that ended without the scanner.
    pub(super) fn tidy(&mut self) {
        self.by_slot.retain(|_, (_, waits)| {
            waits.retain(|armed| !armed.wait.cell.is_settled());
            !waits.is_empty()
        });
    }
}

struct Scanner {
    inbox: Mutex<Inbox>,
    /// Something is in the inbox: read by the spinning thread, which takes the lock only then. On
    /// a cache line of its own, which the spinning thread only reads until it changes.
    news: OwnLine<AtomicBool>,
    changed: Condvar,
}

#[repr(align(128))]
struct OwnLine<T>(T);

#[derive(Default)]
struct Inbox {
    armed: Vec<Armed>,
    running: bool,
}

fn scanner() -> &'static Scanner {
    static SCANNER: Lazy<Scanner> = Lazy::new(|| Scanner {
        inbox: Mutex::new(Inbox::default()),
        news: OwnLine(AtomicBool::new(false)),
        changed: Condvar::new(),
    });
    SCANNER.get()
}

/// Arms a wait on `target` that the reactor already has, to end when its ticket lands in `slot`.
/// Where the thread cannot be started, the reactor alone serves the wait. A ticket that `slot`
/// never issued (the event's slot and ticket read from two records made at once on two lane
/// streams) is not armed: it would keep the thread looking until the reactor ends the wait.
pub(crate) fn arm(slot: &'static FlagSlot, ticket: u64, target: QueryTarget, cell: Arc<WaitCell>) {
    if ticket > slot.issued() {
        return;
    }
    let this = scanner();
    let mut inbox = this.inbox.lock();
    if !inbox.running {
        let Ok(d) = driver("the flag lane's scanner thread") else {
            return;
        };
        let started = crate::sync::thread::Builder::new()
            .name("cuda-event-lane".into())
            .spawn(move || scanner().run(d));
        if started.is_err() {
            return;
        }
        inbox.running = true;
    }
    inbox.armed.push(Armed {
        slot,
        ticket,
        wait: Wait { target, cell },
    });
    this.news.0.store(true, Ordering::Release);
    this.changed.notify_one();
}

impl Scanner {
    fn run(&self, d: &'static Driver) {
        // A panic (a bug) ends the thread: the waits stay the reactor's, and the next arm starts
        // another.
        struct Running<'a>(&'a Scanner);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.inbox.lock().running = false;
            }
        }
        let _running = Running(self);
        RelaxedCapture::enter(d).forever();
        super::mark_waking_thread();
        let alive = RefCell::new(Vec::new());
        let check = |wait: &Wait| {
            alive.borrow_mut().clear();
            check(d, wait, &alive)
        };
        let mut slots = Slots::default();
        let (mut tidied, mut news, mut sleep) = (Instant::now(), Instant::now(), FIRST_SLEEP);
        let mut tidy_cost = Duration::ZERO;
        loop {
            // Only news of a live wait keeps the thread looking.
            if self.news.0.load(Ordering::Relaxed)
                && self.news.0.swap(false, Ordering::Acquire)
                && slots.take(std::mem::take(&mut self.inbox.lock().armed)) > 0
            {
                news = Instant::now();
            }
            if slots.is_empty() {
                let mut inbox = self.inbox.lock();
                if inbox.armed.is_empty() {
                    // A model execution ends only once every thread has: an idle scanner ends
                    // there, under the lock an arm takes, and the next arm starts another.
                    #[cfg(all(test, cuda_event_model))]
                    {
                        inbox.running = false;
                        drop(inbox);
                        std::mem::forget(_running); // said already, and another may run by now
                        return;
                    }
                    #[cfg(not(all(test, cuda_event_model)))]
                    self.changed.wait(&mut inbox);
                }
                self.news.0.store(false, Ordering::Relaxed);
                if slots.take(std::mem::take(&mut inbox.armed)) > 0 {
                    news = Instant::now();
                }
                continue;
            }
            if slots.scan(&check) > 0 {
                news = Instant::now();
            }
            if tidied.elapsed() >= TIDY.max(tidy_cost * TIDY_SPACING) {
                let started = Instant::now();
                slots.tidy();
                tidied = Instant::now();
                tidy_cost = tidied - started;
            }
            let quiet = news.elapsed();
            // The model has no clock: there every look is a sleep's, a yield to the other threads,
            // so that a schedule does not hang on the machine's time.
            #[cfg(all(test, cuda_event_model))]
            let quiet = quiet.max(YIELD_FOR);
            if quiet < SPIN_FOR {
                sleep = FIRST_SLEEP;
                std::hint::spin_loop();
            } else if quiet < YIELD_FOR {
                crate::sync::thread::yield_now();
            } else {
                let mut inbox = self.inbox.lock();
                if inbox.armed.is_empty() {
                    // Woken at once by a new wait.
                    let _ = self.changed.wait_until(&mut inbox, Instant::now() + sleep);
                    sleep = (sleep * 2).min(LONGEST_SLEEP);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::MadeIn;
    use crate::error::Result;
    use crate::sync::atomic::AtomicU64;
    use cuda_event_sys as sys;
    use std::task::Waker;

    fn slot() -> (&'static AtomicU64, &'static FlagSlot) {
        let host: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        (host, Box::leak(Box::new(FlagSlot::for_test(host))))
    }

    fn armed(slot: &'static FlagSlot, ticket: u64, event: usize) -> (Armed, Arc<WaitCell>) {
        let cell = Arc::new(WaitCell::default());
        let target = QueryTarget {
            raw: event as sys::cudaEvent_t,
            made_in: MadeIn::new(0, None),
            exporter: None,
        };
        let wait = Wait {
            target,
            cell: cell.clone(),
        };
        (Armed { slot, ticket, wait }, cell)
    }

    fn result(cell: &WaitCell) -> Option<Result<()>> {
        cell.look(Waker::noop())
    }

    /// A check whose query says complete for the events named in `complete`.
    fn check_with(complete: &[usize]) -> impl Fn(&Wait) -> Outcome + '_ {
        move |wait: &Wait| match complete.contains(&(wait.target.raw as usize)) {
            true => Outcome::Finished(Ok(())),
            false => Outcome::Pending,
        }
    }

    #[test]
    fn a_wait_ends_once_its_ticket_lands_and_its_query_agrees() {
        let (host, slot) = slot();
        let mut slots = Slots::default();
        let (first, first_cell) = armed(slot, 1, 10);
        let (second, second_cell) = armed(slot, 2, 20);
        slots.take([second, first]);
        let check = check_with(&[10, 20]);
        assert_eq!(slots.scan(&check), 0, "no ticket landed");
        host.store(1, Ordering::Release);
        assert_eq!(slots.scan(&check), 1);
        assert!(matches!(result(&first_cell), Some(Ok(()))));
        assert!(result(&second_cell).is_none(), "its ticket has not landed");
        host.store(2, Ordering::Release);
        assert_eq!(slots.scan(&check), 1);
        assert!(matches!(result(&second_cell), Some(Ok(()))));
        assert!(slots.is_empty());
    }

    #[test]
    fn a_ticket_that_lands_before_its_event_completes_leaves_the_wait_to_the_reactor() {
        let (host, slot) = slot();
        let mut slots = Slots::default();
        let (wait, cell) = armed(slot, 5, 10);
        slots.take([wait]);
        host.store(7, Ordering::Release);
        assert_eq!(slots.scan(&check_with(&[])), 1);
        assert!(result(&cell).is_none(), "no query said complete");
        assert!(slots.is_empty(), "dropped by the scanner, kept by the reactor");
    }

    #[test]
    fn a_wait_whose_ticket_never_lands_is_forgotten_once_it_ended_elsewhere() {
        let ((_, first_slot), (_, other_slot)) = (slot(), slot());
        let mut slots = Slots::default();
        let (ended, ended_cell) = armed(first_slot, 3, 10);
        let (pending, _pending_cell) = armed(other_slot, 3, 20);
        slots.take([ended, pending]);
        slots.tidy();
        assert_eq!(slots.by_slot.len(), 2, "both pending");
        ended_cell.finish(Ok(())); // the reactor finished it
        slots.tidy();
        assert_eq!(
            slots.by_slot.len(),
            1,
            "the ended one is forgotten, the other kept"
        );
        drop(_pending_cell);
    }

    #[test]
    fn a_wait_given_up_before_the_thread_takes_it_is_not_filed() {
        let (host, slot) = slot();
        let mut slots = Slots::default();
        let (given_up, given_up_cell) = armed(slot, 1, 10);
        let (live, live_cell) = armed(slot, 2, 20);
        given_up_cell.abandon();
        assert_eq!(slots.take([given_up]), 0, "nothing filed, so no news");
        assert!(slots.is_empty());
        assert_eq!(slots.take([live]), 1);
        host.store(2, Ordering::Release);
        assert_eq!(
            slots.scan(&check_with(&[10, 20])),
            1,
            "only the live wait is checked"
        );
        assert!(matches!(result(&live_cell), Some(Ok(()))));
    }

    #[test]
    fn waits_of_one_slot_armed_in_ticket_order_end_in_it() {
        let (host, slot) = slot();
        let mut slots = Slots::default();
        let cells: Vec<_> = (1..=1000)
            .map(|ticket| {
                let (wait, cell) = armed(slot, ticket, ticket as usize);
                assert_eq!(slots.take([wait]), 1);
                cell
            })
            .collect();
        let events: Vec<usize> = (1..=1000).collect();
        host.store(600, Ordering::Release);
        assert_eq!(slots.scan(&check_with(&events)), 600);
        for (ticket, cell) in (1..=1000).zip(&cells) {
            assert_eq!(result(cell).is_some(), ticket <= 600, "ticket {ticket}");
        }
    }

    #[test]
    fn waits_of_one_slot_armed_out_of_order_end_in_ticket_order() {
        let (host, slot) = slot();
        let mut slots = Slots::default();
        let cells: Vec<_> = [4, 1, 3, 2]
            .into_iter()
            .map(|ticket| {
                let (wait, cell) = armed(slot, ticket, ticket as usize);
                slots.take([wait]);
                (ticket, cell)
            })
            .collect();
        host.store(2, Ordering::Release);
        assert_eq!(slots.scan(&check_with(&[1, 2, 3, 4])), 2);
        for (ticket, cell) in &cells {
            assert_eq!(result(cell).is_some(), *ticket <= 2, "ticket {ticket}");
        }
    }
}
