//! Futures: a first poll and a waiting future beside records into captures, a future dropped
//! under the reactor, and the lane a first poll files its wait in.

use super::scenario::{
    GLOBAL, THREAD_LOCAL, captured_round, hold, ok_or_captured, pending_event, release, stream,
};
use super::{check, poll_once, poll_until_ready};
use crate::Event;
use crate::sync::thread;
use std::sync::Arc;

/// A future's first poll, and a future already waiting, beside a record of the event into a
/// capture: neither reaches the capture, and the waiting one resolves to its work's result.
#[test]
fn futures_beside_a_captured_record() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, held) = (stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || captured_round(&cap, &event, THREAD_LOCAL))
        };
        let waiting = {
            let event = event.clone();
            thread::spawn(move || {
                let mut future = event.completion();
                let _ = poll_once(&mut future); // the first poll, beside the capture
                poll_until_ready(future)
            })
        };
        capturer.join().unwrap();
        release(&held);
        ok_or_captured("the waiting future", waiting.join().unwrap());
    });
}

/// R6: an external event's record into a capture is a node of the graph; a future waiting on its
/// last real record still resolves to that record's result.
#[test]
fn an_external_record_into_a_capture_leaves_waiting_futures_alone() {
    check(200, || {
        let event = Arc::new(Event::builder().external(true).build().unwrap());
        let (cap, held) = (stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let mut future = event.completion();
        assert!(poll_once(&mut future).is_pending());
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || captured_round(&cap, &event, GLOBAL))
        };
        capturer.join().unwrap();
        release(&held);
        assert_eq!(poll_until_ready(future), Ok(()));
        assert_eq!(event.query(), Ok(true));
    });
}

/// A future dropped while the reactor is about to query its event, and the event's CUDA event
/// destroyed right after: the reactor never queries a destroyed event.
#[test]
fn a_dropped_future_is_never_queried_after_its_event_is_destroyed() {
    check(300, || {
        let (held, event) = pending_event();
        let mut future = event.completion();
        assert!(poll_once(&mut future).is_pending());
        thread::yield_now();
        drop(future);
        drop(event);
        crate::pool::empty_event_pool(); // destroys the CUDA event now
        thread::yield_now();
        release(&held);
    });
}

/// Review 3's S11: a first poll racing a record on another stream never files its wait in the new
/// stream's lane with the earlier record's stamp (which would put it at the front of that lane,
/// holding up the lane's other futures until its work completes).
#[test]
fn a_read_of_an_events_order_never_pairs_a_new_stream_with_an_earlier_records_stamp() {
    use crate::sync::atomic::{AtomicBool, Ordering};
    check(300, || {
        let (s1, s2) = (stream(), stream());
        let event = Arc::new(Event::new());
        event.record(&s1).unwrap();
        let first = event
            .watchers()
            .order()
            .expect("recorded on a stream of the crate's");
        let done = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (event, s2, done) = (event.clone(), s2.clone(), done.clone());
            thread::spawn(move || {
                event.record(&s2).unwrap();
                done.store(true, Ordering::Relaxed);
            })
        };
        // Reads (a first poll's) all through the second record.
        while !done.load(Ordering::Relaxed) {
            let seen = event.watchers().order().unwrap();
            assert!(
                seen.lane == first.lane || seen.stamp > first.stamp,
                "the second record's stream paired with the first record's stamp"
            );
            thread::yield_now();
        }
        recorder.join().unwrap();
    });
}

/// A future that spins ([`Wait::Spin`](crate::Wait::Spin)) queries at each poll and, while its
/// work is pending, wakes its own task before returning: an executor that polls woken tasks
/// polls it again, with no thread of the crate. It resolves once its work is done, whatever
/// thread releases the stream meanwhile.
#[test]
fn a_spinning_future_wakes_itself_while_pending_and_resolves_after_its_work() {
    use cuda_event_testkit::{counting_waker, poll_with};
    check(200, || {
        let (held, event) = pending_event();
        let mut future = event.completion().with_wait(crate::Wait::Spin);
        let (count, waker) = counting_waker();
        assert!(poll_with(&mut future, &waker).is_pending());
        assert_eq!(count.count(), 1, "a pending poll wakes its own task");
        let releaser = {
            let held = held.clone();
            thread::spawn(move || release(&held))
        };
        let mut polls = 1;
        let result = loop {
            if let std::task::Poll::Ready(result) = poll_with(&mut future, &waker) {
                break result;
            }
            polls += 1;
            assert_eq!(count.count(), polls, "each pending poll wakes its own task");
            thread::yield_now();
        };
        assert_eq!(result, Ok(()));
        assert_eq!(event.query(), Ok(true));
        releaser.join().unwrap();
    });
}

/// A future that spins for a budget ([`Wait::SpinThen`](crate::Wait::SpinThen)) hands its wait
/// to the reactor once the budget is spent: with none, its first poll registers it and does not
/// wake its own task, and the reactor ends it after the work.
#[test]
fn a_future_past_its_spin_budget_waits_by_the_reactor() {
    use cuda_event_testkit::{counting_waker, poll_with};
    use std::time::Duration;
    check(100, || {
        let (held, event) = pending_event();
        let budget = Duration::ZERO;
        let mut future = event.completion().with_wait(crate::Wait::SpinThen { budget });
        let (count, waker) = counting_waker();
        assert!(poll_with(&mut future, &waker).is_pending());
        assert_eq!(count.count(), 0, "no wake of its own once the budget is spent");
        assert!(format!("{future:?}").contains("waiting_on"), "{future:?}");
        release(&held);
        assert_eq!(poll_until_ready(future), Ok(()));
    });
}

/// A later record of the event into a capture does not touch what a waiting future waits on,
/// whichever way it waits: a spinning future and a reactor future, both pending, both resolve to
/// their work's result after the event is recorded into a capture.
#[test]
fn a_later_record_into_a_capture_leaves_spinning_and_reactor_futures_alone() {
    use cuda_event_testkit::poll_with;
    check(100, || {
        let cap = stream();
        let (held, event) = pending_event();
        let mut spinning = event.completion().with_wait(crate::Wait::Spin);
        let mut reactor = event.completion();
        let waker = std::task::Waker::noop();
        assert!(poll_with(&mut spinning, waker).is_pending());
        assert!(poll_with(&mut reactor, waker).is_pending());
        captured_round(&cap, &event, THREAD_LOCAL);
        release(&held);
        assert_eq!(poll_until_ready(reactor), Ok(()), "the reactor's");
        assert_eq!(poll_until_ready(spinning), Ok(()), "the spinning one's");
    });
}

/// A poll whose waker panics as the future hands its wait to the reactor (the waker's `clone`,
/// which the hand-over takes), at the first poll or at the first past a spin budget: the future is
/// never `Ok` while its work is pending. A later poll (an executor that caught the panic) is ready
/// with an error, and a new future on the same event still resolves after its work.
#[test]
fn a_panic_during_a_polls_hand_over_never_leaves_the_future_ok() {
    use cuda_event_testkit::poll_with;
    use std::task::{RawWaker, RawWakerVTable, Waker};
    fn clone_panics(_: *const ()) -> RawWaker {
        panic!("a waker whose clone panics");
    }
    fn nothing(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_panics, nothing, nothing, nothing);
    check(50, || {
        let (held, event) = pending_event();
        // SAFETY: the vtable's functions ignore the data pointer, which is null; its clone panics
        // instead of returning, and its other functions do nothing.
        let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) };
        let budget = std::time::Duration::from_nanos(1);
        let spent = event.completion().with_wait(crate::Wait::SpinThen { budget });
        for (way, mut future) in [("first poll", event.completion()), ("past its budget", spent)] {
            let mut polls = 0;
            let panicked = loop {
                polls += 1;
                assert!(polls < 1000, "{way}: never handed over");
                let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    poll_with(&mut future, &waker).is_pending()
                }));
                match polled {
                    Ok(true) => thread::yield_now(), // spinning: wakes without a clone
                    Ok(false) => break false,
                    Err(_) => break true,
                }
            };
            assert!(panicked, "{way}: the hand-over clones the waker");
            let again = poll_with(&mut future, Waker::noop());
            assert!(
                matches!(
                    again,
                    std::task::Poll::Ready(Err(crate::Error::ReactorUnavailable { .. }))
                ),
                "{way}: {again:?}"
            );
        }
        assert_eq!(event.query(), Ok(false), "the work is still pending");
        let mut fresh = event.completion();
        assert!(poll_once(&mut fresh).is_pending());
        release(&held);
        assert_eq!(poll_until_ready(fresh), Ok(()));
    });
}

/// A waker that runs its task at once, on the thread that wakes it (the reactor's), where the task
/// waits by the reactor on other pending work: that wait cannot be served by the thread it runs
/// on, so it is refused at once rather than stalling every wait in the process.
#[test]
fn a_wait_by_the_reactor_on_the_reactors_own_thread_is_refused() {
    use crate::Wait;
    use std::task::{Context, Wake, Waker};
    struct RunsInline {
        other: Arc<Event>,
        answer: crate::sync::Mutex<Option<crate::Result<bool>>>,
    }
    impl Wake for RunsInline {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let answer = self.other.synchronize_with(Wait::Reactor, None);
            *self.answer.lock() = Some(answer);
        }
    }
    check(100, || {
        let (held, event) = pending_event();
        let (other_held, other) = pending_event();
        let inline = Arc::new(RunsInline {
            other: Arc::new(other),
            answer: crate::sync::Mutex::new(None),
        });
        let waker = Waker::from(inline.clone());
        let mut future = std::pin::pin!(event.completion());
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        release(&held);
        // The reactor wakes the task, whose wait ends at once; the first future is ready.
        while inline.answer.lock().is_none() {
            thread::yield_now();
        }
        assert!(matches!(
            inline.answer.lock().take(),
            Some(Err(crate::Error::ReactorUnavailable { .. }))
        ));
        release(&other_held);
        assert_eq!(poll_until_ready(future), Ok(()));
    });
}
