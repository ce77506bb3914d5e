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
