//! Futures when the context dies (a kernel fault) or the device is reset, each in a child process
//! of its own.

use cuda_event_testkit as common;

use common::{block_on, block_on_timeout, gpu_sleep, poll_once};
use cuda_event::{Completion, Error, Event, Stream, sys};
use std::time::{Duration, Instant};

/// After a kernel fault CUDA runs no host function; every pending future still resolves within a
/// second, to what CUDA's query of its event says: for work the fault killed, "complete" (from
/// microseconds after the fault until the fault shows, a fraction of a second later), then the
/// fault's error. Once the fault has shown, a new stream future resolves to the
/// error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_every_pending_future_resolves_within_a_second_and_a_later_one_to_the_error() {
    if common::skip_under_sanitizer(
        "kills its context with a kernel fault, on purpose: CUDA reports the sticky error",
    ) {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "sticky").is_none() {
        return;
    }
    let held = Stream::new(0).unwrap();
    gpu_sleep(&held, Duration::from_secs(5));
    let events: Vec<Event> = (0..100).map(|_| held.record_event().unwrap()).collect();
    let mut pending: Vec<Completion> = (0..100).map(|_| held.completion()).collect();
    pending.extend(events.iter().map(Event::completion));
    assert!(pending.iter_mut().all(|f| poll_once(f).is_pending()));
    // The blocking calls' answers, for comparison: a thread polls a held event with query.
    let spun = std::thread::spawn({
        let raw = events[1].as_raw().unwrap() as usize;
        move || loop {
            // SAFETY: the event lives until this thread is joined.
            let code = unsafe { cuda_event::sys::cudaEventQuery(raw as _) };
            if code != cuda_event::sys::cudaError::cudaErrorNotReady {
                return code;
            }
        }
    });
    let code = common::poison_the_context(&Stream::new(0).unwrap());
    println!(
        "a thread polling a held event with cudaEventQuery got {:?}",
        spun.join().unwrap()
    );
    let poisoned = Instant::now();
    println!(
        "after the fault: a held event's query {:?}, the held stream's {:?}",
        events[0].query(),
        held.query()
    );
    let results: Vec<_> = pending.into_iter().map(block_on).collect();
    let oks = |range: std::ops::Range<usize>| results[range].iter().filter(|r| r.is_ok()).count();
    println!(
        "after the fault: Ok from {} of 100 stream futures, {} of 100 event futures",
        oks(0..100),
        oks(100..200)
    );
    for (i, result) in results.iter().enumerate() {
        match result {
            Err(Error::Cuda(e)) if e.code() == code => {}
            // CUDA reports the killed work's events complete (see `Completion`'s docs): a future
            // answers what a query answers.
            Ok(()) => {}
            other => panic!("future {i} (stream: {}) after the fault gave {other:?}", i < 100),
        }
    }
    let took = poisoned.elapsed();
    println!("200 pending futures resolved {took:?} after the fault");
    assert!(took < Duration::from_secs(1));
    let shown = Instant::now();
    while held.query().is_ok() && shown.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    match block_on_timeout(held.completion(), Duration::from_secs(1)) {
        Some(Err(Error::Cuda(e))) if e.code() == code => {}
        other => panic!("a stream future made once the fault showed gave {other:?}"),
    }
}

/// Which calls report a kernel fault, and when: a held event's query, an idle stream's query and a
/// completed event's query, each polled from the moment a trapping kernel is launched (nothing
/// synchronizes on it). Printed for the notes; asserts nothing but that the fault shows somewhere.
#[test]
#[ignore = "needs a CUDA GPU"]
fn probe_which_calls_report_a_fault_and_when() {
    if common::skip_under_sanitizer(
        "a probe: kills its context on purpose to see which calls report the fault",
    ) {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "probe").is_none() {
        return;
    }
    let held = Stream::new(0).unwrap();
    let idle = Stream::new(0).unwrap();
    let old = held.record_event().unwrap();
    old.synchronize().unwrap();
    gpu_sleep(&held, Duration::from_secs(5));
    let pending = held.record_event().unwrap();
    let trap = Stream::new(0).unwrap();
    common::launch_trap(&trap);
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_millis(200) {
        let now = format!(
            "held event {:?}, idle stream {:?}, completed event {:?}",
            pending.query().map_err(|e| e.to_string()),
            idle.query().map_err(|e| e.to_string()),
            old.query().map_err(|e| e.to_string())
        );
        if now != last {
            println!("{:>9.1?}: {now}", start.elapsed());
            last = now;
        }
    }
    assert!(trap.synchronize().is_err());
}

/// Review F3, in a child (a reset is process-wide): after futures have waited on device 0 (so the
/// reactor holds state for it) and `cudaDeviceReset`, the futures of a new stream on device 0
/// resolve `Ok` once its work is done (before: `Err(DeviceWasReset)` at once, forever, from the
/// per-device canary made before the reset).
#[test]
#[ignore = "needs a CUDA GPU"]
fn futures_of_a_new_stream_resolve_ok_after_a_device_reset() {
    let test = common::this_test!();
    if common::in_a_child(test, "reset").is_none() {
        return;
    }
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(200));
    let event = stream.record_event().unwrap();
    let mut event_future = event.completion();
    assert!(poll_once(&mut event_future).is_pending());
    block_on(stream.completion()).unwrap();
    block_on(event_future).unwrap();
    drop((event, stream));
    cuda_event::set_device(0).unwrap();
    // SAFETY: resets device 0; nothing made before it is used after it.
    common::ok(unsafe { sys::cudaDeviceReset() });
    let stream = Stream::new(0).unwrap();
    // gpu_sleep's module died with the old context: a sleeping host function holds the stream.
    stream
        .launch_host_fn(|| std::thread::sleep(Duration::from_millis(300)))
        .unwrap();
    let held = Instant::now();
    let event = stream.record_event().unwrap();
    let mut event_future = event.completion();
    let mut stream_future = stream.completion();
    assert!(
        poll_once(&mut stream_future).is_pending(),
        "the stream future was ready at once"
    );
    assert!(
        poll_once(&mut event_future).is_pending(),
        "the event future was ready at once"
    );
    let by_stream = block_on_timeout(stream_future, Duration::from_secs(5));
    let took = held.elapsed();
    let by_event = block_on_timeout(event_future, Duration::from_secs(5));
    println!(
        "after the reset: the stream future gave {by_stream:?} after {took:?}, the event future {by_event:?}"
    );
    assert_eq!(by_stream, Some(Ok(())), "the stream future after the reset");
    assert_eq!(by_event, Some(Ok(())), "the event future after the reset");
    assert!(
        took >= Duration::from_millis(200),
        "the stream future resolved after {took:?}, before the 300 ms hold ended"
    );
    assert_eq!(stream.query(), Ok(true));
}
