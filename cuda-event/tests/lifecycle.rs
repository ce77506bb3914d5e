//! Lifecycle cases that need a process of their own: a device reset under live events and under an
//! event taken over with `from_raw`, and an event dropped while the process exits.

use cuda_event_testkit as common;

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
    let errors = cuda_event::drop_errors::take_drop_errors();
    println!("drop errors after the reset: {errors:?}");
    // New events and streams work after the reset.
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    event.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
}

/// Review 3's S6: the device is reset between two of `measure`'s calls, while its gated batch
/// holds the gate word and the SM clock's stamp slots (mapped host memory, which the host stores
/// into as the batch ends). The measurement ends in an error; those stores land in memory the
/// crate still owns, where, in `cuMemHostAlloc` memory that the reset freed, they were a SIGSEGV
/// (probe P3). The reset is made by the measured work itself, on the measuring thread: a reset
/// during another thread's CUDA call is undefined behaviour in CUDA, which no library can make
/// safe.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_reset_during_a_measurement_is_an_error_not_a_crash() {
    if common::skip_under_sanitizer(
        "its point is a device reset under the measurement: CUDA reports the crate's check that \
         finds it (cuCtxGetId, 709) and the memory the reset took as leaked",
    ) {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "reset-measure").is_none() {
        return;
    }
    let stream = Stream::new(0).unwrap();
    // CUDA_EVENT_TEST_RESET_MODE picks the measurement's mode, to tell which part a failure is in.
    let mode = std::env::var("CUDA_EVENT_TEST_RESET_MODE").unwrap_or_default();
    let options = cuda_event::timing::MeasureOptions::default()
        .min_time(std::time::Duration::from_secs(3))
        .timeout(std::time::Duration::from_secs(10))
        .gate(!mode.contains("nogate"))
        .sm_clock(!mode.contains("nosm"))
        .graph(mode.contains("graph"));
    println!("mode {mode:?}: {options:?}");
    let mut calls = 0;
    let measured = cuda_event::timing::measure(&stream, &options, |_| {
        calls += 1;
        if calls == 50 {
            // SAFETY: resets the current device (the stream's) between the crate's calls, which
            // is the point; nothing of this closure's uses the device after it.
            common::ok(unsafe { sys::cudaDeviceReset() });
            println!("the work reset the device");
        }
        Ok::<(), cuda_event::Error>(())
    });
    println!("measure across a reset after {calls} calls of the work: {measured:?}");
    assert!(
        measured.is_err(),
        "a measurement across a reset gave {measured:?}"
    );
    // The crate's memory after the reset: a new measurement makes its own.
    let stream = Stream::new(0).unwrap();
    let quick = cuda_event::timing::MeasureOptions::default().min_time(std::time::Duration::from_millis(20));
    drop(cuda_event::timing::measure(&stream, &quick, |_| Ok::<(), cuda_event::Error>(())).unwrap());
    cuda_event::timing::release_measure_memory().unwrap();
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
    let errors = cuda_event::drop_errors::take_drop_errors();
    assert!(
        errors.errors.is_empty(),
        "the drop destroyed a destroyed event: {errors:?}"
    );
    // The device works after the reset.
    let stream = Stream::new(0).unwrap();
    stream.record_event().unwrap().synchronize().unwrap();
}

/// A process forked from one using the crate (review F14): in the forked child every call is an
/// `Err(ForkedChild)`, a future made before the fork resolves to it instead of waiting on a
/// reactor thread the child does not have, and dropping what the parent made returns at once and
/// calls no CUDA (the child may hold the crate's locks as other threads left them). The forking
/// process runs in a child of the test, since a forked copy of libtest must not go on running.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_forked_child_gets_errors_and_drops_without_calling_cuda() {
    let test = common::this_test!();
    if common::in_a_child(test, "fork").is_none() {
        return;
    }
    let stream = Stream::new(0).unwrap();
    common::gpu_sleep(&stream, std::time::Duration::from_secs(2));
    let event = stream.record_event().unwrap();
    let mut pending = event.completion();
    assert!(common::poll_once(&mut pending).is_pending());
    let mut stream_pending = stream.completion();
    assert!(common::poll_once(&mut stream_pending).is_pending());
    drop(Event::builder().build().unwrap()); // a created event for this thread's pool
    let unrecorded_stream = Stream::new(0).unwrap();
    let pooled = unrecorded_stream.record_event().unwrap();
    drop(pooled);
    let exported = Event::builder().interprocess(true).build().unwrap();
    exported.record(&unrecorded_stream).unwrap();
    let handle = exported.ipc_handle().unwrap();

    // SAFETY: fork in a process with other threads; the child below calls only the crate (whose
    // behaviour after a fork is the subject) and async-signal-safe libc functions, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut code = forked_child_checks(&stream, &event, pending, stream_pending, unrecorded_stream);
        if code == 0 && Event::from_ipc_handle(0, handle).err() != Some(cuda_event::Error::ForkedChild) {
            code = 7;
        }
        if code == 0
            && cuda_event::driver_entry_point(c"cuInit", 2000).err() != Some(cuda_event::Error::ForkedChild)
        {
            code = 8;
        }
        if code == 0 && exported.ipc_handle().err() != Some(cuda_event::Error::ForkedChild) {
            code = 9;
        }
        // Neither may take a lock or call CUDA here.
        let _ = cuda_event::drop_errors::take_drop_errors();
        let _ = exported.into_raw();
        // SAFETY: ends the forked child without running the parent's exit handlers (CUDA's).
        unsafe { libc::_exit(code) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut status = 0;
    loop {
        // SAFETY: waits for the child forked above without blocking.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            break;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kills the child forked above, which hung.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung (a poll, a call or a drop waited for ever)");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let failures = [
        "",
        "a pending event future did not resolve to Err(ForkedChild)",
        "a pending stream future did not resolve to Err(ForkedChild)",
        "Event::query did not return Err(ForkedChild)",
        "Stream::new did not return Err(ForkedChild)",
        "a new future did not resolve to Err(ForkedChild)",
        "Event::record did not return Err(ForkedChild)",
        "Event::from_ipc_handle did not return Err(ForkedChild)",
        "driver_entry_point did not return Err(ForkedChild)",
        "ipc_handle of an exported event did not return Err(ForkedChild)",
    ];
    assert!(
        libc::WIFEXITED(status),
        "the forked child died: status {status:#x}"
    );
    let code = libc::WEXITSTATUS(status) as usize;
    assert_eq!(code, 0, "{}", failures.get(code).unwrap_or(&"the child crashed"));
    // The parent's own futures and objects are unaffected.
    stream.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
}

/// What the forked child of [`a_forked_child_gets_errors_and_drops_without_calling_cuda`] checks;
/// returns 0 or the number of the first failure.
fn forked_child_checks(
    stream: &Stream,
    event: &Event,
    mut pending: cuda_event::Completion<'_>,
    mut stream_pending: cuda_event::Completion<'static>,
    unrecorded_stream: Stream,
) -> i32 {
    use cuda_event::Error::ForkedChild;
    let ready_err =
        |poll: std::task::Poll<cuda_event::Result<()>>| poll == std::task::Poll::Ready(Err(ForkedChild));
    if !ready_err(common::poll_once(&mut pending)) {
        return 1;
    }
    if !ready_err(common::poll_once(&mut stream_pending)) {
        return 2;
    }
    if event.query() != Err(ForkedChild) {
        return 3;
    }
    if Stream::new(0).err() != Some(ForkedChild) {
        return 4;
    }
    let fresh = Event::builder().build().unwrap();
    if fresh.record(stream) != Err(ForkedChild) {
        return 6;
    }
    if !ready_err(common::poll_once(&mut event.completion())) {
        return 5;
    }
    drop((pending, stream_pending, fresh, unrecorded_stream));
    0
}
