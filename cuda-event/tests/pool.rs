//! Pooled CUDA events: a dropped event's CUDA event is reused by a new event only when nothing else
//! can still use it. Each test failed before its fix: a first record that failed, handles that
//! escaped the event (`as_raw`, a captured graph's record or wait node).

use cuda_event_testkit as common;

use common::{capture_graph, gpu, hold};
use cuda_event::{Error, Event, Stream, StreamOptions, sys};
use std::time::{Duration, Instant};

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

/// A handle that escapes, route `as_raw`: whoever asked for the raw handle may still use it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_whose_raw_handle_was_handed_out_is_not_reused() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = Event::new();
    event.record(&stream).unwrap();
    let raw = event.as_raw().unwrap();
    drop(event);
    let news = new_recorded_events(&stream, 8);
    assert!(
        news.iter().all(|e| e.as_raw() != Some(raw)),
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
