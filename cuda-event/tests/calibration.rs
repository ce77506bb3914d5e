//! `measure`'s calibration and its L2 flush check on the GPU: a kernel's net time beside the same
//! kernel ending at once, every mode and `compare` calibrated, the flush shown to evict, and the
//! answers without a calibration.

use cuda_event_testkit as common;

use common::{MeasuringGpuTest, TestBuffer, gpu_spin};
use cuda_event::{
    CompareOptions, Comparison, FlushVerdict, MeasureOptions, Measurement, NoNet, Stream, Verdict, compare,
    measure,
};
use std::time::Duration;

/// Why the tests whose bounds are kernels' own lengths are skipped under compute-sanitizer.
const KERNEL_LENGTHS: &str = "its bounds are kernels' own lengths, which memcheck stretches";

fn gpu() -> MeasuringGpuTest {
    common::measuring_gpu_for(Duration::from_secs(120))
}

fn calibrated() -> MeasureOptions {
    MeasureOptions::default()
        .calibrate(true)
        .min_time(Duration::from_millis(300))
        .timeout(Duration::from_secs(4))
}

/// `compare` of a 20 us kernel (A) against a 40 us one (B).
fn twenty_against_forty_us(stream: &Stream, options: &CompareOptions) -> Comparison {
    let spin = |us| {
        move |s: &Stream| -> cuda_event::Result<()> {
            gpu_spin(s, Duration::from_micros(us));
            Ok(())
        }
    };
    compare(stream, options, spin(20), spin(40)).unwrap()
}

fn spin(stream: &Stream, options: &MeasureOptions, length: Duration) -> Measurement {
    let m = measure(stream, options, |s| -> cuda_event::Result<()> {
        gpu_spin(s, length);
        Ok(())
    })
    .unwrap();
    let c = m.calibration().expect("calibrated");
    println!(
        "{length:?} kernel, graph {}: median {:?}, net {:?}; empty kernel {:?} +- {:?}, {} samples; {}",
        m.graph(),
        m.median(),
        m.net(),
        c.empty,
        c.uncertainty,
        c.samples,
        m.trust()
    );
    m
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_net_time_of_a_10us_kernel_is_10us_within_2_percent_in_both_modes() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    for graph in [false, true] {
        let options = calibrated().graph(graph);
        let ten = spin(&stream, &options, Duration::from_micros(10));
        let net = ten.net().expect("a net time");
        let off = net.as_secs_f64() / 10e-6 - 1.0;
        assert!(off.abs() <= 0.02, "net {net:?}: {:+.2}%", 100.0 * off);
        // The raw median holds the launch's fixed cost, which the net time leaves out.
        assert!(ten.median() > net + Duration::from_micros(1), "{ten:?}");
        assert_eq!(ten.graph(), graph);
        // The same kernel ending at once is hardly longer than an empty one: a net time of a
        // fraction of a microsecond, or none (never a negative one).
        let at_once = spin(&stream, &options, Duration::ZERO);
        match at_once.net() {
            Ok(net) => assert!(net < Duration::from_micros(1), "{net:?}"),
            Err(NoNet::NotAboveEmptyKernel { .. } | NoNet::NoisyCalibration { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_flush_check_shows_the_flush_evicts_and_is_absent_without_a_flush() {
    if common::skip_under_sanitizer("its reads are timed against each other, which memcheck stretches") {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let buffer = TestBuffer::new(0, 1 << 20);
    let options = MeasureOptions::default().min_time(Duration::from_millis(100));
    let memset = |s: &Stream| -> cuda_event::Result<()> {
        buffer.memset(s, 1);
        Ok(())
    };
    let m = measure(&stream, &options, memset).unwrap();
    let check = *m.flush_check().expect("a flush, so a check");
    println!("{check:?}: ratio {:.3}, {:?}", check.ratio(), check.verdict());
    assert_eq!(check.verdict(), FlushVerdict::Evicts, "{check:?}");
    assert!((0.9..1.15).contains(&check.ratio()), "{check:?}");
    assert!(check.warm < check.cold, "{check:?}");
    let unflushed = measure(&stream, &options.clone().flush_l2(false), memset).unwrap();
    assert!(unflushed.flush_check().is_none() && !unflushed.l2_flushed());
    // With persisting lines reset first (the device otherwise idle): the same check.
    let reset = measure(&stream, &options.clone().reset_persisting_l2(true), memset).unwrap();
    assert_eq!(
        reset.flush_check().map(|c| c.verdict()),
        Some(FlushVerdict::Evicts)
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn without_calibration_there_is_no_net_time_and_compare_calibrates_both_sides() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = MeasureOptions::default().min_time(Duration::from_millis(100));
    let plain = measure(&stream, &options, |s| -> cuda_event::Result<()> {
        gpu_spin(s, Duration::from_micros(5));
        Ok(())
    })
    .unwrap();
    assert_eq!(plain.net(), Err(NoNet::NotCalibrated));
    assert!(plain.calibration().is_none());
    let compare_options =
        CompareOptions::default().measure(calibrated().min_time(Duration::from_millis(100)));
    let comparison = twenty_against_forty_us(&stream, &compare_options);
    let (a, b) = (comparison.a(), comparison.b());
    assert!(a.calibration().is_some(), "{a:?}");
    assert_eq!(a.calibration(), b.calibration(), "one calibration for both sides");
    // The calls above run under the sanitizer too; the net times below are kernels' lengths,
    // which memcheck stretches past what the calibration's share allows.
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let (net_a, net_b) = (a.net().unwrap(), b.net().unwrap());
    println!("compare: A net {net_a:?}, B net {net_b:?}");
    assert!(net_b > net_a + Duration::from_micros(15), "{net_a:?} {net_b:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_net_time_is_refused_when_the_calibration_is_noisier_than_the_share_allows() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    // No share at all: any uncertainty above zero refuses; a zero one (every sample alike) passes.
    let options = calibrated()
        .max_calibration_share(0.0)
        .min_time(Duration::from_millis(100));
    let m = spin(&stream, &options, Duration::from_micros(5));
    let c = *m.calibration().unwrap();
    if c.empty_p10 == c.empty_p90 && c.uncertainty.is_zero() {
        // Every sample alike: nothing to refuse.
        assert!(m.net().is_ok(), "{:?}", m.net());
    } else {
        // Samples that differ by at least one step of the timer: an uncertainty of at least half
        // a step, more than a share of 0 allows.
        assert!(!c.uncertainty.is_zero(), "{c:?}");
        assert!(
            matches!(m.net(), Err(NoNet::NoisyCalibration { max_share, .. }) if max_share == 0.0),
            "{:?}",
            m.net()
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn compare_in_graph_mode_calibrates_both_sides_and_keeps_its_verdict() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let options = CompareOptions::default().measure(calibrated().graph(true));
    let comparison = twenty_against_forty_us(&stream, &options);
    let (a, b) = (comparison.a(), comparison.b());
    assert!(a.graph() && b.graph());
    assert_eq!(comparison.verdict(), Verdict::Slower, "{comparison:?}");
    let (net_a, net_b) = (a.net().unwrap(), b.net().unwrap());
    println!("compare in graph mode: A net {net_a:?}, B net {net_b:?}");
    for (net, us) in [(net_a, 20e-6), (net_b, 40e-6)] {
        let off = net.as_secs_f64() / us - 1.0;
        assert!(off.abs() < 0.05, "{net:?} against {us}: {:+.2}%", 100.0 * off);
    }
}
