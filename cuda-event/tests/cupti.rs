//! `MeasureOptions::cupti` on the GPU (the `cupti` feature): CUPTI's durations of every repetition
//! of the measured work and of the calibration's empty kernel, the net time checked against
//! CUPTI's net time in the same run, and the error where libcupti cannot be loaded.
#![cfg(feature = "cupti")]

use cuda_event_testkit as common;

use common::gpu_spin;
use cuda_event::timing::{Doubt, MeasureError, MeasureOptions, Measurement, measure};
use cuda_event::{Error, Stream};
use std::time::Duration;

/// compute-sanitizer loads CUPTI-like tooling into the process, and CUPTI allows one client.
const SANITIZER_HOLDS_CUPTI: &str = "compute-sanitizer's tooling holds the profiling interface";

fn options() -> MeasureOptions {
    MeasureOptions::default()
        .calibrate(true)
        .cupti(true)
        .min_time(Duration::from_millis(300))
        .timeout(Duration::from_secs(4))
}

fn spin(stream: &Stream, options: &MeasureOptions, length: Duration) -> Measurement {
    let m = measure(stream, options, |s| -> cuda_event::Result<()> {
        gpu_spin(s, length);
        Ok(())
    })
    .unwrap();
    let c = m.cupti().expect("CUPTI's times");
    println!(
        "{length:?} kernel: events median {:?}, net {:?}; CUPTI median {:?}, empty {:?}, net {:?}, \
         {} of {} samples known, {} dropped; {}",
        m.median(),
        m.net(),
        c.median,
        c.empty,
        c.net(),
        c.samples.iter().flatten().count(),
        c.samples.len(),
        c.dropped,
        m.trust()
    );
    m
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cupti_times_every_repetition_of_the_work_and_of_the_calibration() {
    if common::skip_under_sanitizer(SANITIZER_HOLDS_CUPTI) {
        return;
    }
    let _gpu = common::measuring_gpu_for(Duration::from_secs(120));
    let stream = Stream::new(0).unwrap();
    for us in [10, 100] {
        let length = Duration::from_micros(us);
        let m = spin(&stream, &options(), length);
        let c = m.cupti().unwrap();
        assert_eq!(c.samples.len(), m.samples().len());
        if c.dropped == 0 {
            assert!(c.samples.iter().all(Option::is_some), "{c:?}");
        }
        // A spinning kernel runs at least its length, and inside the events' interval around it.
        let median = c.median.expect("CUPTI's median");
        assert!(
            median >= length && median < m.median(),
            "{median:?} against {m:?}"
        );
        let empty = c.empty.expect("CUPTI's empty kernel");
        assert!(empty < Duration::from_micros(5), "{empty:?}");
    }
}

/// The referee in the same run: the calibration's net time against CUPTI's (its median less its
/// empty kernel) for kernels of 1, 2, 10 and 100 us, within the goal (5% at 1-2 us, 1% at 10 us,
/// 0.5% at 100 us) and the calibration's uncertainty wherever the measurement is trusted (one that
/// misses its goal must say so, and is printed, not failed; a 100 us kernel's must be trusted); and the measurement's verdict does
/// not doubt an agreement that CUPTI's check allows.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_net_time_agrees_with_cuptis_in_the_same_run() {
    if common::skip_under_sanitizer(SANITIZER_HOLDS_CUPTI) {
        return;
    }
    let _gpu = common::measuring_gpu_for(Duration::from_secs(120));
    let stream = Stream::new(0).unwrap();
    let mut failures = Vec::new();
    for (us, goal) in [(1, 0.05), (2, 0.05), (10, 0.01), (100, 0.005)] {
        let m = spin(&stream, &options(), Duration::from_micros(us));
        let trusted = m.trust().is_trusted();
        if us == 100 && !trusted {
            failures.push(format!("{us} us: not trusted: {}", m.trust()));
        }
        let cupti_net = m.cupti().unwrap().net().unwrap();
        let net = match m.net() {
            Ok(net) => net,
            Err(why) => {
                assert!(!trusted, "no net time ({why:?}), yet trusted");
                println!("{us} us: no net time, not trusted: {}", m.trust());
                continue;
            }
        };
        let uncertainty = m.calibration().unwrap().uncertainty;
        let off = net.as_secs_f64() / cupti_net.as_secs_f64() - 1.0;
        let allowed = goal + uncertainty.as_secs_f64() / cupti_net.as_secs_f64();
        println!(
            "{us} us: net {net:?}, CUPTI's {cupti_net:?}: {:+.2}% (allowed {:.2}%)",
            100.0 * off,
            100.0 * allowed
        );
        // A measurement that misses its goal must say that it is not to be trusted.
        if off.abs() > allowed && trusted {
            failures.push(format!("{us} us: {:+.2}%, trusted", 100.0 * off));
        }
        let disagrees = m
            .trust()
            .doubts()
            .iter()
            .any(|d| matches!(d, Doubt::DisagreesWithCupti { .. }));
        if disagrees && off.abs() <= allowed.min(0.02) {
            failures.push(format!("{us} us: doubted, though within {:.2}%", 100.0 * off));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn without_libcupti_the_measurement_says_so() {
    let test = common::this_test!();
    if common::role().as_deref() != Some("no-cupti") {
        let _gpu = common::gpu();
        let missing = [("CUDA_EVENT_CUPTI_LIBRARY", "/nonexistent/libcupti.so")];
        print!(
            "{}",
            String::from_utf8_lossy(&common::run_child(test, "no-cupti", &missing).stdout)
        );
        return;
    }
    let stream = Stream::new(0).unwrap();
    let refused = measure(&stream, &options(), |_| Ok::<(), Error>(()));
    println!("{refused:?}");
    match refused {
        Err(Error::Measure(MeasureError::CuptiUnavailable { reason })) => {
            assert!(reason.contains("/nonexistent/libcupti.so"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}
