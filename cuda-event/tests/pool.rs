//! Pooled CUDA events: a dropped event's CUDA event is reused by a new event of the same flags, a
//! thread's pool is bounded and can be switched off or emptied, and a CUDA event is reused only
//! when nothing else can still use it. Each test of the last kind failed before its fix: a first
//! record that failed, handles that escaped the event (`as_raw`, a captured graph's record or
//! wait node).

use cuda_event_testkit as common;

use common::{capture_graph, gpu, hold};
use cuda_event::{Error, Event, Stream, StreamOptions, sys};
use std::time::{Duration, Instant};

// ---- reuse, the bound, the switch

/// Records `n` new events on `stream` and drops them, on this thread; returns how many CUDA events
/// that created.
fn record_and_drop(stream: &Stream, n: usize, options: cuda_event::EventBuilder) -> u64 {
    let before = cuda_event::pool::cuda_events_created();
    let events: Vec<Event> = (0..n).map(|_| options.build().unwrap()).collect();
    events.iter().for_each(|e| e.record(stream).unwrap());
    stream.synchronize().unwrap();
    drop(events);
    cuda_event::pool::cuda_events_created() - before
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_pool_reuses_dropped_events_per_flags_and_is_bounded() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let timing = Event::builder().enable_timing(true);
    record_and_drop(&stream, 40, Event::builder());
    assert_eq!(
        record_and_drop(&stream, 10, Event::builder()),
        0,
        "10 events come from the pool"
    );
    let pooled = cuda_event::pool::POOL_PER_THREAD as u64;
    assert_eq!(
        record_and_drop(&stream, 40, Event::builder()),
        40 - pooled,
        "the pool keeps {pooled}"
    );
    assert_eq!(
        record_and_drop(&stream, 1, timing),
        1,
        "timing events have a pool of their own"
    );
    assert_eq!(record_and_drop(&stream, 1, timing), 0);
    // A reused event starts afresh: its first record replaces what its last owner captured.
    let gate = hold(&stream);
    let pending = Event::new();
    pending.record(&stream).unwrap();
    drop(pending);
    let free = Stream::new(0).unwrap();
    let reused = Event::new();
    let before = cuda_event::pool::cuda_events_created();
    reused.record(&free).unwrap();
    assert_eq!(
        cuda_event::pool::cuda_events_created(),
        before,
        "the pending event was reused"
    );
    free.synchronize().unwrap();
    assert_eq!(reused.query(), Ok(true));
    gate.open();
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn events_whose_handle_escaped_are_never_pooled_and_the_pool_can_be_off() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let shared = || Event::builder().interprocess(true);
    record_and_drop(&stream, 4, shared()); // fill the interprocess pool
    let exported = shared().build().unwrap();
    exported.record(&stream).unwrap();
    let raw = exported.as_raw();
    exported.ipc_handle().unwrap();
    drop(exported);
    // The exported CUDA event was destroyed, and each round's `as_raw` keeps its own out of the
    // pool too, so once the pool is empty the rounds create, and a created CUDA event may get a
    // destroyed one's address: only one that came from the pool (no creation for it) is the
    // exported one back.
    for round in 0..8 {
        let event = shared().build().unwrap();
        let created_before = cuda_event::pool::cuda_events_created();
        event.record(&stream).unwrap();
        let created = cuda_event::pool::cuda_events_created() - created_before;
        if event.as_raw() == raw {
            println!("round {round}: a CUDA event at the exported one's address, created: {created}");
        }
        assert!(
            created > 0 || event.as_raw() != raw,
            "an exported event came back from the pool"
        );
    }
    let given_up = stream.record_event().unwrap().into_raw().unwrap();
    assert!((0..8).all(|_| stream.record_event().unwrap().as_raw() != Some(given_up)));
    // SAFETY: into_raw gave the event up; destroyed once here.
    common::ok(unsafe { sys::cudaEventDestroy(given_up) });
    cuda_event::pool::set_event_pool(false);
    let without_pool = record_and_drop(&stream, 4, Event::builder());
    cuda_event::pool::set_event_pool(true);
    assert_eq!(without_pool, 4, "with the pool off every first record creates");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn empty_event_pool_destroys_what_this_thread_keeps() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    cuda_event::pool::empty_event_pool();
    let alive = cuda_event::pool::cuda_events_alive();
    record_and_drop(&stream, 5, Event::builder());
    record_and_drop(&stream, 3, Event::builder().blocking(true));
    assert_eq!(
        cuda_event::pool::cuda_events_alive(),
        alive + 8,
        "8 kept for reuse"
    );
    assert_eq!(cuda_event::pool::empty_event_pool(), 8);
    assert_eq!(cuda_event::pool::cuda_events_alive(), alive);
    assert_eq!(cuda_event::pool::empty_event_pool(), 0);
    assert_eq!(
        record_and_drop(&stream, 2, Event::builder()),
        2,
        "nothing left to reuse"
    );
    assert!(cuda_event::drop_errors::take_drop_errors().errors.is_empty());
}

// ---- reused only when nothing else can use it

/// the pool's CUDA event must not become the new `Event`'s before its first record has
/// succeeded, or the `Event` would report the old owner's pending work.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_failed_first_record_leaves_the_event_as_if_never_created() {
    if common::skip_under_sanitizer(
        "a first record that CUDA refuses (during another stream's capture), on purpose",
    ) {
        return;
    }
    let _gpu = gpu();
    let held = Stream::new(0).unwrap();
    let gate = hold(&held);
    let old_owner = Event::new();
    old_owner.record(&held).unwrap(); // pending behind the gate
    drop(old_owner); // its CUDA event goes to this thread's pool

    // While a blocking stream is captured in global mode, work on the legacy default stream is an
    // error (cudaErrorStreamCaptureImplicit): a first record that fails inside CUDA.
    let capturing = Stream::new(0).unwrap();
    let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;
    // SAFETY: a live stream; the capture ends below.
    common::ok(unsafe { sys::cudaStreamBeginCapture(capturing.as_raw(), mode) });
    let event = Event::new();
    let failed = event.record(&Stream::legacy(0).unwrap());
    let mut graph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above (invalidated by the failed record: an error, no graph).
    let _ = unsafe { sys::cudaStreamEndCapture(capturing.as_raw(), &mut graph) };
    if !graph.is_null() {
        // SAFETY: a graph the capture made, destroyed once.
        common::ok(unsafe { sys::cudaGraphDestroy(graph) });
    }

    assert!(matches!(failed, Err(Error::Cuda(_))), "{failed:?}");
    assert_eq!(event.device(), None, "the event must stay uncreated");
    assert_eq!(event.as_raw(), None);
    assert_eq!(
        event.query(),
        Ok(true),
        "the old owner's pending work leaked into the event"
    );
    assert_eq!(event.elapsed_time(&event), Err(Error::NotTimingEvent));
    // And it works once recording can succeed.
    let free = Stream::new(0).unwrap();
    event.record(&free).unwrap();
    free.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
    gate.open();
    held.synchronize().unwrap();
}

/// Records `n` new default events on `stream`, keeps them, and returns them.
fn new_recorded_events(stream: &Stream, n: usize) -> Vec<Event> {
    (0..n)
        .map(|_| {
            let event = Event::new();
            event.record(stream).unwrap();
            event
        })
        .collect()
}

/// A handle that escapes, route `as_raw`: whoever asked for the raw handle may still use it, so
/// the `Event`'s drop destroys it instead of pooling it. Counted, not compared by address: CUDA
/// may give a destroyed event's address to the next event it makes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_whose_raw_handle_was_handed_out_is_not_reused() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    cuda_event::pool::empty_event_pool();
    let event = Event::new();
    event.record(&stream).unwrap();
    assert!(event.as_raw().is_some());
    // The count is the process's: other threads (an earlier test's, ending) may destroy their
    // pooled events meanwhile, so it can only be asked to fall.
    let alive = cuda_event::pool::cuda_events_alive();
    drop(event);
    assert!(
        cuda_event::pool::cuda_events_alive() < alive,
        "a handed-out handle was kept"
    );
    // This thread's pool, which no other thread touches.
    assert_eq!(
        cuda_event::pool::empty_event_pool(),
        0,
        "a handed-out handle went back to the pool"
    );
}

/// A handle that escapes, route "external record in a captured graph": every launch of the graph records the
/// handle; after the `Event` drops, a launch must not drive any other event.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_launch_after_its_external_event_dropped_changes_no_other_event() {
    let _gpu = gpu();
    let stream = Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let external = Event::builder().external(true).build().unwrap();
    external.record(&stream).unwrap(); // created outside the capture
    stream.synchronize().unwrap();
    let graph = capture_graph(&stream, || external.record(&stream).unwrap());
    drop(external);

    // New events on a free stream: complete. If one of them got the graph's handle, a launch of
    // the graph on a held stream would make it pending.
    let free = Stream::new(0).unwrap();
    let news = new_recorded_events(&free, 8);
    free.synchronize().unwrap();
    let held = Stream::new(0).unwrap();
    let gate = hold(&held);
    graph.launch(&held);
    std::thread::sleep(Duration::from_millis(20));
    for (i, event) in news.iter().enumerate() {
        assert_eq!(
            event.query(),
            Ok(true),
            "new event {i} was re-recorded by the graph launch"
        );
    }
    gate.open();
    held.synchronize().unwrap();
}

/// A handle that escapes, route "external wait in a captured graph": every launch waits on the handle; after the
/// `Event` drops, a launch must not wait on an unrelated new event's work.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_launch_after_its_external_wait_event_dropped_waits_on_no_other_event() {
    let _gpu = gpu();
    let stream = Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let external = Event::builder().external(true).build().unwrap();
    external.record(&stream).unwrap();
    stream.synchronize().unwrap();
    let graph = capture_graph(&stream, || external.wait(&stream).unwrap());
    drop(external);

    // New events pending behind a held stream. If one of them got the graph's handle, the launch
    // would wait for the gate.
    let held = Stream::new(0).unwrap();
    let gate = hold(&held);
    let _news = new_recorded_events(&held, 8);
    graph.launch(&stream);
    let start = Instant::now();
    while stream.query() == Ok(false) && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(stream.query(), Ok(true), "the graph waited on a new event's work");
    gate.open();
    held.synchronize().unwrap();
}
