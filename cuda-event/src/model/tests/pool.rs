//! The pool of CUDA events: a CUDA event a capture may still hold is handed to no other `Event`
//! nor capture, and captures over and over keep a bounded number of CUDA events alive.

use super::scenario::{
    RELAXED, THREAD_LOCAL, begin_capture, end_capture, hold, ok_or_captured, relaxed_here, release, stream,
};
use super::{check, check_once, poll_until_ready};
use crate::sync::thread;
use crate::{Error, Event};
use std::sync::Arc;

/// A CUDA event that a capture may still hold is never handed to another `Event` through the
/// pool: here a new event's first record on the same thread, read by another thread while the
/// capture ends.
#[test]
fn a_captured_cuda_event_is_never_pooled_under_an_open_capture() {
    check(300, || {
        let (cap, plain) = (stream(), stream());
        let (send, receive) = shuttle::sync::mpsc::channel::<Arc<Event>>();
        let reader = thread::spawn(move || {
            let event = receive.recv().unwrap();
            ok_or_captured("query", event.query());
            ok_or_captured("synchronize", event.synchronize());
        });
        begin_capture(&cap, THREAD_LOCAL);
        let first = Event::new();
        first.record(&cap).unwrap(); // a first record into the capture
        drop(first);
        let second = Arc::new(Event::new());
        second.record(&plain).unwrap(); // takes from this thread's pool
        send.send(second).unwrap();
        end_capture(&cap).expect("the capture ends valid");
        reader.join().unwrap();
    });
}

/// `wait_stream` inside captures, over and over (each call a new event recorded into the capture
/// and dropped on the capturing thread): the captured CUDA events are reused by that thread, and
/// the published ones pooled, so after the first round the number alive stays the same (the
/// review's finding 2).
#[test]
fn forks_and_joins_in_repeated_captures_keep_a_bounded_number_of_cuda_events() {
    check_once(|| {
        let (cap, side) = (stream(), stream());
        let mut alive = Vec::new();
        for _ in 0..4 {
            begin_capture(&cap, THREAD_LOCAL);
            for _ in 0..10 {
                side.wait_stream(&cap).unwrap(); // fork
                cap.wait_stream(&side).unwrap(); // join
            }
            end_capture(&cap).expect("the capture ends valid");
            alive.push(crate::pool::cuda_events_alive());
        }
        // The first round makes the events (a first record into a capture takes a new one); the
        // rounds after reuse them.
        assert!(
            alive[1..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each capture: {alive:?}"
        );
    });
}

/// An external event's first record into a capture is a graph node only: the event answers as
/// never recorded on a stream, not with a pooled CUDA event's old owner's record (the review's
/// finding 4).
#[test]
fn an_external_events_first_record_into_a_capture_is_not_a_pooled_events_old_record() {
    check_once(|| {
        let (held, cap) = (stream(), stream());
        hold(&held);
        drop(held.record_event().unwrap()); // pooled, its record pending behind the hold
        let external = Event::builder().external(true).build().unwrap();
        begin_capture(&cap, THREAD_LOCAL);
        external.record(&cap).unwrap();
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(external.query(), Ok(true));
        release(&held);
    });
}

/// Refused first records (a stream's future on a capturing stream, an interprocess event's record
/// into a capture) take no CUDA event, so refusing them again and again keeps none (the second
/// review's F2).
#[test]
fn refused_records_into_a_capture_keep_no_cuda_event() {
    check_once(|| {
        let cap = stream();
        drop(cap.record_event().unwrap());
        begin_capture(&cap, THREAD_LOCAL);
        let before = crate::pool::cuda_events_alive();
        for _ in 0..5 {
            assert_eq!(poll_until_ready(cap.completion()), Err(Error::StreamCapturing));
            let interprocess = Event::builder().interprocess(true).build().unwrap();
            assert_eq!(interprocess.record(&cap), Err(Error::CapturedInterprocessEvent));
        }
        let after = crate::pool::cuda_events_alive();
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(after, before, "CUDA events alive: {before} before, {after} after");
    });
}

/// Captures with many events recorded into them at once, round after round, and the thread's
/// pool emptied between rounds: the captured CUDA events are reused, so the number alive stays
/// the same (the second review's F3 and F4).
#[test]
fn captures_of_many_events_and_emptied_pools_keep_a_bounded_number_of_cuda_events() {
    check_once(|| {
        let (cap, side) = (stream(), stream());
        let mut alive = Vec::new();
        for _ in 0..4 {
            begin_capture(&cap, THREAD_LOCAL);
            let events: Vec<Event> = (0..40).map(|_| Event::new()).collect();
            for event in &events {
                event.record(&cap).unwrap();
            }
            side.wait_stream(&cap).unwrap();
            cap.wait_stream(&side).unwrap();
            end_capture(&cap).expect("the capture ends valid");
            drop(events);
            crate::pool::empty_event_pool();
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[1..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each round: {alive:?}"
        );
    });
}

/// Review 3's S1: a captured CUDA event that went into a capture another thread ends goes into no
/// other capture until that end has returned, whichever `Event` records next (here `wait_stream`'s
/// temporary event, which a pool keyed by thread handed the same CUDA event). With that pool it
/// failed: a record of an event into a capture beside the end of a capture that holds its record.
#[test]
fn a_captured_cuda_event_goes_into_no_other_capture_beside_another_threads_end_of_its_own() {
    check(300, || {
        relaxed_here();
        let (c1, c2, side) = (stream(), stream(), stream());
        begin_capture(&c1, RELAXED); // another thread will end it
        let e1 = Event::new();
        e1.record(&c1).unwrap(); // C1 holds its captured CUDA event's record
        drop(e1);
        let ender = {
            let c1 = c1.clone();
            thread::spawn(move || {
                relaxed_here();
                let _ = end_capture(&c1);
            })
        };
        begin_capture(&c2, THREAD_LOCAL);
        side.wait_stream(&c2).unwrap(); // a fork: its temporary event's captured record
        c2.wait_stream(&side).unwrap(); // join
        let again = Event::new();
        again.record(&c2).unwrap();
        end_capture(&c2).expect("the capture ends valid");
        ender.join().unwrap();
    });
}

/// Review 3's S2: captured CUDA events of events dropped on other threads, and of threads that
/// exit, are used again once their capture is over: the number alive stays bounded.
#[test]
fn captured_events_dropped_on_other_threads_or_by_exiting_threads_keep_a_bounded_number() {
    check_once(|| {
        let cap = stream();
        let mut alive = Vec::new();
        for round in 0..6 {
            if round % 2 == 0 {
                let event = Event::new();
                begin_capture(&cap, THREAD_LOCAL);
                event.record(&cap).unwrap();
                end_capture(&cap).unwrap();
                thread::spawn(move || drop(event)).join().unwrap(); // dropped on another thread
            } else {
                let cap = cap.clone();
                thread::spawn(move || {
                    let event = Event::new();
                    begin_capture(&cap, THREAD_LOCAL);
                    event.record(&cap).unwrap();
                    end_capture(&cap).unwrap();
                    drop(event); // then the thread exits
                })
                .join()
                .unwrap();
            }
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[2..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each round: {alive:?}"
        );
    });
}

/// One `Event` recorded into captures by many threads in turn keeps a CUDA event per capture that
/// may still hold one, not one per thread that ever recorded it (the S2 fix's review).
#[test]
fn one_event_recorded_into_captures_by_many_threads_keeps_a_bounded_number() {
    check_once(|| {
        let cap = stream();
        let event = Arc::new(Event::new());
        let mut alive = Vec::new();
        for _ in 0..6 {
            let (cap, event) = (cap.clone(), event.clone());
            thread::spawn(move || {
                begin_capture(&cap, THREAD_LOCAL);
                event.record(&cap).unwrap();
                end_capture(&cap).unwrap();
            })
            .join()
            .unwrap();
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[5] <= alive[1],
            "CUDA events alive after each thread's capture: {alive:?}"
        );
    });
}
