//! What a record into a capture is, by the event's kind: a plain event's record keeps its own
//! CUDA event (kept and counted after the event drops), forks and joins a capture on the
//! capturing thread; an external event's is a node of the graph; an interprocess event's is
//! refused.

use cuda_event_testkit as common;

use common::{GLOBAL, THREAD_LOCAL, TestBuffer, gpu, hold};
use cuda_event::{Error, Event, Stream, StreamOptions, sys};

/// R6: an external event's record into a capture is a node of the graph, not a record of the
/// event now; a future waiting on its last real record resolves to that record's result (it was
/// ended with 907 before), and queries go on reading CUDA.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_external_record_into_a_capture_leaves_a_waiting_future_alone() {
    let _gpu = gpu();
    let (held, cap) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    let gate = hold(&held);
    let event = Event::builder().external(true).build().unwrap();
    event.record(&held).unwrap();
    let mut future = event.completion();
    assert!(common::poll_once(&mut future).is_pending());
    common::begin_capture(&cap, THREAD_LOCAL);
    event.record(&cap).unwrap();
    common::end_capture(&cap).expect("the capture ends valid");
    gate.open();
    held.synchronize().unwrap();
    assert_eq!(common::block_on(future), Ok(()));
    assert_eq!(event.query(), Ok(true));
}

/// An interprocess event is not recorded into a capture (its importers could not see the
/// record); the capture stays valid, and the event keeps its last record.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_interprocess_event_is_refused_a_capture() {
    let _gpu = gpu();
    let (plain, cap) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    let event = Event::builder().interprocess(true).build().unwrap();
    event.record(&plain).unwrap();
    common::begin_capture(&cap, GLOBAL);
    assert_eq!(event.record(&cap), Err(Error::CapturedInterprocessEvent));
    let _graph = common::end_capture(&cap).expect("the capture ends valid");
    plain.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
    event.ipc_handle().unwrap();
}

/// The second CUDA event a captured record uses is kept, not destroyed or pooled, when its event
/// drops (a capture may still hold it), and counted in `cuda_events_alive`.
///
/// In a child process of its own: the count is the process's, and the kept CUDA events of an
/// earlier test's captures are released when CUDA runs their graphs' destructors, on a thread of
/// its own at a time of its choosing, which may fall between this test's two counts.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_records_cuda_event_is_kept_and_counted() {
    if common::in_a_child(common::this_test!(), "alone").is_none() {
        return;
    }
    let cap = Stream::new(0).unwrap();
    drop(cap.record_event().unwrap());
    let before = cuda_event::pool::cuda_events_alive();
    let event = Event::new();
    event.record(&cap).unwrap(); // published: from the pool
    common::begin_capture(&cap, THREAD_LOCAL);
    event.record(&cap).unwrap(); // the captured CUDA event: made now
    let _graph = common::end_capture(&cap).expect("the capture ends valid");
    assert!(matches!(event.query(), Err(Error::Cuda(e)) if e.code() == 907));
    drop(event);
    // The published one went back to the pool (counted), the captured one is kept (counted).
    assert_eq!(cuda_event::pool::cuda_events_alive(), before + 1);
}

/// On the capturing thread, plain events fork a capture into another stream and join it back
/// (CUDA's multi-stream capture); a query of an event recorded into the capture is refused without
/// asking CUDA, which would break the capture.
#[test]
#[ignore = "needs a CUDA GPU"]
fn plain_events_fork_and_join_a_capture_on_the_capturing_thread() {
    let _gpu = gpu();
    let new_stream = || Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let (main, side) = (new_stream(), new_stream());
    let buffer = TestBuffer::new(0, 1 << 20);
    buffer.memset(&main, 0);
    main.synchronize().unwrap();
    let (fork, join) = (Event::new(), Event::new());
    let graph = common::capture_graph(&main, || {
        fork.record(&main).unwrap();
        fork.wait(&side).unwrap(); // side joins the capture
        buffer.memset(&side, 7);
        join.record(&side).unwrap();
        join.wait(&main).unwrap(); // and is joined back before the capture ends
        match fork.query() {
            Err(Error::Cuda(e)) => assert_eq!(e.code(), 907, "{e}"),
            other => panic!("a query of a captured record gave {other:?}"),
        }
    });
    assert!(
        graph.node_count() >= 1,
        "the side stream's memset is not in the graph"
    );
    assert_eq!(buffer.read(16), vec![0; 16], "the memset ran during the capture");
    graph.launch(&main);
    main.synchronize().unwrap();
    assert_eq!(buffer.read(1 << 20), vec![7; 1 << 20]);
    fork.record(&main).unwrap(); // a record outside a capture: read from CUDA again
    assert_eq!(fork.query(), Ok(true));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn external_event_records_as_a_graph_node_while_capturing() {
    let _gpu = gpu();
    let stream = Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let external = Event::builder().external(true).build().unwrap();
    external.record(&stream).unwrap(); // outside capture: a plain record
    stream.synchronize().unwrap();
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
    // SAFETY: captures the stream's work into a graph owned here and destroyed below.
    common::ok(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), mode) });
    assert_eq!(stream.is_capturing(), Ok(true));
    let recorded = external.record(&stream);
    // SAFETY: ends the capture begun above; writes the graph through a live local.
    common::ok(unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) });
    recorded.unwrap();
    assert_eq!(stream.is_capturing(), Ok(false));
    // SAFETY: the graph is live; exec is written through a live local; both destroyed once.
    unsafe {
        common::ok(sys::cudaGraphInstantiate(&mut exec, graph, 0));
        common::ok(sys::cudaGraphLaunch(exec, stream.as_raw()));
    }
    stream.synchronize().unwrap();
    assert_eq!(external.query(), Ok(true));
    // SAFETY: nothing uses them any more.
    unsafe {
        common::ok(sys::cudaGraphExecDestroy(exec));
        common::ok(sys::cudaGraphDestroy(graph));
    }
}
