//! The GPU timeline on a GPU: ranges on four streams from two threads, nested, placed on the host's
//! clock beside host spans, written as a Chrome trace and read back; pending ranges left for a later
//! read; a capturing stream refused; a device reset in mid-trace.

use cuda_event_testkit as common;

use common::{THREAD_LOCAL, gpu, gpu_spin};
use cuda_event::trace::{Trace, TracedRange, Track};
use cuda_event::{Error, Stream};
use std::time::{Duration, Instant};

fn close(a: Duration, b: Duration, within: Duration) -> bool {
    a.max(b) - a.min(b) <= within
}

fn end(r: &TracedRange) -> Duration {
    r.start + r.duration
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ranges_on_four_streams_from_two_threads_nest_and_are_written_back() {
    if common::skip_under_sanitizer("its bounds are the kernels' own lengths, which memcheck stretches") {
        return;
    }
    let _gpu = gpu();
    let trace = Trace::new();
    std::thread::scope(|s| {
        for t in 0..2 {
            let trace = &trace;
            s.spawn(move || {
                let (a, b) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
                for _ in 0..3 {
                    let _step = trace.host_range(format!("step of thread {t}"));
                    let outer = trace.range(&a, "outer").unwrap();
                    gpu_spin(&a, Duration::from_micros(100));
                    trace
                        .in_range(&a, "inner", || gpu_spin(&a, Duration::from_micros(300)))
                        .unwrap();
                    gpu_spin(&a, Duration::from_micros(100));
                    outer.end().unwrap();
                    trace
                        .in_range(&b, "beside", || gpu_spin(&b, Duration::from_micros(400)))
                        .unwrap();
                }
                a.synchronize().unwrap();
                b.synchronize().unwrap();
            });
        }
    });
    let read = trace.take_complete();
    assert_eq!((read.lost, read.pending, read.open), (0, 0, 0), "{read:?}");
    assert_eq!(read.ranges.len(), 2 * 3 * 4);
    assert!(read.max_anchor_error < Duration::from_millis(1), "{read:?}");
    let streams: std::collections::BTreeSet<Track> = read
        .ranges
        .iter()
        .filter(|r| matches!(r.track, Track::Gpu { .. }))
        .map(|r| r.track)
        .collect();
    assert_eq!(streams.len(), 4);
    let slack = read.max_anchor_error + Duration::from_micros(5);
    // Per thread, the k-th step, outer and inner range are one iteration's: the GPU runs behind
    // the host, so only the order pairs them.
    for thread in [1, 2] {
        let of = |name: &str| {
            let mut v: Vec<&TracedRange> = read
                .ranges
                .iter()
                .filter(|r| r.thread == thread && r.name.starts_with(name))
                .collect();
            v.sort_by_key(|r| r.start);
            v
        };
        let (steps, outers, inners) = (of("step of thread"), of("outer"), of("inner"));
        assert_eq!(
            (steps.len(), outers.len(), inners.len()),
            (3, 3, 3),
            "thread {thread}"
        );
        for ((step, outer), inner) in steps.iter().zip(&outers).zip(&inners) {
            assert!(
                matches!(step.track, Track::Host { .. }) && step.depth == 0,
                "{step:?}"
            );
            assert_eq!((outer.depth, inner.depth, outer.track), (1, 2, inner.track));
            assert!(
                inner.start >= outer.start && end(inner) <= end(outer),
                "{inner:?} not inside {outer:?}"
            );
            assert!(
                inner.duration >= Duration::from_micros(300) && inner.duration < Duration::from_micros(400),
                "{inner:?}"
            );
            assert!(outer.duration >= Duration::from_micros(500), "{outer:?}");
            // The GPU starts a range after the host opened it, within the clock's error.
            assert!(step.start <= outer.start + slack, "{step:?} {outer:?}");
        }
    }
    let mut file = Vec::new();
    // A write after a read writes only what completed since.
    trace.in_host_range("after", || ());
    let summary = trace.write_chrome(&mut file).unwrap();
    assert_eq!(summary.written, 1);
    // Written back, from the start: one X event per range.
    let trace = Trace::new();
    let stream = Stream::new(0).unwrap();
    for i in 0..10 {
        trace
            .in_range(&stream, format!("range {i}"), || {
                gpu_spin(&stream, Duration::from_micros(50))
            })
            .unwrap();
    }
    stream.synchronize().unwrap();
    let mut file = Vec::new();
    let summary = trace.write_chrome(&mut file).unwrap();
    let text = String::from_utf8(file).unwrap();
    assert_eq!(summary.written, 10);
    assert_eq!(text.matches("\"ph\":\"X\"").count(), 10);
    assert!(text.contains("\"name\":\"GPU 0\""), "{text}");
    assert!(text.contains("\"cat\":\"gpu\""));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_range_around_a_kernel_of_known_length_starts_at_its_launch_on_the_hosts_clock() {
    if common::skip_under_sanitizer("its bounds are the kernel's own length, which memcheck stretches") {
        return;
    }
    let _gpu = gpu();
    let trace = Trace::new();
    let stream = Stream::new(0).unwrap();
    // Warm: the kernel loaded, the device's first anchor made.
    trace
        .in_range(&stream, "warm", || gpu_spin(&stream, Duration::from_micros(10)))
        .unwrap();
    stream.synchronize().unwrap();
    trace.take_complete();
    let mut worst = Duration::ZERO;
    let mut lengths = Vec::new();
    for _ in 0..20 {
        let launched = Instant::now();
        trace
            .in_range(&stream, "1 ms", || gpu_spin(&stream, Duration::from_millis(1)))
            .unwrap();
        stream.synchronize().unwrap();
        let read = trace.take_complete();
        let r = &read.ranges[0];
        // On an idle stream the start record runs at once and the kernel once the host's launch
        // reaches the GPU: a range holds that launch time too, tens of microseconds at worst on a
        // busy host (its median is held to the kernel's length below).
        assert!(
            r.duration >= Duration::from_micros(990) && r.duration <= Duration::from_micros(1200),
            "{r:?}"
        );
        lengths.push(r.duration);
        // The GPU starts the range after the host asked for it, and soon on an idle stream.
        let at = launched.saturating_duration_since(trace.started());
        let slack = read.max_anchor_error + Duration::from_micros(2);
        assert!(
            r.start + slack >= at,
            "placed {:?} before its launch",
            at - r.start
        );
        worst = worst.max(r.start.saturating_sub(at));
    }
    lengths.sort();
    let median = lengths[lengths.len() / 2];
    println!("range start after the host's launch: worst {worst:?}; median length {median:?}");
    assert!(
        close(median, Duration::from_millis(1), Duration::from_micros(20)),
        "{lengths:?}"
    );
    assert!(worst < Duration::from_micros(200), "{worst:?}");
}

/// A collector reads the trace (the first read of the process's trace, so it makes the device's
/// anchor stream and anchors) and ranges open and close on other streams, while another thread
/// holds a capture in global mode, the default of `torch.cuda.graph`: the capture ends valid with
/// its one node, and the ranges are read.
#[test]
#[ignore = "needs a CUDA GPU"]
fn reading_beside_another_threads_global_mode_capture_leaves_it_valid() {
    let _gpu = gpu();
    let trace = Trace::new();
    let (traced, captured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    for _ in 0..3 {
        trace
            .in_range(&traced, "before", || gpu_spin(&traced, Duration::from_micros(20)))
            .unwrap();
    }
    traced.synchronize().unwrap();
    let (reads, capture) = common::beside_a_global_capture(&captured, || {
        let mut reads = vec![trace.take_complete()];
        trace
            .in_range(&traced, "beside", || gpu_spin(&traced, Duration::from_micros(20)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reads.iter().map(|r| r.ranges.len()).sum::<usize>() < 4 && Instant::now() < deadline {
            reads.push(trace.take_complete());
        }
        reads
    });
    assert_eq!(capture, Ok(()), "a trace's read broke the other thread's capture");
    let (ranges, lost) = reads
        .iter()
        .fold((0, 0), |(n, l), r| (n + r.ranges.len(), l + r.lost));
    assert_eq!((ranges, lost), (4, 0), "{reads:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pending_ranges_stay_for_a_later_read_and_a_capturing_stream_is_refused() {
    let _gpu = gpu();
    let trace = Trace::new();
    let stream = Stream::new(0).unwrap();
    trace
        .in_range(&stream, "long", || gpu_spin(&stream, Duration::from_millis(50)))
        .unwrap();
    let read = trace.take_complete();
    assert_eq!((read.ranges.len(), read.pending), (0, 1), "{read:?}");
    stream.synchronize().unwrap();
    let read = trace.take_complete();
    assert_eq!((read.ranges.len(), read.pending), (1, 0), "{read:?}");
    assert_eq!(trace.held(), 0);

    let capturing = Stream::new(0).unwrap();
    common::begin_capture(&capturing, THREAD_LOCAL);
    let refused = trace.range(&capturing, "in a capture");
    assert!(matches!(refused, Err(Error::StreamCapturing)), "{refused:?}");
    // Opened before a capture began, closed inside it: refused at the close, read as lost.
    let other = Stream::new(0).unwrap();
    let open = trace.range(&other, "before the capture").unwrap();
    drop(common::end_capture(&capturing));
    common::begin_capture(&other, THREAD_LOCAL);
    assert!(matches!(open.end(), Err(Error::StreamCapturing)));
    drop(common::end_capture(&other));
    let read = trace.take_complete();
    assert_eq!(
        (read.ranges.len(), read.lost, trace.held()),
        (0, 1, 0),
        "{read:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_reset_mid_trace_loses_the_pending_ranges_counted_and_later_ranges_work() {
    if common::skip_under_sanitizer(
        "its point is a device reset: the crate then asks CUDA whether the destroyed context is gone, an error memcheck reports",
    ) {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "reset").is_none() {
        return;
    }
    let trace = Trace::new();
    let stream = Stream::new(0).unwrap();
    trace
        .in_range(&stream, "read before", || {
            gpu_spin(&stream, Duration::from_micros(10))
        })
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(trace.take_complete().ranges.len(), 1);
    // Closed, its work queued; then open across the reset.
    trace
        .in_range(&stream, "pending", || {
            gpu_spin(&stream, Duration::from_millis(20))
        })
        .unwrap();
    let open = trace.range(&stream, "open across the reset").unwrap();
    cuda_event::set_device(0).unwrap();
    // SAFETY: resets device 0; the stream and the trace's events are stale afterwards, the point.
    common::ok(unsafe { cuda_event::sys::cudaDeviceReset() });
    let closed = open.end();
    println!("closing a range across the reset: {closed:?}");
    drop(stream);
    let read = trace.take_complete();
    println!("read after the reset: {read:?}");
    assert!(read.ranges.is_empty(), "{read:?}");
    assert_eq!((read.pending, read.open), (0, 0), "{read:?}");
    assert!(read.lost >= 1, "the pending range is lost, and counted: {read:?}");
    // A new stream of the reset device: ranges are recorded, read and written again (around a
    // memset: the test kit's kernels were loaded into the context the reset destroyed).
    let fresh = Stream::new(0).unwrap();
    let buffer = common::TestBuffer::new(0, 1 << 20);
    for i in 0..3 {
        trace
            .in_range(&fresh, format!("after {i}"), || buffer.memset(&fresh, 0))
            .unwrap();
    }
    fresh.synchronize().unwrap();
    let read = trace.take_complete();
    assert_eq!((read.ranges.len(), read.pending), (3, 0), "{read:?}");
    let mut file = Vec::new();
    trace.in_host_range("written", || ());
    assert_eq!(trace.write_chrome(&mut file).unwrap().written, 1);
    let _ = cuda_event::drop_errors::take_drop_errors();
}
