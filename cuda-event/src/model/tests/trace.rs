//! The trace: its reads (the ranges' events, the clock's anchors) beside another thread's
//! capture, and its ranges after a device reset.

use super::check_once;
use super::scenario::{beside_a_global_capture, reset};
use crate::stream::Stream;
use crate::sync::thread;
use crate::trace::Trace;

/// A collector thread reads the trace (the ranges' events, the anchors' queries) while another
/// thread holds a global-mode capture, as `torch.cuda.graph` makes: the reads are the trace's
/// own calls, in relaxed mode, so the capture ends valid, and the ranges are read.
#[test]
fn reading_beside_another_threads_global_capture_leaves_it_valid() {
    check_once(|| {
        let trace = Trace::new();
        let (s, cap) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
        for _ in 0..2 {
            trace.range(&s, "before the capture").unwrap().end().unwrap();
        }
        let (read, capture) = beside_a_global_capture(&cap, || trace.take_complete());
        assert_eq!(capture, Ok(()), "the read broke the capture");
        let later = trace.take_complete();
        assert_eq!(
            (read.ranges.len() + later.ranges.len(), read.lost + later.lost),
            (2, 0),
            "{read:?} {later:?}"
        );
    });
}

/// After a device reset, the events a lane kept died with the context: a range on a new
/// stream of the device drops them and records on a new one.
#[test]
fn ranges_work_again_after_a_reset() {
    check_once(|| {
        let trace = Trace::new();
        let s = Stream::new(0).unwrap();
        for _ in 0..3 {
            trace.range(&s, "before the reset").unwrap().end().unwrap();
        }
        assert_eq!(trace.take_complete().ranges.len(), 3);
        thread::spawn(|| reset(0)).join().unwrap();
        drop(s);
        let fresh = Stream::new(0).unwrap();
        for i in 0..3 {
            let r = trace.range(&fresh, "after the reset");
            assert!(r.is_ok(), "attempt {i}: {:?}", r.as_ref().err());
            r.unwrap().end().unwrap();
        }
        let read = trace.take_complete();
        assert_eq!((read.ranges.len(), read.lost), (3, 0), "{read:?}");
    });
}

/// A trace's read never waits for a range whose record CUDA blocks on a full queue: the opener
/// holds no lane's lock across its record, and `take_complete` takes every lane's lock. Here the
/// queue gets room only after the read returns (as when the reader is what lets the stream go
/// on). (It failed when the opener held its lane's lock across the record: the read never
/// returned.)
#[test]
fn a_trace_read_never_waits_for_a_range_blocked_on_a_full_queue() {
    use super::check;
    use super::scenario::{fill, release, stream};
    use std::sync::Arc;
    check(20, || {
        let trace = Arc::new(Trace::new());
        let (full, free) = (stream(), stream());
        trace.range(&free, "complete").unwrap().end().unwrap();
        fill(&full);
        let opener = {
            let (trace, full) = (trace.clone(), full.clone());
            thread::spawn(move || {
                // Any lane will do; this thread's own is made here.
                let _ = trace.range(&full, "blocked").map(|r| r.end());
            })
        };
        let read = trace.take_complete();
        release(&full);
        opener.join().unwrap();
        assert_eq!(read.ranges.len(), 1, "{read:?}");
    });
}

/// A range that stays open (an outer "whole run" range, or a forgotten guard) keeps only the
/// anchor it needs, not every anchor made since its open: counted as the CUDA events that reads
/// create in a steady trace, with and without the open range. (It failed when the clock kept every
/// anchor from the oldest open range's epoch on: one more CUDA event per read.)
#[test]
fn an_open_range_does_not_make_the_clock_grow_without_bound() {
    use super::scenario::{calls, reset_calls};
    check_once(|| {
        let created_per_reads = |keep_one_open: bool| {
            let trace = Trace::new();
            let (a, b) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
            let outer = keep_one_open.then(|| trace.range(&a, "the whole run").unwrap());
            let read = || {
                trace.range(&b, "step").unwrap().end().unwrap();
                assert_eq!(trace.take_complete().ranges.len(), 1);
            };
            (0..20).for_each(|_| read()); // warm: pools and spares filled
            reset_calls();
            (0..100).for_each(|_| read());
            let created = calls().get("cuEventCreate").copied().unwrap_or(0);
            drop(outer);
            created
        };
        let steady = created_per_reads(false);
        let with_open = created_per_reads(true);
        assert!(
            with_open <= steady + 5,
            "100 reads created {steady} CUDA events, and {with_open} while one range stayed open"
        );
    });
}

/// A range on the stream another thread captures in global mode (opened before and
/// closed during the capture, and opened during it): refused and counted lost, and the capture
/// stays valid.
#[test]
fn ranges_on_a_stream_another_thread_captures() {
    use crate::Error;
    check_once(|| {
        let trace = Trace::new();
        let cap = Stream::new(0).unwrap();
        let before = trace.range(&cap, "open at the capture's begin").unwrap();
        let (got, capture) = beside_a_global_capture(&cap, || {
            let during = trace.range(&cap, "during").map(drop);
            (during, before.end())
        });
        assert_eq!(capture, Ok(()), "the ranges broke the capture");
        assert!(matches!(got.0, Err(Error::StreamCapturing)), "{:?}", got.0);
        assert!(matches!(got.1, Err(Error::StreamCapturing)), "{:?}", got.1);
        let read = trace.take_complete();
        assert_eq!((read.lost, trace.held()), (1, 0), "{read:?}");
    });
}
