//! Faults survived: a context killed by a trapping kernel (and the drop errors it leaves, printed to
//! a stderr that is gone), bad devices and handles, and a soak of millions of events on every GPU. Each fault runs in a child process (the context dies with it).

use cuda_event_testkit as common;

use common::{gpu, role, two_gpus_for};
use cuda_event::{Error, Event, Stream};
use std::time::{Duration, Instant};

fn is_cuda_error(result: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(result, Err(Error::Cuda(_)))
}

/// After a sticky error (a kernel executed `trap;`), every call returns the CUDA error: never
/// `Ok(true)`, never a hang; drops do not panic and keep what they met.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_after_a_sticky_error_every_call_returns_the_error() {
    if common::skip_under_sanitizer(
        "kills its context with a kernel fault, on purpose: CUDA reports every call after it",
    ) {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "sticky").is_none() {
        return;
    }
    let stream = Stream::new(0).unwrap();
    let other = Stream::new(0).unwrap();
    let timed = || Event::builder().enable_timing(true).build().unwrap();
    let (start, end) = (timed(), timed());
    start.record(&stream).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    let blocking = Event::builder().blocking(true).build().unwrap();
    blocking.record(&stream).unwrap();
    blocking.synchronize().unwrap();

    let sticky = common::poison_the_context(&stream);
    let began = Instant::now();
    let results: Vec<(&str, bool)> = vec![
        ("record (created event)", is_cuda_error(&start.record(&stream))),
        ("record (new event)", is_cuda_error(&Event::new().record(&stream))),
        (
            "record (other stream)",
            is_cuda_error(&Event::new().record(&other)),
        ),
        ("query", is_cuda_error(&end.query())),
        ("query (blocking)", is_cuda_error(&blocking.query())),
        ("synchronize", is_cuda_error(&end.synchronize())),
        ("synchronize (blocking)", is_cuda_error(&blocking.synchronize())),
        ("wait", is_cuda_error(&end.wait(&other))),
        ("elapsed_time", is_cuda_error(&start.elapsed_time(&end))),
        ("Stream::synchronize", is_cuda_error(&other.synchronize())),
        ("Stream::query", is_cuda_error(&other.query())),
    ];
    for (call, erred) in &results {
        println!(
            "after the fault: {call}: {}",
            if *erred { "Err" } else { "NOT an error" }
        );
    }
    println!("all answered in {:?}", began.elapsed());
    assert!(began.elapsed() < Duration::from_secs(5), "a call waited");
    // Query and synchronize must not call a dead context's work "done"; a record on a dead
    // context must not pretend to have captured anything.
    let wrong: Vec<_> = results
        .iter()
        .filter(|(_, erred)| !erred)
        .map(|(c, _)| *c)
        .collect();
    assert!(wrong.is_empty(), "these did not return the CUDA error: {wrong:?}");
    drop((start, end, blocking, stream, other));
    let errors = cuda_event::drop_errors::take_drop_errors();
    println!("drop errors: {} kept, {} lost", errors.errors.len(), errors.lost);
    for error in &errors.errors {
        println!("  {error}");
        let Error::Cuda(e) = error else {
            panic!("a drop met {error}")
        };
        assert_eq!(e.code(), sticky, "{error}");
    }
}

/// Out-of-range devices, an event of another device, a stream of a reset device: typed errors,
/// never a panic or a use of a destroyed handle. (Events of another device: `multi_gpu_record_on_another_devices_stream_is_an_error`.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_bad_devices_are_typed_errors() {
    if common::skip_under_sanitizer("passes invalid devices, on purpose: CUDA reports each refusal") {
        return;
    }
    let test = common::this_test!();
    if common::in_a_child(test, "bad-devices").is_none() {
        return;
    }
    let count = cuda_event::device_count().unwrap();
    for device in [-1, count, count + 7, i32::MAX, i32::MIN] {
        let results = [
            Stream::new(device).map(drop),
            Stream::legacy(device).map(drop),
            Stream::per_thread(device).map(drop),
            cuda_event::set_device(device),
            cuda_event::DeviceGuard::new(device).map(drop),
            Event::from_ipc_handle(device, cuda_event::IpcEventHandle::from_bytes(&[1; 64]).unwrap())
                .map(drop),
        ];
        for result in results {
            assert!(is_cuda_error(&result), "device {device}: {result:?}");
        }
    }
    // A stream made before a device reset: calls return errors or work, never crash.
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    event.synchronize().unwrap();
    cuda_event::set_device(0).unwrap();
    // SAFETY: resets device 0: `stream` and `event` are stale afterwards, which is the point.
    common::ok(unsafe { cuda_event::sys::cudaDeviceReset() });
    println!(
        "stale stream query: {:?}",
        stream.query().map_err(|e| e.to_string())
    );
    println!(
        "stale event query: {:?}",
        event.query().map_err(|e| e.to_string())
    );
    drop((event, stream));
    println!("drop errors: {:?}", cuda_event::drop_errors::take_drop_errors());
}

/// 16 threads x N new/record/query/drop with random flags on both GPUs (N = 1M, or
/// CUDA_EVENT_SOAK_ROUNDS): the CUDA events alive stay bounded, no drop errors, resident memory
/// flat.
#[test]
#[ignore = "needs a CUDA GPU"]
fn multi_gpu_soak_new_record_query_drop_stays_bounded() {
    let Some(_gpu) = two_gpus_for(Duration::from_secs(400)) else {
        return;
    };
    let rounds: u64 = std::env::var("CUDA_EVENT_SOAK_ROUNDS").map_or(1_000_000, |v| v.parse().unwrap());
    let streams: Vec<Stream> = (0..2).map(|d| Stream::new(d).unwrap()).collect();
    // Warm-up: pools and allocator at their working size.
    soak(&streams, 16, 2_000);
    let (alive, rss) = (cuda_event::pool::cuda_events_alive(), common::resident_kib());
    let started = Instant::now();
    let peak = std::sync::atomic::AtomicU64::new(0);
    let soaking = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        s.spawn(|| {
            while soaking.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(
                    cuda_event::pool::cuda_events_alive(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        soak(&streams, 16, rounds);
        soaking.store(false, std::sync::atomic::Ordering::Relaxed);
    });
    let took = started.elapsed();
    let peak = peak.into_inner();
    let (alive_after, rss_after) = (cuda_event::pool::cuda_events_alive(), common::resident_kib());
    let errors = cuda_event::drop_errors::take_drop_errors();
    println!(
        "soak: 16 threads x {rounds} on 2 GPUs in {took:?} ({:.0} ns per op per thread); CUDA events \
         alive {alive} -> {alive_after} (peak {peak}), created in all {}; resident {rss} KiB -> {rss_after} KiB; drop errors {}",
        took.as_nanos() as f64 / rounds as f64,
        cuda_event::pool::cuda_events_created(),
        errors.errors.len()
    );
    assert!(errors.errors.is_empty() && errors.lost == 0, "{errors:?}");
    // Each thread holds one event at a time and pools at most one per (device, flags): 2 devices x
    // 6 flag combinations.
    assert!(peak <= 16 * (1 + 2 * 6), "CUDA events alive peaked at {peak}");
    // Threads end with the soak, so their pools are gone: what is alive is what was before.
    assert!(
        alive_after <= alive,
        "CUDA events alive grew: {alive} -> {alive_after}"
    );
    assert!(
        rss_after <= rss + 8 * 1024,
        "resident memory grew: {rss} -> {rss_after} KiB"
    );
}

/// `threads` threads, each `rounds` times: a new event with random flags, a record on a random
/// GPU's stream, a query, a drop. Every 4096 rounds a synchronize keeps the queues short.
fn soak(streams: &[Stream], threads: u64, rounds: u64) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                for i in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let interprocess = x & 4 != 0;
                    let event = Event::builder()
                        .enable_timing(x & 1 != 0 && !interprocess)
                        .blocking(x & 2 != 0)
                        .interprocess(interprocess)
                        .build()
                        .unwrap();
                    let stream = &streams[(x >> 8) as usize % streams.len()];
                    event.record(stream).unwrap();
                    event.query().unwrap();
                    if i % 4096 == 4095 {
                        event.synchronize().unwrap();
                    }
                }
            });
        }
    });
}

/// with `print_drop_errors(true)`, a drop error printed to a stderr whose reader is gone
/// (EPIPE) must not panic the drop. In a child whose stderr is a pipe the parent closed at once; the
/// drop errors come from a context poisoned by a trapping kernel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn drop_errors_printed_to_a_closed_stderr_do_not_panic() {
    if common::skip_under_sanitizer(
        "kills its child's context on purpose, so that drops fail: CUDA reports those errors",
    ) {
        return;
    }
    let test = common::this_test!();
    if role().as_deref() != Some("closed-stderr") {
        let _gpu = gpu();
        let mut child = common::child_command(test, "closed-stderr", &[])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take()); // the read end closes: the child's writes to stderr fail
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child failed ({}):\n{text}",
            out.status
        );
        assert!(text.contains("drop errors kept: "), "{text}");
        return;
    }
    cuda_event::drop_errors::print_drop_errors(true);
    let stream = Stream::new(0).unwrap();
    let events: Vec<Event> = (0..4).map(|_| stream.record_event().unwrap()).collect();
    stream.synchronize().unwrap();
    cuda_event::pool::set_event_pool(false); // the drops destroy, in the dead context
    common::poison_the_context(&stream);
    drop(events);
    drop(stream);
    let errors = cuda_event::drop_errors::take_drop_errors();
    println!("drop errors kept: {}", errors.errors.len());
    assert!(
        !errors.errors.is_empty(),
        "the drops in a dead context met no error"
    );
}
