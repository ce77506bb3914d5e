//! The flag lane's scanner thread (`completion::scanner`): waits armed from several threads, the
//! thread's start and end between them, and tickets that land as the work ends or before it. The
//! waits are armed directly, with slots the test writes by hand, since a lane stream cannot be made
//! under the driver model; the events are the model's.

use super::check;
use super::scenario::{hold, release, stream};
use crate::Event;
use crate::completion::scanner::arm;
use crate::event::watchers::WaitCell;
use crate::stream::flag_lane::FlagSlot;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::thread;
use std::sync::Arc;
use std::task::Waker;

/// A slot whose first `issued` tickets were handed out, and its host word, which the test writes
/// as the GPU would.
fn slot(issued: u64) -> (&'static AtomicU64, &'static FlagSlot) {
    let host: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let slot: &'static FlagSlot = Box::leak(Box::new(FlagSlot::for_test(host)));
    slot.issue_for_test(issued);
    (host, slot)
}

/// Yields until `cell` has a result (the scanner is the only one that can give it one here).
fn result_of(cell: &WaitCell) -> crate::Result<()> {
    loop {
        if let Some(result) = cell.look(Waker::noop()) {
            return result;
        }
        thread::yield_now();
    }
}

/// Two waits on two slots, armed from two threads while a third lands each ticket after its
/// event's work: both end `Ok`, whether the scanner was running, starting, or ending (it ends
/// whenever nothing is armed) when each was armed.
#[test]
fn waits_armed_from_several_threads_end_once_their_tickets_land() {
    check(200, || {
        let (held, other) = (stream(), stream());
        hold(&held);
        hold(&other);
        let (first, second) = (Arc::new(Event::new()), Arc::new(Event::new()));
        first.record(&held).unwrap();
        second.record(&other).unwrap();
        let ((first_host, first_slot), (second_host, second_slot)) = (slot(1), slot(1));
        let armer = |event: &Arc<Event>, slot: &'static FlagSlot| {
            let event = event.clone();
            thread::spawn(move || {
                let cell = Arc::new(WaitCell::default());
                arm(slot, 1, event.query_target().unwrap(), cell.clone());
                result_of(&cell)
            })
        };
        let waits = [armer(&first, first_slot), armer(&second, second_slot)];
        let lander = thread::spawn(move || {
            release(&held);
            first_host.store(1, Ordering::Release);
            release(&other);
            second_host.store(1, Ordering::Release);
        });
        lander.join().unwrap();
        for wait in waits {
            assert_eq!(wait.join().unwrap(), Ok(()));
        }
        assert_eq!((first.query(), second.query()), (Ok(true), Ok(true)));
    });
}

/// A ticket that lands before its event completes (another record's, or a stale one) ends nothing:
/// the scanner's query says "not yet" and it drops the wait, which here nothing else serves. A
/// second wait on the same slot, with a later ticket on a complete event, shows that the scanner
/// has looked at the first (it checks a slot's waits in ticket order); the first is still without
/// a result, and is abandoned, as a dropped future's is, before its event goes.
#[test]
fn a_ticket_that_lands_before_its_work_ends_no_wait() {
    check(200, || {
        let (held, done) = (stream(), stream());
        hold(&held);
        let (pending, complete) = (Event::new(), Event::new());
        pending.record(&held).unwrap();
        complete.record(&done).unwrap();
        let (host, slot) = slot(2);
        host.store(2, Ordering::Release);
        let early = Arc::new(WaitCell::default());
        arm(slot, 1, pending.query_target().unwrap(), early.clone());
        let sentinel = Arc::new(WaitCell::default());
        arm(slot, 2, complete.query_target().unwrap(), sentinel.clone());
        assert_eq!(result_of(&sentinel), Ok(()));
        assert!(
            early.look(Waker::noop()).is_none(),
            "a wait ended on a ticket while its event was pending"
        );
        assert_eq!(pending.query(), Ok(false));
        early.abandon();
        release(&held);
    });
}

/// Two threads each arm a wait whose ticket has landed on complete work, so that the scanner may
/// be ending (nothing armed) as the second arm comes: both waits still end `Ok`. An arm lost
/// between the scanner's last look and its end would leave one without a result, and the test
/// would not end.
#[test]
fn an_arm_that_meets_the_scanner_ending_is_not_lost() {
    check(200, || {
        let done = stream();
        let armers: Vec<_> = (0..2)
            .map(|_| {
                let event = Arc::new(Event::new());
                event.record(&done).unwrap();
                let (host, slot) = slot(1);
                host.store(1, Ordering::Release);
                thread::spawn(move || {
                    let cell = Arc::new(WaitCell::default());
                    arm(slot, 1, event.query_target().unwrap(), cell.clone());
                    result_of(&cell)
                })
            })
            .collect();
        for armer in armers {
            assert_eq!(armer.join().unwrap(), Ok(()));
        }
    });
}
