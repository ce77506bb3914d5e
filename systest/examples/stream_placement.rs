//! Does the way a stream is made, or what was done on it first, change how fast records on it
//! scale across threads? Aggregate `cudaEventRecord` calls/s from 1-8 threads, each recording its
//! own event on its own stream, for streams made ten ways (runtime with flags, runtime with
//! priority, driver with priority, cuda-event's `Stream`, runtime with flags again as the last
//! made, and streams that first got timing and/or plain event records and a synchronize, as the
//! events benchmark's raw baseline stream does), medians of 5 interleaved rounds; `--reverse` makes
//! each thread's streams in the opposite order.
//!
//! Found on an H200 (issue 10, 2026-11-30; bench/results/2026-11-30-h200-timing-3): neither the
//! API that made a stream nor what was done on it first decides. With eight variants a thread, the
//! two that had timing and plain records ran 1.56-1.79x the others at 8 threads in three runs; with
//! ten variants (two more streams a thread), none did. Where a stream falls among the streams made
//! moves its throughput, in a pattern not worked out, so the events benchmark compares
//! implementations on the same stream.
//!
//! Run on a GPU machine: `cargo run --release -p cuda-event-systest --example stream_placement`.
use cuda_event::{Stream, StreamOptions, sys};
use std::time::Instant;

fn ok(code: sys::cudaError_t) {
    // A probe: any failure ends it.
    assert_eq!(code, sys::cudaError_t::cudaSuccess);
}

const NAMES: [&str; VARIANTS] = [
    "runtime WithFlags",
    "runtime WithPriority(0)",
    "driver cuStreamCreateWithPriority(0)",
    "cuda-event Stream",
    "runtime WithFlags (made last)",
    "runtime WithFlags + timing and plain records + sync",
    "cuda-event Stream + timing and plain records + sync",
    "cuda-event Stream + stream sync",
    "cuda-event Stream + timing records + sync",
    "cuda-event Stream + plain records + sync",
];
const VARIANTS: usize = 10;

struct PerThread {
    streams: [usize; VARIANTS],
    events: [usize; VARIANTS],
    _keep: Vec<Stream>,
}

fn main() {
    let reverse = std::env::args().any(|a| a == "--reverse");
    // SAFETY: the pointer is the driver's cuStreamCreateWithPriority at the version the PFN type names.
    let create_prio: sys::PFN_cuStreamCreateWithPriority_v5050 = unsafe {
        std::mem::transmute_copy(
            &cuda_event::driver_entry_point(c"cuStreamCreateWithPriority", 5050).unwrap(),
        )
    };
    // SAFETY: device 0 exists (the driver entry point above resolved).
    unsafe { ok(sys::cudaSetDevice(0)) };
    let mut all = Vec::new();
    for _ in 0..8 {
        let mut streams = [0usize; VARIANTS];
        let mut keep = Vec::new();
        let mut order: Vec<usize> = (0..VARIANTS).collect();
        if reverse {
            order.reverse();
        }
        for v in order {
            let mut s: sys::cudaStream_t = std::ptr::null_mut();
            // SAFETY: each call writes a new stream of device 0 through a live local; the records and
            // the synchronize use that live stream and events just made.
            unsafe {
                match v {
                    0 | 4 | 5 => ok(sys::cudaStreamCreateWithFlags(&mut s, sys::cudaStreamNonBlocking)),
                    1 => ok(sys::cudaStreamCreateWithPriority(
                        &mut s,
                        sys::cudaStreamNonBlocking,
                        0,
                    )),
                    2 => {
                        let mut cs = std::ptr::null_mut();
                        assert_eq!(create_prio.unwrap()(&mut cs, 1, 0), sys::CUresult::CUDA_SUCCESS);
                        s = cs.cast();
                    }
                    _ => {
                        let st =
                            Stream::with_options(0, StreamOptions::default().non_blocking(true)).unwrap();
                        s = st.as_raw();
                        keep.push(st);
                    }
                }
                // What the events benchmark's raw objects do to their stream, whose records scale
                // better there than on streams made by cuda-event or cudarc.
                let flags: &[u32] = match v {
                    5 | 6 => &[sys::cudaEventDefault, sys::cudaEventDisableTiming],
                    8 => &[sys::cudaEventDefault],
                    9 => &[sys::cudaEventDisableTiming],
                    _ => &[],
                };
                for &flags in flags {
                    for _ in 0..3 {
                        let mut ev = std::ptr::null_mut();
                        ok(sys::cudaEventCreateWithFlags(&mut ev, flags));
                        ok(sys::cudaEventRecord(ev, s));
                    }
                }
                if v >= 5 {
                    ok(sys::cudaStreamSynchronize(s));
                }
            }
            streams[v] = s as usize;
        }
        let mut events = [0usize; VARIANTS];
        for e in &mut events {
            let mut ev = std::ptr::null_mut();
            // SAFETY: writes a new event through a live local.
            unsafe {
                ok(sys::cudaEventCreateWithFlags(
                    &mut ev,
                    sys::cudaEventDisableTiming,
                ))
            };
            *e = ev as usize;
        }
        all.push(PerThread {
            streams,
            events,
            _keep: keep,
        });
    }
    const N: usize = 50_000;
    for threads in [1, 2, 4, 8] {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS];
        for round in 0..6 {
            for k in 0..VARIANTS {
                let v = (k + round) % VARIANTS;
                let barrier = std::sync::Barrier::new(threads + 1);
                let start = std::thread::scope(|scope| {
                    for objects in all.iter().take(threads) {
                        let (s, e) = (objects.streams[v], objects.events[v]);
                        let barrier = &barrier;
                        scope.spawn(move || {
                            // SAFETY: device 0 exists.
                            unsafe { ok(sys::cudaSetDevice(0)) };
                            for _ in 0..1000 {
                                // SAFETY: a live event and stream of device 0, kept until main ends.
                                unsafe { ok(sys::cudaEventRecord(e as _, s as _)) };
                            }
                            barrier.wait();
                            for _ in 0..N {
                                // SAFETY: as in the warm-up loop.
                                unsafe { ok(sys::cudaEventRecord(e as _, s as _)) };
                            }
                        });
                    }
                    barrier.wait();
                    Instant::now()
                });
                let secs = start.elapsed().as_secs_f64();
                if round > 0 {
                    samples[v].push((threads * N) as f64 / secs);
                }
                // SAFETY: no arguments; waits for device 0's work.
                unsafe { ok(sys::cudaDeviceSynchronize()) };
            }
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let base = med(&mut samples[0].clone());
        for v in 0..VARIANTS {
            let m = med(&mut samples[v]);
            println!(
                "threads {threads} {:40} {:>10.0} calls/s  {:.2}x",
                NAMES[v],
                m,
                m / base
            );
        }
    }
}
