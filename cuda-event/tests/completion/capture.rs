//! Futures beside stream captures: nothing they do goes into a graph or breaks a capture, and work
//! captured into a graph is an error to await, not a hang.

use cuda_event_testkit as common;

use common::{GLOBAL, block_on, gpu, gpu_sleep, poll_once};
use cuda_event::{Completion, Error, Stream};
use std::future::IntoFuture;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs a CUDA GPU"]
fn awaiting_work_captured_into_a_graph_is_an_err_not_a_hang() {
    if common::skip_under_sanitizer(
        "awaits an event last recorded into a capture: CUDA's error for that query is what it asks for",
    ) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap(); // created before the capture
    let mut refused = Vec::new();
    let _graph = common::capture_graph(&stream, || {
        refused.push(("launch_host_fn", stream.launch_host_fn(|| {}).err()));
        refused.push(("Stream::completion", block_on(stream.completion()).err()));
        event.record(&stream).unwrap(); // a node of the graph, not a record now
    });
    // After the capture, the event was last recorded into a graph: awaiting it (like querying it)
    // is CUDA's error. (During the capture, that query would end the capture.)
    refused.push(("Event::completion", block_on(event.completion()).err()));
    for (call, error) in refused {
        println!("{call} during capture: {error:?}");
        match (call, error) {
            // CUDA 13.0 on driver 580 answers CUDA_ERROR_INVALID_VALUE for such an event.
            ("Event::completion", Some(Error::Cuda(_))) => {}
            (_, Some(Error::StreamCapturing)) if call != "Event::completion" => {}
            (_, other) => panic!("{call} during capture gave {other:?}"),
        }
    }
}

/// A future made and awaited while the stream its event was recorded on is being captured queues
/// nothing on it: the graph stays empty (a wake-up queued on the captured stream would be its one
/// node).
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_future_made_during_a_capture_adds_nothing_to_the_graph() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(50));
    let event = stream.record_event().unwrap(); // before the capture
    let graph = common::capture_graph(&stream, || {
        // Another thread: on the capturing one, the future's query would end the capture.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut done = event.completion();
                let _ = poll_once(&mut done);
                block_on(done).unwrap();
            });
        });
    });
    assert_eq!(graph.node_count(), 0, "the capture got a node");
    stream.synchronize().unwrap();
}

/// Laziness: making an event's future (and dropping it unpolled) makes no CUDA call, so it cannot
/// disturb anything, here this thread's own global-mode capture of another stream, which a query
/// on the capturing thread would invalidate. Once polled, it waits for the work.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_future_makes_no_cuda_call_until_it_is_polled() {
    let _gpu = gpu();
    let (work, capture) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&work, Duration::from_millis(200));
    let event = work.record_event().unwrap();
    common::begin_capture(&capture, GLOBAL);
    let made: Completion<'_> = event.completion();
    drop(made);
    drop((&event).into_future());
    let graph = common::end_capture(&capture)
        .expect("making an event's future called CUDA (its query ended this thread's global-mode capture)");
    assert_eq!(graph.node_count(), 0);
    let mut future = event.completion();
    assert!(poll_once(&mut future).is_pending());
    block_on(future).unwrap();
    assert_eq!(event.query(), Ok(true));
}

/// Review F2: while futures wait (event and stream futures on work that ends during the capture,
/// others on work that outlasts it, and some first polled during it), another thread captures a
/// memset in global mode, the default of `torch.cuda.graph` and of most C++ code. The reactor's
/// and the futures' queries run in relaxed capture mode, so the capture ends with success and one
/// node, and every future resolves `Ok` (before: `cudaStreamEndCapture` returned 901 and the event
/// future `Err(900)`). Futures whose work ends during the capture resolve during it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_global_mode_capture_on_another_thread_succeeds_while_futures_wait_and_they_resolve_ok() {
    let _gpu = gpu();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (short, long, capture) = (
        Stream::new(0).unwrap(),
        Stream::new(0).unwrap(),
        Stream::new(0).unwrap(),
    );
    let buffer = common::TestBuffer::new(0, 1 << 20);
    gpu_sleep(&short, Duration::from_millis(100));
    gpu_sleep(&long, Duration::from_millis(800));
    let (short_event, long_event, late_event) = (
        short.record_event().unwrap(),
        long.record_event().unwrap(),
        long.record_event().unwrap(),
    );
    let (short_stream, long_stream, late_stream) = (short.completion(), long.completion(), long.completion());
    let start = Instant::now();
    let short_tasks = [
        runtime.spawn(async move { short_event.completion().await }),
        runtime.spawn(short_stream),
    ];
    let long_tasks = [
        runtime.spawn(async move { long_event.completion().await }),
        runtime.spawn(long_stream),
    ];
    std::thread::sleep(Duration::from_millis(20)); // polled, and waiting
    assert!(short_tasks.iter().chain(&long_tasks).all(|t| !t.is_finished()));
    common::begin_capture(&capture, GLOBAL);
    buffer.memset(&capture, 0);
    // First polled during the capture.
    let late_tasks = [
        runtime.spawn(async move { late_event.completion().await }),
        runtime.spawn(late_stream),
    ];
    // Open until 400 ms: the short work ends at 100 ms; the long work's futures are checked by the
    // reactor many times meanwhile.
    std::thread::sleep(Duration::from_millis(400).saturating_sub(start.elapsed()));
    let short_done = short_tasks.iter().map(|t| t.is_finished()).collect::<Vec<_>>();
    let long_pending = long_tasks.iter().chain(&late_tasks).all(|t| !t.is_finished());
    let ended = common::end_capture(&capture);
    println!(
        "capture ended after {:?}: {:?}, short work's futures done during it: {short_done:?}",
        start.elapsed(),
        ended.as_ref().map(|graph| graph.node_count())
    );
    let graph = ended.expect("the global-mode capture was broken by the futures' CUDA calls");
    assert_eq!(graph.node_count(), 1, "the graph is the memset");
    let results = |tasks: [tokio::task::JoinHandle<cuda_event::Result<()>>; 2]| {
        tasks.map(|t| runtime.block_on(t).unwrap())
    };
    assert_eq!(
        results(short_tasks),
        [Ok(()), Ok(())],
        "short work's futures (event, stream)"
    );
    assert_eq!(
        results(long_tasks),
        [Ok(()), Ok(())],
        "long work's futures (event, stream)"
    );
    assert_eq!(
        results(late_tasks),
        [Ok(()), Ok(())],
        "futures first polled during the capture (event, stream)"
    );
    assert_eq!(
        short_done,
        [true, true],
        "futures whose work ended at 100 ms were still pending at 400 ms, during the capture (event, stream)"
    );
    assert!(long_pending, "a future on 800 ms of work was ready within 400 ms");
}
