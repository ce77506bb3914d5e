//! The flag lane (`StreamOptions::flag_lane`): waits on a lane stream's events end no earlier than
//! their work, sooner after it than the reactor's, and a capture begun on a lane stream anyway
//! stays valid. Each test releases the lane's memory at its end
//! (`Stream::release_flag_lane_memory`), as a program under a leak checker does.

use cuda_event_testkit as common;

use common::{RELAXED, block_on, block_on_timeout, gpu, gpu_sleep, poll_once};
use cuda_event::{Event, Stream, StreamOptions};
use parking_lot::Mutex;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

fn lane_stream() -> Stream {
    Stream::with_options(0, StreamOptions::default().non_blocking(true).flag_lane(true)).unwrap()
}

/// `n` lane streams, each with an event recorded behind `work` of GPU time.
fn lane_streams_behind(n: usize, work: Duration) -> (Vec<Stream>, Vec<Event>) {
    let streams: Vec<Stream> = (0..n).map(|_| lane_stream()).collect();
    let events = streams
        .iter()
        .map(|stream| {
            gpu_sleep(stream, work);
            stream.record_event().unwrap()
        })
        .collect();
    (streams, events)
}

fn plain_stream() -> Stream {
    Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap()
}

/// Waits on a future on an event behind `work` of GPU time; fails unless the event is complete
/// once the future resolves.
fn wait_behind(stream: &Stream, work: Duration) {
    gpu_sleep(stream, work);
    let event = stream.record_event().unwrap();
    block_on(event.completion()).unwrap();
    assert!(event.query().unwrap(), "resolved before its event completed");
}

/// How long after its stream reached it a future on an event behind `work` of GPU time resolves:
/// a host function queued just before the event reads the clock as the stream gets there (as the
/// wake bench measures), so the kernel's overshoot and the launch's latency are not in it. The
/// future is polled in a loop, not parked: a later poll only reads what the scanner or the reactor
/// found, so the time is the crate's alone, with no thread's wake-up in it (which, on a virtual
/// machine, can cost more than the crate's part, whatever woke it). Untimed where the work was
/// done by the end of the future's first poll (the host was held up past the work, before or
/// during that poll): the event must then be complete.
fn wake_latency_behind(stream: &Stream, work: Duration) -> Round {
    let reached = Arc::new(Mutex::new(None));
    gpu_sleep(stream, work);
    let stamp = reached.clone();
    stream
        .launch_host_fn(move || *stamp.lock() = Some(Instant::now()))
        .unwrap();
    let event = stream.record_event().unwrap();
    let mut done = event.completion();
    let first_poll = Instant::now();
    let first = poll_once(&mut done);
    let poll_took = first_poll.elapsed();
    if let Poll::Ready(done) = first {
        done.unwrap();
        assert!(
            event.query().unwrap(),
            "ready at its first poll, its event not complete"
        );
        let reached = reached
            .lock()
            .expect("the host function ran before the event completed");
        return match reached < first_poll {
            true => Round::DoneBeforeThePoll,
            false => Round::DoneDuringThePoll(poll_took),
        };
    }
    let deadline = Instant::now() + work + Duration::from_secs(5);
    let woke = loop {
        if let Poll::Ready(done) = poll_once(&mut done) {
            done.unwrap();
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the wait did not end within 5 s of its work"
        );
        std::hint::spin_loop();
    };
    assert!(event.query().unwrap(), "resolved before its event completed");
    let reached = reached
        .lock()
        .expect("the host function ran before the event completed");
    Round::Timed(woke.saturating_duration_since(reached))
}

/// What the rounds of [`wake_latency_behind`] on one stream found.
#[derive(Default)]
struct Side {
    timed: Vec<Duration>,
    done_before_the_poll: usize,
    /// How long each first poll lasted that the work ended in.
    slow_polls: Vec<Duration>,
}

impl Side {
    fn time(&mut self, stream: &Stream, work: Duration) {
        match wake_latency_behind(stream, work) {
            Round::Timed(latency) => self.timed.push(latency),
            Round::DoneBeforeThePoll => self.done_before_the_poll += 1,
            Round::DoneDuringThePoll(took) => self.slow_polls.push(took),
        }
    }
}

/// One round of [`wake_latency_behind`].
enum Round {
    /// From the stream reaching the event to the future resolving.
    Timed(Duration),
    /// The work was done before the future's first poll.
    DoneBeforeThePoll,
    /// The work ended during the future's first poll, which took this long (the thread was held
    /// up in it, past the work).
    DoneDuringThePoll(Duration),
}

/// Releases the lane's registered pages once the streams are gone and their last tickets landed
/// (within 2 s); fails if a page stays.
fn release_lane_memory() {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        // SAFETY: no graph in this test binary holds a ticket's write: no lane stream is captured
        // but in the capture test, whose record into the capture writes no ticket, and its graph
        // is never launched.
        let kept = unsafe { Stream::release_flag_lane_memory() }.unwrap();
        if kept == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{kept} page(s) of lane slots stay registered"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The lane's referee is the reactor, in the same run: 101 interleaved waits behind 1 ms of GPU
/// work on a lane stream and on a plain one, each timed from the moment its stream reached the
/// event to the one a future polled in a loop saw the wait end (at least 90 of each, where the
/// host was held up past a round's work by the end of its first poll; at most 3 of those each
/// during the poll, since a first poll that often outlasts 1 ms is the crate's doing). A lane
/// wait resolves no earlier than its work (its event is complete when it does), and its median
/// takes at most four fifths of the reactor's: a lane that did nothing would take as long. Once
/// the waits are over, the scanner thread stops spinning: the process uses little CPU while idle.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lane_streams_waits_end_after_their_work_and_sooner_than_the_reactors() {
    let _gpu = gpu();
    if common::skip_under_sanitizer(
        "times wake-ups, and its work may end before the first poll under memcheck",
    ) {
        return;
    }
    let (lane, plain) = (lane_stream(), plain_stream());
    let work = Duration::from_millis(1);
    wait_behind(&lane, work); // kernels loaded, threads started
    wait_behind(&plain, work);
    let (mut on_lane, mut on_plain) = (Side::default(), Side::default());
    for round in 0..101 {
        if round % 2 == 0 {
            on_lane.time(&lane, work);
            on_plain.time(&plain, work);
        } else {
            on_plain.time(&plain, work);
            on_lane.time(&lane, work);
        }
    }
    // A round whose work was done by the end of its first poll timed nothing; a few such (a host
    // held up past 1 ms) leave the medians standing, many would leave them unmeasured, and a
    // first poll that waited for the work would leave every round untimed.
    for (name, side) in [("lane", &on_lane), ("reactor", &on_plain)] {
        println!(
            "{name}: {} rounds timed, {} done before their first poll, first polls the work ended \
             in: {:?}",
            side.timed.len(),
            side.done_before_the_poll,
            side.slow_polls
        );
        assert!(
            side.timed.len() >= 90 && side.slow_polls.len() <= 3,
            "{name}: only {} waits of 101 were pending after their first poll, and {} first \
             polls lasted past the work",
            side.timed.len(),
            side.slow_polls.len()
        );
    }
    drop((lane, plain));
    release_lane_memory();
    std::thread::sleep(Duration::from_millis(30)); // past the scanner's last look
    let (cpu, wall) = (common::process_cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_millis(300));
    let idle_cores = (common::process_cpu_time() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
    let timed = (on_lane.timed.len(), on_plain.timed.len());
    let (lane_median, plain_median) = (median(on_lane.timed), median(on_plain.timed));
    println!(
        "median wake-ups: lane {lane_median:?}, reactor {plain_median:?} ({} and {} of 101 rounds \
         timed); idle after: {idle_cores:.3} cores",
        timed.0, timed.1
    );
    assert!(
        lane_median * 5 <= plain_median * 4,
        "the lane's median wake-up {lane_median:?} is not within four fifths of the reactor's {plain_median:?}"
    );
    assert!(
        idle_cores < 0.5,
        "the process used {idle_cores:.2} cores idle after the lane's waits"
    );
}

/// A lane stream captured anyway (relaxed mode, raw CUDA): a record into the capture writes no
/// ticket, so the graph holds only what was asked for (the kernel and the record's node, as on a
/// plain stream), the capture ends valid, and after it the stream's waits still end.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_begun_on_a_lane_stream_gets_no_ticket_and_stays_valid() {
    let _gpu = gpu();
    let (lane, plain) = (lane_stream(), plain_stream());
    let mut nodes = Vec::new();
    for stream in [&lane, &plain] {
        gpu_sleep(stream, Duration::from_micros(1)); // loaded before the capture
        stream.synchronize().unwrap();
        common::begin_capture(stream, RELAXED);
        gpu_sleep(stream, Duration::from_micros(10));
        let event = stream.record_event().unwrap();
        let graph = common::end_capture(stream).expect("the capture ends valid");
        nodes.push(graph.node_count());
        drop(event);
        wait_behind(stream, Duration::from_micros(100));
    }
    assert_eq!(
        nodes[0], nodes[1],
        "the lane stream's capture got other nodes than a plain stream's"
    );
}

/// Slots go back when their stream drops and serve the next lane streams: 150 lane streams alive
/// at once (more than two pages of slots), each with a wait pending on its last event, dropped
/// with the waits still pending; every wait still ends, the pages are released once the last
/// tickets land, and a lane stream made after that works.
#[test]
#[ignore = "needs a CUDA GPU"]
fn waits_on_dropped_lane_streams_end_and_their_slots_serve_new_streams() {
    let _gpu = gpu();
    let (streams, events) = lane_streams_behind(150, Duration::from_millis(20));
    let mut futures: Vec<_> = events.iter().map(|event| event.completion()).collect();
    let pending = futures
        .iter_mut()
        .map(|f| poll_once(f).is_pending())
        .filter(|&p| p)
        .count();
    drop(streams);
    for (i, future) in futures.into_iter().enumerate() {
        let done = block_on_timeout(future, Duration::from_secs(5));
        assert!(matches!(done, Some(Ok(()))), "wait {i}: {done:?}");
    }
    assert!(
        pending > 0,
        "no wait was pending at its first poll: the test waited on nothing"
    );
    release_lane_memory();
    let stream = lane_stream();
    wait_behind(&stream, Duration::from_millis(1));
    drop(stream);
    release_lane_memory();
}

/// A ticket that lands while its event is not complete wakes nothing: an event recorded on a lane
/// stream, its future armed, then recorded again on a plain stream held by a host function. The
/// lane stream's ticket lands, the future stays pending (the scanner queries before it finishes a
/// wait), and it ends once the hold opens, with its event complete.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_ticket_that_lands_before_its_event_completes_wakes_nothing() {
    let _gpu = gpu();
    if common::skip_under_sanitizer(super::HOST_FN_THREAD_BLOCKED) {
        return;
    }
    let (lane, plain) = (lane_stream(), plain_stream());
    wait_behind(&lane, Duration::from_micros(10)); // threads started
    let lane_held = common::hold(&lane);
    let event = lane.record_event().unwrap();
    let mut done = event.completion();
    assert!(poll_once(&mut done).is_pending(), "done before its work");
    let held = common::hold(&plain);
    event.record(&plain).unwrap();
    lane_held.open();
    lane.synchronize().unwrap(); // the lane's ticket has landed
    std::thread::sleep(Duration::from_millis(50));
    let pending = poll_once(&mut done).is_pending();
    held.open();
    let ended = block_on_timeout(done, Duration::from_secs(5));
    assert!(pending, "the wait ended on a ticket while its event was held");
    assert!(matches!(ended, Some(Ok(()))), "the wait did not end: {ended:?}");
    assert!(event.query().unwrap());
    drop((lane, plain));
    release_lane_memory();
}

/// A dropped lane stream's slot stays registered until its last ticket lands: lane streams
/// dropped with 100 ms of work still queued keep their page through a release made at once, and
/// a lane stream made meanwhile works; once the work is done the pages go.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dropped_lane_streams_page_stays_registered_until_its_last_ticket_lands() {
    let _gpu = gpu();
    release_lane_memory();
    let (streams, events) = lane_streams_behind(4, Duration::from_millis(100));
    let queued = || events.iter().filter(|e| !e.query().unwrap()).count();
    let queued_at_drop = queued();
    drop(streams);
    // SAFETY: no graph in this test binary holds a ticket's write (see `release_lane_memory`).
    let kept = unsafe { Stream::release_flag_lane_memory() }.unwrap();
    let busy = queued();
    println!("work queued: {queued_at_drop} of 4 at the drop, {busy} at the release; pages kept: {kept}");
    let newer = lane_stream();
    wait_behind(&newer, Duration::from_micros(100));
    drop(newer);
    for event in &events {
        event.synchronize().unwrap();
    }
    release_lane_memory();
    // Work still queued after the release had its ticket still to land at it.
    assert!(
        busy == 0 || kept > 0,
        "a page was released with tickets still to land"
    );
    // Under memcheck, which slows every call, the work may be done before the release: there the
    // test checks what it still can (no page released early, none left at the end).
    assert!(
        busy > 0 || common::under_sanitizer(),
        "the work ended before the release ({queued_at_drop} of 4 queued at the drop): the test saw no quarantine"
    );
}

/// The scanner backs off from a wait whose ticket does not come: a lane wait behind a host
/// function that blocks for 300 ms costs the process little CPU from 40 ms on (the scanner sleeps
/// between looks once 20 ms pass without news), and still ends once the host function returns.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_scanner_backs_off_from_a_lane_wait_whose_ticket_does_not_come() {
    let _gpu = gpu();
    if common::skip_under_sanitizer("measures the process's CPU, which memcheck's instrumentation inflates") {
        return;
    }
    let stream = lane_stream();
    wait_behind(&stream, Duration::from_micros(10)); // threads started
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    stream
        .launch_host_fn(move || {
            let _ = blocked.recv_timeout(Duration::from_secs(5));
        })
        .unwrap();
    let event = stream.record_event().unwrap();
    let mut done = event.completion();
    assert!(
        poll_once(&mut done).is_pending(),
        "done before the host function returned"
    );
    std::thread::sleep(Duration::from_millis(40));
    let (cpu, wall) = (common::process_cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_millis(240));
    let cores = (common::process_cpu_time() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
    release.send(()).unwrap();
    let ended = block_on_timeout(done, Duration::from_secs(5));
    assert!(matches!(ended, Some(Ok(()))), "the wait did not end: {ended:?}");
    drop(stream);
    release_lane_memory();
    println!("process CPU while the lane wait was stuck: {cores:.3} cores");
    assert!(
        cores < 0.3,
        "the process used {cores:.2} cores while a lane wait was stuck"
    );
}
