//! Races of futures against captures of the stream they wait on, thousands of rounds each: every
//! capture ends with success and the graph it should have, and every future resolves `Ok`.

use cuda_event_testkit as common;

use common::{
    CaptureFailed, GLOBAL, RawGraph, SetOnDrop, THREAD_LOCAL, block_on_timeout, gpu_for, gpu_sleep, poll_once,
};
use cuda_event::{Completion, Event, Stream, sys};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The capture mode of a race's round: thread-local and global in turn.
fn capture_mode(round: usize) -> sys::CUstreamCaptureMode {
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

/// Captures `stream` on this thread in round `round`'s mode: `during` runs in the capture, which
/// then stays open for the round's time (spinning, with no CUDA call). Returns the mode, for the
/// failure messages, and how the capture ended ([`common::end_capture`]).
fn capture_round(
    stream: &Stream,
    round: usize,
    during: impl FnOnce(),
) -> (sys::CUstreamCaptureMode, Result<RawGraph, CaptureFailed>) {
    let mode = capture_mode(round);
    common::begin_capture(stream, mode);
    during();
    let start = Instant::now();
    while start.elapsed() < capture_time(round) {
        std::hint::spin_loop();
    }
    (mode, common::end_capture(stream))
}

/// What the two threads of a [`race_captures`] share: whether the capturing thread is done, and
/// how many rounds the other thread has taken.
#[derive(Default)]
struct Race {
    over: AtomicBool,
    taken: AtomicUsize,
}

impl Race {
    /// Whether the capturing thread still has rounds to run.
    fn running(&self) -> bool {
        !self.over.load(Ordering::Acquire)
    }

    /// How many rounds the other thread has taken.
    fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }

    /// Says that the other thread has taken `rounds` rounds.
    fn took(&self, rounds: usize) {
        self.taken.store(rounds, Ordering::Release);
    }
}

/// The capture race: `rounds` times, this thread keeps `stream` busy, calls `publish(round)` (which
/// hands the round's work to the other thread), captures `stream` for a few microseconds (thread-
/// local and global mode in turn) and waits until `other`, on a thread of its own, has taken the
/// round (unless it has ended). Every capture must end with success and an empty graph. Returns
/// what went wrong with the captures and what `other` returned once the race was over.
fn race_captures<T: Send>(
    stream: &Stream,
    rounds: usize,
    mut publish: impl FnMut(usize),
    other: impl FnOnce(&Race) -> T + Send,
) -> (Vec<String>, T) {
    gpu_sleep(stream, Duration::from_micros(1)); // the kernel loaded before the first capture
    stream.synchronize().unwrap();
    let race = &Race::default();
    std::thread::scope(|t| {
        let other = t.spawn(move || other(race));
        let over = SetOnDrop(&race.over);
        let mut failures = Vec::new();
        let mut busy_until = Instant::now();
        for round in 0..rounds {
            keep_busy(stream, &mut busy_until);
            publish(round);
            let (mode, ended) = capture_round(stream, round, || {});
            let wrong = match ended {
                Err(failed) => Some(failed.to_string()),
                Ok(graph) => {
                    let nodes = graph.node_count();
                    (nodes != 0).then(|| format!("the graph got {nodes} node(s)"))
                }
            };
            if let Some(e) = wrong {
                failures.push(format!("round {round} (capture mode {}): {e}", mode.0));
            }
            // In step: the other thread took this round (during or just after the capture).
            while race.taken() < round + 1 && !other.is_finished() {
                std::hint::spin_loop();
            }
        }
        drop(over);
        (failures, other.join().unwrap())
    })
}

/// Fails the test unless nothing in `wrong` (of `total`) went wrong; says how many and the first.
fn assert_none_wrong(wrong: &[String], total: usize, what: &str) {
    assert!(
        wrong.is_empty(),
        "{} of {total} {what}, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Fails the test unless nine in ten of the `made` futures were pending at their first poll.
fn assert_raced(pending: usize, made: usize) {
    assert!(
        pending * 10 >= made * 9,
        "only {pending} of {made} futures were pending at their first poll: the race raced nothing"
    );
}

/// Awaits each of `futures` until 5 s from now (all of them together: their work is done) and
/// fails the test unless every one resolved `Ok`.
fn assert_resolve_ok(futures: Vec<Completion<'_>>) {
    let (total, deadline) = (futures.len(), Instant::now() + Duration::from_secs(5));
    let mut wrong = Vec::new();
    for (i, future) in futures.into_iter().enumerate() {
        match block_on_timeout(future, deadline.saturating_duration_since(Instant::now())) {
            Some(Ok(())) => {}
            Some(Err(e)) => wrong.push(format!("future {i}: {e:?}")),
            None => wrong.push(format!("future {i}: still pending")),
        }
    }
    assert_none_wrong(
        &wrong,
        total,
        "futures did not resolve Ok within 5 s of their work",
    );
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
    let events: Vec<Event> = (0..ROUNDS).map(|_| Event::new()).collect();
    let published = AtomicUsize::new(0); // rounds whose event is recorded
    let publish = |round: usize| {
        events[round].record(&stream).unwrap();
        published.store(round + 1, Ordering::Release);
    };
    let (failures, (kept, made, pending)) = race_captures(&stream, ROUNDS, publish, |race| {
        let (mut kept, mut made, mut pending) = (Vec::new(), 0usize, 0usize);
        while race.running() {
            let round = published.load(Ordering::Acquire);
            if round == race.taken() {
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
            race.took(round);
        }
        (kept, made, pending)
    });
    println!(
        "{ROUNDS} captures: {} went wrong; {made} event futures made, {pending} pending at their first poll",
        failures.len()
    );
    assert_none_wrong(&failures, ROUNDS, "captures went wrong");
    assert_eq!(made, ROUNDS * (KEPT_PER_ROUND + 1));
    assert_raced(pending, made);
    stream.synchronize().unwrap();
    assert_resolve_ok(kept);
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
        let mut recorded = Ok(());
        let (mode, ended) = capture_round(&captured, round, || recorded = event.record(&captured));
        if recorded.is_err() || ended.is_err() {
            let ended = ended.map(drop);
            failures.push(format!(
                "round {round} (mode {}): record {recorded:?}, end capture {ended:?}",
                mode.0
            ));
        }
    }
    assert_none_wrong(&failures, ROUNDS, "captures went wrong");
    println!("{ROUNDS} captures valid");
    busy.synchronize().unwrap();
    assert_resolve_ok(futures);
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
    let inbox: Mutex<Vec<Completion<'static>>> = Mutex::new(Vec::new());
    let publish = |_round: usize| inbox.lock().push(stream.completion());
    let (failures, (kept, polls, pending)) = race_captures(&stream, ROUNDS, publish, |race| {
        let (mut kept, mut polls, mut pending) = (Vec::<Completion<'static>>::new(), 0usize, 0usize);
        while race.running() {
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
            race.took(kept.len());
        }
        (kept, polls, pending)
    });
    println!(
        "{ROUNDS} captures: {} went wrong; {} stream futures, {pending} pending at their first poll, {polls} polls",
        failures.len(),
        kept.len()
    );
    assert_none_wrong(&failures, ROUNDS, "captures went wrong");
    assert_eq!(kept.len(), ROUNDS);
    assert_raced(pending, ROUNDS);
    stream.synchronize().unwrap();
    assert_resolve_ok(kept);
}
