//! Captures: forks and joins through events inside captures (across threads and devices), and
//! the end of a capture the crate makes (`Stream::capture`) beside records into it.

use super::scenario::{
    GLOBAL, THREAD_LOCAL, begin_capture, end_capture, ok_or_captured, relaxed_here, stream,
};
use super::{check, check_once};
use crate::sync::thread;
use crate::{Event, Stream};
use std::sync::Arc;

/// Two threads record one event into their own captures and fork them through it (the review's
/// finding 1): each thread's captured records use a CUDA event of its own, so no two captured
/// records, and no fork beside another thread's captured record, touch one CUDA event. A fork
/// whose thread's record is no longer the event's last is refused (907), never joined to the other
/// thread's capture.
#[test]
fn two_threads_capture_one_event_and_fork_through_it() {
    check(300, || {
        let event = Arc::new(Event::new());
        let plain = stream();
        event.record(&plain).unwrap();
        let workers: Vec<_> = [THREAD_LOCAL, GLOBAL]
            .into_iter()
            .map(|mode| {
                let event = event.clone();
                let (cap, side) = (stream(), stream());
                thread::spawn(move || {
                    relaxed_here();
                    begin_capture(&cap, mode);
                    event.record(&cap).unwrap();
                    let forked = event.wait(&side);
                    if forked.is_ok() {
                        let joined = Event::new();
                        joined.record(&side).unwrap();
                        joined.wait(&cap).unwrap();
                    }
                    ok_or_captured("fork", forked);
                    end_capture(&cap).expect("the capture ends valid");
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    });
}

/// A fork into a stream of another device (CUDA allows a wait across devices) waits on the
/// recording thread's captured event (the second review's F5).
#[test]
fn a_fork_into_a_stream_of_another_device() {
    check_once(|| {
        let cap = stream();
        let side = Stream::new(1).expect("a model stream on device 1");
        let event = Event::new();
        begin_capture(&cap, THREAD_LOCAL);
        event.record(&cap).unwrap();
        let forked = event.wait(&side);
        let _ = end_capture(&cap);
        assert_eq!(forked, Ok(()), "a cross-device fork");
    });
}

/// Another thread's records and reads on a stream that the crate's wait forks into a capture the
/// crate is making: no record straddles the fork (a record on the published CUDA event swallowed
/// unseen, whose read beside the end crashes), and none overlaps the capture's end (neither the
/// record into it nor a read of its capture info, capture_end_signals i). The forked stream has a
/// gate of its own: what keeps its records apart from the end is the capture's entry.
#[test]
fn the_crates_end_of_a_capture_never_overlaps_a_record_into_it_on_a_forked_stream() {
    records_on_a_forked_stream_beside_the_crates_end(Event::new);
}

/// The same with an external event, whose record into the capture is a node of the graph.
#[test]
fn the_crates_end_of_a_capture_never_overlaps_an_external_record_into_it_on_a_forked_stream() {
    records_on_a_forked_stream_beside_the_crates_end(|| {
        Event::builder()
            .external(true)
            .build()
            .expect("an external event")
    });
}

fn records_on_a_forked_stream_beside_the_crates_end(new_event: fn() -> Event) {
    use crate::sync::atomic::{AtomicBool, Ordering};
    check(300, move || {
        let main = stream();
        let side = stream();
        let event = Arc::new(new_event());
        let forked = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (side, event, forked) = (side.clone(), event.clone(), forked.clone());
            thread::spawn(move || {
                // Before, during and after the fork: each record goes on the stream or into the
                // capture knowingly, and each read is of a CUDA event no capture holds.
                for _ in 0..3 {
                    let _ = event.record(&side);
                    let _ = event.query();
                    if forked.load(Ordering::Relaxed) {
                        thread::yield_now();
                    }
                }
            })
        };
        let _ = main.capture(crate::capture::CaptureMode::Relaxed, |s| {
            side.wait_stream(s)?; // fork: side joins the capture
            forked.store(true, Ordering::Relaxed);
            s.wait_stream(&side) // join
        });
        forked.store(true, Ordering::Relaxed);
        recorder.join().unwrap();
    });
}
