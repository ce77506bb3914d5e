//! Records from several threads, each on its own stream, on the streams the crate makes: at the
//! rate of the streams CUDA takes records fastest on. A stream that never had a timing event
//! recorded on it takes them at a lower rate (`bench/probes/stream_first_use.c`), so the crate
//! records one on each stream it makes (`stream/prime.rs`).
//!
//! The referee is a runtime-made stream given a timing record, and the control, printed so that a
//! run shows the effect on its card, is one given nothing; all three are timed in the same rounds,
//! interleaved, with the same raw record call, so only the stream differs.

use cuda_event_testkit as common;

use common::{gpu, ok};
use cuda_event::{Stream, StreamOptions, sys};
use std::sync::Barrier;
use std::time::Instant;

const THREADS: usize = 4;
const RECORDS: usize = 20_000;
const ROUNDS: usize = 9;

/// A raw handle that threads may share: CUDA streams and events may be used from any thread.
#[derive(Clone, Copy)]
struct Handle(usize);

fn runtime_stream(primed: bool) -> Handle {
    let mut stream = std::ptr::null_mut();
    // SAFETY: device 0 exists (the test holds the GPU); writes through live locals; the event is
    // recorded on the stream just made, waited for, and destroyed.
    unsafe {
        ok(sys::cudaSetDevice(0));
        ok(sys::cudaStreamCreateWithFlags(
            &mut stream,
            sys::cudaStreamNonBlocking,
        ));
        if primed {
            let mut timing = std::ptr::null_mut();
            ok(sys::cudaEventCreateWithFlags(&mut timing, sys::cudaEventDefault));
            ok(sys::cudaEventRecord(timing, stream));
            ok(sys::cudaStreamSynchronize(stream));
            ok(sys::cudaEventDestroy(timing));
        }
    }
    Handle(stream as usize)
}

/// Records per second of THREADS threads, each recording its own event on its own stream.
fn rate(streams: &[Handle], events: &[Handle]) -> f64 {
    let barrier = Barrier::new(THREADS + 1);
    let start = std::thread::scope(|s| {
        for (stream, event) in streams.iter().zip(events) {
            let barrier = &barrier;
            let (stream, event) = (*stream, *event);
            s.spawn(move || {
                // SAFETY: device 0 exists.
                ok(unsafe { sys::cudaSetDevice(0) });
                barrier.wait();
                for _ in 0..RECORDS {
                    // SAFETY: a live event and stream of device 0, used by this thread alone.
                    ok(unsafe {
                        sys::cudaEventRecord(event.0 as sys::cudaEvent_t, stream.0 as sys::cudaStream_t)
                    });
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    let elapsed = start.elapsed().as_secs_f64();
    for stream in streams {
        // SAFETY: a live stream.
        ok(unsafe { sys::cudaStreamSynchronize(stream.0 as sys::cudaStream_t) });
    }
    (THREADS * RECORDS) as f64 / elapsed
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn records_from_several_threads_on_the_crates_streams_run_at_a_primed_streams_rate() {
    let _gpu = gpu();
    let options = StreamOptions::default().non_blocking(true);
    // Made in turn, thread by thread, so that no kind of stream gets the first places in CUDA's
    // order of creation.
    let (mut crate_streams, mut primed, mut unprimed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..THREADS {
        crate_streams.push(Stream::with_options(0, options).unwrap());
        primed.push(runtime_stream(true));
        unprimed.push(runtime_stream(false));
    }
    let ours: Vec<Handle> = crate_streams
        .iter()
        .map(|s| Handle(s.as_raw() as usize))
        .collect();
    let events: Vec<Handle> = (0..THREADS)
        .map(|_| {
            let mut event = std::ptr::null_mut();
            // SAFETY: writes through a live local, on device 0.
            ok(unsafe { sys::cudaEventCreateWithFlags(&mut event, sys::cudaEventDisableTiming) });
            Handle(event as usize)
        })
        .collect();
    let arms = [&ours, &primed, &unprimed];
    let (mut ours_vs_primed, mut unprimed_vs_primed) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let mut rates = [0.0; 3];
        for k in 0..arms.len() {
            let arm = (k + round) % arms.len(); // who goes first rotates
            rates[arm] = rate(arms[arm], &events);
        }
        if round > 0 {
            // Round 0 warms up.
            ours_vs_primed.push(rates[0] / rates[1]);
            unprimed_vs_primed.push(rates[2] / rates[1]);
        }
    }
    let (ours, control) = (median(ours_vs_primed), median(unprimed_vs_primed));
    println!(
        "{THREADS} threads' records, median ratio to a primed runtime-made stream: the crate's streams {ours:.2}x, \
         unprimed runtime-made streams {control:.2}x (the control)"
    );
    for handle in primed.iter().chain(&unprimed) {
        // SAFETY: made above, idle (each rate() synchronized them), destroyed once.
        ok(unsafe { sys::cudaStreamDestroy(handle.0 as sys::cudaStream_t) });
    }
    for event in &events {
        // SAFETY: made above, destroyed once.
        ok(unsafe { sys::cudaEventDestroy(event.0 as sys::cudaEvent_t) });
    }
    assert!(
        ours >= 0.8,
        "records on the crate's streams ran at {ours:.2}x a primed stream's rate (unprimed: {control:.2}x)"
    );
}
