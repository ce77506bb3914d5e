//! Reads: queries, synchronizes, waits and elapsed times beside records into captures and their
//! ends, and every way of waiting for completion.

use super::scenario::{
    GLOBAL, THREAD_LOCAL, begin_capture, captured_round, end_capture, fill, ok_or_captured, pending_event,
    relaxed_here, release, stream,
};
use super::{check, poll_until_ready};
use crate::Event;
use crate::sync::thread;
use std::sync::Arc;

/// R2: a read never waits for a record on a stream, even one that replaces a swallowed record
/// and blocks on a full queue while another thread's record on a free stream replaces it too (with
/// the record gate the second record could hold it with nothing swallowed, and readers spun behind
/// it: here the queue gets room only after the read returns, so a read held up never returns).
#[test]
fn a_read_never_waits_for_a_record_blocked_on_a_full_queue() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, full, free) = (stream(), stream(), stream());
        captured_round(&cap, &event, GLOBAL);
        fill(&full);
        let recorders: Vec<_> = [full.clone(), free.clone()]
            .into_iter()
            .map(|stream| {
                let event = event.clone();
                thread::spawn(move || event.record(&stream).unwrap())
            })
            .collect();
        let reader = {
            let event = event.clone();
            thread::spawn(move || {
                relaxed_here();
                for _ in 0..3 {
                    ok_or_captured("query", event.query());
                }
            })
        };
        reader.join().unwrap();
        release(&full);
        for recorder in recorders {
            recorder.join().unwrap();
        }
    });
}

/// Reads of every kind on other threads beside captured records, forks and joins of the
/// capture, and its end.
#[test]
fn reads_beside_captured_records_forks_and_capture_ends() {
    check(300, || {
        let timing = || Event::builder().enable_timing(true).build().unwrap();
        let (event, start) = (Arc::new(timing()), Arc::new(timing()));
        let (cap, side, other) = (stream(), stream(), stream());
        start.record(&other).unwrap();
        event.record(&other).unwrap();
        let capturer = {
            let (event, cap, side) = (event.clone(), cap.clone(), side.clone());
            thread::spawn(move || {
                for mode in [GLOBAL, THREAD_LOCAL] {
                    begin_capture(&cap, mode);
                    event.record(&cap).unwrap();
                    event.wait(&side).unwrap(); // fork: side joins the capture
                    let joined = Event::new();
                    joined.record(&side).unwrap();
                    joined.wait(&cap).unwrap(); // join
                    end_capture(&cap).expect("the capture ends valid");
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|i| {
                let (event, start, other) = (event.clone(), start.clone(), other.clone());
                thread::spawn(move || {
                    relaxed_here();
                    if i == 0 {
                        ok_or_captured("query", event.query());
                        ok_or_captured("wait", event.wait(&other));
                        ok_or_captured("completion", poll_until_ready(event.completion()));
                    } else {
                        ok_or_captured("synchronize", event.synchronize());
                        ok_or_captured("elapsed_time", start.elapsed_time(&event));
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.join().unwrap();
        }
        capturer.join().unwrap();
    });
}

/// Every way of waiting returns once another thread lets the work complete, and each answers
/// `false` at a timeout that passes first: spinning, yielding, spinning then sleeping on the
/// reactor, the reactor alone, the driver's own synchronize; on an event and on a stream.
#[test]
fn every_way_of_waiting_returns_at_completion_or_at_its_timeout() {
    use crate::Wait;
    use std::time::Duration;
    let ways = [
        Wait::Spin,
        Wait::Yield,
        Wait::SpinThen {
            budget: Duration::ZERO,
        },
        Wait::Reactor,
        Wait::Driver,
    ];
    for wait in ways {
        check(30, move || {
            let (held, pending) = pending_event();
            assert_eq!(pending.synchronize_with(wait, Some(Duration::ZERO)), Ok(false));
            assert_eq!(held.synchronize_with(wait, Some(Duration::ZERO)), Ok(false));
            let releaser = {
                let held = held.clone();
                thread::spawn(move || release(&held))
            };
            assert_eq!(pending.synchronize_with(wait, None), Ok(true), "{wait:?}");
            assert_eq!(held.synchronize_with(wait, None), Ok(true), "{wait:?}");
            releaser.join().unwrap();
            assert_eq!(Event::new().synchronize_with(wait, None), Ok(true));
        });
    }
}
