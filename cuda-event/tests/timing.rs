//! Timer and measure on the GPU: known GPU durations, host launch gaps kept out, the L2 flush,
//! and every misuse a typed error.

mod common;

use common::{DeviceBuffer, gpu, gpu_for, gpu_sleep};
use cuda_event::{Error, MeasureOptions, Measurement, Stream, Timer, measure};
use std::time::Duration;

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

#[test]
#[ignore = "needs a CUDA GPU"]
fn timer_elapsed_never_blocks_and_is_none_until_complete() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let timer = Timer::start(&stream).unwrap();
    gpu_sleep(&stream, Duration::from_millis(300));
    let timing = timer.stop(&stream).unwrap();
    let asked = std::time::Instant::now();
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
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let m = measure(&stream, &quick(), |s| {
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
    let work = |s: &Stream| {
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
    let (src, dst) = (DeviceBuffer::new(0, 8 << 20), DeviceBuffer::new(0, 8 << 20));
    let copy = |s: &Stream| {
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
    let m = measure(&stream, &options, |s| {
        gpu_sleep(s, Duration::from_micros(500));
        Ok(())
    })
    .unwrap();
    print("500 us kernel", &m);
    assert!(m.samples().len() >= 50);
    assert!(m.wall_time() >= Duration::from_millis(200));
    match m.stop_reason() {
        cuda_event::StopReason::NoiseBelowMax => assert!(m.noise() <= 0.005),
        cuda_event::StopReason::NoiseSettled => {}
        cuda_event::StopReason::Timeout => assert!(m.wall_time() >= Duration::from_secs(2)),
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
fn measure_of_work_that_waits_on_the_host_is_an_error_not_a_hang() {
    let _gpu = gpu_for(Duration::from_secs(30));
    let stream = Stream::new(0).unwrap();
    let started = std::time::Instant::now();
    let result = measure(&stream, &quick(), |s| {
        gpu_sleep(s, Duration::from_micros(10));
        s.synchronize()
    });
    println!("gave {result:?} after {:?}", started.elapsed());
    assert_eq!(result.err(), Some(Error::WorkBlockedOnTheHost));
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
    ];
    for options in bad {
        let mut called = false;
        let result = measure(&stream, &options, |_| {
            called = true;
            Ok(())
        });
        assert!(
            matches!(result, Err(Error::InvalidMeasureOptions { .. })),
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
        result = Some(measure(&stream, &quick(), |_| Ok(())).map(drop));
    });
    assert_eq!(result, Some(Err(Error::StreamCapturing)));
}
