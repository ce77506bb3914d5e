//! Capture modes: the crate's own calls run in relaxed mode, so that another thread's global
//! capture stays valid, and the caller's work runs in the caller's mode.

use super::scenario::{
    GLOBAL, RELAXED, THREAD_LOCAL, beside_a_global_capture, capture_mode, captured_round,
    exchange_capture_mode, hold, release, stream,
};
use super::{check, check_once, poll_until_ready};
use crate::sync::thread;
use crate::{Error, Event, Stream};
use std::sync::Arc;

/// The crate's own queries (a future's first poll, the reactor's) run in relaxed capture mode, so
/// that another thread's global capture is never invalidated by them.
#[test]
fn the_crates_own_queries_never_invalidate_a_global_capture() {
    check(200, || {
        let (event, held, cap) = (Arc::new(Event::new()), stream(), stream());
        hold(&held);
        event.record(&held).unwrap();
        let capturer = {
            let cap = cap.clone();
            thread::spawn(move || {
                let inside = Event::new();
                captured_round(&cap, &inside, GLOBAL);
            })
        };
        let waiting = {
            let event = event.clone();
            thread::spawn(move || poll_until_ready(event.completion()))
        };
        capturer.join().unwrap();
        release(&held);
        assert_eq!(waiting.join().unwrap(), Ok(()));
    });
}

/// The caller's span inside the crate's relaxed mode (the work `measure` times) runs in the
/// caller's mode, and relaxed mode is back after it, also when it panics: the crate's cleanup
/// while unwinding (a measurement's synchronize) must not run in global mode beside another
/// thread's global capture.
#[test]
fn relaxed_mode_is_back_after_the_callers_span_even_when_it_panics() {
    use crate::capture_mode::RelaxedCapture;
    check_once(|| {
        let d = crate::driver::driver("a model test").unwrap();
        assert_eq!(capture_mode(), GLOBAL);
        {
            let relaxed = RelaxedCapture::enter(d);
            assert_eq!(capture_mode(), RELAXED);
            relaxed.in_callers_mode(|| assert_eq!(capture_mode(), GLOBAL));
            assert_eq!(capture_mode(), RELAXED);
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                relaxed.in_callers_mode(|| panic!("the caller's work panics"))
            }));
            assert!(unwound.is_err());
            assert_eq!(capture_mode(), RELAXED);
        }
        assert_eq!(capture_mode(), GLOBAL);
    });
}

/// A mode the caller's work sets stays the caller's: the next span starts in it, and it is the
/// thread's mode after the crate's relaxed stretch, as if that stretch were not there.
#[test]
fn a_mode_the_callers_span_sets_is_the_callers_after_it() {
    use crate::capture_mode::RelaxedCapture;
    check_once(|| {
        let d = crate::driver::driver("a model test").unwrap();
        {
            let relaxed = RelaxedCapture::enter(d);
            relaxed.in_callers_mode(|| exchange_capture_mode(THREAD_LOCAL));
            assert_eq!(capture_mode(), RELAXED);
            let seen = relaxed.in_callers_mode(capture_mode);
            assert_eq!(seen, THREAD_LOCAL);
        }
        assert_eq!(capture_mode(), THREAD_LOCAL);
        exchange_capture_mode(GLOBAL);
    });
}

/// Reads the crate makes on the caller's behalf beyond the one CUDA call asked for (a timer's
/// non-blocking read, a bounded synchronize's polls, the completeness check of an elapsed time
/// across devices) run in relaxed mode: beside another thread's global capture they answer, and
/// the capture ends valid.
#[test]
fn reads_on_the_callers_behalf_leave_another_threads_global_capture_valid() {
    use crate::timing::Timer;
    use std::time::Duration;
    check_once(|| {
        let (held, cap) = (stream(), stream());
        hold(&held);
        let timing = Timer::start(&held).unwrap().stop(&held).unwrap();
        let pending = Event::new();
        pending.record(&held).unwrap();
        let timed = || Event::builder().enable_timing(true).build().unwrap();
        let (start, end) = (timed(), timed());
        start.record(&held).unwrap();
        end.record(&Stream::new(1).expect("a model stream on device 1"))
            .unwrap();
        let (answers, capture) = beside_a_global_capture(&cap, || {
            (
                timing.elapsed(),
                pending.synchronize_timeout(Duration::ZERO),
                start.elapsed_time(&end),
            )
        });
        assert_eq!(capture, Ok(()), "a read broke the capture");
        assert_eq!(answers, (Ok(None), Ok(false), Err(Error::NotComplete)));
        release(&held);
    });
}
