//! Captures that several threads meet: records into one thread's capture beside another's end,
//! the crate's own captures begun and ended beside records and reads on the same stream, and the
//! captured CUDA events that many short-lived capturing threads leave behind. Each of these
//! crashed, or grew without bound, before captured CUDA events were bound to their capture
//! (review 3's S1 and S2, the begin-capture race).

use cuda_event_testkit as common;

use common::{RELAXED, THREAD_LOCAL, begin_capture, end_capture, gpu_for};
use cuda_event::capture::CaptureMode;
use cuda_event::{Error, Event, Stream, StreamOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rounds of each stress test: 10,000, or `CUDA_EVENT_SOAK_ROUNDS` where that is fewer (the
/// sanitizer's run).
fn rounds() -> usize {
    std::env::var("CUDA_EVENT_SOAK_ROUNDS").map_or(10_000, |v| v.parse::<usize>().unwrap().min(10_000))
}

fn new_stream() -> Stream {
    Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap()
}

/// Two threads' meeting point, as `std::sync::Barrier`, which gives up with a panic after 10 s: a
/// thread whose peer panicked fails the test instead of waiting forever.
struct Meet {
    arrived: parking_lot::Mutex<(u64, usize)>,
    all_here: parking_lot::Condvar,
}

impl Meet {
    fn new() -> Meet {
        Meet {
            arrived: parking_lot::Mutex::new((0, 0)),
            all_here: parking_lot::Condvar::new(),
        }
    }

    fn wait(&self) {
        let mut arrived = self.arrived.lock();
        let generation = arrived.0;
        arrived.1 += 1;
        if arrived.1 == 2 {
            *arrived = (generation + 1, 0);
            self.all_here.notify_all();
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while arrived.0 == generation {
            if self.all_here.wait_until(&mut arrived, deadline).timed_out() {
                panic!("the other thread never came (it panicked or hung)");
            }
        }
    }
}

/// Busy-waits `micros` microseconds: a varying offset between two threads' calls.
fn spin(micros: u64) {
    let until = Instant::now() + Duration::from_micros(micros);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Whether a read of an event gave what a read may give here: an answer, or 907 for an event
/// whose last record went into a capture.
fn is_a_reads_answer(read: &Result<bool, Error>) -> bool {
    match read {
        Ok(_) => true,
        Err(Error::Cuda(e)) => e.code() == 907,
        Err(_) => false,
    }
}

/// `Stream::capture` with a fork and join through the crate's waits captures both streams' work
/// (none of it runs during the capture), and each replay that `Graph::launch_completion` awaits
/// does it again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_through_the_crate_replays_its_forked_work_at_each_awaited_launch() {
    let _gpu = common::gpu();
    let (main, side) = (new_stream(), new_stream());
    let (first, second) = (
        common::TestBuffer::new(0, 1 << 20),
        common::TestBuffer::new(0, 1 << 20),
    );
    first.memset(&main, 0);
    second.memset(&main, 0);
    main.synchronize().unwrap();
    let graph = main
        .capture(CaptureMode::ThreadLocal, |s| {
            first.memset(s, 3);
            side.wait_stream(s)?; // fork
            second.memset(&side, 5);
            s.wait_stream(&side) // join
        })
        .unwrap();
    assert_eq!(
        (first.read(16), second.read(16)),
        (vec![0; 16], vec![0; 16]),
        "ran during the capture"
    );
    for _ in 0..2 {
        common::block_on(graph.launch_completion(&main).unwrap()).unwrap();
        assert_eq!(first.read(1 << 20), vec![3; 1 << 20]);
        assert_eq!(second.read(1 << 20), vec![5; 1 << 20]);
        first.memset(&main, 0);
        second.memset(&main, 0);
        main.synchronize().unwrap();
    }
}

/// S1's shape: thread U captures stream A (C1); thread T records an `Event` into C1, then, while
/// U ends C1, records an `Event` into C2, its own capture of stream B, and forks and joins C2
/// through the crate. The second `Event` is the same one in half the rounds, and in the other half
/// a new one (which a pool could hand C1's CUDA event). C1 is ended by raw CUDA; C2 alternately by
/// raw CUDA and through `Stream::capture`. Every capture ends valid, and nothing crashes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn records_into_a_capture_beside_the_end_of_another_that_held_the_event_never_crash() {
    let _gpu = gpu_for(Duration::from_secs(300));
    let (a, b, side) = (new_stream(), new_stream(), new_stream());
    let rounds = rounds();
    let before = cuda_event::pool::cuda_events_alive();
    let meet = Meet::new();
    let reused = Event::new();
    let began = Instant::now();
    let c1_failed = std::thread::scope(|s| {
        let ender = s.spawn(|| {
            let mut failed = 0;
            for round in 0..rounds {
                let mode = match round % 3 {
                    0 => RELAXED,
                    _ => THREAD_LOCAL,
                };
                begin_capture(&a, mode);
                meet.wait(); // C1 is open
                meet.wait(); // T recorded into C1 and opened C2
                spin(round as u64 % 9);
                failed += usize::from(end_capture(&a).is_err());
                meet.wait(); // the round is over
            }
            failed
        });
        for round in 0..rounds {
            let fresh = (round / 2) % 2 == 1;
            meet.wait();
            let first = Event::new();
            let into_c1 = if fresh { &first } else { &reused };
            into_c1.record(&a).unwrap();
            drop(first);
            let second = Event::new();
            let into_c2 = if fresh { &second } else { &reused };
            let work = |b: &Stream| -> cuda_event::Result<()> {
                meet.wait(); // U ends C1 from now on
                into_c2.record(b)?;
                side.wait_stream(b)?; // fork: its temporary event is a captured one
                b.wait_stream(&side) // join
            };
            if round % 2 == 0 {
                begin_capture(&b, THREAD_LOCAL);
                work(&b).unwrap();
                end_capture(&b).unwrap_or_else(|e| panic!("round {round}: C2 ended invalid: {e}"));
            } else {
                let graph = b.capture(CaptureMode::ThreadLocal, work);
                drop(graph.unwrap_or_else(|e| panic!("round {round}: C2 ended invalid: {e}")));
            }
            meet.wait();
        }
        ender.join().unwrap()
    });
    println!("{rounds} rounds in {:?}", began.elapsed());
    assert_eq!(c1_failed, 0, "captures of A that ended invalid");
    drop(reused);
    // Every graph is gone, so every captured CUDA event's capture is over: what is kept is bounded
    // by the pools, not by the rounds.
    let kept = cuda_event::pool::cuda_events_alive() - before;
    assert!(kept <= 128, "{kept} CUDA events kept after {rounds} rounds");
}

/// The begin-capture race, through the crate's own capture: thread B captures a stream again and
/// again with `Stream::capture`, while thread A records an event on it and launches host
/// functions there, and thread C reads that event. No record straddles a begin or an end, so every
/// capture ends valid, every read answers (or says 907 for a record that went into a capture), and
/// nothing crashes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_crates_captures_beside_records_host_functions_and_reads_on_their_stream_never_crash() {
    let _gpu = gpu_for(Duration::from_secs(300));
    let stream = new_stream();
    let rounds = rounds();
    let event = Event::new();
    let stop = AtomicBool::new(false);
    let (records, captured, reads, host_fns) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let began = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                event.record(&stream).unwrap();
                records.fetch_add(1, Ordering::Relaxed);
                match stream.launch_host_fn(|| {}) {
                    Ok(()) => drop(host_fns.fetch_add(1, Ordering::Relaxed)),
                    Err(Error::StreamCapturing) => drop(captured.fetch_add(1, Ordering::Relaxed)),
                    Err(e) => panic!("a host function's launch gave {e}"),
                }
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let read = event.query();
                assert!(is_a_reads_answer(&read), "a query gave {read:?}");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        for round in 0..rounds {
            let mode = match round % 2 {
                0 => CaptureMode::ThreadLocal,
                _ => CaptureMode::Relaxed,
            };
            let graph = stream.capture(mode, |_| {
                spin(round as u64 % 5);
                Ok(())
            });
            if let Err(e) = graph {
                stop.store(true, Ordering::Relaxed);
                panic!("round {round}: the capture ended invalid: {e}");
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    stream.synchronize().unwrap();
    println!(
        "{rounds} captures in {:?}; {} records, {} host functions launched, {} refused for a capture, {} reads",
        began.elapsed(),
        records.into_inner(),
        host_fns.into_inner(),
        captured.into_inner(),
        reads.into_inner()
    );
}

/// 10,000 short-lived threads each record an event into a capture (half of them ended by raw
/// CUDA, half through `Stream::capture`), and half of those events are dropped on another thread:
/// the CUDA events kept stay bounded by the pools, not by the threads that ever ran.
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_events_alive_stays_bounded_over_10000_threads_that_each_capture() {
    let _gpu = gpu_for(Duration::from_secs(300));
    let stream = new_stream();
    let rounds = rounds();
    // The thread's pools and the kept captured events, warmed.
    drop(stream.record_event().unwrap());
    let before = cuda_event::pool::cuda_events_alive();
    let (mut most, began) = (0, Instant::now());
    for round in 0..rounds {
        let stream = &stream;
        let event = std::thread::scope(|s| {
            s.spawn(move || {
                let event = Event::new();
                if round % 2 == 0 {
                    begin_capture(stream, THREAD_LOCAL);
                    event.record(stream).unwrap();
                    end_capture(stream).expect("the capture ends valid");
                } else {
                    drop(
                        stream
                            .capture(CaptureMode::ThreadLocal, |s| event.record(s))
                            .unwrap(),
                    );
                }
                (round % 4 < 2).then_some(event) // else dropped on its thread
            })
            .join()
            .unwrap()
        });
        drop(event); // on this thread, not the one that recorded it
        most = most.max(cuda_event::pool::cuda_events_alive().saturating_sub(before));
    }
    println!(
        "{rounds} threads in {:?}; at most {most} more CUDA events alive",
        began.elapsed()
    );
    assert!(
        most <= 128,
        "{most} more CUDA events alive at most over {rounds} threads"
    );
}

/// The packaged `capture` example, run as a user would: its three timed replays and the awaited
/// one, each replay's time above zero (its external timing events recorded by every replay).
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_capture_example_replays_its_graph_and_awaits_a_replay() {
    let _gpu = gpu_for(Duration::from_secs(60));
    let stdout = common::run_example("capture");
    for replay in 1..=3 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("replay {replay}:")))
            .unwrap_or_else(|| panic!("no replay {replay}: {stdout}"));
        let us: f64 = line
            .rsplit(" in ")
            .next()
            .unwrap()
            .trim_end_matches(" us")
            .parse()
            .unwrap();
        assert!(us > 0.0, "{line}");
    }
    assert!(stdout.contains("replay 4, awaited: complete"), "{stdout}");
}
