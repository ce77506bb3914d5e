//! What holds without a GPU: building events, IPC handle text, errors, thread safety, and that every
//! call that needs CUDA returns an error (never panics) when no GPU can be used.

use cuda_event_testkit as common;

use cuda_event::timing::MeasureError;
use cuda_event::{Error, Event, EventBuilder, IpcEventHandle, IpcHandleParseError, Stream, StreamOptions};

#[test]
fn builder_defaults_are_torchs_all_off() {
    assert_eq!(Event::builder(), EventBuilder::default());
    let event = Event::new();
    assert_eq!(event.options(), EventBuilder::default());
}

#[test]
fn interprocess_with_timing_is_rejected_when_built() {
    let built = Event::builder().interprocess(true).enable_timing(true).build();
    assert_eq!(built.err(), Some(Error::InterprocessWithTiming));
}

#[test]
fn every_other_flag_combination_builds() {
    for bits in 0..16u8 {
        let (timing, blocking, interprocess, external) =
            (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
        let built = Event::builder()
            .enable_timing(timing)
            .blocking(blocking)
            .interprocess(interprocess)
            .external(external)
            .build();
        assert_eq!(built.is_ok(), !(timing && interprocess), "flags {bits:04b}");
        if let Ok(event) = built {
            let options = event.options();
            let read = (
                options.has_timing(),
                options.is_blocking(),
                options.is_interprocess(),
                options.is_external(),
            );
            assert_eq!(
                read,
                (timing, blocking, interprocess, external),
                "flags {bits:04b}"
            );
        }
    }
}

#[test]
fn query_is_true_before_first_record_and_device_is_none() {
    // No CUDA call happens before creation, so this holds with or without a GPU.
    let event = Event::new();
    assert_eq!(event.query(), Ok(true));
    assert_eq!(event.device(), None);
    assert_eq!(event.as_raw(), None);
}

#[test]
fn wait_and_synchronize_before_first_record_do_nothing() {
    let event = Event::new();
    assert_eq!(event.synchronize(), Ok(()));
    // wait needs a stream, which needs CUDA; synchronize and query need nothing.
}

#[test]
fn a_never_recorded_event_is_complete_at_once_as_a_future() {
    // As synchronize returns at once: no CUDA call, so this holds without a GPU.
    assert_eq!(common::block_on(Event::new().completion()), Ok(()));
    let event = Event::new();
    assert_eq!(common::block_on(async { (&event).await }), Ok(()));
}

#[test]
fn debug_says_not_created_before_first_record() {
    let text = format!("{:?}", Event::new());
    assert!(text.contains("not created"), "{text}");
}

#[test]
fn elapsed_time_checks_timing_then_recorded_without_cuda() {
    let plain = Event::new();
    let timed = || Event::builder().enable_timing(true).build().unwrap();
    assert_eq!(plain.elapsed_time(&timed()), Err(Error::NotTimingEvent));
    assert_eq!(timed().elapsed_time(&plain), Err(Error::NotTimingEvent));
    assert_eq!(timed().elapsed_time(&timed()), Err(Error::NotRecorded));
}

#[test]
fn ipc_handle_needs_the_interprocess_flag() {
    assert_eq!(Event::new().ipc_handle(), Err(Error::NotInterprocess));
    let timing = Event::builder().enable_timing(true).build().unwrap();
    assert_eq!(timing.ipc_handle(), Err(Error::NotInterprocess));
}

#[test]
fn into_raw_of_a_never_created_event_is_none() {
    assert_eq!(Event::new().into_raw(), None);
}

#[test]
fn ipc_handle_bytes_round_trip() {
    let bytes: Vec<u8> = (0..64).map(|i| i * 3).collect();
    let handle = IpcEventHandle::from_bytes(&bytes).unwrap();
    assert_eq!(handle.as_bytes().as_slice(), bytes.as_slice());
    assert_eq!(IpcEventHandle::LEN, 64);
}

#[test]
fn ipc_handle_bytes_of_wrong_length_are_rejected() {
    for len in [0, 1, 63, 65, 128] {
        assert_eq!(
            IpcEventHandle::from_bytes(&vec![0; len]),
            Err(IpcHandleParseError::Length {
                expected: 64,
                found: len
            }),
            "length {len}"
        );
    }
}

#[test]
fn ipc_handle_hex_round_trips_and_reads_either_case() {
    let bytes: Vec<u8> = (0..64).map(|i| 255 - i * 2).collect();
    let handle = IpcEventHandle::from_bytes(&bytes).unwrap();
    let text = handle.to_string();
    assert_eq!(text.len(), 128);
    assert!(
        text.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
        "{text}"
    );
    assert_eq!(text.parse::<IpcEventHandle>(), Ok(handle));
    assert_eq!(text.to_uppercase().parse::<IpcEventHandle>(), Ok(handle));
    assert!(format!("{handle:?}").contains(&text));
}

#[test]
fn ipc_handle_text_of_wrong_length_is_rejected() {
    for len in [0, 2, 126, 127, 129, 130] {
        assert_eq!(
            "a".repeat(len).parse::<IpcEventHandle>(),
            Err(IpcHandleParseError::Length {
                expected: 128,
                found: len
            }),
            "length {len}"
        );
    }
}

#[test]
fn ipc_handle_text_that_is_not_hex_names_the_position() {
    let mut text = "0".repeat(128);
    text.replace_range(77..78, "g");
    assert_eq!(
        text.parse::<IpcEventHandle>(),
        Err(IpcHandleParseError::Text { position: 77 })
    );
    // Positions count in the text as given, whitespace around the digits included.
    assert_eq!(
        format!("\t {text}\n").parse::<IpcEventHandle>(),
        Err(IpcHandleParseError::Text { position: 79 })
    );
    let spaced = format!("{} {}", "0".repeat(64), "0".repeat(63));
    assert_eq!(
        spaced.parse::<IpcEventHandle>(),
        Err(IpcHandleParseError::Text { position: 64 })
    );
}

#[test]
fn ipc_handle_text_ignores_ascii_whitespace_around_it() {
    let handle = IpcEventHandle::from_bytes(&[0xa5; 64]).unwrap();
    for text in [
        format!("{handle}\n"),
        format!("  {handle}\r\n"),
        format!("\t{handle} "),
    ] {
        assert_eq!(text.parse::<IpcEventHandle>(), Ok(handle), "{text:?}");
    }
    assert_eq!(
        "\n".parse::<IpcEventHandle>(),
        Err(IpcHandleParseError::Length {
            expected: 128,
            found: 0
        })
    );
}

#[test]
fn errors_display_for_a_reader() {
    let mismatch = Error::DeviceMismatch { event: 0, stream: 1 }.to_string();
    assert!(
        mismatch.contains("device 0") && mismatch.contains("device 1"),
        "{mismatch}"
    );
    for error in [
        Error::NotTimingEvent,
        Error::NotRecorded,
        Error::NotComplete,
        Error::ElapsedAcrossDevices { start: 0, end: 1 },
        Error::InterprocessWithTiming,
        Error::IpcHandleParse(IpcHandleParseError::Length {
            expected: 64,
            found: 3,
        }),
        Error::IpcHandleParse(IpcHandleParseError::Text { position: 5 }),
        Error::IpcHandleFromThisProcess,
        Error::NotInterprocess,
        Error::PerThreadStreamOfAnotherThread,
        Error::StreamCapturing,
        MeasureError::InvalidOptions {
            reason: "max_batch must be at least 1",
        }
        .into(),
        MeasureError::NotCapturable {
            reason: "cuStreamBeginCapture: refused".into(),
        }
        .into(),
        MeasureError::ClockThrottled {
            sm_clock_mhz: 900.0,
            max_sm_clock_mhz: 1980.0,
            threshold: 0.9,
            discarded: 12,
        }
        .into(),
        MeasureError::CuptiUnavailable {
            reason: "libcupti.so not found".into(),
        }
        .into(),
    ] {
        let text = error.to_string();
        assert!(text.len() > 20 && !text.contains("Error::"), "{text}");
        let _: &dyn std::error::Error = &error;
    }
}

/// The areas' errors read as they did when they were `Error`'s own variants. A wrapping variant
/// is transparent: its message is the wrapped error's, so a report that walks the source chain
/// prints it once, not twice.
#[test]
fn the_areas_errors_display_as_before_and_print_once_in_a_chain() {
    let parse = IpcHandleParseError::Text { position: 5 };
    let measure = MeasureError::InvalidOptions {
        reason: "max_batch must be at least 1",
    };
    assert_eq!(
        parse.to_string(),
        "an IPC event handle's text is hexadecimal; character 5 is not"
    );
    assert_eq!(
        measure.to_string(),
        "invalid measure options: max_batch must be at least 1"
    );
    let (parsing, measuring) = (Error::from(parse.clone()), Error::from(measure.clone()));
    assert_eq!(parsing, Error::IpcHandleParse(parse.clone()));
    assert_eq!(measuring, Error::Measure(measure.clone()));
    assert_eq!(parsing.to_string(), parse.to_string());
    assert_eq!(measuring.to_string(), measure.to_string());
    // What anyhow's `{:#}` prints: each message of the chain, joined by ": ".
    fn chain(e: &dyn std::error::Error) -> String {
        let mut text = e.to_string();
        let mut next = e.source();
        while let Some(e) = next {
            text = format!("{text}: {e}");
            next = e.source();
        }
        text
    }
    assert_eq!(chain(&parsing), parse.to_string());
    assert_eq!(chain(&measuring), measure.to_string());
    let cuda = cuda_event::check_runtime("cudaMalloc", cuda_event::sys::cudaError(2))
        .expect_err("code 2 is an error");
    assert!(matches!(cuda, Error::Cuda(_)), "{cuda:?}");
    assert_eq!(chain(&cuda), cuda.to_string());
    assert!(std::error::Error::source(&Error::NotRecorded).is_none());
}

#[test]
fn event_stream_and_errors_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Event>();
    send_sync::<Stream>();
    send_sync::<Error>();
    send_sync::<IpcHandleParseError>();
    send_sync::<MeasureError>();
    send_sync::<IpcEventHandle>();
    send_sync::<EventBuilder>();
    send_sync::<cuda_event::StreamOptions>();
    send_sync::<cuda_event::drop_errors::DropErrors>();
    // A future that a multi-threaded runtime may move between its threads.
    send_sync::<cuda_event::Completion<'static>>();
    send_sync::<cuda_event::CudaError>();
    // DeviceGuard is Sync but not Send: its compile_fail doctest pins that.
    fn sync<T: Sync>() {}
    sync::<cuda_event::DeviceGuard>();
}

/// A per-thread default stream names the stream of the thread that uses it: used on another
/// thread, it is refused before any CUDA call (so this holds without a GPU as well).
#[test]
fn a_per_thread_stream_used_on_another_thread_is_refused() {
    let Ok(stream) = Stream::per_thread(0) else {
        return; // no driver here: nothing to hand to another thread
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(
                Event::new().record(&stream),
                Err(Error::PerThreadStreamOfAnotherThread)
            );
            assert_eq!(stream.query(), Err(Error::PerThreadStreamOfAnotherThread));
            assert_eq!(stream.synchronize(), Err(Error::PerThreadStreamOfAnotherThread));
        });
    });
}

/// Every CUDA-needing call, on a process that can use no GPU: here (no driver) or, on a GPU
/// machine, a child run with `CUDA_VISIBLE_DEVICES=` (no visible device). Each returns a CUDA
/// error with its name and message; none panics.
#[test]
fn without_a_usable_gpu_every_cuda_call_is_an_err_not_a_panic() {
    if common::skip_under_sanitizer(
        "its child sees no GPU: CUDA reports each call's error, which is what it asks for",
    ) {
        return;
    }
    if common::role().as_deref() != Some("no-gpu") {
        let out = common::run_child(
            "without_a_usable_gpu_every_cuda_call_is_an_err_not_a_panic",
            "no-gpu",
            &[("CUDA_VISIBLE_DEVICES", "")],
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("checked 9 calls"));
        return;
    }
    let interprocess = || Event::builder().interprocess(true).build().unwrap();
    let handle = IpcEventHandle::from_bytes(&[7; 64]).unwrap();
    let results: Vec<(&str, Result<(), Error>)> = vec![
        ("device_count", cuda_event::device_count().map(drop)),
        ("set_device", cuda_event::set_device(0)),
        ("Stream::new", Stream::new(0).map(drop)),
        (
            "Stream::with_options",
            Stream::with_options(0, StreamOptions::default().non_blocking(true).priority(-1)).map(drop),
        ),
        ("Stream::legacy", Stream::legacy(0).map(drop)),
        ("Stream::per_thread", Stream::per_thread(0).map(drop)),
        (
            "Event::record_on_current_device",
            Event::new().record_on_current_device(),
        ),
        ("Event::ipc_handle", interprocess().ipc_handle().map(drop)),
        (
            "Event::from_ipc_handle",
            Event::from_ipc_handle(0, handle).map(drop),
        ),
    ];
    for (call, result) in &results {
        let Err(Error::Cuda(e)) = result else {
            panic!("{call} without a usable GPU gave {result:?}")
        };
        // 35 without a driver, 100 with a driver and no visible device.
        assert!([35, 100].contains(&e.code()), "{call}: {e}");
        assert!(
            e.name().starts_with("cuda") || e.name().starts_with("CUDA_ERROR"),
            "{call}: {e}"
        );
        assert!(
            !e.message().is_empty() && e.to_string().contains(e.name()),
            "{call}: {e}"
        );
        // Without a driver at all, the message says so instead of CUDA's "insufficient driver".
        if e.code() == 35 && !common::driver_library_present() {
            assert!(e.message().starts_with("no CUDA driver found"), "{call}: {e}");
        }
        // The user's call is named, not the crate's way of loading the driver.
        assert!(
            !["cudaGetDriverEntryPointByVersion", "cuInit"].contains(&e.call()),
            "{call}: {e}"
        );
        println!("{call}: {e}");
    }
    println!("checked {} calls", results.len());
}

/// The name a child-process test passes to its child is the test's own, as libtest filters by it.
#[test]
fn this_test_names_the_test_it_is_written_in() {
    assert_eq!(common::this_test!(), "this_test_names_the_test_it_is_written_in");
}

/// The table from `torch.cuda.Event` calls to this crate's is written twice, on the crates.io page
/// (README.md) and on docs.rs (the crate's docs): both copies say the same.
#[test]
fn the_torch_table_reads_the_same_on_crates_io_and_docs_rs() {
    fn table(text: &str, prefix: &str) -> Vec<String> {
        let lines: Vec<&str> = text
            .lines()
            .map(|line| line.strip_prefix(prefix).unwrap_or(line))
            .collect();
        let start = lines
            .iter()
            .position(|line| line.starts_with("| PyTorch |"))
            .expect("the table's header");
        lines[start..]
            .iter()
            .take_while(|line| line.starts_with('|'))
            .map(|line| line.to_string())
            .collect()
    }
    let readme = table(include_str!("../README.md"), "");
    let docs = table(include_str!("../src/lib.rs"), "//! ");
    assert!(readme.len() > 10, "the README's table is {} rows", readme.len());
    assert_eq!(
        readme, docs,
        "the torch table differs between README.md and lib.rs"
    );
}

/// Without a usable GPU, making a criterion `GpuTime` is an `Err` naming CUDA's error, not a panic:
/// here (no driver) directly; on a GPU machine, in a child that sees no device.
#[cfg(feature = "criterion")]
#[test]
fn without_a_usable_gpu_making_a_gpu_time_is_an_err_not_a_panic() {
    if common::skip_under_sanitizer("its child sees no GPU: CUDA reports the error it asks for") {
        return;
    }
    if common::role().is_none() && cuda_event::device_count().is_ok_and(|n| n > 0) {
        common::run_child(
            "without_a_usable_gpu_making_a_gpu_time_is_an_err_not_a_panic",
            "no-gpu",
            &[("CUDA_VISIBLE_DEVICES", "")],
        );
        return;
    }
    let made = cuda_event::timing::GpuTime::on_device(0);
    let Err(Error::Cuda(e)) = &made else {
        panic!("GpuTime::on_device without a usable GPU gave {made:?}")
    };
    // 35 without a driver, 100 with a driver and no visible device.
    assert!([35, 100].contains(&e.code()), "{e}");
}

/// A never-recorded event has nothing to wait for, whichever way of waiting: no CUDA call, so
/// also without a GPU.
#[test]
fn every_way_of_waiting_on_a_never_recorded_event_returns_at_once() {
    use std::time::Duration;
    let event = Event::new();
    let budget = Duration::from_micros(20);
    for wait in common::every_wait(budget) {
        for timeout in [None, Some(Duration::ZERO)] {
            assert_eq!(
                event.synchronize_with(wait, timeout),
                Ok(true),
                "{wait:?} {timeout:?}"
            );
        }
        // A future waiting that way is ready at its first poll, with no driver.
        let mut done = event.completion().with_wait(wait);
        assert_eq!(
            common::poll_once(&mut done),
            std::task::Poll::Ready(Ok(())),
            "{wait:?}"
        );
    }
}

/// A process forked before any CUDA call (a daemon, a fork-based worker pool) traces as any
/// process does, with a trace made in it; a trace made before the fork is the parent's: the
/// child's copy keeps nothing (its spans are counted as dropped), reads nothing and closes nothing
/// (the parent's threads, which did not fork, may hold its locks), and the parent's ranges stay
/// the parent's. The forking process runs in a child of the test, since a forked copy of libtest
/// must not go on running.
#[test]
fn a_trace_made_in_a_forked_child_works_and_one_made_before_the_fork_is_left_alone() {
    use cuda_event::trace::Trace;
    let test = common::this_test!();
    if common::role().as_deref() != Some("fork") {
        common::run_child(test, "fork", &[]);
        return;
    }
    let before = Trace::new();
    let open = before.host_range("open across the fork");
    // SAFETY: fork in a process with other threads; the child below uses only the trace (whose
    // behaviour after a fork is the subject), the allocator and async-signal-safe libc functions,
    // then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = {
            let dropped = before.dropped();
            drop(before.host_range("in the child, on the parent's trace"));
            let parents = before.take_complete();
            let fresh = Trace::new();
            drop(fresh.host_range("in the child, on its own trace"));
            let own = fresh.take_complete();
            if before.dropped() != dropped + 1 {
                1
            } else if !parents.ranges.is_empty() {
                2
            } else if own.ranges.len() != 1 {
                3
            } else {
                0
            }
        };
        // SAFETY: ends the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let failures = [
        "",
        "a span on the parent's trace was not counted as dropped",
        "the parent's trace was read in the child",
        "a trace made in the child did not keep its span",
    ];
    let code = libc::WEXITSTATUS(status) as usize;
    assert!(
        libc::WIFEXITED(status) && code == 0,
        "the forked child: {}",
        failures.get(code).copied().unwrap_or("failed")
    );
    drop(open);
    assert_eq!(
        before.take_complete().ranges.len(),
        1,
        "the parent's range is the parent's"
    );
}
