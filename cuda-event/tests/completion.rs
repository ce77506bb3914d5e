//! Awaiting the GPU: events and streams as futures, and the safe host callback. Streams are held by
//! a kernel that waits on the GPU's timer (`gpu_sleep`), not by host functions (CUDA runs all host
//! functions of a context on one thread, which would hold back the tests' own host functions).
//! Tests that block that thread on purpose say so.
//!
//! The contract pinned here: a future is woken by the crate's reactor thread, which queries the
//! events futures wait on and queues nothing on any stream; a future is woken within about a
//! millisecond of its work, every pending one is confirmed by a query of its own event at least
//! once a second; `Event::completion` makes no CUDA call until first polled.

use cuda_event_testkit as common;

use common::{block_on, block_on_timeout, gpu, gpu_for, gpu_sleep, poll_once, poll_with, two_gpus_for};
use cuda_event::{Completion, Error, Event, Stream, sys};
use parking_lot::Mutex;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::Poll;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_fn_runs_once_in_stream_order_and_a_panic_is_contained() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let (sent, received) = mpsc::channel();
    gpu_sleep(&stream, Duration::from_millis(50));
    for i in 0..4 {
        let sent = sent.clone();
        stream
            .launch_host_fn(move || {
                assert!(i != 2, "a panic in a host function is contained");
                sent.send(i).unwrap();
            })
            .unwrap();
    }
    assert_eq!(received.try_iter().count(), 0, "ran before the stream got there");
    stream.synchronize().unwrap();
    assert_eq!(received.try_iter().collect::<Vec<_>>(), [0, 1, 3]);
    // The stream goes on after the panic.
    stream.record_event().unwrap().synchronize().unwrap();
}

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

#[test]
#[ignore = "needs a CUDA GPU"]
fn awaiting_work_captured_into_a_graph_is_an_err_not_a_hang() {
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

/// Among 10,000 futures pending on another, held stream (each also confirmed by the reactor's
/// walk once a second), an event's future on 5 ms of work resolves within about a millisecond of
/// its work: the reactor queries each stream's oldest pending event, not every one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_future_wakes_as_its_work_ends_among_ten_thousand_pending_on_a_held_stream() {
    let _gpu = gpu_for(Duration::from_secs(60));
    let held = Stream::new(0).unwrap();
    gpu_sleep(&held, Duration::from_secs(3));
    let events: Vec<Event> = (0..10_000).map(|_| held.record_event().unwrap()).collect();
    let mut pending: Vec<Completion> = events.iter().map(Event::completion).collect();
    assert!(pending.iter_mut().all(|f| poll_once(f).is_pending()));
    let quick = Stream::new(0).unwrap();
    for trial in 0..5 {
        gpu_sleep(&quick, Duration::from_millis(5));
        let event = quick.record_event().unwrap();
        let start = Instant::now();
        block_on(event.completion()).unwrap();
        let took = start.elapsed();
        println!("trial {trial}: an event future on 5 ms of work resolved after {took:?}");
        assert!(took < Duration::from_millis(8), "trial {trial}: {took:?}");
    }
    drop(pending);
    held.synchronize().unwrap();
}

/// An event recorded again elsewhere after its future was polled is waited for on its new record,
/// and one whose stream was dropped is still awaited.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_future_follows_a_new_record_and_outlives_its_stream() {
    let _gpu = gpu();
    let (quick, held) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    // Long enough that the new record comes before the first one completes, also under
    // compute-sanitizer (whose launches take milliseconds): else the future may rightly resolve
    // on the first.
    gpu_sleep(&quick, Duration::from_millis(300));
    let event = quick.record_event().unwrap();
    let quick_done = quick.record_event().unwrap();
    let mut done = event.completion();
    assert!(poll_once(&mut done).is_pending());
    gpu_sleep(&held, Duration::from_millis(1500));
    event.record(&held).unwrap();
    // Queried, not synchronized: under compute-sanitizer a stream's synchronize also waited for
    // the held stream (this test failed there at the assert below, twice, and nowhere else).
    while !quick_done.query().unwrap() {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50)); // the reactor has looked since the first record
    assert!(
        poll_once(&mut done).is_pending(),
        "ready while its new record is pending"
    );
    block_on(done).unwrap();
    assert!(held.query().unwrap(), "ready before the held stream was");

    let gone = Stream::new(0).unwrap();
    gpu_sleep(&gone, Duration::from_millis(50));
    let event = gone.record_event().unwrap();
    drop(gone);
    block_on(event.completion()).unwrap();
    assert!(event.query().unwrap());
}

/// Streams dropped while another thread makes (and polls) a future on an event last recorded on
/// them: nothing is queued on a destroyed stream (compute-sanitizer would report that call), and
/// every future resolves.
#[test]
#[ignore = "needs a CUDA GPU"]
fn streams_dropped_while_event_futures_are_made_on_them() {
    let _gpu = gpu_for(Duration::from_secs(60));
    for _ in 0..200 {
        let stream = Stream::new(0).unwrap();
        gpu_sleep(&stream, Duration::from_micros(200));
        let event = stream.record_event().unwrap();
        let barrier = std::sync::Barrier::new(2);
        let barrier = &barrier;
        std::thread::scope(|s| {
            s.spawn(move || {
                barrier.wait();
                drop(stream);
            });
            barrier.wait();
            block_on(event.completion()).unwrap();
        });
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

/// 62 streams on two GPUs, each held for 5 s, with 2,048 futures pending on them; the work of a
/// quick stream on each GPU, done in 20 ms, wakes its futures at once while every other one is still
/// pending. In a child with 32 hardware queues a GPU (`CUDA_DEVICE_MAX_CONNECTIONS`; CUDA's default
/// is 8): streams beyond that share queues, and held work in a shared queue holds back the quick
/// stream's own work (measured: 5 s), whatever waits for it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_the_first_work_to_complete_wakes_first_with_thousands_pending() {
    let test = common::this_test!();
    if common::role().as_deref() != Some("32-queues") {
        let Some(_gpu) = two_gpus_for(Duration::from_secs(60)) else {
            return;
        };
        let child = common::run_child(test, "32-queues", &[("CUDA_DEVICE_MAX_CONNECTIONS", "32")]);
        print!("{}", String::from_utf8_lossy(&child.stdout));
        return;
    }
    let quick: Vec<Stream> = (0..2).map(|d| Stream::new(d).unwrap()).collect(); // first: own queues
    let held: Vec<Stream> = (0..62).map(|i| Stream::new(i % 2).unwrap()).collect();
    let mut events = Vec::new();
    for stream in &held {
        gpu_sleep(stream, Duration::from_secs(5));
        for _ in 0..16 {
            events.push(stream.record_event().unwrap());
        }
    }
    let mut pending: Vec<Completion> = Vec::new();
    for (i, stream) in held.iter().enumerate() {
        for _ in 0..16 {
            pending.push(stream.completion());
        }
        pending.extend(events[i * 16..(i + 1) * 16].iter().map(Event::completion));
    }
    assert!(pending.iter_mut().all(|f| poll_once(f).is_pending()));
    for quick in &quick {
        gpu_sleep(quick, Duration::from_millis(20));
        let event = quick.record_event().unwrap();
        let start = Instant::now();
        block_on(quick.completion()).unwrap();
        block_on(event.completion()).unwrap();
        let took = start.elapsed();
        let device = quick.device();
        println!(
            "device {device}: woke after {took:?} with {} futures pending",
            pending.len()
        );
        assert!(
            took < Duration::from_secs(1),
            "the quick work's futures waited {took:?}"
        );
    }
    assert!(
        pending.iter_mut().all(|f| poll_once(f).is_pending()),
        "a future on held work was ready"
    );
    drop(pending); // cancelled while pending
}

/// Ten thousand event futures dropped at once, while the reactor walks its entries a chunk at a
/// time, leave it working: a new future still resolves. (The reactor thread once panicked when
/// removals shrank its entries below where a round in flight had got to; every later future then
/// hung.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_thousands_of_pending_event_futures_at_once_leaves_the_reactor_working() {
    let _gpu = gpu_for(Duration::from_secs(30));
    let held = Stream::new(0).unwrap();
    gpu_sleep(&held, Duration::from_secs(2));
    let events: Vec<Event> = (0..10_000).map(|_| held.record_event().unwrap()).collect();
    for _ in 0..5 {
        let mut pending: Vec<Completion> = events.iter().map(Event::completion).collect();
        assert!(pending.iter_mut().all(|f| poll_once(f).is_pending()));
        std::thread::sleep(Duration::from_millis(20));
        drop(pending); // cancelled while pending, all at once
    }
    let quick = Stream::new(0).unwrap();
    gpu_sleep(&quick, Duration::from_millis(10));
    let event = quick.record_event().unwrap();
    let start = Instant::now();
    block_on(event.completion()).unwrap();
    let took = start.elapsed();
    println!("a new event future resolved after {took:?}");
    assert!(took < Duration::from_millis(20), "it took {took:?}");
    held.synchronize().unwrap();
}

/// After a kernel fault CUDA runs no host function; every pending future still resolves within a
/// second, to what CUDA's query of its event says: for work the fault killed, "complete" (from
/// microseconds after the fault until the fault shows, a fraction of a second later), then the
/// fault's error. Once the fault has shown, a new stream future resolves to the
/// error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_every_pending_future_resolves_within_a_second_and_a_later_one_to_the_error() {
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

/// A million futures on events and streams, each dropped before, while or after its work runs:
/// memory, CUDA events and the reactor's entries stay flat.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_million_futures_dropped_at_random_moments_leak_nothing() {
    let _gpu = gpu_for(Duration::from_secs(300));
    let rounds: u64 = std::env::var("CUDA_EVENT_SOAK_ROUNDS").map_or(1_000_000, |v| v.parse().unwrap());
    let stream = Stream::new(0).unwrap();
    // Warm up: pools, the reactor thread, the kernel.
    gpu_sleep(&stream, Duration::from_micros(10));
    block_on(stream.completion()).unwrap();
    let (rss, alive) = (common::resident_kib(), cuda_event::cuda_events_alive());
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let mut kept: Vec<Completion<'_>> = Vec::new();
    let start = Instant::now();
    for i in 0..rounds {
        if i % 1000 == 0 {
            gpu_sleep(&stream, Duration::from_micros(next() % 200));
        }
        let event = stream.record_event().unwrap();
        if next() % 2 == 0 {
            let mut future = stream.completion();
            for _ in 0..next() % 3 {
                let _ = poll_once(&mut future);
            }
            if next() % 4 == 0 && kept.len() < 64 {
                kept.push(future); // dropped later, maybe after its work
            }
        } else {
            let mut future = event.completion();
            for _ in 0..next() % 3 {
                let _ = poll_once(&mut future);
            }
        }
        drop(event);
        if !kept.is_empty() && next() % 64 == 0 {
            drop(kept.swap_remove(next() as usize % kept.len()));
        }
    }
    drop(kept);
    stream.synchronize().unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the last host functions run
    let (rss_after, alive_after) = (common::resident_kib(), cuda_event::cuda_events_alive());
    println!(
        "{rounds} futures in {:?}: resident {rss} -> {rss_after} KiB, CUDA events alive {alive} -> {alive_after}",
        start.elapsed()
    );
    assert!(
        rss_after < rss + 8 * 1024,
        "memory grew by {} KiB",
        rss_after - rss
    );
    assert!(
        alive_after <= alive + cuda_event::POOL_PER_THREAD as u64,
        "CUDA events leaked"
    );
}

/// Which calls report a kernel fault, and when: a held event's query, an idle stream's query and a
/// completed event's query, each polled from the moment a trapping kernel is launched (nothing
/// synchronizes on it). Printed for the notes; asserts nothing but that the fault shows somewhere.
#[test]
#[ignore = "needs a CUDA GPU"]
fn probe_which_calls_report_a_fault_and_when() {
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

// ---- The reactor's contract (issue 18): capture safety, no dependence on CUDA's host-function
// ---- thread, no blocking, wakers, resets, owned stream futures, bounded blocking waits.

const THREAD_LOCAL: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
const GLOBAL: sys::cudaStreamCaptureMode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeGlobal;

/// The capture mode of a race's round: thread-local and global in turn.
fn capture_mode(round: usize) -> sys::cudaStreamCaptureMode {
    if round.is_multiple_of(2) {
        THREAD_LOCAL
    } else {
        GLOBAL
    }
}

/// How long a race's round keeps its capture open: 5 to 49 us, varied so that the other thread's
/// calls fall at every point of it.
fn capture_time(round: usize) -> Duration {
    Duration::from_micros(5 + (round as u64 * 7) % 45)
}

/// Keeps `stream` busy 10 to 20 ms ahead with `gpu_sleep` kernels (at most a few queued), so that
/// what is recorded on it now is pending for a while.
fn keep_busy(stream: &Stream, busy_until: &mut Instant) {
    let now = Instant::now();
    if *busy_until < now + Duration::from_millis(10) {
        gpu_sleep(stream, Duration::from_millis(20));
        *busy_until = (*busy_until).max(now) + Duration::from_millis(20);
    }
}

/// Captures `stream` on this thread in `mode` for `hold` (spinning, with no CUDA call) and checks
/// what the capture got: it ends with success and an empty graph, else `Err` says how not.
fn capture_briefly(stream: &Stream, mode: sys::cudaStreamCaptureMode, hold: Duration) -> Result<(), String> {
    common::begin_capture(stream, mode);
    let start = Instant::now();
    while start.elapsed() < hold {
        std::hint::spin_loop();
    }
    let (code, graph) = common::end_capture(stream);
    if code != sys::cudaError::cudaSuccess {
        return Err(format!("cudaStreamEndCapture returned {}", code.0));
    }
    match graph.map_or(0, |g| g.node_count()) {
        0 => Ok(()),
        nodes => Err(format!("the graph got {nodes} node(s)")),
    }
}

/// Sets the flag when dropped: a thread that spins until it is set stops even if the setter
/// panics.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Awaits each future in `futures` until `timeout` from now (all of them together) and describes
/// those that did not resolve `Ok` in that time.
fn not_ok_within<'a>(futures: Vec<Completion<'a>>, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut wrong = Vec::new();
    for (i, future) in futures.into_iter().enumerate() {
        match block_on_timeout(future, deadline.saturating_duration_since(Instant::now())) {
            Some(Ok(())) => {}
            Some(Err(e)) => wrong.push(format!("future {i}: {e:?}")),
            None => wrong.push(format!("future {i}: still pending")),
        }
    }
    wrong
}

/// Review F1 and the crash measured after it: one thread captures a stream for a few microseconds,
/// 2,000 times (thread-local and global mode in turn), while another makes and polls futures on
/// the event recorded on that stream just before each capture (the stream kept busy, so they are
/// pending). A wake-up queued on the captured stream would be a node of the graph (or crash the
/// driver, as `cuLaunchHostFunc` from `Event::completion` did in the first round of every run); a
/// CUDA call in the default capture mode from the awaiting thread or the reactor would invalidate
/// a global-mode capture. So: no crash, every capture ends with success and no node, and every one
/// of the 10,000 kept futures resolves `Ok`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn event_futures_polled_while_another_thread_captures_their_stream_add_nothing_and_resolve_ok() {
    const ROUNDS: usize = 2_000;
    /// Futures made per round on its event and kept; one more is made, polled and dropped.
    const KEPT_PER_ROUND: usize = 5;
    let _gpu = gpu_for(Duration::from_secs(60));
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_micros(1)); // the kernel loaded before the first capture
    stream.synchronize().unwrap();
    let events: Vec<Event> = (0..ROUNDS).map(|_| Event::new()).collect();
    let published = AtomicUsize::new(0); // rounds whose event is recorded
    let seen = AtomicUsize::new(0); // rounds whose futures the awaiter has made
    let finished = AtomicBool::new(false);
    let (failures, kept, made, pending) = std::thread::scope(|t| {
        let awaiter = t.spawn(|| {
            let (mut kept, mut made, mut pending) = (Vec::new(), 0usize, 0usize);
            while !finished.load(Ordering::Acquire) {
                let round = published.load(Ordering::Acquire);
                if round == seen.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                    continue;
                }
                for i in 0..=KEPT_PER_ROUND {
                    let mut future = events[round - 1].completion();
                    made += 1;
                    if poll_once(&mut future).is_pending() {
                        pending += 1;
                    }
                    if i < KEPT_PER_ROUND {
                        kept.push(future);
                    }
                }
                seen.store(round, Ordering::Release);
            }
            (kept, made, pending)
        });
        let _finish = SetOnDrop(&finished);
        let mut failures = Vec::new();
        let mut busy_until = Instant::now();
        for (round, event) in events.iter().enumerate() {
            keep_busy(&stream, &mut busy_until);
            event.record(&stream).unwrap();
            published.store(round + 1, Ordering::Release);
            let mode = capture_mode(round);
            if let Err(e) = capture_briefly(&stream, mode, capture_time(round)) {
                failures.push(format!("round {round} (capture mode {}): {e}", mode.0));
            }
            // In step: the awaiter made this round's futures (during or just after the capture).
            while seen.load(Ordering::Acquire) < round + 1 && !awaiter.is_finished() {
                std::hint::spin_loop();
            }
        }
        drop(_finish);
        let (kept, made, pending) = awaiter.join().unwrap();
        (failures, kept, made, pending)
    });
    println!(
        "{ROUNDS} captures: {} went wrong; {made} event futures made, {pending} pending at their first poll",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} captures went wrong, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(made, ROUNDS * (KEPT_PER_ROUND + 1));
    assert!(
        pending * 10 >= made * 9,
        "only {pending} of {made} futures were pending at their first poll: the race raced nothing"
    );
    stream.synchronize().unwrap();
    let wrong = not_ok_within(kept, Duration::from_secs(5));
    assert!(
        wrong.is_empty(),
        "{} of {} futures did not resolve Ok within 5 s of their work: {:?}",
        wrong.len(),
        ROUNDS * KEPT_PER_ROUND,
        &wrong[..wrong.len().min(5)]
    );
}

/// An awaited event that its owner re-records into a capture on another stream (the user's own
/// record, into the user's own graph). A query of an event recorded in an open capture
/// invalidates the capture, whatever the capture mode of either thread, and a query after such a
/// capture crashed the driver (probe `capq.c` in the results; this test crashed the process before
/// the record gate), so the reactor must never query a CUDA event a capture holds: the captured
/// record goes to the event's second CUDA event, and the future keeps waiting on the first. 1,000
/// rounds: record on a busy stream, poll a future on it (the reactor watches it), capture a
/// record of the same event on a second stream for 5-49 us, end the capture. Every capture ends
/// with success, and every future resolves to `Ok` once the busy stream's work is done.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_awaited_event_rerecorded_into_a_capture_leaves_the_capture_valid() {
    const ROUNDS: usize = 1_000;
    let _gpu = gpu_for(Duration::from_secs(60));
    let (busy, captured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&busy, Duration::from_micros(1));
    busy.synchronize().unwrap();
    let events: Vec<Event> = (0..ROUNDS / 10).map(|_| Event::new()).collect();
    let mut futures = Vec::new();
    let mut failures = Vec::new();
    let mut busy_until = Instant::now();
    for round in 0..ROUNDS {
        let event = &events[round % events.len()];
        keep_busy(&busy, &mut busy_until);
        event.record(&busy).unwrap();
        let mut future = event.completion();
        let _ = poll_once(&mut future);
        futures.push(future);
        let mode = capture_mode(round);
        common::begin_capture(&captured, mode);
        let recorded = event.record(&captured);
        let start = Instant::now();
        while start.elapsed() < capture_time(round) {
            std::hint::spin_loop();
        }
        let (code, graph) = common::end_capture(&captured);
        if recorded.is_err() || code != sys::cudaError::cudaSuccess || graph.is_none() {
            failures.push(format!(
                "round {round} (mode {}): record {recorded:?}, end capture {}",
                mode.0, code.0
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} captures went wrong, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    busy.synchronize().unwrap();
    let results: Vec<_> = futures
        .into_iter()
        .map(|future| block_on_timeout(future, Duration::from_secs(5)))
        .collect();
    let wrong: Vec<_> = results.iter().filter(|r| !matches!(r, Some(Ok(())))).collect();
    println!(
        "{ROUNDS} captures valid; {} futures resolved Ok",
        results.len() - wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "futures that did not resolve to Ok: {:?}",
        &wrong[..wrong.len().min(5)]
    );
}

/// The same race for `Stream::completion`: each future is made on the capturing thread just before
/// its capture begins (its record is the one call asked for, made outside the capture) and polled
/// by another thread while the capture is open. Nothing may go into the graph, and no call may
/// invalidate a global-mode capture.
#[test]
#[ignore = "needs a CUDA GPU"]
fn stream_futures_made_before_a_capture_and_polled_during_it_add_nothing_and_resolve_ok() {
    const ROUNDS: usize = 2_000;
    let _gpu = gpu_for(Duration::from_secs(60));
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_micros(1));
    stream.synchronize().unwrap();
    let inbox: Mutex<Vec<Completion<'static>>> = Mutex::new(Vec::new());
    let received = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let (failures, kept, polls, pending) = std::thread::scope(|t| {
        let awaiter = t.spawn(|| {
            let (mut kept, mut polls, mut pending) = (Vec::<Completion<'static>>::new(), 0usize, 0usize);
            while !finished.load(Ordering::Acquire) {
                let new = std::mem::take(&mut *inbox.lock());
                if new.is_empty() {
                    // Polled again and again while its capture is open.
                    if let Some(last) = kept.last_mut() {
                        polls += 1;
                        let _ = poll_once(last);
                    }
                    continue;
                }
                for mut future in new {
                    polls += 1;
                    if poll_once(&mut future).is_pending() {
                        pending += 1;
                    }
                    kept.push(future);
                }
                received.store(kept.len(), Ordering::Release);
            }
            (kept, polls, pending)
        });
        let _finish = SetOnDrop(&finished);
        let mut failures = Vec::new();
        let mut busy_until = Instant::now();
        for round in 0..ROUNDS {
            keep_busy(&stream, &mut busy_until);
            let future: Completion<'static> = stream.completion();
            inbox.lock().push(future);
            let mode = capture_mode(round);
            if let Err(e) = capture_briefly(&stream, mode, capture_time(round)) {
                failures.push(format!("round {round} (capture mode {}): {e}", mode.0));
            }
            while received.load(Ordering::Acquire) < round + 1 && !awaiter.is_finished() {
                std::hint::spin_loop();
            }
        }
        drop(_finish);
        let (kept, polls, pending) = awaiter.join().unwrap();
        (failures, kept, polls, pending)
    });
    println!(
        "{ROUNDS} captures: {} went wrong; {} stream futures, {pending} pending at their first poll, {polls} polls",
        failures.len(),
        kept.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} captures went wrong, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(kept.len(), ROUNDS);
    assert!(
        pending * 10 >= ROUNDS * 9,
        "only {pending} of {ROUNDS} futures were pending at their first poll: the race raced nothing"
    );
    stream.synchronize().unwrap();
    let wrong = not_ok_within(kept, Duration::from_secs(5));
    assert!(
        wrong.is_empty(),
        "{} of {ROUNDS} futures did not resolve Ok within 5 s of their work: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
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
    let (code, graph) = common::end_capture(&capture);
    println!(
        "capture ended after {:?}: code {}, short work's futures done during it: {short_done:?}",
        start.elapsed(),
        code.0
    );
    assert_eq!(
        code,
        sys::cudaError::cudaSuccess,
        "the global-mode capture was broken by the futures' CUDA calls"
    );
    assert_eq!(graph.unwrap().node_count(), 1, "the graph is the memset");
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
    let (code, graph) = common::end_capture(&capture);
    assert_eq!(
        code,
        sys::cudaError::cudaSuccess,
        "making an event's future called CUDA (its query ended this thread's global-mode capture)"
    );
    assert_eq!(graph.unwrap().node_count(), 0);
    let mut future = event.completion();
    assert!(poll_once(&mut future).is_pending());
    block_on(future).unwrap();
    assert_eq!(event.query(), Ok(true));
}

/// Review F5: CUDA runs every host function of a context on one thread. With it blocked by a host
/// function of another stream that waits on a channel, futures on stream `b` (50 ms of work) still
/// resolve as their work ends (the reactor needs no host function); before, both stayed pending
/// for as long as the host function waited (3 s measured), although `b.synchronize()` returned at
/// once.
#[test]
#[ignore = "needs a CUDA GPU"]
fn futures_resolve_as_their_work_ends_while_a_host_function_of_another_stream_blocks_cudas_thread() {
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

/// Review F6, the `select!` pattern: on a stream held 5 s with 900 kernels queued behind the hold,
/// 5,000 event futures and 50 stream futures are each made, polled once (pending) and dropped; no
/// such pair blocks (worst under 10 ms here; the wake benchmark reports the worst against the 1 ms
/// goal). 900, not 1,000 kernels: about 1,000 queued kernels fill a hardware queue, and then this
/// test's own launches would block. Only 50 stream futures: each records an event on the stream,
/// a stream operation like any other, and thousands of them would fill the queue too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn making_polling_and_dropping_futures_on_a_full_busy_stream_never_blocks() {
    const PAIRS: usize = 5_000;
    const STREAM_PAIRS: usize = 50;
    let _gpu = gpu_for(Duration::from_secs(30));
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_micros(1));
    stream.synchronize().unwrap();
    let setup = Instant::now();
    gpu_sleep(&stream, Duration::from_secs(5));
    for _ in 0..900 {
        gpu_sleep(&stream, Duration::from_micros(1));
    }
    let event = stream.record_event().unwrap();
    let setup = setup.elapsed();
    println!("900 kernels queued behind a 5 s hold in {setup:?}");
    assert!(
        setup < Duration::from_secs(1),
        "queueing the kernels blocked for {setup:?}"
    );
    let mut worst = [Duration::ZERO; 2];
    let mut pending = [0usize; 2];
    let held = Instant::now();
    for pair in 0..PAIRS {
        let start = Instant::now();
        let mut future = event.completion();
        pending[0] += usize::from(poll_once(&mut future).is_pending());
        drop(future);
        worst[0] = worst[0].max(start.elapsed());
        if pair % (PAIRS / STREAM_PAIRS) != 0 {
            continue;
        }
        let start = Instant::now();
        let mut future = stream.completion();
        pending[1] += usize::from(poll_once(&mut future).is_pending());
        drop(future);
        worst[1] = worst[1].max(start.elapsed());
    }
    let took = held.elapsed();
    println!(
        "{PAIRS} event and {STREAM_PAIRS} stream pairs in {took:?}: worst make+poll+drop {:?} (event), {:?} (stream); pending {pending:?}",
        worst[0], worst[1]
    );
    assert_eq!(
        pending,
        [PAIRS, STREAM_PAIRS],
        "futures ready while the stream was held: the hold ended before the pairs did ({took:?})"
    );
    assert!(
        worst[0] < Duration::from_millis(10),
        "an event future's make+poll+drop took {:?}",
        worst[0]
    );
    assert!(
        worst[1] < Duration::from_millis(10),
        "a stream future's make+poll+drop took {:?}",
        worst[1]
    );
    stream.synchronize().unwrap();
}

/// Review F13: a waker that panics does not kill the reactor. Its futures are woken first while
/// CUDA's host-function thread is blocked, then while it is free; after each, new futures still
/// resolve, also while the host-function thread is blocked again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_waker_does_not_stop_later_futures_from_resolving() {
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

/// Review F8: `into_raw` of an event whose future was leaked while pending (or dropped just
/// before) hands the handle over for good: the crate stops querying it, so the new owner may
/// destroy it. Here nothing may crash; under compute-sanitizer, a query of a destroyed handle would
/// be reported. The crate goes on working after.
#[test]
#[ignore = "needs a CUDA GPU"]
fn into_raw_of_an_awaited_event_hands_the_handle_over_for_good() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(200));
    let event = stream.record_event().unwrap();
    let mut future = event.completion();
    assert!(poll_once(&mut future).is_pending());
    std::mem::forget(future); // safe, and leaves the future's registration behind
    let raw = event.into_raw().unwrap();
    // SAFETY: the handle is ours to destroy (into_raw's contract); its record may be pending.
    common::ok(unsafe { sys::cudaEventDestroy(raw) });
    // Futures dropped just before into_raw, while the reactor may be checking them.
    for _ in 0..50 {
        gpu_sleep(&stream, Duration::from_millis(1));
        let event = stream.record_event().unwrap();
        let mut future = event.completion();
        let _ = poll_once(&mut future);
        drop(future);
        let raw = event.into_raw().unwrap();
        // SAFETY: as above.
        common::ok(unsafe { sys::cudaEventDestroy(raw) });
    }
    // New events (which may get the destroyed handles' values) while the reactor's checks would
    // query the destroyed handles.
    let fresh: Vec<Event> = (0..50).map(|_| stream.record_event().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    gpu_sleep(&stream, Duration::from_millis(10));
    let event = stream.record_event().unwrap();
    assert_eq!(
        block_on_timeout(event.completion(), Duration::from_secs(2)),
        Some(Ok(()))
    );
    for event in &fresh {
        assert_eq!(
            block_on_timeout(event.completion(), Duration::from_secs(2)),
            Some(Ok(()))
        );
    }
}

/// `synchronize_timeout` of an event and of a stream: `Ok(false)` when the work is not done in
/// time, after waiting the whole timeout and not much more; `Ok(true)` once it is done, without
/// waiting out a longer timeout; `Ok(true)` at once for a never-recorded event.
#[test]
#[ignore = "needs a CUDA GPU"]
fn synchronize_timeout_says_false_when_time_runs_out_and_true_once_the_work_is_done() {
    let _gpu = gpu();
    assert_eq!(Event::new().synchronize_timeout(Duration::ZERO), Ok(true));
    let stream = Stream::new(0).unwrap();
    let (event, blocking) = (Event::new(), Event::builder().blocking(true).build().unwrap());
    for e in [&event, &blocking] {
        e.record(&stream).unwrap(); // created and warm
    }
    stream.synchronize().unwrap();
    let held = Instant::now();
    gpu_sleep(&stream, Duration::from_secs(1));
    for e in [&event, &blocking] {
        e.record(&stream).unwrap();
    }
    type Wait<'a> = Box<dyn Fn(Duration) -> cuda_event::Result<bool> + 'a>;
    let waits: [(&str, Wait); 3] = [
        ("Event", Box::new(|t| event.synchronize_timeout(t))),
        ("a blocking Event", Box::new(|t| blocking.synchronize_timeout(t))),
        ("Stream", Box::new(|t| stream.synchronize_timeout(t))),
    ];
    let timeout = Duration::from_millis(50);
    for (what, wait) in &waits {
        assert_eq!(
            wait(Duration::ZERO),
            Ok(false),
            "{what} with no time, on held work"
        );
        let start = Instant::now();
        assert_eq!(wait(timeout), Ok(false), "{what}, on held work");
        let took = start.elapsed();
        println!("{what}: Ok(false) after {took:?} of a {timeout:?} timeout");
        assert!(
            took >= timeout - Duration::from_millis(1),
            "{what}: Ok(false) after only {took:?}"
        );
        assert!(
            took < Duration::from_millis(250),
            "{what}: Ok(false) only after {took:?}"
        );
    }
    assert!(
        held.elapsed() < Duration::from_millis(900),
        "the checks above outlasted the hold"
    );
    for (what, wait) in &waits {
        assert_eq!(
            wait(Duration::from_secs(5)),
            Ok(true),
            "{what}, waiting for the work"
        );
        let took = held.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "{what}: Ok(true) {took:?} after 1 s of work began"
        );
        assert_eq!(
            wait(Duration::ZERO),
            Ok(true),
            "{what} with no time, on done work"
        );
    }
    assert!(
        held.elapsed() >= Duration::from_millis(990),
        "Ok(true) before the work was done"
    );
    assert_eq!(event.query(), Ok(true));
    assert_eq!(stream.query(), Ok(true));
}

/// `synchronize_timeout` honours the blocking flag: for a blocking event, a wait that times out
/// after 200 ms costs the waiting thread under 10% of a core, and no other thread spins for it
/// either (the whole process under 60%).
#[test]
#[ignore = "needs a CUDA GPU"]
fn synchronize_timeout_of_a_blocking_event_does_not_spin_a_core() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = Event::builder().blocking(true).build().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap(); // created and warm
    gpu_sleep(&stream, Duration::from_secs(1));
    event.record(&stream).unwrap();
    let (thread, process, wall) = (
        common::thread_cpu_time(),
        common::process_cpu_time(),
        Instant::now(),
    );
    assert_eq!(event.synchronize_timeout(Duration::from_millis(200)), Ok(false));
    let (thread, process, wall) = (
        common::thread_cpu_time() - thread,
        common::process_cpu_time() - process,
        wall.elapsed(),
    );
    println!(
        "a blocking event's 200 ms synchronize_timeout: {wall:?} wall, {thread:?} CPU on its thread, {process:?} in the process"
    );
    assert!(
        thread < wall / 10,
        "the waiting thread spun: {thread:?} of CPU in {wall:?}"
    );
    assert!(
        process < wall * 6 / 10,
        "a thread spun: the process used {process:?} of CPU in {wall:?}"
    );
    stream.synchronize().unwrap();
}

/// A stream's future owns what it waits on (`Completion<'static>`): `tokio::spawn` takes it, and
/// it resolves after its `Stream` was dropped, also when returned from the function whose stream
/// it was.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stream_future_can_be_spawned_and_outlives_its_stream() {
    fn completion_of_a_dropped_stream(work: Duration) -> Completion<'static> {
        let stream = Stream::new(0).unwrap();
        gpu_sleep(&stream, work);
        stream.completion()
    }
    let _gpu = gpu();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stream = Stream::new(0).unwrap();
    gpu_sleep(&stream, Duration::from_millis(100));
    let start = Instant::now();
    let task = {
        let _in_the_runtime = runtime.enter();
        tokio::spawn(stream.completion())
    };
    drop(stream);
    assert_eq!(runtime.block_on(task).unwrap(), Ok(()));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(90),
        "ready after {took:?} of 100 ms of work"
    );
    // From before the work is queued: dropping the stream may wait for it (compute-sanitizer's
    // memcheck makes cuStreamDestroy wait), and the future must not resolve before it is done.
    let start = Instant::now();
    let future = completion_of_a_dropped_stream(Duration::from_millis(100));
    assert_eq!(
        runtime
            .block_on(async move { tokio::spawn(future).await })
            .unwrap(),
        Ok(())
    );
    println!(
        "a spawned future of a dropped stream resolved after {:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() >= Duration::from_millis(90),
        "ready before its work was done"
    );
}

/// Latency at any position: 1,000 futures on one stream (500 steps of 2 ms of work, an event
/// future and a stream future behind each), with 10,000 more pending on a held stream, wake at p99
/// within 2 ms of their work being done, as a thread spinning on the events' queries sees it, and
/// each within 20 ms (before: past 32 a stream, futures fell back to polling and woke up to 1.1 s
/// late). The wake benchmark measures the p99 against the 1 ms goal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn each_of_a_thousand_futures_on_one_stream_wakes_within_20_ms_of_its_work_among_ten_thousand_pending() {
    const STEPS: usize = 500;
    let _gpu = gpu_for(Duration::from_secs(60));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (held, quick) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&quick, Duration::from_micros(1));
    quick.synchronize().unwrap();
    // Held past the whole measurement, also where every call is slower (under compute-sanitizer).
    gpu_sleep(&held, Duration::from_secs(6));
    let held_events: Vec<Event> = (0..9_000).map(|_| held.record_event().unwrap()).collect();
    let mut pending: Vec<Completion> = held_events.iter().map(Event::completion).collect();
    pending.extend((0..1_000).map(|_| held.completion()));
    assert!(pending.iter_mut().all(|f| poll_once(f).is_pending()));
    gpu_sleep(&quick, Duration::from_millis(300)); // every future below is polled before its work ends
    let mut events = Vec::new();
    let mut stream_futures = Vec::new();
    for _ in 0..STEPS {
        gpu_sleep(&quick, Duration::from_millis(2));
        events.push(quick.record_event().unwrap());
        stream_futures.push(quick.completion());
    }
    let events = Arc::new(events);
    let event_tasks: Vec<_> = (0..STEPS)
        .map(|i| {
            let events = events.clone();
            runtime.spawn(async move { events[i].completion().await.map(|()| Instant::now()) })
        })
        .collect();
    let stream_tasks: Vec<_> = stream_futures
        .into_iter()
        .map(|f| runtime.spawn(async move { f.await.map(|()| Instant::now()) }))
        .collect();
    // The floor: when each step's work was done, as a thread spinning on each event's query sees it.
    let done_at: Vec<Instant> = events
        .iter()
        .map(|e| {
            while !e.query().unwrap() {
                std::hint::spin_loop();
            }
            Instant::now()
        })
        .collect();
    for (kind, tasks) in [("event", event_tasks), ("stream", stream_tasks)] {
        let mut late: Vec<(Duration, usize)> = tasks
            .into_iter()
            .enumerate()
            .map(|(i, task)| {
                let resolved = runtime
                    .block_on(task)
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{kind} future {i}: {e:?}"));
                (resolved.saturating_duration_since(done_at[i]), i)
            })
            .collect();
        late.sort();
        let (p50, p99, worst) = (late[STEPS / 2].0, late[STEPS * 99 / 100].0, late[STEPS - 1]);
        println!(
            "{kind} futures on one stream, 10,000 pending elsewhere: woke p50 {p50:?}, p99 {p99:?}, \
             worst {:?} (step {}) after their work",
            worst.0, worst.1
        );
        assert!(
            worst.0 < Duration::from_millis(20),
            "{kind} future {} woke {:?} after its work",
            worst.1,
            worst.0
        );
        assert!(p99 < Duration::from_millis(2), "{kind} futures: p99 {p99:?}");
    }
    assert!(
        pending.iter_mut().all(|f| poll_once(f).is_pending()),
        "a future on the held stream was ready"
    );
    drop(pending);
    held.synchronize().unwrap();
}

/// Latency spread over streams: 9,984 event futures over 64 streams (39 steps of 5 ms of work
/// each, the streams' steps staggered, 4 futures on each step's event, all polled while the
/// streams are held: about 50,000 completions a second), each its own task, wake at p99 within
/// 5 ms of their work being done, as threads spinning on the events' queries (8 streams each) see
/// it, and each within 20 ms. The p99 is a few hundred microseconds on an idle machine, and the
/// wake benchmark holds it to the 1 ms goal; the bound here is loose enough for a shared one (a
/// machine's hiccup moved it past 2 ms once) and still fails a reactor that polls too seldom. Few steps a stream: with CUDA's 8 hardware queues, 8 of the streams
/// share one, and about 1,000 operations fill it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn ten_thousand_event_futures_over_64_streams_each_wake_within_20_ms_of_its_work() {
    const STREAMS: usize = 64;
    const STEPS: usize = 39;
    const FUTURES_PER_EVENT: usize = 4;
    const STEP: Duration = Duration::from_millis(5);
    const PER_SPINNER: usize = 8;
    let _gpu = gpu_for(Duration::from_secs(60));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let streams: Vec<Stream> = (0..STREAMS).map(|_| Stream::new(0).unwrap()).collect();
    for stream in &streams {
        gpu_sleep(stream, Duration::from_micros(1));
        stream.synchronize().unwrap();
    }
    let setup = Instant::now();
    for (s, stream) in streams.iter().enumerate() {
        // Every future is polled before this ends; then the streams step in turn.
        gpu_sleep(
            stream,
            Duration::from_millis(500) + STEP * s as u32 / STREAMS as u32,
        );
    }
    let events: Vec<Vec<Event>> = streams
        .iter()
        .map(|stream| {
            (0..STEPS)
                .map(|_| {
                    gpu_sleep(stream, STEP);
                    stream.record_event().unwrap()
                })
                .collect()
        })
        .collect();
    let events = Arc::new(events);
    let tasks: Vec<Vec<_>> = (0..STREAMS)
        .map(|s| {
            (0..STEPS * FUTURES_PER_EVENT)
                .map(|f| {
                    let events = events.clone();
                    let i = f / FUTURES_PER_EVENT;
                    runtime.spawn(async move { events[s][i].completion().await.map(|()| Instant::now()) })
                })
                .collect()
        })
        .collect();
    let setup = setup.elapsed();
    println!("work queued and tasks spawned in {setup:?}");
    assert!(
        setup < Duration::from_millis(300),
        "the setup took {setup:?} of the 500 ms hold"
    );
    // The floor: when each event's work was done, as a thread spinning on its streams' oldest
    // pending events sees it.
    let done_at: Vec<Vec<Instant>> = std::thread::scope(|scope| {
        let spinners: Vec<_> = events
            .chunks(PER_SPINNER)
            .map(|mine| {
                scope.spawn(move || {
                    let mut seen: Vec<Vec<Instant>> = vec![Vec::with_capacity(STEPS); mine.len()];
                    while seen.iter().any(|s| s.len() < STEPS) {
                        for (stream, seen) in mine.iter().zip(&mut seen) {
                            while seen.len() < STEPS && stream[seen.len()].query().unwrap() {
                                seen.push(Instant::now());
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        spinners.into_iter().flat_map(|s| s.join().unwrap()).collect()
    });
    let mut late: Vec<(Duration, usize, usize)> = Vec::new();
    for (s, tasks) in tasks.into_iter().enumerate() {
        for (f, task) in tasks.into_iter().enumerate() {
            let i = f / FUTURES_PER_EVENT;
            let resolved = runtime
                .block_on(task)
                .unwrap()
                .unwrap_or_else(|e| panic!("stream {s} future {f}: {e:?}"));
            late.push((resolved.saturating_duration_since(done_at[s][i]), s, i));
        }
    }
    late.sort();
    let n = late.len();
    let (p50, p99, worst) = (late[n / 2].0, late[n * 99 / 100].0, late[n - 1]);
    println!(
        "{n} event futures over {STREAMS} streams: woke p50 {p50:?}, p99 {p99:?}, worst {:?} \
         (stream {}, step {}) after their work",
        worst.0, worst.1, worst.2
    );
    assert!(
        worst.0 < Duration::from_millis(20),
        "a future woke {:?} after its work",
        worst.0
    );
    assert!(p99 < Duration::from_millis(5), "p99 {p99:?}");
}
