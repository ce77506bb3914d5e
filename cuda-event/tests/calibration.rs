//! `measure`'s calibration and its L2 flush check on the GPU: kernels' net times against their
//! lengths in both modes, every mode and `compare` calibrated, the flush shown to evict, and the
//! answers without a calibration.

use cuda_event_testkit as common;

use common::{MeasuringGpuTest, TestBuffer, gpu_spin};
use cuda_event::Stream;
use cuda_event::timing::{
    CompareOptions, Comparison, FlushVerdict, MeasureOptions, Measurement, NoNet, Verdict, compare, measure,
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
        "{length:?} kernel, graph {}: median {:?}, net {:?}; fixed cost {:?} +- {:?} (largest residual {:?}, \
         slope {:?} +- {:.4}), empty kernel {:?}, {} samples; {}",
        m.graph(),
        m.median(),
        m.net(),
        c.fixed_cost,
        c.uncertainty,
        c.largest_residual,
        c.slope,
        c.slope_uncertainty,
        c.empty,
        c.samples,
        m.trust()
    );
    m
}

/// The goal for a kernel of `length`'s net time: within 5% at 1-2 us, 1% at 10 us, 0.5% at 100 us.
fn goal(length: Duration) -> f64 {
    match length.as_micros() {
        0..=2 => 0.05,
        3..=10 => 0.01,
        _ => 0.005,
    }
}

/// Kernels that spin on the GPU's timer for 1, 2, 10 and 100 us: each one's net time is its length
/// (it runs its length and ends within one read of the timer after it; an empty kernel's own run,
/// which it also holds, is in the fixed cost), within the goal and the calibration's uncertainty,
/// gated and in graph mode, and the two modes agree within the same, wherever the measurement is
/// trusted: a measurement that misses its goal says so (its verdict, or no net time), and is
/// printed, not failed; but a 100 us kernel's, far above the launch's cost, must be trusted in
/// both modes. The same kernel ending at once has a net time of a fraction of a
/// microsecond or none. The referee is the kernel's own length, which no card moves; CUPTI's in
/// the same run is `cupti.rs`'s.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_net_time_of_a_kernel_is_its_length_and_both_modes_agree() {
    if common::skip_under_sanitizer(KERNEL_LENGTHS) {
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let mut failures = Vec::new();
    for us in [1, 2, 10, 100] {
        let length = Duration::from_micros(us);
        let mut nets = Vec::new();
        for graph in [false, true] {
            let m = spin(&stream, &calibrated().graph(graph), length);
            assert_eq!(m.graph(), graph);
            let c = *m.calibration().expect("calibrated");
            let trusted = m.trust().is_trusted();
            if us == 100 && !trusted {
                failures.push(format!("{length:?} graph {graph}: not trusted: {}", m.trust()));
            }
            let net = match m.net() {
                Ok(net) => net,
                Err(why) => {
                    assert!(!trusted, "no net time ({why:?}), yet trusted");
                    println!(
                        "{length:?}, graph {graph}: no net time, not trusted: {}",
                        m.trust()
                    );
                    continue;
                }
            };
            // The raw median holds the launch's fixed cost, which the net time leaves out.
            assert!(m.median() > net, "{m:?}");
            let allowed = goal(length) * length.as_secs_f64() + c.uncertainty.as_secs_f64();
            let off = net.as_secs_f64() - length.as_secs_f64();
            println!(
                "{length:?}, graph {graph}: net {net:?}, {:+.2}% (allowed {:.2}%), fixed cost {:?} +- {:?}, slope {:?}, trusted {trusted}",
                100.0 * off / length.as_secs_f64(),
                100.0 * allowed / length.as_secs_f64(),
                c.fixed_cost,
                c.uncertainty,
                c.slope
            );
            if off.abs() > allowed && trusted {
                failures.push(format!("{length:?} graph {graph}: net {net:?}, trusted"));
            }
            if trusted {
                nets.push((net, c.uncertainty));
            }
        }
        if let [(gated, u_gated), (graph, u_graph)] = nets[..] {
            let allowed = goal(length) * length.as_secs_f64() + (u_gated + u_graph).as_secs_f64();
            if gated.abs_diff(graph).as_secs_f64() > allowed {
                failures.push(format!(
                    "{length:?}: gated {gated:?} and graph {graph:?} disagree"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    for graph in [false, true] {
        let at_once = spin(&stream, &calibrated().graph(graph), Duration::ZERO);
        match at_once.net() {
            Ok(net) => assert!(net < Duration::from_micros(1), "{net:?}"),
            Err(NoNet::NotAboveFixedCost { .. } | NoNet::NoisyCalibration { .. }) => {}
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
    // No share at all: any uncertainty above zero refuses. The calibration's kernels of different
    // lengths differ by at least a step of the timer, so its uncertainty is at least half a step.
    let options = calibrated()
        .max_calibration_share(0.0)
        .min_time(Duration::from_millis(100));
    let m = spin(&stream, &options, Duration::from_micros(5));
    let c = *m.calibration().unwrap();
    assert!(!c.uncertainty.is_zero(), "{c:?}");
    assert!(
        matches!(m.net(), Err(NoNet::NoisyCalibration { max_share, .. }) if max_share == 0.0),
        "{:?}",
        m.net()
    );
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
