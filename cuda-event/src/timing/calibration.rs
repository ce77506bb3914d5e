//! The calibration of [`MeasureOptions::calibrate`](crate::MeasureOptions::calibrate): intervals
//! around an empty kernel, timed beside the work; and the work's time net of them, or why there is
//! none.

use crate::timing::clusters::{Clusters, Drift, drift, two_clusters};
use crate::timing::statistics::{median_duration, median_half_width, percentile_of_sorted, smallest_step};
use std::fmt;
use std::time::Duration;

/// The calibration's samples: intervals between two timing events around one empty kernel, taken
/// beside the work's ([`Measurement::calibration`](crate::Measurement::calibration)).
///
/// Such an interval is the GPU's fixed cost of a timed launch (the start event to the kernel's
/// start, the kernel's end to the end event) and the empty kernel's own run (a block started and
/// retired), which no pair of timing events can tell apart.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Calibration {
    /// The median interval around one empty kernel: what the net time takes away.
    pub empty: Duration,
    /// The 10th and 90th percentiles of those intervals (as [`Measurement::percentile`](crate::Measurement::percentile)
    /// reads them): the spread of one sample.
    pub empty_p10: Duration,
    /// See [`empty_p10`](Self::empty_p10).
    pub empty_p90: Duration,
    /// Half the width of a 95% confidence interval of [`empty`](Self::empty) (distribution-free,
    /// from the order statistics; half the samples' range when there are too few for one), and at
    /// least half the timing events' resolution as the samples show it: how far the calibration's
    /// noise can move the net time.
    pub uncertainty: Duration,
    /// How many samples it has.
    pub samples: usize,
    /// The samples' two clusters, if they fall in two (see [`Clusters`]): the fixed cost is not
    /// one number in this run, and [`empty`](Self::empty) is one of them or neither.
    pub two_clusters: Option<Clusters>,
    /// The median's move between the first and the second half of the samples, if it moved by
    /// more than the halves' confidence intervals allow (see [`Drift`]).
    pub drift: Option<Drift>,
}

impl Calibration {
    /// The calibration of `in_order` (the intervals around an empty kernel, in the order they were
    /// taken), with `work_step` the smallest step between two different samples of the work timed
    /// beside it (the same timing events, so the same resolution; `None` where it has none); none
    /// when there are no samples.
    pub(crate) fn of_samples(in_order: &[Duration], work_step: Option<Duration>) -> Option<Calibration> {
        let n = in_order.len();
        if n == 0 {
            return None;
        }
        let mut sorted = in_order.to_vec();
        sorted.sort_unstable();
        let sorted = &sorted[..];
        let resolution = [step_of_sorted(sorted), work_step].into_iter().flatten().min();
        Some(Calibration {
            empty: median_duration(sorted),
            empty_p10: percentile_of_sorted(sorted, 10.0),
            empty_p90: percentile_of_sorted(sorted, 90.0),
            uncertainty: median_half_width(sorted, resolution),
            samples: n,
            two_clusters: two_clusters(sorted),
            drift: drift(in_order, resolution),
        })
    }
}

/// The smallest step between two different samples of `sorted` (ascending); none if all are equal.
pub(crate) fn step_of_sorted(sorted: &[Duration]) -> Option<Duration> {
    let secs: Vec<f64> = sorted.iter().map(Duration::as_secs_f64).collect();
    let step = smallest_step(&secs);
    step.is_finite().then(|| Duration::from_secs_f64(step))
}

/// Why a [`Measurement`](crate::Measurement) has no net time
/// ([`Measurement::net`](crate::Measurement::net)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum NoNet {
    /// [`MeasureOptions::calibrate`](crate::MeasureOptions::calibrate) was off.
    NotCalibrated,
    /// The driver could not compile the empty kernel for the device (PTX compilation disabled,
    /// say): the measurement went on without it.
    KernelUnavailable,
    /// The work's median is not longer than an empty kernel's interval: a net time would be zero
    /// or negative (work that is not a kernel launch, a small memset, say, can cost the GPU less
    /// than an empty kernel's launch).
    NotAboveEmptyKernel {
        /// The work's median.
        median: Duration,
        /// The calibration's [`empty`](Calibration::empty).
        empty: Duration,
    },
    /// The calibration's uncertainty is more than
    /// [`MeasureOptions::max_calibration_share`](crate::MeasureOptions::max_calibration_share)
    /// of the net time it would give.
    NoisyCalibration {
        /// The net time it would have given.
        net: Duration,
        /// The calibration's [`uncertainty`](Calibration::uncertainty).
        uncertainty: Duration,
        /// The share allowed.
        max_share: f64,
    },
}

impl fmt::Display for NoNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoNet::NotCalibrated => write!(f, "not calibrated (MeasureOptions::calibrate is off)"),
            NoNet::KernelUnavailable => {
                write!(f, "not calibrated: the driver could not compile the empty kernel")
            }
            NoNet::NotAboveEmptyKernel { median, empty } => write!(
                f,
                "the work's median ({median:?}) is not above an empty kernel's ({empty:?})"
            ),
            NoNet::NoisyCalibration {
                net,
                uncertainty,
                max_share,
            } => write!(
                f,
                "the calibration's uncertainty ({uncertainty:?}) is more than {:.1}% of the net \
                 time ({net:?})",
                100.0 * max_share
            ),
        }
    }
}

impl std::error::Error for NoNet {}

/// Where a measurement's calibration stands: what [`net`] needs beside the work's median.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Calibrated {
    NotAsked,
    KernelUnavailable,
    Done(Calibration),
}

/// The net time of work whose median is `median`, or why there is none: `median` less the
/// calibration's empty-kernel interval, given when it is above zero and the calibration's
/// uncertainty is at most `max_share` of it.
pub(crate) fn net(median: Duration, calibrated: Calibrated, max_share: f64) -> Result<Duration, NoNet> {
    let calibration = match calibrated {
        Calibrated::NotAsked => return Err(NoNet::NotCalibrated),
        Calibrated::KernelUnavailable => return Err(NoNet::KernelUnavailable),
        Calibrated::Done(calibration) => calibration,
    };
    let net = median.saturating_sub(calibration.empty);
    if net.is_zero() {
        return Err(NoNet::NotAboveEmptyKernel {
            median,
            empty: calibration.empty,
        });
    }
    if calibration.uncertainty.as_secs_f64() > max_share * net.as_secs_f64() {
        return Err(NoNet::NoisyCalibration {
            net,
            uncertainty: calibration.uncertainty,
            max_share,
        });
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(values: &[f64]) -> Vec<Duration> {
        let mut v: Vec<Duration> = values
            .iter()
            .map(|&u| Duration::from_secs_f64(u * 1e-6))
            .collect();
        v.sort();
        v
    }

    fn calibration(empty_us: f64, uncertainty_us: f64) -> Calibrated {
        let d = |u: f64| Duration::from_secs_f64(u * 1e-6);
        Calibrated::Done(Calibration {
            empty: d(empty_us),
            empty_p10: Duration::ZERO,
            empty_p90: Duration::ZERO,
            uncertainty: d(uncertainty_us),
            samples: 1000,
            two_clusters: None,
            drift: None,
        })
    }

    fn close(a: Duration, b_us: f64) -> bool {
        (a.as_secs_f64() * 1e6 - b_us).abs() < 1e-6
    }

    #[test]
    fn net_is_the_median_less_the_empty_kernels() {
        let net = net(Duration::from_micros(13), calibration(3.25, 0.01), 0.05).unwrap();
        assert!(close(net, 9.75), "{net:?}");
    }

    #[test]
    fn no_net_without_a_calibration() {
        let median = Duration::from_micros(13);
        assert_eq!(net(median, Calibrated::NotAsked, 0.05), Err(NoNet::NotCalibrated));
        assert_eq!(
            net(median, Calibrated::KernelUnavailable, 0.05),
            Err(NoNet::KernelUnavailable)
        );
    }

    #[test]
    fn work_no_longer_than_an_empty_kernel_has_no_net_never_a_negative_one() {
        for median_us in [3.0, 3.25] {
            let median = Duration::from_secs_f64(median_us * 1e-6);
            let refused = net(median, calibration(3.25, 0.0), 0.05);
            assert!(
                matches!(refused, Err(NoNet::NotAboveEmptyKernel { .. })),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_calibration_noisier_than_the_share_allows_gives_no_net() {
        // 1 us net, 0.06 us uncertainty: 6% > 5%.
        let refused = net(Duration::from_micros(4), calibration(3.0, 0.06), 0.05);
        assert!(
            matches!(refused, Err(NoNet::NoisyCalibration { max_share, .. }) if max_share == 0.05),
            "{refused:?}"
        );
        assert!(refused.unwrap_err().to_string().contains("5.0%"));
        // 3% of a 2 us net passes; so does a 1 us net with a share that allows 6%.
        assert!(net(Duration::from_micros(5), calibration(3.0, 0.06), 0.05).is_ok());
        assert!(net(Duration::from_micros(4), calibration(3.0, 0.06), 0.06).is_ok());
    }

    #[test]
    fn the_uncertainty_comes_from_the_order_statistics() {
        // 100 samples 1..=100 us: the sign test's 95% bounds are the 40th and 61st (40 and 61 us),
        // half-width 10.5 us.
        let c = Calibration::of_samples(&us(&(1..=100).map(f64::from).collect::<Vec<_>>()), None).unwrap();
        assert!(close(c.uncertainty, 10.5), "{c:?}");
        assert!(close(c.empty, 50.5), "{c:?}");
        // Interpolated, as Measurement::percentile reads them: ranks 9.9 and 89.1 of 0..=99.
        assert!(close(c.empty_p10, 10.9) && close(c.empty_p90, 90.1), "{c:?}");
        // Identical samples: no uncertainty, unless the work's samples show the timer's step.
        let same = Calibration::of_samples(&us(&[3.0; 50]), None).unwrap();
        assert_eq!(same.uncertainty, Duration::ZERO);
        let stepped = Calibration::of_samples(&us(&[3.0; 50]), Some(Duration::from_nanos(32))).unwrap();
        assert_eq!(stepped.uncertainty, Duration::from_nanos(16));
        // Few samples: half their range.
        let few = Calibration::of_samples(&us(&[3.0, 4.0, 5.0]), None).unwrap();
        assert!(close(few.uncertainty, 1.0), "{few:?}");
        assert_eq!(Calibration::of_samples(&[], None), None);
    }

    #[test]
    fn tied_samples_keep_half_a_step_of_the_timer_as_their_uncertainty() {
        // 32 ns steps, the median's interval all one value: the uncertainty is half a step.
        let mut v = vec![3.2; 90];
        v.extend([3.168, 3.232, 3.264, 3.232, 3.168]);
        let c = Calibration::of_samples(&us(&v), None).unwrap();
        assert!(close(c.uncertainty, 0.016), "{c:?}");
        // A finer step in the work's samples is the resolution.
        let finer = Calibration::of_samples(&us(&v), Some(Duration::from_nanos(8))).unwrap();
        assert!(close(finer.uncertainty, 0.004), "{finer:?}");
        // So a net time of one step is refused at any share under 50%.
        let refused = net(Duration::from_secs_f64(3.232e-6), Calibrated::Done(c), 0.05);
        assert!(
            matches!(refused, Err(NoNet::NoisyCalibration { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn more_samples_narrow_the_uncertainty() {
        let noisy = |n: usize| {
            let v: Vec<f64> = (0..n)
                .map(|i| 3.0 + ((i * 7919) % 1000) as f64 / 1000.0)
                .collect();
            Calibration::of_samples(&us(&v), None).unwrap().uncertainty
        };
        assert!(
            noisy(10_000) < noisy(100) / 5,
            "{:?} {:?}",
            noisy(10_000),
            noisy(100)
        );
    }
}
