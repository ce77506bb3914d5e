//! The contract's two-GPU cases. Every test name starts with `multi_gpu_`; with fewer than two GPUs
//! visible each says it was skipped and passes, unless `CUDA_EVENT_TEST_GPUS=2` requires them.

use cuda_event_testkit as common;

use common::{hold, role, run_child, timed, two_gpus};
use cuda_event::{DeviceGuard, Error, Event, Stream, current_device, sys};
use std::ffi::{c_int, c_uint, c_void};

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_record_on_another_devices_stream_is_an_error() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let event = Event::new();
    event.record(&Stream::new(0).unwrap()).unwrap();
    let on_1 = Stream::new(1).unwrap();
    assert_eq!(
        event.record(&on_1),
        Err(Error::DeviceMismatch { event: 0, stream: 1 })
    );
    assert_eq!(event.device(), Some(0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_device_1_stream_waits_on_a_device_0_event() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    common::check_wait_orders_b_after_a(&Stream::new(0).unwrap(), &Stream::new(1).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_query_and_synchronize_do_not_depend_on_the_current_device() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let stream = Stream::new(1).unwrap();
    let gate = hold(&stream);
    let event = stream.record_event().unwrap();
    let _current = DeviceGuard::new(0).unwrap();
    assert_eq!(event.query(), Ok(false));
    gate.open();
    event.synchronize().unwrap();
    assert_eq!(event.query(), Ok(true));
    assert_eq!(current_device(), Ok(0), "no call may change the current device");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_elapsed_time_across_devices_is_an_error() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let (start, end) = (timed(), timed());
    start.record(&Stream::new(0).unwrap()).unwrap();
    end.record(&Stream::new(1).unwrap()).unwrap();
    start.synchronize().unwrap();
    end.synchronize().unwrap();
    assert_eq!(
        start.elapsed_time(&end),
        Err(Error::ElapsedAcrossDevices { start: 0, end: 1 })
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_a_device_guard_restores_the_previous_device_whatever_its_scope_made_current() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    cuda_event::set_device(0).unwrap();
    {
        // Its own device already current: the scope's change is undone all the same.
        let _on_0 = DeviceGuard::new(0).unwrap();
        cuda_event::set_device(1).unwrap();
    }
    assert_eq!(current_device(), Ok(0));
    {
        let _on_1 = DeviceGuard::new(1).unwrap();
        assert_eq!(current_device(), Ok(1));
    }
    assert_eq!(current_device(), Ok(0));
}

/// A `DeviceGuard` for device 1, in a program that uses device 1 alone with the current device left
/// at its default (0): its drop must not make 0 current again, which since CUDA 12 creates device
/// 0's primary context (the stray context of torch's `with torch.cuda.device(1):` before its
/// `MaybeExchangeDevice`). In a child process, whose contexts are its own.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_a_device_guards_drop_makes_no_context_on_a_device_the_program_never_used() {
    let test = common::this_test!();
    if role().as_deref() != Some("guard-on-device-1") {
        let Some(_gpu) = two_gpus() else {
            return;
        };
        run_child(test, "guard-on-device-1", &[]);
        return;
    }
    {
        let _on_1 = DeviceGuard::new(1).unwrap();
        let stream = Stream::new(1).unwrap();
        stream.record_event().unwrap().synchronize().unwrap();
    }
    assert!(primary_context_active(1), "device 1 was used");
    assert!(
        !primary_context_active(0),
        "DeviceGuard's drop created a context on device 0, which the program never used"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_ipc_handle_under_device_1_creates_on_device_1() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let event = Event::builder().interprocess(true).build().unwrap();
    {
        let _on_1 = DeviceGuard::new(1).unwrap();
        event.ipc_handle().unwrap();
    }
    assert_eq!(event.device(), Some(1));
    assert_eq!(
        event.record(&Stream::new(0).unwrap()),
        Err(Error::DeviceMismatch { event: 1, stream: 0 })
    );
    event.record(&Stream::new(1).unwrap()).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_drop_on_a_thread_whose_current_device_differs_keeps_it() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    cuda_event::drop_errors::take_drop_errors();
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    std::thread::spawn(move || {
        cuda_event::set_device(1).unwrap();
        event.synchronize().unwrap();
        drop(event);
        drop(stream);
        assert_eq!(current_device(), Ok(1), "drop changed the current device");
    })
    .join()
    .unwrap();
    assert_eq!(cuda_event::drop_errors::take_drop_errors(), Default::default());
}

/// Whether `device`'s primary context is active, asked of the driver directly.
fn primary_context_active(device: c_int) -> bool {
    type GetState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> c_uint;
    let (mut function, mut status) = (
        std::ptr::null_mut::<c_void>(),
        sys::cudaDriverEntryPointQueryResult(0),
    );
    let (mut flags, mut active) = (0, 0);
    // SAFETY: resolves cuDevicePrimaryCtxGetState (signature from cuda.h) and calls it with live
    // out-pointers; the device ordinal equals the CUdevice of a visible device.
    unsafe {
        let code = sys::cudaGetDriverEntryPointByVersion(
            c"cuDevicePrimaryCtxGetState".as_ptr(),
            &mut function,
            12000,
            0,
            &mut status,
        );
        assert_eq!(code, sys::cudaError::cudaSuccess);
        let get_state: GetState = std::mem::transmute(function);
        assert_eq!(get_state(device, &mut flags, &mut active), 0);
    }
    active != 0
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_no_call_creates_a_context_on_a_device_the_program_did_not_use() {
    let test = common::this_test!();
    if role().as_deref() != Some("device-1-only") {
        let Some(_gpu) = two_gpus() else {
            return;
        };
        run_child(test, "device-1-only", &[]);
        return;
    }
    // This process uses device 1 alone, through every kind of call, on two threads, with the
    // current device left at its default (0), as PyTorch's stray-context bug needed.
    let stream = Stream::new(1).unwrap();
    let (start, end) = (timed(), timed());
    start.record(&stream).unwrap();
    end.record(&stream).unwrap();
    end.wait(&Stream::new(1).unwrap()).unwrap();
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    start.elapsed_time(&end).unwrap();
    let shared = Event::builder().interprocess(true).build().unwrap();
    shared.record(&stream).unwrap();
    shared.ipc_handle().unwrap();
    let timer = cuda_event::timing::Timer::start(&stream).unwrap();
    timer.stop(&stream).unwrap().wait().unwrap();
    let quick = cuda_event::timing::MeasureOptions::default()
        .min_time(std::time::Duration::from_millis(20))
        .timeout(std::time::Duration::from_millis(200));
    let _ = cuda_event::timing::measure(&stream, &quick, |_| Ok::<(), cuda_event::Error>(())).unwrap();
    std::thread::spawn(move || {
        end.synchronize().unwrap();
        drop((start, end, shared, stream));
    })
    .join()
    .unwrap();
    assert!(primary_context_active(1), "device 1 was used");
    assert!(
        !primary_context_active(0),
        "a context was created on device 0, which the program never used"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_timer_stopped_on_another_devices_stream_is_an_error() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let on_0 = Stream::new(0).unwrap();
    let timer = cuda_event::timing::Timer::start(&on_0).unwrap();
    let stopped = timer.stop(&Stream::new(1).unwrap()).map(drop);
    assert_eq!(stopped, Err(Error::DeviceMismatch { event: 0, stream: 1 }));
    // The refused stop left the timer as it was: stopped on its own device's stream, it times.
    timer.stop(&on_0).unwrap().wait().unwrap();
}

/// What the runtime API does on a thread with no current context, for events and streams of device
/// 1 in a process that never used device 0: whether the calls cuda-event makes through the driver
/// could go through the runtime instead (issue: thread scaling) without a stray context on device 0
/// or a changed current device. Prints what it finds; fails only if a call fails.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_probe_runtime_event_calls_on_a_thread_without_a_context() {
    if common::skip_under_sanitizer(
        "a probe: calls CUDA without a current context, on purpose, to learn what it requires",
    ) {
        return;
    }
    let test = common::this_test!();
    if role().as_deref() != Some("probe") {
        let Some(_gpu) = two_gpus() else {
            return;
        };
        let out = run_child(test, "probe", &[]);
        print!("{}", String::from_utf8_lossy(&out.stdout));
        return;
    }
    let stream = Stream::new(1).unwrap();
    let other = Stream::new(1).unwrap();
    let event = Event::new();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    let (raw_event, raw_stream, raw_other) = (event.as_raw().unwrap(), stream.as_raw(), other.as_raw());
    let raw = (raw_event as usize, raw_stream as usize, raw_other as usize);
    std::thread::spawn(move || {
        let (e, s, o) = (
            raw.0 as sys::cudaEvent_t,
            raw.1 as sys::cudaStream_t,
            raw.2 as sys::cudaStream_t,
        );
        let current = || {
            let mut device = -1;
            // SAFETY: writes one int through a live local.
            let code = unsafe { sys::cudaGetDevice(&mut device) };
            (code.0, device)
        };
        println!(
            "before: cudaGetDevice {:?}, device 0 context active {}",
            current(),
            primary_context_active(0)
        );
        // SAFETY: live handles of device 1 (the Events and Streams outlive this thread).
        let codes = unsafe {
            [
                sys::cudaEventRecord(e, s).0,
                sys::cudaEventQuery(e).0,
                sys::cudaStreamWaitEvent(o, e, 0).0,
                sys::cudaEventSynchronize(e).0,
            ]
        };
        println!("runtime record, query, wait, synchronize on device 1's handles: codes {codes:?}");
        println!(
            "after: cudaGetDevice {:?}, device 0 context active {}, device 1 active {}",
            current(),
            primary_context_active(0),
            primary_context_active(1)
        );
        assert_eq!(codes, [0; 4]);
    })
    .join()
    .unwrap();
    drop((event, stream, other));
}

/// Futures pending on both devices while device 1 is reset (in a child: a reset is process-wide):
/// the reactor keeps its state per context instance, so device 0's futures resolve `Ok` as their
/// work completes, and device 1's resolve (to whatever a query of a reset device's event says)
/// instead of hanging.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_a_reset_of_device_1_leaves_device_0_futures_resolving_ok() {
    let test = common::this_test!();
    if role().as_deref() != Some("reset") {
        let Some(_gpu) = two_gpus() else {
            return;
        };
        print!(
            "{}",
            String::from_utf8_lossy(&run_child(test, "reset", &[]).stdout)
        );
        return;
    }
    let (on_0, on_1) = (Stream::new(0).unwrap(), Stream::new(1).unwrap());
    common::gpu_sleep(&on_0, std::time::Duration::from_millis(300));
    let events_0: Vec<Event> = (0..100).map(|_| on_0.record_event().unwrap()).collect();
    let mut futures_0: Vec<_> = events_0.iter().map(Event::completion).collect();
    futures_0.extend((0..100).map(|_| on_0.completion()));
    common::gpu_sleep(&on_1, std::time::Duration::from_millis(300));
    let event_1 = on_1.record_event().unwrap();
    let mut futures_1 = vec![event_1.completion(), on_1.completion()];
    for future in &mut futures_0 {
        assert!(common::poll_once(future).is_pending());
    }
    for future in &mut futures_1 {
        assert!(common::poll_once(future).is_pending());
    }
    {
        let _on_device_1 = DeviceGuard::new(1).unwrap();
        // SAFETY: resets device 1 under live events, streams and futures: that is the point.
        common::ok(unsafe { sys::cudaDeviceReset() });
    }
    for (i, future) in futures_0.into_iter().enumerate() {
        let result = common::block_on_timeout(future, std::time::Duration::from_secs(5));
        assert_eq!(result, Some(Ok(())), "device 0's future {i}");
    }
    for (i, future) in futures_1.into_iter().enumerate() {
        let result = common::block_on_timeout(future, std::time::Duration::from_secs(5));
        println!("device 1's future {i} after the reset: {result:?}");
        assert!(result.is_some(), "device 1's future {i} hung after the reset");
    }
}

/// A global-mode capture on device 1, begun and ended 100 times, while futures wait on both
/// devices: the reactor's queries (relaxed capture mode) invalidate none of the captures, nothing
/// goes into the graphs, and every future resolves `Ok`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_a_global_mode_capture_on_device_1_leaves_futures_on_both_devices_resolving_ok() {
    let Some(_gpu) = two_gpus() else {
        return;
    };
    let (on_0, on_1, captured) = (
        Stream::new(0).unwrap(),
        Stream::new(1).unwrap(),
        Stream::new(1).unwrap(),
    );
    common::gpu_sleep(&on_0, std::time::Duration::from_millis(200));
    common::gpu_sleep(&on_1, std::time::Duration::from_millis(200));
    let (event_0, event_1) = (on_0.record_event().unwrap(), on_1.record_event().unwrap());
    let mut futures = vec![
        event_0.completion(),
        event_1.completion(),
        on_0.completion(),
        on_1.completion(),
    ];
    for future in &mut futures {
        assert!(common::poll_once(future).is_pending());
    }
    let _on_device_1 = DeviceGuard::new(1).unwrap();
    for round in 0..100 {
        common::begin_capture(&captured, common::GLOBAL);
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_micros(500) {
            std::hint::spin_loop();
        }
        let graph = common::end_capture(&captured)
            .unwrap_or_else(|e| panic!("round {round}: the capture was invalidated: {e}"));
        assert_eq!(graph.node_count(), 0, "round {round}: a node in the graph");
    }
    for (i, future) in futures.into_iter().enumerate() {
        let result = common::block_on_timeout(future, std::time::Duration::from_secs(5));
        assert_eq!(result, Some(Ok(())), "future {i}");
    }
}
