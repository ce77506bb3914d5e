//! The model itself, tested: the rules fail what they should.

use super::check;
use super::scenario::{RELAXED, begin_capture, end_capture, stream};
use crate::Event;
use crate::sync::thread;
use std::sync::Arc;

/// The model itself: it fails a read beside a captured record of the same CUDA event (what the
/// crate must never do), so that the other tests would see it.
#[test]
#[should_panic(expected = "driver model: a read of an event beside")]
fn the_model_fails_a_read_beside_a_captured_record() {
    check(200, || {
        let (event, cap) = (Arc::new(Event::new()), stream());
        event.record(&cap).unwrap();
        let raw = event.as_raw().unwrap() as usize;
        let capturer = {
            let cap = cap.clone();
            thread::spawn(move || {
                let raw = raw as crate::sys::cudaEvent_t;
                let d = crate::driver::driver("model").unwrap();
                begin_capture(&cap, RELAXED);
                // SAFETY: a live event and stream: a raw record into the capture, as C code might.
                let _ = d.event_record.call(|f| unsafe { f(raw, cap.as_raw()) });
                let _ = end_capture(&cap);
            })
        };
        let d = crate::driver::driver("model").unwrap();
        let raw = raw as crate::sys::cudaEvent_t;
        // SAFETY: a live event, queried raw, beside the record.
        let _ = d.event_query.code(|f| unsafe { f(raw) });
        capturer.join().unwrap();
    });
}
