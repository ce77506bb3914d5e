//! Lifecycle cases that need a process of their own: a device reset under live events and under an
//! event taken over with `from_raw`, and an event dropped while the process exits.

mod common;

use common::{gpu, role, run_child};
use cuda_event::{Event, Stream, sys};

#[test]
#[ignore = "needs a CUDA GPU"]
fn events_alive_across_a_device_reset_drop_without_panic() {
    let test = common::this_test!();
    if common::in_a_child(test, "reset").is_none() {
        return;
    }
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    let never_recorded = Event::new();
    event.synchronize().unwrap();
    cuda_event::set_device(0).unwrap();
    // SAFETY: resets device 0; the event and stream above are stale afterwards, which is the point.
    common::ok(unsafe { sys::cudaDeviceReset() });
    drop(event);
    drop(stream);
    drop(never_recorded);
    let errors = cuda_event::take_drop_errors();
    println!("drop errors after the reset: {errors:?}");
    // New events and streams work after the reset.
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    event.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
}

thread_local! {
    static THREAD_EVENT: Event = Event::new();
}

static AT_EXIT: parking_lot::Mutex<Option<(Event, Stream)>> = parking_lot::Mutex::new(None);

extern "C" fn drop_at_exit() {
    drop(AT_EXIT.lock().take());
    let line = b"dropped at exit\n";
    // SAFETY: writes a static buffer to stdout; no Rust I/O lock is taken during exit.
    unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_dropped_while_the_process_exits_does_not_panic() {
    let test = common::this_test!();
    if role().as_deref() != Some("exit") {
        let _gpu = gpu();
        let out = run_child(test, "exit", &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("dropped at exit"),
            "the exit handler did not run: {stdout}"
        );
        return;
    }
    // Registered before CUDA starts, so it runs after the runtime's own exit handler: the event and
    // stream are dropped after CUDA has shut down.
    // SAFETY: registers a function that takes no arguments and does not unwind.
    assert_eq!(unsafe { libc::atexit(drop_at_exit) }, 0);
    let stream = Stream::new(0).unwrap();
    let event = Event::builder().blocking(true).build().unwrap();
    event.record(&stream).unwrap();
    *AT_EXIT.lock() = Some((event, stream));
    // A thread-local event, dropped when its thread ends.
    std::thread::spawn(|| {
        let stream = Stream::new(0).unwrap();
        THREAD_EVENT.with(|event| event.record(&stream).unwrap());
    })
    .join()
    .unwrap();
}

/// an event taken over with `from_raw` must not be destroyed again after a device reset
/// destroyed it (a use-after-free inside the driver). In a child: the reset is process-wide.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_from_raw_dropped_after_a_device_reset_is_not_destroyed_again() {
    let test = common::this_test!();
    if common::in_a_child(test, "reset").is_none() {
        return;
    }
    cuda_event::set_device(0).unwrap();
    let mut raw = std::ptr::null_mut();
    // SAFETY: creates an event in device 0's primary context (current after set_device).
    common::ok(unsafe { sys::cudaEventCreateWithFlags(&mut raw, sys::cudaEventDisableTiming) });
    // SAFETY: a live event of device 0's primary context, owned by `event` from here on.
    let event = unsafe { Event::from_raw(raw, 0, Event::builder()) };
    event.synchronize().unwrap();
    // SAFETY: resets device 0, destroying the event under `event`: that is the point.
    common::ok(unsafe { sys::cudaDeviceReset() });
    drop(event);
    let errors = cuda_event::take_drop_errors();
    assert!(
        errors.errors.is_empty(),
        "the drop destroyed a destroyed event: {errors:?}"
    );
    // The device works after the reset.
    let stream = Stream::new(0).unwrap();
    stream.record_event().unwrap().synchronize().unwrap();
}
