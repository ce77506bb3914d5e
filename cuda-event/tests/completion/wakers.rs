//! What the crate does with a future's waker: a dropped future's is never woken nor kept, and one
//! that panics stops nothing.

use cuda_event_testkit as common;

use common::{block_on_timeout, gpu, gpu_sleep, poll_once, poll_with};
use cuda_event::Stream;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// A dropped future's waker is never woken (before the reactor: woken when a wake-up host function
/// ran, twice in one run) and is not kept by the crate once the work is done; a kept future's waker,
/// made the same way, is woken (so the counting waker works).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dropped_future_never_wakes_its_waker() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(100));
    let event = stream.record_event().unwrap();
    let (dropped_event, waker) = common::counting_waker();
    let mut future = event.completion();
    assert!(poll_with(&mut future, &waker).is_pending());
    drop((future, waker));
    let (dropped_stream, waker) = common::counting_waker();
    let mut future = stream.completion();
    assert!(poll_with(&mut future, &waker).is_pending());
    drop((future, waker));
    // Polled twice (the second poll replaces the waker), then dropped.
    let (replaced, first) = common::counting_waker();
    let (dropped_twice_polled, second) = common::counting_waker();
    let mut future = event.completion();
    assert!(poll_with(&mut future, &first).is_pending());
    assert!(poll_with(&mut future, &second).is_pending());
    drop((future, first, second));
    let (kept_event, waker) = common::counting_waker();
    let mut kept_event_future = event.completion();
    assert!(poll_with(&mut kept_event_future, &waker).is_pending());
    let (kept_stream, waker) = common::counting_waker();
    let mut kept_stream_future = stream.completion();
    assert!(poll_with(&mut kept_stream_future, &waker).is_pending());
    drop(waker);
    stream.synchronize().unwrap();
    std::thread::sleep(Duration::from_millis(200)); // the reactor's checks have run
    let counts = [
        ("an event future's", &dropped_event),
        ("a stream future's", &dropped_stream),
        ("a replaced", &replaced),
        ("a twice-polled event future's", &dropped_twice_polled),
    ];
    for (whose, counter) in counts {
        assert_eq!(
            counter.count(),
            0,
            "{whose} waker was woken after its future was dropped"
        );
        assert_eq!(
            Arc::strong_count(counter),
            1,
            "{whose} waker is still held by the crate 200 ms after the work completed"
        );
    }
    assert!(kept_event.count() >= 1, "a kept event future was never woken");
    assert!(kept_stream.count() >= 1, "a kept stream future was never woken");
    assert_eq!(poll_once(&mut kept_event_future), Poll::Ready(Ok(())));
    assert_eq!(poll_once(&mut kept_stream_future), Poll::Ready(Ok(())));
}

/// Review F13: a waker that panics does not kill the reactor. Its futures are woken first while
/// CUDA's host-function thread is blocked, then while it is free; after each, new futures still
/// resolve, also while the host-function thread is blocked again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_waker_does_not_stop_later_futures_from_resolving() {
    if common::skip_under_sanitizer(super::HOST_FN_THREAD_BLOCKED) {
        return;
    }
    let _gpu = gpu();
    let (a, b) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&b, Duration::from_micros(1));
    b.synchronize().unwrap();
    for host_thread_blocked in [true, false] {
        let release = host_thread_blocked.then(|| common::block_the_host_fn_thread(&a));
        gpu_sleep(&b, Duration::from_millis(30));
        let event = b.record_event().unwrap();
        let (event_panics, waker) = common::panicking_waker();
        let mut event_future = event.completion();
        assert!(poll_with(&mut event_future, &waker).is_pending());
        let (stream_panics, waker) = common::panicking_waker();
        let mut stream_future = b.completion();
        assert!(poll_with(&mut stream_future, &waker).is_pending());
        drop(waker);
        let start = Instant::now();
        while (event_panics.count() == 0 || stream_panics.count() == 0)
            && start.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        println!(
            "host-function thread blocked: {host_thread_blocked}; panicking wakers woken {} (event) and {} (stream) times",
            event_panics.count(),
            stream_panics.count()
        );
        assert!(
            event_panics.count() >= 1,
            "the event future's waker was never woken"
        );
        assert!(
            stream_panics.count() >= 1,
            "the stream future's waker was never woken"
        );
        drop((event_future, stream_future));
        drop(release);
        a.synchronize().unwrap();
        // New futures still resolve, CUDA's host-function thread blocked.
        let release = common::block_the_host_fn_thread(&a);
        gpu_sleep(&b, Duration::from_millis(20));
        let event = b.record_event().unwrap();
        let stream_future = b.completion();
        assert_eq!(
            block_on_timeout(event.completion(), Duration::from_secs(1)),
            Some(Ok(())),
            "a new event future after a panicking waker (host-function thread blocked: {host_thread_blocked})"
        );
        assert_eq!(
            block_on_timeout(stream_future, Duration::from_secs(1)),
            Some(Ok(())),
            "a new stream future after a panicking waker (host-function thread blocked: {host_thread_blocked})"
        );
        drop(release);
        a.synchronize().unwrap();
    }
    // And with nothing blocked.
    gpu_sleep(&b, Duration::from_millis(20));
    let event = b.record_event().unwrap();
    assert_eq!(
        block_on_timeout(b.completion(), Duration::from_secs(1)),
        Some(Ok(()))
    );
    assert_eq!(
        block_on_timeout(event.completion(), Duration::from_secs(1)),
        Some(Ok(()))
    );
}
