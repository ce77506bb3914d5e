//! The crate's concurrency core against the driver model: each test runs in many schedules (see
//! [`check`]) and fails when the crate makes a call pattern that crashes CUDA or invalidates a
//! capture it did not make invalid itself. Run by `ci/test model`.

use super::{
    CaptureMode, begin_capture, beside_a_global_capture, check, check_once, end_capture, fault, fill,
    fork_here, hold, relaxed_here, release, reset,
};
use crate::sync::thread;
use crate::{Error, Event, Stream};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

const CAPTURED: u32 = 907;

fn is_captured(result: &crate::Result<impl std::fmt::Debug>) -> bool {
    matches!(result, Err(Error::Cuda(e)) if e.code() == CAPTURED)
}

/// Ok, or CUDA's answer for an event whose last record a capture holds.
fn ok_or_captured<T: std::fmt::Debug>(what: &str, result: crate::Result<T>) {
    assert!(result.is_ok() || is_captured(&result), "{what}: {result:?}");
}

/// Polls `future` until it is ready, letting other threads run between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::yield_now();
    }
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

fn stream() -> Arc<Stream> {
    Arc::new(Stream::new(0).expect("a model stream"))
}

/// One round of a capture on `cap`: begin, record `event` into it, end; the capture must end
/// valid (no read of ours invalidated it).
fn captured_round(cap: &Stream, event: &Event, mode: CaptureMode) {
    begin_capture(cap, mode);
    event.record(cap).expect("a record into a capture");
    end_capture(cap).expect("the capture ends valid");
}

/// R1: two threads make an event's first record at once, one into a capture, and a third reads it.
/// With the record gate, the plain record's release could clear the swallowed mark the captured
/// record set, and the read reached CUDA while the capture was open (invalidated) or as it ended
/// (crash).
#[test]
fn first_records_racing_one_into_a_capture_never_let_a_read_reach_the_capture() {
    check(400, || {
        let event = Arc::new(Event::new());
        let (cap, other) = (stream(), stream());
        let a = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                drop(cap.record_event().unwrap()); // this thread's pool has a CUDA event
                captured_round(&cap, &event, CaptureMode::ThreadLocal);
            })
        };
        let b = {
            let (event, other) = (event.clone(), other.clone());
            thread::spawn(move || {
                drop(other.record_event().unwrap());
                event.record(&other).unwrap();
            })
        };
        ok_or_captured("query", event.query());
        ok_or_captured("synchronize", event.synchronize());
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// R2: a read never waits for a record on a stream, even one that replaces a swallowed record
/// and blocks on a full queue while another thread's record on a free stream replaces it too (with
/// the record gate the second record could hold it with nothing swallowed, and readers spun behind
/// it: here the queue gets room only after the read returns, so a read held up never returns).
#[test]
fn a_read_never_waits_for_a_record_blocked_on_a_full_queue() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, full, free) = (stream(), stream(), stream());
        captured_round(&cap, &event, CaptureMode::Global);
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

/// R4: records of one event on a stream beside its records into another thread's captures and
/// those captures' ends (the review's "each worker records the done event" shape).
#[test]
fn records_on_a_stream_beside_captured_records_and_capture_ends() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, plain) = (stream(), stream());
        event.record(&plain).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                captured_round(&cap, &event, CaptureMode::Global);
                captured_round(&cap, &event, CaptureMode::ThreadLocal);
            })
        };
        for _ in 0..2 {
            event.record(&plain).unwrap();
        }
        capturer.join().unwrap();
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
                for mode in [CaptureMode::Global, CaptureMode::ThreadLocal] {
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
                        ok_or_captured("completion", block_on(event.completion()));
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

/// A CUDA event that a capture may still hold is never handed to another `Event` through the
/// pool: here a new event's first record on the same thread, read by another thread while the
/// capture ends.
#[test]
fn a_captured_cuda_event_is_never_pooled_under_an_open_capture() {
    check(300, || {
        let (cap, plain) = (stream(), stream());
        let (send, receive) = shuttle::sync::mpsc::channel::<Arc<Event>>();
        let reader = thread::spawn(move || {
            let event = receive.recv().unwrap();
            ok_or_captured("query", event.query());
            ok_or_captured("synchronize", event.synchronize());
        });
        begin_capture(&cap, CaptureMode::ThreadLocal);
        let first = Event::new();
        first.record(&cap).unwrap(); // a first record into the capture
        drop(first);
        let second = Arc::new(Event::new());
        second.record(&plain).unwrap(); // takes from this thread's pool
        send.send(second).unwrap();
        end_capture(&cap).expect("the capture ends valid");
        reader.join().unwrap();
    });
}

/// A future's first poll, and a future already waiting, beside a record of the event into a
/// capture: neither reaches the capture, and the waiting one resolves to its work's result.
#[test]
fn futures_beside_a_captured_record() {
    check(300, || {
        let event = Arc::new(Event::new());
        let (cap, held) = (stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || captured_round(&cap, &event, CaptureMode::ThreadLocal))
        };
        let waiting = {
            let event = event.clone();
            thread::spawn(move || {
                let mut future = event.completion();
                let _ = poll_once(&mut future); // the first poll, beside the capture
                block_on(future)
            })
        };
        capturer.join().unwrap();
        release(&held);
        ok_or_captured("the waiting future", waiting.join().unwrap());
    });
}

/// R6: an external event's record into a capture is a node of the graph; a future waiting on its
/// last real record still resolves to that record's result.
#[test]
fn an_external_record_into_a_capture_leaves_waiting_futures_alone() {
    check(200, || {
        let event = Arc::new(Event::builder().external(true).build().unwrap());
        let (cap, held) = (stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let mut future = event.completion();
        assert!(poll_once(&mut future).is_pending());
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || captured_round(&cap, &event, CaptureMode::Global))
        };
        capturer.join().unwrap();
        release(&held);
        assert_eq!(block_on(future), Ok(()));
        assert_eq!(event.query(), Ok(true));
    });
}

/// A future dropped while the reactor is about to query its event, and the event's CUDA event
/// destroyed right after: the reactor never queries a destroyed event.
#[test]
fn a_dropped_future_is_never_queried_after_its_event_is_destroyed() {
    check(300, || {
        let held = stream();
        hold(&held);
        let event = Event::new();
        event.record(&held).unwrap();
        let mut future = event.completion();
        assert!(poll_once(&mut future).is_pending());
        thread::yield_now();
        drop(future);
        drop(event);
        crate::pool::empty_event_pool(); // destroys the CUDA event now
        thread::yield_now();
        release(&held);
    });
}

/// After another thread's device reset, old events and streams answer `DeviceWasReset` and their
/// drops destroy nothing; nothing reaches the driver with a destroyed handle.
#[test]
fn after_a_reset_nothing_uses_a_destroyed_handle() {
    check(200, || {
        let (event, plain) = (Arc::new(Event::new()), stream());
        event.record(&plain).unwrap();
        thread::spawn(|| reset(0)).join().unwrap();
        let user = {
            let (event, plain) = (event.clone(), plain.clone());
            thread::spawn(move || {
                assert!(matches!(event.query(), Err(Error::DeviceWasReset { .. })));
                assert!(matches!(event.record(&plain), Err(Error::DeviceWasReset { .. })));
            })
        };
        assert!(matches!(event.synchronize(), Err(Error::DeviceWasReset { .. })));
        user.join().unwrap();
        drop(event);
        drop(plain);
        let fresh = Stream::new(0).unwrap();
        Event::new().record(&fresh).unwrap();
    });
}

/// A kernel fault's sticky error: reads answer it, and a waiting future resolves to it.
#[test]
fn a_sticky_error_ends_waiting_futures_with_it() {
    check(200, || {
        let (event, held) = (Arc::new(Event::new()), stream());
        hold(&held);
        event.record(&held).unwrap();
        let (pending, is_pending) = shuttle::sync::mpsc::channel();
        let waiting = {
            let event = event.clone();
            thread::spawn(move || {
                let mut future = event.completion();
                assert!(poll_once(&mut future).is_pending());
                pending.send(()).unwrap();
                block_on(future)
            })
        };
        is_pending.recv().unwrap();
        fault(0);
        let illegal = |r: &crate::Result<()>| matches!(r, Err(Error::Cuda(e)) if e.code() == 700);
        let answer = waiting.join().unwrap();
        assert!(illegal(&answer), "{answer:?}");
        assert!(matches!(event.query(), Err(Error::Cuda(e)) if e.code() == 700));
    });
}

/// A forked child makes no driver call: its calls answer `ForkedChild`, its futures resolve to
/// it, and its drops release nothing (the model fails any driver call the child makes).
#[test]
fn a_forked_child_makes_no_driver_call() {
    check(100, || {
        let (event, held) = (Event::new(), Stream::new(0).unwrap());
        hold(&held);
        event.record(&held).unwrap();
        let mut waiting = event.completion();
        assert!(poll_once(&mut waiting).is_pending());
        let fresh = event.completion();
        fork_here();
        assert_eq!(event.query(), Err(Error::ForkedChild));
        assert_eq!(event.record(&held), Err(Error::ForkedChild));
        assert_eq!(block_on(waiting), Err(Error::ForkedChild));
        assert_eq!(block_on(fresh), Err(Error::ForkedChild));
        release(&held); // the parent's reactor then finds its wait complete and goes idle
        drop(event);
        drop(held);
    });
}

/// The crate's own queries (a future's first poll, the reactor's) run in relaxed capture mode, so
/// that another thread's global capture is never invalidated by them.
#[test]
fn the_crates_own_queries_never_invalidate_a_global_capture() {
    check(200, || {
        let (event, held, cap) = (Arc::new(Event::new()), stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let capturer = {
            let cap = cap.clone();
            thread::spawn(move || {
                let inside = Event::new();
                captured_round(&cap, &inside, CaptureMode::Global);
            })
        };
        let waiting = {
            let event = event.clone();
            thread::spawn(move || block_on(event.completion()))
        };
        capturer.join().unwrap();
        release(&held);
        assert_eq!(waiting.join().unwrap(), Ok(()));
    });
}

/// An interprocess event is never recorded into a capture (its importers could not see it), and
/// exporting it beside another thread's capture is safe.
#[test]
fn an_interprocess_event_is_refused_a_capture_and_exports_beside_one() {
    check(200, || {
        let event = Arc::new(Event::builder().interprocess(true).build().unwrap());
        let (cap, plain) = (stream(), stream());
        event.record(&plain).unwrap();
        let capturer = {
            let (event, cap) = (event.clone(), cap.clone());
            thread::spawn(move || {
                begin_capture(&cap, CaptureMode::Global);
                assert_eq!(event.record(&cap), Err(Error::CapturedInterprocessEvent));
                end_capture(&cap).expect("the capture ends valid");
            })
        };
        event.ipc_handle().unwrap();
        capturer.join().unwrap();
        assert_eq!(event.query(), Ok(true));
    });
}

/// The driver calls each hot call makes, counted by the model (no GPU needed): a record is the
/// reset check, the capture check and the record, each read the reset check and the call.
#[test]
fn driver_calls_per_hot_call() {
    check_once(|| {
        let counted = |f: &dyn Fn()| {
            super::reset_calls();
            f();
            let mut calls: Vec<_> = super::calls().into_iter().collect();
            calls.sort();
            calls
        };
        let (plain, other) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
        let timing = || Event::builder().enable_timing(true).build().unwrap();
        let (event, start) = (timing(), timing());
        start.record(&plain).unwrap();
        event.record(&plain).unwrap();
        let record = [
            ("cuCtxGetId", 1),
            ("cuEventRecord", 1),
            ("cuStreamIsCapturing", 1),
        ];
        assert_eq!(counted(&|| event.record(&plain).unwrap()), record);
        assert_eq!(
            counted(&|| {
                event.query().unwrap();
            }),
            [("cuCtxGetId", 1), ("cuEventQuery", 1)]
        );
        assert_eq!(
            counted(&|| event.synchronize().unwrap()),
            [("cuCtxGetId", 1), ("cuEventSynchronize", 1)]
        );
        assert_eq!(
            counted(&|| event.wait(&other).unwrap()),
            [("cuCtxGetId", 1), ("cuStreamWaitEvent", 1)]
        );
        assert_eq!(
            counted(&|| {
                start.elapsed_time(&event).unwrap();
            }),
            [("cuCtxGetId", 1), ("cuEventElapsedTime", 1)]
        );
        // A new event's first record with a pooled CUDA event: as a record.
        drop(plain.record_event().unwrap());
        assert_eq!(counted(&|| drop(plain.record_event().unwrap())), record);
        // A stream's future: the record, and one more capture check (a capture begun around it).
        let completion = [
            ("cuCtxGetId", 1),
            ("cuEventRecord", 1),
            ("cuStreamIsCapturing", 2),
        ];
        assert_eq!(counted(&|| drop(plain.completion())), completion);
        // SAFETY: no stream is captured in this test.
        unsafe { crate::capture::set_capture_checks(false) };
        let unchecked = counted(&|| event.record(&plain).unwrap());
        // SAFETY: turned back on.
        unsafe { crate::capture::set_capture_checks(true) };
        assert_eq!(unchecked, [("cuCtxGetId", 1), ("cuEventRecord", 1)]);
    });
}

/// The model itself: it fails a read beside a captured record of the same CUDA event (what the
/// crate must never do), so that the tests above would see it.
#[test]
#[should_panic(expected = "driver model: a read of an event beside")]
fn the_model_fails_a_read_beside_a_captured_record() {
    check(200, || {
        let (event, cap) = (Arc::new(Event::new()), stream());
        event.record(&cap).unwrap();
        let raw = event.as_raw().unwrap() as usize;
        let capturer = {
            let cap = cap.clone();
            thread::spawn(move || {
                let raw = raw as crate::sys::cudaEvent_t;
                let d = crate::driver::driver("model").unwrap();
                begin_capture(&cap, CaptureMode::Relaxed);
                // SAFETY: a live event and stream: a raw record into the capture, as C code might.
                let _ = d.event_record.call(|f| unsafe { f(raw, cap.as_raw()) });
                let _ = end_capture(&cap);
            })
        };
        let d = crate::driver::driver("model").unwrap();
        let raw = raw as crate::sys::cudaEvent_t;
        // SAFETY: a live event, queried raw, beside the record.
        let _ = d.event_query.code(|f| unsafe { f(raw) });
        capturer.join().unwrap();
    });
}

/// Two threads record one event into their own captures and fork them through it (the review's
/// finding 1): each thread's captured records use a CUDA event of its own, so no two captured
/// records, and no fork beside another thread's captured record, touch one CUDA event. A fork
/// whose thread's record is no longer the event's last is refused (907), never joined to the other
/// thread's capture.
#[test]
fn two_threads_capture_one_event_and_fork_through_it() {
    check(300, || {
        let event = Arc::new(Event::new());
        let plain = stream();
        event.record(&plain).unwrap();
        let workers: Vec<_> = [CaptureMode::ThreadLocal, CaptureMode::Global]
            .into_iter()
            .map(|mode| {
                let event = event.clone();
                let (cap, side) = (stream(), stream());
                thread::spawn(move || {
                    relaxed_here();
                    begin_capture(&cap, mode);
                    event.record(&cap).unwrap();
                    let forked = event.wait(&side);
                    if forked.is_ok() {
                        let joined = Event::new();
                        joined.record(&side).unwrap();
                        joined.wait(&cap).unwrap();
                    }
                    ok_or_captured("fork", forked);
                    end_capture(&cap).expect("the capture ends valid");
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    });
}

/// `Stream::completion` on a stream being captured records nothing into the capture (the review's
/// finding 3) and keeps no CUDA event.
#[test]
fn a_stream_completion_on_a_capturing_stream_records_nothing() {
    check_once(|| {
        let cap = stream();
        drop(cap.record_event().unwrap());
        let alive = crate::pool::cuda_events_alive();
        begin_capture(&cap, CaptureMode::ThreadLocal);
        assert_eq!(block_on(cap.completion()), Err(Error::StreamCapturing));
        let held = super::world::with(|w| w.captures.values().map(|c| c.holds.len()).sum::<usize>());
        assert_eq!(held, 0, "the completion's event went into the capture");
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(crate::pool::cuda_events_alive(), alive);
    });
}

/// `wait_stream` inside captures, over and over (each call a new event recorded into the capture
/// and dropped on the capturing thread): the captured CUDA events are reused by that thread, and
/// the published ones pooled, so after the first round the number alive stays the same (the
/// review's finding 2).
#[test]
fn forks_and_joins_in_repeated_captures_keep_a_bounded_number_of_cuda_events() {
    check_once(|| {
        let (cap, side) = (stream(), stream());
        let mut alive = Vec::new();
        for _ in 0..4 {
            begin_capture(&cap, CaptureMode::ThreadLocal);
            for _ in 0..10 {
                side.wait_stream(&cap).unwrap(); // fork
                cap.wait_stream(&side).unwrap(); // join
            }
            end_capture(&cap).expect("the capture ends valid");
            alive.push(crate::pool::cuda_events_alive());
        }
        // The first round makes the events (a first record into a capture takes a new one); the
        // rounds after reuse them.
        assert!(
            alive[1..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each capture: {alive:?}"
        );
    });
}

/// An external event's first record into a capture is a graph node only: the event answers as
/// never recorded on a stream, not with a pooled CUDA event's old owner's record (the review's
/// finding 4).
#[test]
fn an_external_events_first_record_into_a_capture_is_not_a_pooled_events_old_record() {
    check_once(|| {
        let (held, cap) = (stream(), stream());
        hold(&held);
        drop(held.record_event().unwrap()); // pooled, its record pending behind the hold
        let external = Event::builder().external(true).build().unwrap();
        begin_capture(&cap, CaptureMode::ThreadLocal);
        external.record(&cap).unwrap();
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(external.query(), Ok(true));
        release(&held);
    });
}

/// Refused first records (a stream's future on a capturing stream, an interprocess event's record
/// into a capture) take no CUDA event, so refusing them again and again keeps none (the second
/// review's F2).
#[test]
fn refused_records_into_a_capture_keep_no_cuda_event() {
    check_once(|| {
        let cap = stream();
        drop(cap.record_event().unwrap());
        begin_capture(&cap, CaptureMode::ThreadLocal);
        let before = crate::pool::cuda_events_alive();
        for _ in 0..5 {
            assert_eq!(block_on(cap.completion()), Err(Error::StreamCapturing));
            let interprocess = Event::builder().interprocess(true).build().unwrap();
            assert_eq!(interprocess.record(&cap), Err(Error::CapturedInterprocessEvent));
        }
        let after = crate::pool::cuda_events_alive();
        end_capture(&cap).expect("the capture ends valid");
        assert_eq!(after, before, "CUDA events alive: {before} before, {after} after");
    });
}

/// Captures with many events recorded into them at once, round after round, and the thread's
/// pool emptied between rounds: the captured CUDA events are reused, so the number alive stays
/// the same (the second review's F3 and F4).
#[test]
fn captures_of_many_events_and_emptied_pools_keep_a_bounded_number_of_cuda_events() {
    check_once(|| {
        let (cap, side) = (stream(), stream());
        let mut alive = Vec::new();
        for _ in 0..4 {
            begin_capture(&cap, CaptureMode::ThreadLocal);
            let events: Vec<Event> = (0..40).map(|_| Event::new()).collect();
            for event in &events {
                event.record(&cap).unwrap();
            }
            side.wait_stream(&cap).unwrap();
            cap.wait_stream(&side).unwrap();
            end_capture(&cap).expect("the capture ends valid");
            drop(events);
            crate::pool::empty_event_pool();
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[1..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each round: {alive:?}"
        );
    });
}

/// A fork into a stream of another device (CUDA allows a wait across devices) waits on the
/// recording thread's captured event (the second review's F5).
#[test]
fn a_fork_into_a_stream_of_another_device() {
    check_once(|| {
        let cap = stream();
        let side = Stream::new(1).expect("a model stream on device 1");
        let event = Event::new();
        begin_capture(&cap, CaptureMode::ThreadLocal);
        event.record(&cap).unwrap();
        let forked = event.wait(&side);
        let _ = end_capture(&cap);
        assert_eq!(forked, Ok(()), "a cross-device fork");
    });
}

/// The caller's span inside the crate's relaxed mode (the work `measure` times) runs in the
/// caller's mode, and relaxed mode is back after it, also when it panics: the crate's cleanup
/// while unwinding (a measurement's synchronize) must not run in global mode beside another
/// thread's global capture.
#[test]
fn relaxed_mode_is_back_after_the_callers_span_even_when_it_panics() {
    use crate::capture_mode::RelaxedCapture;
    use cuda_event_sys::CUstreamCaptureMode as Mode;
    check_once(|| {
        let d = crate::driver::driver("a model test").unwrap();
        let mode_now = || {
            let mut mode = Mode::CU_STREAM_CAPTURE_MODE_RELAXED;
            let exchange = |mode: &mut Mode| {
                // SAFETY: exchanges this thread's mode through a live local.
                d.thread_exchange_capture_mode.code(|f| unsafe { f(mode) })
            };
            assert_eq!(exchange(&mut mode), crate::driver::CUresult::CUDA_SUCCESS);
            let now = mode;
            assert_eq!(exchange(&mut mode), crate::driver::CUresult::CUDA_SUCCESS);
            now
        };
        assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_GLOBAL);
        {
            let relaxed = RelaxedCapture::enter(d);
            assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_RELAXED);
            relaxed.in_callers_mode(|| assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_GLOBAL));
            assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_RELAXED);
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                relaxed.in_callers_mode(|| panic!("the caller's work panics"))
            }));
            assert!(unwound.is_err());
            assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_RELAXED);
        }
        assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_GLOBAL);
    });
}

/// A mode the caller's work sets stays the caller's: the next span starts in it, and it is the
/// thread's mode after the crate's relaxed stretch, as if that stretch were not there.
#[test]
fn a_mode_the_callers_span_sets_is_the_callers_after_it() {
    use crate::capture_mode::RelaxedCapture;
    use cuda_event_sys::CUstreamCaptureMode as Mode;
    check_once(|| {
        let d = crate::driver::driver("a model test").unwrap();
        let exchange = |mut mode: Mode| {
            // SAFETY: exchanges this thread's mode through a live local.
            let code = d.thread_exchange_capture_mode.code(|f| unsafe { f(&mut mode) });
            assert_eq!(code, crate::driver::CUresult::CUDA_SUCCESS);
            mode
        };
        let mode_now = || {
            let now = exchange(Mode::CU_STREAM_CAPTURE_MODE_RELAXED);
            exchange(now);
            now
        };
        {
            let relaxed = RelaxedCapture::enter(d);
            relaxed.in_callers_mode(|| exchange(Mode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
            assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_RELAXED);
            let seen = relaxed.in_callers_mode(mode_now);
            assert_eq!(seen, Mode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        }
        assert_eq!(mode_now(), Mode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        exchange(Mode::CU_STREAM_CAPTURE_MODE_GLOBAL);
    });
}

/// Reads the crate makes on the caller's behalf beyond the one CUDA call asked for (a timer's
/// non-blocking read, a bounded synchronize's polls, the completeness check of an elapsed time
/// across devices) run in relaxed mode: beside another thread's global capture they answer, and
/// the capture ends valid.
#[test]
fn reads_on_the_callers_behalf_leave_another_threads_global_capture_valid() {
    use crate::timing::Timer;
    use std::time::Duration;
    check_once(|| {
        let (held, cap) = (stream(), stream());
        hold(&held);
        let timing = Timer::start(&held).unwrap().stop(&held).unwrap();
        let pending = Event::new();
        pending.record(&held).unwrap();
        let timed = || Event::builder().enable_timing(true).build().unwrap();
        let (start, end) = (timed(), timed());
        start.record(&held).unwrap();
        end.record(&Stream::new(1).expect("a model stream on device 1"))
            .unwrap();
        let (answers, capture) = beside_a_global_capture(&cap, || {
            (
                timing.elapsed(),
                pending.synchronize_timeout(Duration::ZERO),
                start.elapsed_time(&end),
            )
        });
        assert_eq!(capture, Ok(()), "a read broke the capture");
        assert_eq!(answers, (Ok(None), Ok(false), Err(Error::NotComplete)));
        release(&held);
    });
}

/// Review 3's S1: a captured CUDA event that went into a capture another thread ends goes into no
/// other capture until that end has returned, whichever `Event` records next (here `wait_stream`'s
/// temporary event, which a pool keyed by thread handed the same CUDA event). With that pool it
/// failed: a record of an event into a capture beside the end of a capture that holds its record.
#[test]
fn a_captured_cuda_event_goes_into_no_other_capture_beside_another_threads_end_of_its_own() {
    check(300, || {
        relaxed_here();
        let (c1, c2, side) = (stream(), stream(), stream());
        begin_capture(&c1, CaptureMode::Relaxed); // another thread will end it
        let e1 = Event::new();
        e1.record(&c1).unwrap(); // C1 holds its captured CUDA event's record
        drop(e1);
        let ender = {
            let c1 = c1.clone();
            thread::spawn(move || {
                relaxed_here();
                let _ = end_capture(&c1);
            })
        };
        begin_capture(&c2, CaptureMode::ThreadLocal);
        side.wait_stream(&c2).unwrap(); // a fork: its temporary event's captured record
        c2.wait_stream(&side).unwrap(); // join
        let again = Event::new();
        again.record(&c2).unwrap();
        end_capture(&c2).expect("the capture ends valid");
        ender.join().unwrap();
    });
}

/// Review 3's S2: captured CUDA events of events dropped on other threads, and of threads that
/// exit, are used again once their capture is over: the number alive stays bounded.
#[test]
fn captured_events_dropped_on_other_threads_or_by_exiting_threads_keep_a_bounded_number() {
    check_once(|| {
        let cap = stream();
        let mut alive = Vec::new();
        for round in 0..6 {
            if round % 2 == 0 {
                let event = Event::new();
                begin_capture(&cap, CaptureMode::ThreadLocal);
                event.record(&cap).unwrap();
                end_capture(&cap).unwrap();
                thread::spawn(move || drop(event)).join().unwrap(); // dropped on another thread
            } else {
                let cap = cap.clone();
                thread::spawn(move || {
                    let event = Event::new();
                    begin_capture(&cap, CaptureMode::ThreadLocal);
                    event.record(&cap).unwrap();
                    end_capture(&cap).unwrap();
                    drop(event); // then the thread exits
                })
                .join()
                .unwrap();
            }
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[2..].windows(2).all(|w| w[1] == w[0]),
            "CUDA events alive after each round: {alive:?}"
        );
    });
}

/// Review 3's S11: a first poll racing a record on another stream never files its wait in the new
/// stream's lane with the earlier record's stamp (which would put it at the front of that lane,
/// holding up the lane's other futures until its work completes).
#[test]
fn a_read_of_an_events_order_never_pairs_a_new_stream_with_an_earlier_records_stamp() {
    use crate::sync::atomic::{AtomicBool, Ordering};
    check(300, || {
        let (s1, s2) = (stream(), stream());
        let event = Arc::new(Event::new());
        event.record(&s1).unwrap();
        let first = event
            .watchers()
            .order()
            .expect("recorded on a stream of the crate's");
        let done = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (event, s2, done) = (event.clone(), s2.clone(), done.clone());
            thread::spawn(move || {
                event.record(&s2).unwrap();
                done.store(true, Ordering::Relaxed);
            })
        };
        // Reads (a first poll's) all through the second record.
        while !done.load(Ordering::Relaxed) {
            let seen = event.watchers().order().unwrap();
            assert!(
                seen.lane == first.lane || seen.stamp > first.stamp,
                "the second record's stream paired with the first record's stamp"
            );
            thread::yield_now();
        }
        recorder.join().unwrap();
    });
}

/// Records into a capture the crate is making (`Stream::capture`) know it without asking CUDA: no
/// `cuStreamIsCapturing` nor `cuStreamGetCaptureInfo` (the stream's capture gate lists it); and
/// the capture ends valid with the record's CUDA event kept for it until then.
#[test]
fn records_into_a_capture_the_crate_makes_ask_cuda_nothing_about_the_capture() {
    check_once(|| {
        let cap = Stream::new(0).unwrap();
        let event = Event::new();
        event.record(&cap).unwrap(); // published, outside the capture
        let graph = cap
            .capture(crate::capture::CaptureMode::ThreadLocal, |s| {
                event.record(s)?; // the captured CUDA event: made now
                super::reset_calls();
                event.record(s)?; // the same one, the same capture
                let calls: Vec<_> = super::calls().into_keys().collect();
                assert!(
                    !calls.contains(&"cuStreamIsCapturing") && !calls.contains(&"cuStreamGetCaptureInfo"),
                    "a record into the crate's capture asked CUDA: {calls:?}"
                );
                Ok(())
            })
            .expect("the capture ends valid");
        drop(graph);
        assert!(matches!(event.query(), Err(Error::Cuda(e)) if e.code() == 907));
    });
}

/// One `Event` recorded into captures by many threads in turn keeps a CUDA event per capture that
/// may still hold one, not one per thread that ever recorded it (the S2 fix's review).
#[test]
fn one_event_recorded_into_captures_by_many_threads_keeps_a_bounded_number() {
    check_once(|| {
        let cap = stream();
        let event = Arc::new(Event::new());
        let mut alive = Vec::new();
        for _ in 0..6 {
            let (cap, event) = (cap.clone(), event.clone());
            thread::spawn(move || {
                begin_capture(&cap, CaptureMode::ThreadLocal);
                event.record(&cap).unwrap();
                end_capture(&cap).unwrap();
            })
            .join()
            .unwrap();
            alive.push(crate::pool::cuda_events_alive());
        }
        assert!(
            alive[5] <= alive[1],
            "CUDA events alive after each thread's capture: {alive:?}"
        );
    });
}

/// Another thread's records and reads on a stream that the crate's wait forks into a capture the
/// crate is making: no record straddles the fork (a record on the published CUDA event swallowed
/// unseen, whose read beside the end crashes), and none overlaps the capture's end (neither the
/// record into it nor a read of its capture info, capture_end_signals i).
#[test]
fn the_crates_end_of_a_capture_never_overlaps_a_record_into_it_on_a_forked_stream() {
    use crate::sync::atomic::{AtomicBool, Ordering};
    check(300, || {
        let (main, side) = (stream(), stream());
        let event = Arc::new(Event::new());
        let forked = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (side, event, forked) = (side.clone(), event.clone(), forked.clone());
            thread::spawn(move || {
                // Before, during and after the fork: each record goes on the stream or into the
                // capture knowingly, and each read is of a CUDA event no capture holds.
                for _ in 0..3 {
                    let _ = event.record(&side);
                    let _ = event.query();
                    if forked.load(Ordering::Relaxed) {
                        thread::yield_now();
                    }
                }
            })
        };
        let _ = main.capture(crate::capture::CaptureMode::Relaxed, |s| {
            side.wait_stream(s)?; // fork: side joins the capture
            forked.store(true, Ordering::Relaxed);
            s.wait_stream(&side) // join
        });
        forked.store(true, Ordering::Relaxed);
        recorder.join().unwrap();
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
            let held = stream();
            hold(&held);
            let pending = Event::new();
            pending.record(&held).unwrap();
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
