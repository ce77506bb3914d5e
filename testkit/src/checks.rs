//! What more than one test binary (or a benchmark) does alike, written once: a timing event, and
//! checks of waits and of their CPU cost.

use crate::clock::thread_cpu_time;
use crate::hold::{hold, log_on, sleep_on};
use cuda_event::{Event, Stream};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A new event built with `enable_timing`.
pub fn timed() -> Event {
    Event::builder().enable_timing(true).build().unwrap()
}

/// CPU time of this thread and wall time over a synchronize of an event recorded behind 200 ms of
/// stream work (a sleeping host function), with a blocking or a spinning event.
pub fn cpu_and_wall_of_a_200ms_synchronize(blocking: bool) -> (Duration, Duration) {
    let stream = Stream::new(0).unwrap();
    let event = Event::builder().blocking(blocking).build().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap(); // created and warm
    sleep_on(&stream, Duration::from_millis(200));
    event.record(&stream).unwrap();
    let (cpu, wall) = (thread_cpu_time(), Instant::now());
    event.synchronize().unwrap();
    (thread_cpu_time() - cpu, wall.elapsed())
}

/// Checks that `event.wait(b)` orders work on `b` after the held work of `a` that the event
/// recorded: host functions on each stream log 1 (on `a`) and 2 (on `b`) in that order.
pub fn check_wait_orders_b_after_a(a: &Stream, b: &Stream) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let held = hold(a);
    log_on(a, &log, 1);
    let event = a.record_event().unwrap();
    event.wait(b).unwrap();
    log_on(b, &log, 2);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(b.query(), Ok(false), "b must wait for a's held work");
    assert!(log.lock().is_empty());
    held.open();
    b.synchronize().unwrap();
    assert_eq!(*log.lock(), vec![1, 2]);
}
