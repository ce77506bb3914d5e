//! The driver calls the crate makes on its hot paths and into its own captures, counted by the model.

use super::check_once;
use super::scenario::{calls, reset_calls};
use crate::{Error, Event, Stream};

/// The driver calls each hot call makes, counted by the model (no GPU needed): a record is the
/// reset check, the capture check and the record, each read the reset check and the call.
#[test]
fn driver_calls_per_hot_call() {
    check_once(|| {
        let counted = |f: &dyn Fn()| {
            reset_calls();
            f();
            let mut calls: Vec<_> = calls().into_iter().collect();
            calls.sort();
            calls
        };
        let (plain, other) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
        let timing = || Event::builder().enable_timing(true).build().unwrap();
        let (event, start) = (timing(), timing());
        start.record(&plain).unwrap();
        event.record(&plain).unwrap();
        let record = [
            ("cuCtxGetId", 1),
            ("cuEventRecord", 1),
            ("cuStreamIsCapturing", 1),
        ];
        assert_eq!(counted(&|| event.record(&plain).unwrap()), record);
        assert_eq!(
            counted(&|| {
                event.query().unwrap();
            }),
            [("cuCtxGetId", 1), ("cuEventQuery", 1)]
        );
        assert_eq!(
            counted(&|| event.synchronize().unwrap()),
            [("cuCtxGetId", 1), ("cuEventSynchronize", 1)]
        );
        assert_eq!(
            counted(&|| event.wait(&other).unwrap()),
            [("cuCtxGetId", 1), ("cuStreamWaitEvent", 1)]
        );
        assert_eq!(
            counted(&|| {
                start.elapsed_time(&event).unwrap();
            }),
            [("cuCtxGetId", 1), ("cuEventElapsedTime", 1)]
        );
        // A new event's first record with a pooled CUDA event: as a record.
        drop(plain.record_event().unwrap());
        assert_eq!(counted(&|| drop(plain.record_event().unwrap())), record);
        // A stream's future: the record, and one more capture check (a capture begun around it).
        let completion = [
            ("cuCtxGetId", 1),
            ("cuEventRecord", 1),
            ("cuStreamIsCapturing", 2),
        ];
        assert_eq!(counted(&|| drop(plain.completion())), completion);
        // SAFETY: no stream is captured in this test.
        unsafe { crate::capture::set_capture_checks(false) };
        let unchecked = counted(&|| event.record(&plain).unwrap());
        // SAFETY: turned back on.
        unsafe { crate::capture::set_capture_checks(true) };
        assert_eq!(unchecked, [("cuCtxGetId", 1), ("cuEventRecord", 1)]);
    });
}

/// Records into a capture the crate is making (`Stream::capture`) know it without asking CUDA: no
/// `cuStreamIsCapturing` nor `cuStreamGetCaptureInfo` (the stream's capture gate lists it); and
/// the capture ends valid with the record's CUDA event kept for it until then.
#[test]
fn records_into_a_capture_the_crate_makes_ask_cuda_nothing_about_the_capture() {
    check_once(|| {
        let cap = Stream::new(0).unwrap();
        let event = Event::new();
        event.record(&cap).unwrap(); // published, outside the capture
        let graph = cap
            .capture(crate::capture::CaptureMode::ThreadLocal, |s| {
                event.record(s)?; // the captured CUDA event: made now
                reset_calls();
                event.record(s)?; // the same one, the same capture
                let calls: Vec<_> = calls().into_keys().collect();
                assert!(
                    !calls.contains(&"cuStreamIsCapturing") && !calls.contains(&"cuStreamGetCaptureInfo"),
                    "a record into the crate's capture asked CUDA: {calls:?}"
                );
                Ok(())
            })
            .expect("the capture ends valid");
        drop(graph);
        assert!(matches!(event.query(), Err(Error::Cuda(e)) if e.code() == 907));
    });
}
