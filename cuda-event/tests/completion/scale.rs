//! Thousands of futures at once: the ones whose work ends wake within milliseconds, making and
//! dropping them never blocks, and a million of them leak nothing.

use cuda_event_testkit as common;

use common::{block_on, gpu_for, gpu_sleep, poll_once, two_gpus_for};
use cuda_event::{Completion, Event, Stream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Among 10,000 futures pending on another, held stream (each also confirmed by the reactor's
/// walk once a second), an event's future on 5 ms of work resolves within about a millisecond of
/// its work: the reactor queries each stream's oldest pending event, not every one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_future_wakes_as_its_work_ends_among_ten_thousand_pending_on_a_held_stream() {
    if common::skip_under_sanitizer(
        "a wake-up latency bound beside a held stream, and under memcheck a launch waits for the kernel before it",
    ) {
        return;
    }
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
    let (rss, alive) = (common::resident_kib(), cuda_event::pool::cuda_events_alive());
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
    let (rss_after, alive_after) = (common::resident_kib(), cuda_event::pool::cuda_events_alive());
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
        alive_after <= alive + cuda_event::pool::POOL_PER_THREAD as u64,
        "CUDA events leaked"
    );
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
    if common::skip_under_sanitizer(
        "queues kernels behind a running one, and under memcheck each launch waits for the kernel before it",
    ) {
        return;
    }
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
        // The latest ten, by step: one stall of the machine shows as neighbouring steps.
        let mut latest: Vec<_> = late.iter().rev().take(10).map(|&(d, i)| (i, d)).collect();
        latest.sort();
        let latest: Vec<_> = latest.iter().map(|(i, d)| format!("{i}: {d:?}")).collect();
        assert!(
            p99 < Duration::from_millis(2),
            "{kind} futures: p99 {p99:?}; the latest by step: {}",
            latest.join(", ")
        );
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
    if common::skip_under_sanitizer("a wake-up latency bound on work that memcheck slows") {
        return;
    }
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
