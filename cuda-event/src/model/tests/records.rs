//! Records: an event's records on streams beside its records into captures (first records
//! racing, the done event each worker records), and the records the crate refuses into a capture
//! (an interprocess event's, a stream future's).

use super::scenario::{
    GLOBAL, THREAD_LOCAL, begin_capture, captured_round, end_capture, fill, ok_or_captured, release, stream,
};
use super::{check, check_once, poll_until_ready};
use crate::model::world::with;
use crate::sync::thread;
use crate::{Error, Event};
use std::sync::Arc;

/// R1: two threads make an event's first record at once, one into a capture, and a third reads it.
/// With the record gate, the plain record's release could clear the swallowed mark the captured
/// record set, and the read reached CUDA while the capture was open (invalidated) or as it ended
/// (crash).
#[test]
fn first_records_racing_one_into_a_capture_never_let_a_read_reach_the_capture() {
    check(400, || {
        let event = Arc::new(Event::new());
        let (cap, other) = (stream(), stream());
        let a = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                drop(cap.record_event().unwrap()); // this thread's pool has a CUDA event
                captured_round(&cap, &event, THREAD_LOCAL);
            })
        };
        let b = {
            let (event, other) = (event.clone(), other.clone());
            thread::spawn(move || {
                drop(other.record_event().unwrap());
                event.record(&other).unwrap();
            })
        };
        ok_or_captured("query", event.query());
        ok_or_captured("synchronize", event.synchronize());
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// R4: records of one event on a stream beside its records into another thread's captures and
/// those captures' ends (the review's "each worker records the done event" shape).
#[test]
fn records_on_a_stream_beside_captured_records_and_capture_ends() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, plain) = (stream(), stream());
        event.record(&plain).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                captured_round(&cap, &event, GLOBAL);
                captured_round(&cap, &event, THREAD_LOCAL);
            })
        };
        for _ in 0..2 {
            event.record(&plain).unwrap();
        }
        capturer.join().unwrap();
    });
}

/// An interprocess event is never recorded into a capture (its importers could not see it), and
/// exporting it beside another thread's capture is safe.
#[test]
fn an_interprocess_event_is_refused_a_capture_and_exports_beside_one() {
    check(200, || {
        let event = Arc::new(Event::builder().interprocess(true).build().unwrap());
        let (cap, plain) = (stream(), stream());
        event.record(&plain).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                begin_capture(&cap, GLOBAL);
                assert_eq!(event.record(&cap), Err(Error::CapturedInterprocessEvent));
                end_capture(&cap).expect("the capture ends valid");
            })
        };
        event.ipc_handle().unwrap();
        capturer.join().unwrap();
        assert_eq!(event.query(), Ok(true));
    });
}

/// `Stream::completion` on a stream being captured records nothing into the capture (the review's
/// finding 3) and keeps no CUDA event.
#[test]
fn a_stream_completion_on_a_capturing_stream_records_nothing() {
    check_once(|| {
        let cap = stream();
        drop(cap.record_event().unwrap());
        let alive = crate::pool::cuda_events_alive();
        begin_capture(&cap, THREAD_LOCAL);
        assert_eq!(poll_until_ready(cap.completion()), Err(Error::StreamCapturing));
        let held = with(|w| w.captures.values().map(|c| c.holds.len()).sum::<usize>());
        assert_eq!(held, 0, "the completion's event went into the capture");
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(crate::pool::cuda_events_alive(), alive);
    });
}

/// A record blocked on a full queue holds its stream's capture gate shared for as long as CUDA
/// blocks it; dropping another stream must not wait for it (here the dropping thread is the one
/// that would free the queue, as a host function waiting for it would).
#[test]
fn dropping_a_stream_never_waits_for_a_record_blocked_on_another_stream() {
    check(50, || {
        let other = stream();
        beside_a_record_blocked_on_a_full_queue(|| drop(other)); // the last Arc: dropped here
    });
}

/// Runs `then` while another thread's record waits for room in a full queue, which gets room only
/// once `then` has returned.
fn beside_a_record_blocked_on_a_full_queue(then: impl FnOnce()) {
    let full = stream();
    fill(&full);
    let recorder = {
        let full = full.clone();
        thread::spawn(move || {
            let _ = Event::new().record(&full);
        })
    };
    thread::yield_now();
    then();
    release(&full);
    recorder.join().unwrap();
}

/// Nor must a capture that the crate begins and ends of another stream (here the capturing thread
/// is the one that would free the queue): raw CUDA would not make it wait, so such a wait would be
/// a deadlock of the crate's making. (With gates shared by streams whose handles fell in one of 64
/// sets, this failed for two such streams: the capture's begin waited for the blocked record.)
#[test]
fn a_capture_of_another_stream_never_waits_for_a_record_blocked_on_a_full_queue() {
    check(50, || {
        let other = stream();
        beside_a_record_blocked_on_a_full_queue(|| {
            let graph = other.capture(crate::capture::CaptureMode::ThreadLocal, |s| {
                Event::new().record(s)?;
                Event::new().wait(s)
            });
            assert!(graph.is_ok(), "{:?}", graph.err());
        });
    });
}

/// The `Stream`s on one CUDA stream handle share its capture gate (an owned stream and one
/// borrowing its handle; the legacy default stream made twice), and streams on two handles never
/// do, however many there are, nor two threads' per-thread default streams.
#[test]
fn streams_share_a_capture_gate_exactly_when_they_share_a_handle() {
    use crate::Stream;
    use crate::stream::capture_gate::same_gate;
    check_once(|| {
        let owned = stream();
        // SAFETY: `owned` outlives the borrow, and its handle is a stream of device 0.
        let borrowed = unsafe { Stream::from_raw_borrowed(owned.as_raw(), 0) }.unwrap();
        assert!(same_gate(&owned, &borrowed));
        let legacy = (Stream::legacy(0).unwrap(), Stream::legacy(0).unwrap());
        assert!(same_gate(&legacy.0, &legacy.1));
        // A per-thread stream is another stream on every thread, all its calls made on its own.
        let mine = Stream::per_thread(0).unwrap();
        let theirs = thread::spawn(|| Arc::new(Stream::per_thread(0).unwrap()))
            .join()
            .unwrap();
        assert!(!same_gate(&mine, &theirs));
        let others: Vec<_> = (0..130).map(|_| stream()).collect();
        assert!(others.iter().all(|other| !same_gate(other, &owned)));
        assert!(!same_gate(&legacy.0, &owned));
        // A gate outlives its owned stream while a borrowed one holds it: a `Stream` made on the
        // handle then (no call is made on it) finds it.
        let handle = owned.as_raw();
        drop(owned);
        // SAFETY: no call is made on it.
        let again = unsafe { Stream::from_raw_borrowed(handle, 0) }.unwrap();
        assert!(same_gate(&again, &borrowed));
    });
}
