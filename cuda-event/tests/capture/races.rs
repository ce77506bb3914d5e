//! Reads and records on other threads racing the records into a capture of the event they use,
//! round after round: nothing crashes, and every capture ends valid.

use cuda_event_testkit as common;

use common::{GLOBAL, SetOnDrop, THREAD_LOCAL, gpu};
use cuda_event::{Error, Event, Stream, StreamOptions, sys};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Other threads query, synchronize, wait on and first-poll an event while, round after round, it
/// is recorded on a stream and then into a capture (global and thread-local mode in turn). CUDA
/// crashes in the reading thread when such a read overlaps the record into the capture or the
/// capture's end (the C probes in the results: within a few rounds here). The event keeps reads
/// off the record and refuses them while its last record is the capture's, so nothing crashes,
/// no read breaks the capture, and the event works after.
#[test]
#[ignore = "needs a CUDA GPU"]
fn reads_on_other_threads_never_overlap_a_record_into_a_capture() {
    if common::skip_under_sanitizer(
        "races reads against records into captures: CUDA's errors there (invalidated captures, captured events' answers) are what it checks come back as errors",
    ) {
        return;
    }
    let _gpu = gpu();
    let new_stream = || Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let (source, captured, waiter) = (new_stream(), new_stream(), new_stream());
    let event = Event::new();
    event.record(&source).unwrap();
    source.synchronize().unwrap();
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let (mut valid, mut invalidated) = (0, 0);
    std::thread::scope(|s| {
        for reader in 0..4 {
            let (event, waiter, stop, reads) = (&event, &waiter, &stop, &reads);
            s.spawn(move || {
                relaxed_capture_mode();
                while !stop.load(Ordering::Relaxed) {
                    let _ = match reader {
                        0 => event.query().map(drop),
                        1 => event.synchronize(),
                        2 => event.wait(waiter),
                        _ => {
                            let mut first_poll = event.completion();
                            let _ = common::poll_once(&mut first_poll);
                            Ok(())
                        }
                    };
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let _stop = SetOnDrop(&stop); // also if a round below panics: the readers must end
        for round in 0..5000 {
            let mode = match round % 2 {
                0 => sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
                _ => sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
            };
            event.record(&source).unwrap(); // readers reach CUDA again
            // SAFETY: begins a capture on a live stream; ended below.
            common::ok(unsafe { sys::cudaStreamBeginCapture(captured.as_raw(), mode) });
            event.record(&captured).unwrap();
            for stream in [&captured, &waiter] {
                if stream.is_capturing() != Ok(true) {
                    continue; // the waiter joins a capture only when its wait saw the captured record
                }
                let mut graph = std::ptr::null_mut();
                // SAFETY: ends the capture; writes the graph (null if the capture failed) to a live local.
                let _ = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
                if graph.is_null() {
                    invalidated += 1;
                } else {
                    valid += 1;
                    // SAFETY: a graph no one else holds, never instantiated.
                    common::ok(unsafe { sys::cudaGraphDestroy(graph) });
                }
            }
            // SAFETY: clears the runtime's sticky last error of a failed capture (no device state).
            let _ = unsafe { sys::cudaGetLastError() };
        }
    });
    println!(
        "{valid} captures ended with a graph, {invalidated} failed; {} reads on other threads",
        reads.load(Ordering::Relaxed)
    );
    assert!(reads.load(Ordering::Relaxed) > 5000, "the readers hardly ran");
    assert_eq!(
        (valid, invalidated),
        (5000, 0),
        "reads on other threads broke captures"
    );
    event.record(&source).unwrap();
    event.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
    event.wait(&waiter).unwrap();
    waiter.synchronize().unwrap();
}

/// Sets the calling thread's capture mode to relaxed, as a thread that reads events while others
/// capture in global mode must (CUDA refuses its queries and invalidates the capture otherwise).
fn relaxed_capture_mode() {
    common::exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
}

/// The review's R1 and R4 on the GPU, without hooks: every round a new event's first records race
/// on two threads, one into a capture (thread A) and one on a stream (thread B, which then keeps
/// recording it on its stream while A ends the capture), and a third thread reads it throughout.
/// Before the two CUDA events, the plain first record could clear the captured record's mark
/// (reads then reached a CUDA event an open capture held), and the plain records overlapped the
/// captured record and the capture's end. Every capture must end valid; nothing may crash.
#[test]
#[ignore = "needs a CUDA GPU"]
fn first_records_and_records_on_a_stream_race_captured_records_of_one_event() {
    if common::skip_under_sanitizer(
        "races first records against records into captures: CUDA's errors there are what it checks come back as errors",
    ) {
        return;
    }
    const ROUNDS: usize = 3000;
    let _gpu = gpu();
    let new_stream = || Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
    let (captured, plain) = (new_stream(), new_stream());
    let current: Mutex<Option<Arc<Event>>> = Mutex::new(None);
    let (stop, reads, records) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let refused: Mutex<Vec<Error>> = Mutex::new(Vec::new());
    let mut failures = Vec::new();
    std::thread::scope(|s| {
        // Each round's event for thread B, handed over as the round starts: the send returns once
        // B has it, and B's loop ends when this sender drops (after the last round, or in a panic
        // of this thread, which then reaches the test instead of leaving B waiting).
        let (start_b, round_events) = std::sync::mpsc::sync_channel::<Arc<Event>>(0);
        let _stop = SetOnDrop(&stop); // the reader's end, also in a panic of this thread
        let (current_ref, stop_ref, reads_ref) = (&current, &stop, &reads);
        s.spawn(move || {
            relaxed_capture_mode();
            while !stop_ref.load(Ordering::Relaxed) {
                let event = current_ref.lock().clone();
                if let Some(event) = event {
                    let _ = event.query();
                    let _ = event.synchronize();
                    reads_ref.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let (plain_ref, records_ref, refused_ref) = (&plain, &records, &refused);
        s.spawn(move || {
            // Relaxed, as a thread working beside another's global capture should be (in global
            // mode CUDA may refuse its calls meanwhile).
            relaxed_capture_mode();
            let _ = plain_ref.record_event(); // this thread's pool holds a CUDA event
            for event in round_events {
                for _ in 0..4 {
                    // Refusals are counted, not failures: CUDA may refuse a record meanwhile.
                    match event.record(plain_ref) {
                        Ok(()) => drop(records_ref.fetch_add(1, Ordering::Relaxed)),
                        Err(e) => refused_ref.lock().push(e),
                    };
                }
            }
        });
        drop(captured.record_event().unwrap());
        for round in 0..ROUNDS {
            let event = Arc::new(Event::new());
            *current.lock() = Some(event.clone());
            let mode = match round % 2 {
                0 => GLOBAL,
                _ => THREAD_LOCAL,
            };
            start_b.send(event.clone()).expect("thread B takes every round");
            common::begin_capture(&captured, mode);
            let recorded = event.record(&captured);
            let ended = common::end_capture(&captured);
            if recorded.is_err() || ended.is_err() {
                let ended = ended.map(drop);
                failures.push(format!(
                    "round {round}: record {recorded:?}, end capture {ended:?}"
                ));
            }
        }
    });
    println!(
        "{ROUNDS} rounds; {} reads and {} records on other threads; {} captures went wrong",
        reads.load(Ordering::Relaxed),
        records.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "first: {:?}",
        &failures[..failures.len().min(5)]
    );
    assert!(
        reads.load(Ordering::Relaxed) > ROUNDS as u64,
        "the reader hardly ran"
    );
}
