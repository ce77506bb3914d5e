//! Futures wake as their work ends: on a stream's and on an event's work, and without CUDA's
//! host-function thread (the reactor queries events; it queues no host function).

use cuda_event_testkit as common;

use common::{block_on, block_on_timeout, gpu, gpu_sleep, poll_once};
use cuda_event::{Completion, Event, Stream};
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stream_completion_waits_for_the_stream_and_wakes_the_task() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(100));
    let start = Instant::now();
    let mut done = stream.completion();
    assert!(poll_once(&mut done).is_pending());
    block_on(done).unwrap();
    let waited = start.elapsed();
    assert!(stream.query().unwrap(), "ready before the stream was");
    assert!(
        waited >= Duration::from_millis(90),
        "ready after {waited:?} of 100 ms"
    );
    // `.await` on &Stream is the same future.
    gpu_sleep(&stream, Duration::from_millis(20));
    block_on(async { (&stream).await }).unwrap();
    assert!(stream.query().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_completion_waits_for_its_work_and_a_never_recorded_event_is_ready() {
    let _gpu = gpu();
    assert_eq!(
        poll_once(&mut Event::new().completion()),
        std::task::Poll::Ready(Ok(()))
    );
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(100));
    let event = stream.record_event().unwrap();
    let mut done = event.completion();
    assert!(poll_once(&mut done).is_pending());
    block_on(done).unwrap();
    assert!(event.query().unwrap());
    gpu_sleep(&stream, Duration::from_millis(20));
    event.record(&stream).unwrap();
    block_on(async { (&event).await }).unwrap();
    assert!(event.query().unwrap());
}

/// Review F5: CUDA runs every host function of a context on one thread. With it blocked by a host
/// function of another stream that waits on a channel, futures on stream `b` (50 ms of work) still
/// resolve as their work ends (the reactor needs no host function); before, both stayed pending
/// for as long as the host function waited (3 s measured), although `b.synchronize()` returned at
/// once.
#[test]
#[ignore = "needs a CUDA GPU"]
fn futures_resolve_as_their_work_ends_while_a_host_function_of_another_stream_blocks_cudas_thread() {
    if common::skip_under_sanitizer(super::HOST_FN_THREAD_BLOCKED) {
        return;
    }
    let _gpu = gpu();
    let (a, b) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&b, Duration::from_micros(1)); // the kernel loaded
    b.synchronize().unwrap();
    let release = common::block_the_host_fn_thread(&a);
    gpu_sleep(&b, Duration::from_millis(50));
    let event = b.record_event().unwrap();
    let stream_future: Completion<'static> = b.completion();
    let start = Instant::now();
    let by_event = block_on_timeout(event.completion(), Duration::from_secs(1));
    let event_took = start.elapsed();
    let by_stream = block_on_timeout(
        stream_future,
        Duration::from_secs(1).saturating_sub(start.elapsed()),
    );
    let stream_took = start.elapsed();
    println!(
        "with CUDA's host-function thread blocked: the event future resolved after {event_took:?}, \
         the stream future after {stream_took:?} (work: 50 ms)"
    );
    assert_eq!(b.query(), Ok(true), "b's work ran");
    assert!(
        stream_took < Duration::from_millis(60),
        "{stream_took:?} for 50 ms of work"
    );
    assert_eq!(
        by_event,
        Some(Ok(())),
        "the event future, {event_took:?} after the work began"
    );
    assert_eq!(
        by_stream,
        Some(Ok(())),
        "the stream future, {stream_took:?} after the work began"
    );
    // The host function was still blocked all along: nothing was woken through it.
    assert!(!a.query().unwrap(), "a's host function returned early");
    release.send(()).unwrap();
    a.synchronize().unwrap();
}

/// Each way a future can wait (`Completion::with_wait`), on an event's and on a stream's future
/// behind 100 ms of GPU work: it resolves `Ok` once the work is done, with its event complete. A
/// spinning future pending after its first poll has woken its own task (so a runtime polls it
/// again); a reactor future has not.
#[test]
#[ignore = "needs a CUDA GPU"]
fn each_way_a_future_waits_resolves_after_its_work() {
    use cuda_event::Wait;
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    // Longer than a first poll takes, even under memcheck; shorter than the work.
    let budget = Duration::from_millis(20);
    for wait in common::every_wait(budget) {
        for on_stream in [false, true] {
            gpu_sleep(&stream, Duration::from_millis(100));
            let event = stream.record_event().unwrap();
            let mut done = match on_stream {
                true => stream.completion(),
                false => event.completion(),
            }
            .with_wait(wait);
            let (count, waker) = common::counting_waker();
            assert!(
                common::poll_with(&mut done, &waker).is_pending(),
                "{wait:?}: done before its work"
            );
            let woke_itself = count.count() > 0;
            let ended = block_on_timeout(done, Duration::from_secs(5));
            assert!(matches!(ended, Some(Ok(()))), "{wait:?}: {ended:?}");
            assert!(event.query().unwrap(), "{wait:?}: resolved before its work");
            let spins = matches!(wait, Wait::Spin | Wait::Yield | Wait::SpinThen { .. });
            assert_eq!(woke_itself, spins, "{wait:?}, on the stream {on_stream}");
        }
    }
}
