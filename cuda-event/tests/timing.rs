//! Timer, measure and compare on the GPU: known GPU durations, host launch gaps kept out, the L2
//! flush, never a wait for another stream, repetitions too large for the gate, the caller's own
//! errors, A/B verdicts on kernels of known lengths, every misuse a typed error, and measurements
//! beside another thread's graph capture.

use cuda_event_testkit as common;

use common::{MeasuringGpuTest, TestBuffer, driver_fn, gpu_sleep, hold, ok};
use cuda_event::timing::{
    CompareOptions, MeasureError, MeasureOptions, Measurement, StopReason, Timer, Verdict, compare, measure,
};
use cuda_event::{DeviceGuard, Error, Stream, sys};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Why the tests whose bounds are kernels' own lengths are skipped under compute-sanitizer.
const KERNEL_LENGTHS: &str =
    "its bounds are kernels' own lengths, which memcheck's instrumentation stretches";

fn gpu() -> MeasuringGpuTest {
    common::measuring_gpu()
}

fn gpu_for(deadline: Duration) -> MeasuringGpuTest {
    common::measuring_gpu_for(deadline)
}

/// Free device memory on device 0, as `cuMemGetInfo` reports it.
fn free_device_memory() -> usize {
    type GetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> sys::CUresult;
    let get_info: GetInfo = driver_fn(c"cuMemGetInfo", 3020);
    let _device = DeviceGuard::new(0).unwrap();
    // SAFETY: freeing null frees nothing; the runtime makes device 0's primary context current on
    // this thread for it, which cuMemGetInfo needs.
    ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
    let (mut free, mut total) = (0, 0);
    // SAFETY: writes two sizes through live locals; a context is current.
    let code = unsafe { get_info(&mut free, &mut total) };
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
    free
}

fn quick() -> MeasureOptions {
    MeasureOptions::default()
        .min_time(Duration::from_millis(100))
        .timeout(Duration::from_secs(2))
}

fn print(what: &str, m: &Measurement) {
    println!(
        "{what}: {} samples in {:?} ({:?} each), median {:?}, p10 {:?}, p90 {:?}, min {:?}, max {:?}, noise {:.3}%, {:?}, {} gate timeouts",
        m.samples().len(),
        m.wall_time(),
        m.wall_time() / m.samples().len() as u32,
        m.median(),
        m.percentile(10.0),
        m.percentile(90.0),
        m.min(),
        m.max(),
        100.0 * m.noise(),
        m.stop_reason(),
        m.gate_timeouts()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn timer_measures_a_kernel_of_known_length() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let timer = Timer::start(&stream).unwrap();
    gpu_sleep(&stream, Duration::from_millis(10));
    let elapsed = timer.stop(&stream).unwrap().wait().unwrap();
    println!("10 ms kernel: {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(10) && elapsed < Duration::from_micros(10_600));
}

/// A timer stopped twice gives two laps from one start: the second holds the first and the work
/// between them.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_timer_stopped_twice_gives_two_laps_from_its_start() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let timer = Timer::start(&stream).unwrap();
    gpu_sleep(&stream, Duration::from_millis(5));
    let first = timer.stop(&stream).unwrap();
    gpu_sleep(&stream, Duration::from_millis(5));
    let both = timer.stop(&stream).unwrap();
    drop(timer); // the laps keep their start
    let (first, both) = (first.wait().unwrap(), both.wait().unwrap());
    println!("laps: {first:?}, {both:?}");
    assert!(first >= Duration::from_millis(5), "{first:?}");
    assert!(
        both >= first + Duration::from_millis(5),
        "{first:?} then {both:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn timer_elapsed_never_blocks_and_is_none_until_complete() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let timer = Timer::start(&stream).unwrap();
    gpu_sleep(&stream, Duration::from_millis(300));
    let timing = timer.stop(&stream).unwrap();
    let asked = Instant::now();
    assert_eq!(timing.elapsed(), Ok(None));
    assert!(asked.elapsed() < Duration::from_millis(50));
    let waited = timing.wait().unwrap();
    assert_eq!(timing.elapsed(), Ok(Some(waited)));
    assert!(waited >= Duration::from_millis(300));
    assert!(timing.events().1.query().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_times_a_kernel_of_known_length() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let m = measure(&stream, &quick(), |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(100));
        Ok(())
    })
    .unwrap();
    print("100 us kernel", &m);
    assert!(m.samples().len() >= 10 && m.gated() && m.l2_flushed());
    assert!(m.median() >= Duration::from_micros(100) && m.median() < Duration::from_micros(110));
    assert!(m.min() <= m.percentile(10.0) && m.percentile(10.0) <= m.median());
    assert!(m.median() <= m.percentile(90.0) && m.percentile(90.0) <= m.max());
    assert!(m.min() <= m.mean() && m.mean() <= m.max());
    assert_eq!(m.gate_timeouts(), 0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_keeps_host_launch_gaps_out_of_the_samples() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    // Each repetition: the host takes 300 us to get to the launch of a 20 us kernel.
    let work = |s: &Stream| -> cuda_event::Result<()> {
        std::thread::sleep(Duration::from_micros(300));
        gpu_sleep(s, Duration::from_micros(20));
        Ok(())
    };
    let options = quick().flush_l2(false);
    let gated = measure(&stream, &options, work).unwrap();
    let ungated = measure(&stream, &options.clone().gate(false), work).unwrap();
    print("gated", &gated);
    print("ungated", &ungated);
    assert!(gated.gated() && !ungated.gated());
    assert!(gated.median() < Duration::from_micros(60), "{:?}", gated.median());
    assert!(
        ungated.median() > Duration::from_micros(200),
        "{:?}",
        ungated.median()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_flushing_l2_makes_an_l2_resident_copy_slower() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let (src, dst) = (TestBuffer::new(0, 8 << 20), TestBuffer::new(0, 8 << 20));
    let copy = |s: &Stream| -> cuda_event::Result<()> {
        dst.copy_from(&src, s);
        Ok(())
    };
    let cold = measure(&stream, &quick(), copy).unwrap();
    let warm = measure(&stream, &quick().flush_l2(false), copy).unwrap();
    print("8 MiB copy, L2 flushed", &cold);
    print("8 MiB copy, L2 warm", &warm);
    assert!(cold.l2_flushed() && !warm.l2_flushed());
    assert!(
        cold.median().as_secs_f64() > 1.05 * warm.median().as_secs_f64(),
        "cold {:?}, warm {:?}",
        cold.median(),
        warm.median()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_stops_on_noise_time_or_timeout() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = quick().min_samples(50).min_time(Duration::from_millis(200));
    let m = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(500));
        Ok(())
    })
    .unwrap();
    print("500 us kernel", &m);
    assert!(m.samples().len() >= 50);
    assert!(m.wall_time() >= Duration::from_millis(200));
    match m.stop_reason() {
        cuda_event::timing::StopReason::NoiseBelowMax => assert!(m.noise() <= 0.005),
        cuda_event::timing::StopReason::NoiseSettled => {}
        cuda_event::timing::StopReason::Timeout => assert!(m.wall_time() >= Duration::from_secs(2)),
        other => panic!("a stop reason this test does not know: {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_returns_the_works_error_and_leaves_the_stream_usable() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let mut calls = 0;
    let result = measure(&stream, &quick(), |s| {
        calls += 1;
        if calls == 20 {
            return Err(Error::NotRecorded);
        }
        gpu_sleep(s, Duration::from_micros(10));
        Ok(())
    });
    assert_eq!(result.err(), Some(Error::NotRecorded));
    // The gate was opened: new work on the stream completes.
    stream.record_event().unwrap().synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_of_work_that_waits_on_the_host_times_it_ungated_not_a_hang() {
    let _gpu = gpu_for(Duration::from_secs(30));
    let stream = Stream::new(0).unwrap();
    let started = Instant::now();
    let m = measure(&stream, &quick(), |s| {
        gpu_sleep(s, Duration::from_micros(10));
        s.synchronize()
    })
    .unwrap();
    println!("took {:?}", started.elapsed());
    print("10 us kernel and a synchronize", &m);
    assert!(!m.gated() && m.gate_timeouts() >= 1, "{m:?}");
    assert!(
        m.samples().len() >= 2 && m.min() >= Duration::from_micros(9),
        "{m:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    stream.record_event().unwrap().synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_of_a_repetition_too_large_for_the_gate_times_it_ungated_and_says_so() {
    // 4096 memsets a repetition: more stream operations than CUDA queues on a held stream, so the
    // host blocks inside the first repetition until the gate's watchdog opens the gate. Nothing
    // waits on the host: this is not an error, and the samples are taken without the gate.
    let _gpu = gpu_for(Duration::from_secs(30));
    let stream = Stream::new(0).unwrap();
    let buffer = TestBuffer::new(0, 4096);
    let started = Instant::now();
    let m = measure(&stream, &quick().flush_l2(false), |s| -> cuda_event::Result<()> {
        for _ in 0..4096 {
            buffer.memset(s, 0);
        }
        Ok(())
    })
    .unwrap();
    println!("took {:?}", started.elapsed());
    print("4096 memsets of 4 KiB", &m);
    assert!(!m.gated(), "the repetition fit behind the gate after all: {m:?}");
    assert!(m.gate_timeouts() >= 1 && m.samples().len() >= 2, "{m:?}");
    assert!(m.noise().is_finite() && m.median() > Duration::ZERO, "{m:?}");
    // One watchdog timeout (the first repetition blocked: no smaller batch was tried), then
    // ungated repetitions until the noise settles or quick()'s 2 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    stream.synchronize().unwrap();
}

/// A word of mapped host memory (`cuMemHostAlloc`, device-mapped) that a stream can wait on with
/// `cuStreamWaitValue32`: holds a stream on the GPU, with no host function and no kernel.
struct MappedFlag {
    host: *mut std::ffi::c_void,
    device_ptr: sys::CUdeviceptr,
}

impl MappedFlag {
    fn new() -> MappedFlag {
        let _device = DeviceGuard::new(0).unwrap();
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
        let alloc: sys::PFN_cuMemHostAlloc_v2020 = driver_fn(c"cuMemHostAlloc", 2020);
        let mapped: sys::PFN_cuMemHostGetDevicePointer_v3020 = driver_fn(c"cuMemHostGetDevicePointer", 3020);
        let (mut host, mut device_ptr) = (std::ptr::null_mut(), 0);
        // SAFETY: writes the allocation and its device address through live locals, with the
        // primary context current; the flags of the second call must be 0.
        unsafe {
            let code = alloc.unwrap()(&mut host, 4, sys::CU_MEMHOSTALLOC_DEVICEMAP);
            assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "cuMemHostAlloc");
            let code = mapped.unwrap()(&mut device_ptr, host, 0);
            assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "cuMemHostGetDevicePointer");
        }
        let flag = MappedFlag { host, device_ptr };
        flag.word().store(0, Ordering::Release);
        flag
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: a live, page-aligned allocation of 4 bytes, freed only on drop.
        unsafe { &*self.host.cast::<AtomicU32>() }
    }

    /// Holds `stream` until the word is at least 1.
    fn hold(&self, stream: &Stream) {
        let wait: sys::PFN_cuStreamWaitValue32_v11070 = driver_fn(c"cuStreamWaitValue32", 11070);
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
        // SAFETY: a live stream; the word's device address stays valid until the stream has
        // passed the wait (the test releases and synchronizes before the drop).
        let code = unsafe { wait.unwrap()(stream.as_raw().cast(), self.device_ptr, 1, geq) };
        assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "cuStreamWaitValue32");
    }
}

impl Drop for MappedFlag {
    fn drop(&mut self) {
        self.word().store(1, Ordering::Release);
        let free: sys::PFN_cuMemFreeHost_v2000 = driver_fn(c"cuMemFreeHost", 2000);
        // SAFETY: frees the allocation once; every wait on it was released and passed (each test
        // synchronizes the held stream before the flag drops).
        let _ = unsafe { free.unwrap()(self.host) };
    }
}

/// Whether work queued on `stream` runs while another stream is held: false when CUDA put the two
/// on one hardware queue (a device has a few, shared by all its streams), where the hold holds
/// both and no library call can help it.
fn runs_while_another_is_held(stream: &Stream) -> bool {
    let event = stream.record_event().unwrap();
    let asked = Instant::now();
    while asked.elapsed() < Duration::from_millis(200) {
        if event.query().unwrap() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_and_timer_never_wait_for_a_held_stream_of_the_device() {
    if common::skip_under_sanitizer(
        "runs work beside a held stream, and under memcheck a launch waits for the kernel before it",
    ) {
        return;
    }
    let _gpu = gpu_for(Duration::from_secs(30));
    let buffer = TestBuffer::new(0, 1 << 20);
    let (held, candidates) = (Stream::new(0).unwrap(), [(); 16].map(|_| Stream::new(0).unwrap()));
    // The SM clock's kernel, loaded while the device is idle: only its loading waits for the
    // device's work (MeasureOptions::sm_clock).
    let _ = measure(&held, &quick().sm_clock(true), |s| -> cuda_event::Result<()> {
        buffer.memset(s, 0);
        Ok(())
    })
    .unwrap();
    let flag = MappedFlag::new();
    flag.hold(&held);
    let behind_the_hold = held.record_event().unwrap();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let word = flag.word();
    std::thread::scope(|scope| {
        // Releases the held stream after 10 s whatever happens, so that a measure that waits for
        // it returns (late: the timing check below fails) instead of hanging the test.
        scope.spawn(move || {
            let _ = wait.recv_timeout(Duration::from_secs(10));
            word.store(1, Ordering::Release);
        });
        let idle = candidates
            .iter()
            .find(|s| runs_while_another_is_held(s))
            .expect("every stream made shares the held stream's hardware queue");
        let started = Instant::now();
        for round in 0..3 {
            // Twice: the first measurement on the device may make its scratch memory, the second
            // reuses it; then with the SM clock's stamps, whose kernel is loaded.
            let options = quick().sm_clock(round == 2);
            let m = measure(idle, &options, |s| -> cuda_event::Result<()> {
                buffer.memset(s, 0);
                Ok(())
            })
            .unwrap();
            print(&format!("1 MiB memset, another stream held, round {round}"), &m);
            assert!(m.gated() && m.l2_flushed());
            assert_eq!(m.sm_clock_mhz().is_some(), round == 2);
        }
        let timer = Timer::start(idle).unwrap();
        buffer.memset(idle, 0);
        let section = timer.stop(idle).unwrap().wait().unwrap();
        let took = started.elapsed();
        let still_held = !behind_the_hold.query().unwrap();
        println!("two measurements and a timed memset: {took:?}; the timed memset {section:?}");
        drop(done);
        assert!(
            still_held,
            "the held stream was released before measure returned ({took:?})"
        );
        assert!(
            took < Duration::from_secs(5),
            "measure waited for the held stream: {took:?}"
        );
    });
    held.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn timing_wait_waits_for_a_start_on_a_stream_not_joined_to_the_stop() {
    let _gpu = gpu();
    let (a, b) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    gpu_sleep(&a, Duration::from_millis(300));
    let timer = Timer::start(&a).unwrap();
    // Stopped on an idle stream that never waits for `a`: the end completes long before the start.
    let timing = timer.stop(&b).unwrap();
    let asked = Instant::now();
    let section = timing.wait().unwrap();
    println!(
        "waited {:?}; the section (unordered ends) {section:?}",
        asked.elapsed()
    );
    assert!(asked.elapsed() >= Duration::from_millis(200));
    assert!(timing.events().0.query().unwrap() && timing.events().1.query().unwrap());
    assert_eq!(timing.elapsed(), Ok(Some(section)));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_of_an_empty_closure_has_a_finite_noise_and_bandwidth() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let m = measure(&stream, &quick().flush_l2(false), |_| Ok::<(), Error>(())).unwrap();
    print("empty closure", &m);
    assert!(m.noise().is_finite() && m.noise() >= 0.0, "{m:?}");
    assert!(m.bandwidth_gb_per_s(1 << 20).is_finite(), "{m:?}");
}

/// An error type of the caller's own, as a program that measures another library's calls has.
#[derive(Debug, PartialEq)]
enum WorkError {
    Cuda(Error),
    Mine(&'static str),
}

impl From<Error> for WorkError {
    fn from(e: Error) -> WorkError {
        WorkError::Cuda(e)
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_returns_the_callers_own_error_type() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let mut calls = 0;
    let result = measure(&stream, &quick(), |s| {
        calls += 1;
        if calls == 20 {
            return Err(WorkError::Mine("the 20th call failed"));
        }
        gpu_sleep(s, Duration::from_micros(10));
        Ok(())
    });
    assert_eq!(result.err(), Some(WorkError::Mine("the 20th call failed")));
    // This crate's own errors arrive as the caller's type too.
    let result = measure(&stream, &quick().max_batch(0), |_| Ok::<(), WorkError>(()));
    assert!(
        matches!(
            result,
            Err(WorkError::Cuda(Error::Measure(
                MeasureError::InvalidOptions { .. }
            )))
        ),
        "{result:?}"
    );
    stream.record_event().unwrap().synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_rejects_options_it_cannot_honour() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let bad = [
        quick().min_samples(1),
        quick().max_noise(f64::NAN),
        quick().max_noise(-0.1),
        quick().timeout(Duration::from_millis(10)),
        quick().max_batch(0),
        quick().throttle_threshold(1.5),
        quick().throttle_threshold(f64::NAN),
    ];
    for options in bad {
        let mut called = false;
        let result = measure(&stream, &options, |_| -> cuda_event::Result<()> {
            called = true;
            Ok(())
        });
        assert!(
            matches!(result, Err(Error::Measure(MeasureError::InvalidOptions { .. }))),
            "{options:?}: {result:?}"
        );
        assert!(!called);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_on_a_stream_being_captured_is_an_error() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let mut result = None;
    let _graph = common::capture_graph(&stream, || {
        result = Some(measure(&stream, &quick(), |_| Ok::<(), Error>(())).map(drop));
    });
    assert_eq!(result, Some(Err(Error::StreamCapturing)));
}

/// `release_measure_memory` gives back what measurements keep (the flush buffer is twice the
/// L2 of the device: tens of MiB), a measurement after it allocates anew and works, and a second
/// release with nothing kept is `Ok`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn release_measure_memory_gives_the_flush_buffer_back_and_a_later_measurement_works() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let work = |s: &Stream| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(20));
        Ok(())
    };
    let _ = measure(&stream, &quick(), work).unwrap();
    let kept = free_device_memory();
    cuda_event::timing::release_measure_memory().unwrap();
    let released = free_device_memory();
    println!("free device memory: {kept} bytes while kept, {released} after the release");
    assert!(
        released >= kept + (16 << 20),
        "the release gave back {} bytes",
        released.saturating_sub(kept)
    );
    let again = measure(&stream, &quick(), work).unwrap();
    assert!(again.l2_flushed() && !again.samples().is_empty());
    cuda_event::timing::release_measure_memory().unwrap();
    cuda_event::timing::release_measure_memory().unwrap();
}

/// `compare`'s verdicts on kernels of known lengths, 20 comparisons of each (the validation its
/// design asks for): the same kernel twice is "same" every time, a kernel 3% longer "slower" every
/// time and 3% shorter "faster", and one 0.5% longer never "faster".
#[test]
#[ignore = "needs a CUDA GPU"]
fn compare_gives_the_verdicts_of_kernels_of_known_lengths() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = CompareOptions::default().measure(quick());
    let sleep = |ns: u64| {
        move |s: &Stream| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_nanos(ns));
            Ok(())
        }
    };
    use Verdict::{Ambiguous, Faster, Same, Slower};
    let cases: [(&str, u64, u64, &[Verdict]); 4] = [
        ("100 us vs 100 us", 100_000, 100_000, &[Same]),
        ("100 us vs 103 us", 100_000, 103_000, &[Slower]),
        ("103 us vs 100 us", 103_000, 100_000, &[Faster]),
        ("100 us vs 100.5 us", 100_000, 100_500, &[Same, Slower, Ambiguous]),
    ];
    for (name, a, b, allowed) in cases {
        let mut verdicts = Vec::new();
        for run in 0..20 {
            let c = compare(&stream, &options, sleep(a), sleep(b)).unwrap();
            println!(
                "{name} run {run}: {c} ({:?}; A median {:?}, B median {:?}, {:?})",
                c.verdict(),
                c.a().median(),
                c.b().median(),
                c.a().stop_reason()
            );
            assert_eq!(c.a().samples().len(), c.b().samples().len());
            assert!(c.a().gated() && c.a().l2_flushed());
            verdicts.push(c.verdict());
        }
        assert!(
            verdicts.iter().all(|v| allowed.contains(v)),
            "{name}: {verdicts:?}"
        );
    }
}

/// A decided verdict stops the comparison early; work shorter than the timing events' resolution
/// is ambiguous at the timeout, not an error; the margin is checked before any work.
#[test]
#[ignore = "needs a CUDA GPU"]
fn compare_stops_when_decided_and_says_ambiguous_when_it_cannot_tell() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = CompareOptions::default().measure(quick());
    let short = |s: &Stream| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(20));
        Ok(())
    };
    let long = |s: &Stream| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(40));
        Ok(())
    };
    let c = compare(&stream, &options, short, long).unwrap();
    println!("20 us vs 40 us: {c}");
    assert_eq!(c.verdict(), Verdict::Slower);
    assert_eq!(c.a().stop_reason(), StopReason::VerdictReached);
    // The sleep kernel overshoots by a few microseconds, a larger share of the shorter one; under
    // memcheck by more, so the bound holds outside it only.
    if !common::under_sanitizer() {
        assert!(c.ratio() > 1.5 && c.ratio() < 2.1, "{c}");
    }
    assert!(c.interval().0 <= c.ratio() && c.ratio() <= c.interval().1, "{c}");

    let nothing = |_: &Stream| Ok::<(), Error>(());
    let c = compare(
        &stream,
        &options.clone().measure(quick().flush_l2(false)),
        nothing,
        nothing,
    )
    .unwrap();
    println!("empty vs empty: {c}");
    // Samples at or near the timing events' resolution, all alike: they resolve no margin.
    assert_eq!(c.verdict(), Verdict::Ambiguous);
    assert_eq!(c.a().stop_reason(), StopReason::Timeout);

    for margin in [f64::NAN, -0.01, f64::INFINITY] {
        let mut called = false;
        let result = compare(
            &stream,
            &options.clone().margin(margin),
            |_| {
                called = true;
                Ok::<(), Error>(())
            },
            |_| Ok(()),
        );
        assert!(
            matches!(result, Err(Error::Measure(MeasureError::InvalidOptions { .. }))),
            "{margin}: {result:?}"
        );
        assert!(!called);
    }
}

/// Graph mode: the repetitions replayed from a captured graph read a kernel of known length as
/// that length, flushed, with no gate; work of many launches reads no longer than its kernels'
/// sum (no launch gaps); compare works in it too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_in_graph_mode_times_kernels_of_known_length_without_launch_gaps() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = quick().graph(true);
    let m = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(100));
        Ok(())
    })
    .unwrap();
    print("100 us kernel, graph mode", &m);
    assert!(m.graph() && !m.gated() && m.l2_flushed() && m.samples().len() >= 10);
    assert!(m.median() >= Duration::from_micros(100) && m.median() < Duration::from_micros(110));
    // 50 kernels of 4 us: launched one by one from the host, each launch takes longer than the
    // kernel; replayed from a graph, they run back to back.
    let many = |s: &Stream| -> cuda_event::Result<()> {
        for _ in 0..50 {
            gpu_sleep(s, Duration::from_micros(4));
        }
        Ok(())
    };
    let graphed = measure(&stream, &options, many).unwrap();
    let ungated = measure(&stream, &quick().gate(false), many).unwrap();
    print("50 x 4 us kernels, graph mode", &graphed);
    print("50 x 4 us kernels, ungated", &ungated);
    assert!(graphed.median() >= Duration::from_micros(200));
    assert!(graphed.median() <= ungated.median(), "{graphed:?} {ungated:?}");
    let c = compare(
        &stream,
        &CompareOptions::default().measure(options),
        |s| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_micros(100));
            Ok(())
        },
        |s| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_micros(103));
            Ok(())
        },
    )
    .unwrap();
    println!("graph mode, 100 us vs 103 us: {c}");
    assert!(c.a().graph() && c.verdict() == Verdict::Slower);
}

/// Graph mode on work a graph cannot hold: a call that invalidates the capture (a query of the
/// stream, its error ignored), the legacy default stream, a wait on the host inside the work;
/// each a clear error, the stream usable after.
#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_in_graph_mode_of_work_that_cannot_be_captured_is_an_error_that_says_why() {
    if common::skip_under_sanitizer(
        "breaks measure's graph capture, on purpose: CUDA reports the capture's errors",
    ) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = quick().graph(true);
    let mut calls = 0;
    let unjoined = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        calls += 1;
        gpu_sleep(s, Duration::from_micros(5));
        // Outside a capture, an answer; inside one, an error that invalidates it.
        let _ = s.query();
        Ok(())
    });
    println!("a query inside the work: {unjoined:?} after {calls} calls");
    match &unjoined {
        Err(Error::Measure(MeasureError::NotCapturable { reason })) => {
            assert!(reason.contains("broke the capture"), "{reason}")
        }
        other => panic!("expected NotCapturable, got {other:?}"),
    }
    let legacy = measure(
        &Stream::legacy(0).unwrap(),
        &options,
        |s| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_micros(5));
            Ok(())
        },
    );
    println!("legacy default stream: {legacy:?}");
    match &legacy {
        Err(Error::Measure(MeasureError::NotCapturable { reason })) => {
            assert!(reason.contains("legacy default stream"), "{reason}")
        }
        other => panic!("expected NotCapturable, got {other:?}"),
    }
    let waits = measure(&stream, &options, |s| {
        gpu_sleep(s, Duration::from_micros(5));
        s.synchronize()
    });
    println!("a wait on the host: {waits:?}");
    assert!(matches!(waits, Err(Error::Cuda(_))), "{waits:?}");
    assert!(!stream.is_capturing().unwrap());
    gpu_sleep(&stream, Duration::from_micros(5));
    stream.synchronize().unwrap();
}

/// Graph mode end to end, with no timing bound (so that it runs under the sanitizer too, whose
/// leak check sees the graph and its events freed).
#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_in_graph_mode_replays_the_work_and_leaves_nothing_behind() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let mut calls = 0;
    // Without the SM clock, whose warm-up may go on while the clock ramps up.
    let options = quick().graph(true).warmup(Duration::ZERO).sm_clock(false);
    let m = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        calls += 1;
        gpu_sleep(s, Duration::from_micros(20));
        Ok(())
    })
    .unwrap();
    print("20 us kernel, graph mode", &m);
    assert!(m.graph() && m.samples().len() >= 10 && m.median() >= Duration::from_micros(20));
    // The first call, the 5-call estimate and one of warm-up, then one capture of a batch (at
    // most max_batch repetitions), replayed for every sample after.
    assert!(calls <= 7 + options.max_batch, "{calls} calls");
    assert!(
        m.samples().len() > options.max_batch,
        "{} samples",
        m.samples().len()
    );
    assert!(!stream.is_capturing().unwrap());
}

/// Device 0's maximum SM clock in MHz, as the driver reports it.
fn max_sm_clock_mhz() -> f64 {
    let get: sys::PFN_cuDeviceGetAttribute_v2000 = driver_fn(c"cuDeviceGetAttribute", 2000);
    let mut khz = 0;
    let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE;
    // SAFETY: device ordinal 0 is a CUdevice of a machine with a GPU; writes through a live local.
    let code = unsafe { get.unwrap()(&mut khz, attribute, 0) };
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
    f64::from(khz) / 1e3
}

fn print_clock(what: &str, m: &Measurement) {
    let known: Vec<f64> = m.sm_clocks_mhz().iter().flatten().copied().collect();
    let (low, high) = known
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &c| (l.min(c), h.max(c)));
    println!(
        "{what}: SM clock {:?} of {:?} MHz, samples {low:.1} to {high:.1} MHz ({} of {} read), {} throttled",
        m.sm_clock_mhz(),
        m.max_sm_clock_mhz(),
        known.len(),
        m.samples().len(),
        m.throttled_samples()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_reads_the_sm_clock_of_every_sample_beside_the_maximum() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let max = max_sm_clock_mhz();
    for graph in [false, true] {
        for length in [Duration::from_micros(5), Duration::from_micros(100)] {
            let m = measure(
                &stream,
                &quick().graph(graph).sm_clock(true),
                |s| -> cuda_event::Result<()> {
                    gpu_sleep(s, length);
                    Ok(())
                },
            )
            .unwrap();
            let what = format!("{length:?} kernel, graph {graph}");
            print(&what, &m);
            print_clock(&what, &m);
            assert_eq!(m.max_sm_clock_mhz(), Some(max));
            assert_eq!(m.sm_clocks_mhz().len(), m.samples().len());
            let known = m.sm_clocks_mhz().iter().flatten().count();
            assert!(known * 10 >= m.samples().len() * 9, "{known} clocks read");
            // Kept samples are at least the threshold's; none reads above the maximum by more
            // than the reading's error.
            for &clock in m.sm_clocks_mhz().iter().flatten() {
                assert!(clock >= 0.75 * max && clock <= 1.02 * max, "{clock} MHz");
            }
            // Warmed up until ramped: a kernel that sleeps draws little power, so nothing holds
            // the clock back.
            assert!(m.sm_clock_mhz().unwrap() >= 0.9 * max);
        }
    }
    // Off by default.
    let m = measure(&stream, &quick(), |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(5));
        Ok(())
    })
    .unwrap();
    assert_eq!((m.sm_clock_mhz(), m.max_sm_clock_mhz()), (None, None));
    assert!(m.sm_clocks_mhz().iter().all(Option::is_none));
    let c = compare(
        &stream,
        &CompareOptions::default().measure(quick().sm_clock(true)),
        |s| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_micros(20));
            Ok(())
        },
        |s| {
            gpu_sleep(s, Duration::from_micros(20));
            Ok(())
        },
    )
    .unwrap();
    print_clock("compare's A", c.a());
    assert!(c.a().sm_clock_mhz().is_some() && c.b().sm_clock_mhz().is_some());
    assert_eq!(c.a().sm_clocks_mhz().len(), c.pairs());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn measure_discards_samples_below_the_throttle_threshold_and_says_so_when_every_one_is() {
    if common::skip_under_sanitizer(
        "runs to measure's timeout, a cool-down after each throttled batch: too slow under memcheck",
    ) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let max = max_sm_clock_mhz();
    // The referee, in the same run: the default threshold keeps every repetition of this work, and
    // says where this card reads its clock while it runs.
    let referee = measure(&stream, &quick().sm_clock(true), |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(50));
        Ok(())
    })
    .unwrap();
    print_clock("threshold 0.75", &referee);
    assert_eq!(referee.throttled_samples(), 0);
    let mut readings: Vec<f64> = referee.sm_clocks_mhz().iter().flatten().copied().collect();
    readings.sort_by(f64::total_cmp);
    let typical = readings[readings.len() / 2];
    // A threshold of the maximum itself: on most cards about every repetition reads below it; a
    // card whose timer runs a little slow against its clock reads above it (the referee says
    // which), and there nothing is to be discarded.
    let reads_below_max = typical < max;
    let options = quick().sm_clock(true).throttle_threshold(1.0);
    let started = Instant::now();
    let result = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        gpu_sleep(s, Duration::from_micros(50));
        Ok(())
    });
    println!(
        "threshold 1.0 (the referee's median reading {typical:.1} of {max} MHz): {result:?} after {:?}",
        started.elapsed()
    );
    match result {
        Err(
            e @ Error::Measure(MeasureError::ClockThrottled {
                sm_clock_mhz,
                max_sm_clock_mhz,
                discarded,
                ..
            }),
        ) => {
            assert_eq!(max_sm_clock_mhz, max);
            assert!(sm_clock_mhz > 0.0 && sm_clock_mhz < max && discarded > 0);
            assert!(e.to_string().contains("throttle_threshold"), "{e}");
            // It went on until the timeout, pausing after each throttled batch.
            assert!(started.elapsed() >= options.timeout);
        }
        Ok(m) => {
            print_clock("threshold 1.0", &m);
            // Only repetitions that read at the maximum or above are kept...
            assert!(m.sm_clocks_mhz().iter().flatten().all(|&c| c >= max));
            // ...and where the referee read below it, some were discarded.
            assert!(
                m.throttled_samples() > 0 || !reads_below_max,
                "none discarded, though the referee read {typical:.1} of {max} MHz"
            );
        }
        Err(e) => panic!("{e}"),
    }
}

/// Measurements on one thread while another thread holds a capture in global mode (the default of
/// `torch.cuda.graph` and of most C++ code), the first in the context among them (it allocates and
/// loads the timing kernels), gated and in graph mode: they succeed, and the capture ends valid
/// with its one node. Global mode forbids "potentially unsafe" calls (an allocation, a query) on
/// every other thread and is invalidated by them: measure makes its own calls in relaxed mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn measurements_beside_another_threads_global_mode_capture_leave_it_valid() {
    const GLOBAL_MODE: sys::CUstreamCaptureMode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    let _gpu = gpu();
    cuda_event::timing::release_measure_memory().unwrap();
    let (measured, captured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    // Allocated before the capture begins: an allocation during it would break it.
    let work = TestBuffer::new(0, 1 << 20);
    let (results, capture) = common::beside_a_global_capture(&captured, || {
        [
            (
                "gated, calibrated, clocked",
                quick().calibrate(true).sm_clock(true),
            ),
            ("graph mode, calibrated", quick().graph(true).calibrate(true)),
        ]
        .into_iter()
        .map(|(what, options)| {
            let mut modes = Vec::new();
            let m = measure(&measured, &options, |s| -> cuda_event::Result<()> {
                modes.push(common::capture_mode());
                work.memset(s, 1);
                Ok(())
            });
            // The work ran in this thread's mode, and the mode is this thread's again after.
            assert!(modes.iter().all(|&mode| mode == GLOBAL_MODE), "{what}");
            assert_eq!(common::capture_mode(), GLOBAL_MODE, "{what}");
            (what, m)
        })
        .collect::<Vec<_>>()
    });
    assert_eq!(capture, Ok(()), "a measurement broke the other thread's capture");
    for (what, m) in results {
        let m = m.unwrap_or_else(|e| panic!("{what}: {e}"));
        print(what, &m);
        assert!(m.samples().len() >= 10, "{what}");
    }
}

/// `release_measure_memory` on one thread while another holds a capture in global mode: it frees
/// (device buffers, registered host words, the timing kernels' module) and the capture ends valid
/// with its one node. In this thread's global mode CUDA would refuse each free and break the
/// capture (`bench/probes/capture_unsafe_calls.c`); the crate frees in relaxed mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn releasing_measure_memory_beside_another_threads_global_mode_capture_leaves_it_valid() {
    if common::skip_under_sanitizer(
        "under memcheck the other thread's capture ends invalidated (901) though the frees are \
         relaxed; without memcheck the same frees leave it valid, so the tool's own work breaks it",
    ) {
        return;
    }
    let _gpu = gpu();
    let (measured, captured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    // Something to free of every kind: a calibrated, clocked measurement keeps the flush buffers,
    // the gate's word, the clock's slots and the kernels' module.
    let _ = measure(
        &measured,
        &quick().calibrate(true).sm_clock(true),
        |s| -> cuda_event::Result<()> {
            gpu_sleep(s, Duration::from_micros(20));
            Ok(())
        },
    )
    .unwrap();
    let (released, capture) =
        common::beside_a_global_capture(&captured, cuda_event::timing::release_measure_memory);
    assert_eq!(
        capture,
        Ok(()),
        "releasing measure's memory broke the other thread's capture"
    );
    released.unwrap();
    assert_eq!(
        common::capture_mode(),
        sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
    );
}

/// A timing read on one thread (`Timing::elapsed` of a pending section) while another holds a
/// capture in global mode: it answers, and the capture ends valid with its one node. The read's
/// queries are the crate's, in relaxed mode; in global mode CUDA would refuse them and break the
/// capture.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_timings_read_beside_another_threads_global_mode_capture_leaves_it_valid() {
    let _gpu = gpu();
    let (timed, captured) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    let held = hold(&timed);
    let timing = Timer::start(&timed).unwrap().stop(&timed).unwrap();
    let (pending, capture) = common::beside_a_global_capture(&captured, || {
        let pending = timing.elapsed();
        held.open(); // before the capture's end, whose thread then synchronizes the device
        pending
    });
    assert_eq!(
        capture,
        Ok(()),
        "a timing's read broke the other thread's capture"
    );
    assert_eq!(pending.unwrap(), None);
}
