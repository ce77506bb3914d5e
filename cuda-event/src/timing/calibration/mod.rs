//! The calibration of [`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate): intervals
//! around the calibration's kernels, timed beside the work; the launch's fixed cost they give
//! (`fixed_cost`); and the work's time net of it, or why there is none. Arithmetic on the samples
//! only: the engine launches the kernels (its calibration arm).

pub(crate) mod fixed_cost;

use crate::timing::calibration::fixed_cost::{EMPTY, RUNGS, Rung, fit};
use crate::timing::statistics::clusters::{Clusters, Drift, drift, two_clusters};
use crate::timing::statistics::places::{balanced_half_width, balanced_median, without_places};
use crate::timing::statistics::{saturating_secs, smallest_step};
use std::fmt;
use std::time::Duration;

/// The calibration's result ([`Measurement::calibration`](crate::timing::Measurement::calibration)): the
/// fixed cost of a timed launch, from intervals around kernels of known lengths taken beside the
/// work, and how far to trust it.
///
/// Each repetition times one calibration kernel, in turn an empty one and ones that spin on the
/// GPU's timer for 1, 2, 3, 5, 10 and 20 us. An interval around a kernel of length `L` is the fixed
/// cost (the start event to the kernel's start, the kernel's end to the end event) plus `L` plus
/// what an empty kernel itself runs (the launch of its block), which no pair of timing events can
/// tell apart; each length's median less `L` is one reading of the fixed cost, and
/// [`fixed_cost`](Self::fixed_cost) is their mean. A length's median is place-balanced: the
/// calibration kernel runs first in its repetition in one half of them and last in the other,
/// and some GPUs add to an interval timed first; each place's median weighs once, as in the
/// work's net time ([`Measurement::net`](crate::timing::Measurement::net)). Where the lengths disagree by more than their
/// noise, [`uncertainty`](Self::uncertainty) says so; where the intervals do not grow as the
/// lengths do, [`slope`](Self::slope) does.
///
/// In graph mode every replay holds the same repetitions, so a graph of fewer repetitions than
/// there are lengths (work of milliseconds, or a small
/// [`max_batch`](crate::timing::MeasureOptions::max_batch)) times only the first lengths: then
/// [`slope`](Self::slope) is `None` (one length) or [`empty`](Self::empty) is (no empty kernel).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Calibration {
    /// The launch's fixed cost, with an empty kernel's own run: what the net time takes away.
    pub fixed_cost: Duration,
    /// How far the calibration's noise can move [`fixed_cost`](Self::fixed_cost), so the net time:
    /// the half-widths of the 95% confidence intervals of each length's median (distribution-free,
    /// at least half the timing events' resolution as the samples show it) carried through the
    /// mean, plus the most by which one length's reading lies outside its own half-width from the
    /// mean.
    pub uncertainty: Duration,
    /// The most by which one length's reading of the fixed cost lies from
    /// [`fixed_cost`](Self::fixed_cost).
    pub largest_residual: Duration,
    /// The least-squares slope of the lengths' medians over their lengths: 1 where the intervals
    /// grow as the kernels' lengths do. `None` with fewer than two lengths sampled.
    pub slope: Option<f64>,
    /// The 95% half-width of [`slope`](Self::slope) from the medians' half-widths (0 without a
    /// slope).
    pub slope_uncertainty: f64,
    /// The median interval around the empty kernel, reported beside the fixed cost: on some GPUs
    /// it holds more fixed cost than a kernel that runs. `None` when no repetition ran it.
    pub empty: Option<Duration>,
    /// How many samples it has, every length's.
    pub samples: usize,
    /// The fixed cost's readings (each sample of a kernel that runs, less its length and what its
    /// place in the repetition adds) in two clusters, if they fall in two (see [`Clusters`]): the fixed cost is not one number in this
    /// run, and [`fixed_cost`](Self::fixed_cost) is one of them or neither.
    pub two_clusters: Option<Clusters>,
    /// The readings' median moved between the first and the second half of the run by more than
    /// the halves' confidence intervals allow (see [`Drift`]).
    pub drift: Option<Drift>,
}

impl Calibration {
    /// The calibration of `in_order` (the calibration's intervals, in the order they were taken)
    /// whose kernels were of the rungs `rungs` and taken in the places of their repetitions
    /// `places` (one each, [`RUNGS`]), with `work_step` the smallest step between two different
    /// samples of the work timed beside it (the same timing events, so the same resolution;
    /// `None` where it has none); none when there are no samples. Each rung's reading is its
    /// place-balanced median, as the work's net time takes the work's (`Measurement::net`).
    pub(crate) fn of_samples(
        in_order: &[Duration],
        rungs: &[usize],
        places: &[usize],
        work_step: Option<Duration>,
    ) -> Option<Calibration> {
        debug_assert_eq!(in_order.len(), rungs.len(), "a rung for each sample");
        debug_assert_eq!(in_order.len(), places.len(), "a place for each sample");
        if in_order.is_empty() {
            return None;
        }
        let mut all = in_order.to_vec();
        all.sort_unstable();
        let resolution = [step_of_sorted(&all), work_step].into_iter().flatten().min();
        // A rung's samples and their places.
        let of_rung = |rung: usize| -> (Vec<Duration>, Vec<usize>) {
            in_order
                .iter()
                .zip(rungs)
                .zip(places)
                .filter(|&((_, &r), _)| r == rung)
                .map(|((&sample, _), &place)| (sample, place))
                .unzip()
        };
        let summary = |(samples, places): &(Vec<Duration>, Vec<usize>)| {
            (
                balanced_median(samples, places),
                balanced_half_width(samples, places, resolution),
            )
        };
        let empty = Some(of_rung(EMPTY))
            .filter(|(samples, _)| !samples.is_empty())
            .map(|taken| summary(&taken));
        let mut lengths: Vec<Rung> = (0..RUNGS.len())
            .filter(|&rung| rung != EMPTY)
            .filter_map(|rung| {
                let taken = of_rung(rung);
                (!taken.0.is_empty()).then(|| {
                    let (median, half_width) = summary(&taken);
                    Rung {
                        length: RUNGS[rung].as_secs_f64(),
                        median: median.as_secs_f64(),
                        half_width: half_width.as_secs_f64(),
                    }
                })
            })
            .collect();
        lengths.sort_by(|a, b| a.length.total_cmp(&b.length));
        let secs = saturating_secs;
        // Without a kernel that runs (every such repetition throttled away), the empty kernel's
        // interval is the only reading there is.
        let (fixed_cost, uncertainty, largest_residual, slope) = match fit(&lengths) {
            Some(fit) => (
                secs(fit.fixed_cost),
                secs(fit.uncertainty),
                secs(fit.largest_residual),
                fit.slope,
            ),
            None => {
                let (median, half_width) = empty.expect("samples of some rung");
                (median, half_width, Duration::ZERO, None)
            }
        };
        // Each sample's reading of the fixed cost, in order: its interval less its kernel's length,
        // and less what its place adds (which the fixed cost, balanced, leaves out).
        let (readings, reading_places): (Vec<Duration>, Vec<usize>) = in_order
            .iter()
            .zip(rungs)
            .zip(places)
            .filter(|&((_, &rung), _)| rung != EMPTY || lengths.is_empty())
            .map(|((&sample, &rung), &place)| (sample.saturating_sub(RUNGS[rung]), place))
            .unzip();
        let readings = without_places(&readings, &reading_places);
        let mut sorted_readings = readings.clone();
        sorted_readings.sort_unstable();
        Some(Calibration {
            fixed_cost,
            uncertainty,
            largest_residual,
            slope: slope.map(|(slope, _)| slope),
            slope_uncertainty: slope.map_or(0.0, |(_, spread)| spread),
            empty: empty.map(|(median, _)| median),
            samples: in_order.len(),
            two_clusters: two_clusters(&sorted_readings),
            drift: drift(&readings, resolution),
        })
    }
}

/// The smallest step between two different samples of `sorted` (ascending); none if all are equal.
pub(crate) fn step_of_sorted(sorted: &[Duration]) -> Option<Duration> {
    let secs: Vec<f64> = sorted.iter().map(Duration::as_secs_f64).collect();
    let step = smallest_step(&secs);
    step.is_finite().then(|| saturating_secs(step))
}

/// Why a [`Measurement`](crate::timing::Measurement) has no net time
/// ([`Measurement::net`](crate::timing::Measurement::net)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum NoNet {
    /// [`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate) was off.
    NotCalibrated,
    /// The driver could not compile the calibration's kernels for the device (PTX compilation
    /// disabled, say): the measurement went on without them.
    KernelUnavailable,
    /// The work's median is not longer than the launch's fixed cost: a net time would be zero or
    /// negative (work that is not a kernel launch, a small memset, say, can cost the GPU less than
    /// a kernel's launch).
    NotAboveFixedCost {
        /// The work's median, place-balanced as the net time takes it (see
        /// [`Measurement::net`](crate::timing::Measurement::net)).
        median: Duration,
        /// The calibration's [`fixed_cost`](Calibration::fixed_cost).
        fixed_cost: Duration,
    },
    /// The calibration's uncertainty is more than
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share)
    /// of the net time it would give.
    NoisyCalibration {
        /// The net time it would have given.
        net: Duration,
        /// The calibration's [`uncertainty`](Calibration::uncertainty).
        uncertainty: Duration,
        /// The share allowed.
        max_share: f64,
    },
    /// The calibration's uncertainty and the 95% half-width of the work's place-balanced median
    /// together are more than
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share)
    /// of the net time it would give: each alone may be within it, but a small net time (a median
    /// just above the fixed cost) is known less well than either.
    Imprecise {
        /// The net time it would have given.
        net: Duration,
        /// The calibration's uncertainty plus the work's median's half-width.
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
                write!(
                    f,
                    "not calibrated: the driver could not compile the calibration's kernels"
                )
            }
            NoNet::NotAboveFixedCost { median, fixed_cost } => write!(
                f,
                "the work's median ({median:?}) is not above the launch's fixed cost ({fixed_cost:?})"
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
            NoNet::Imprecise {
                net,
                uncertainty,
                max_share,
            } => write!(
                f,
                "the net time ({net:?}) is known to +-{uncertainty:?} (the calibration and the \
                 work's median together), more than {:.1}% of it",
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
/// calibration's fixed cost, given when it is above zero and the calibration's uncertainty is at
/// most `max_share` of it.
pub(crate) fn net(median: Duration, calibrated: Calibrated, max_share: f64) -> Result<Duration, NoNet> {
    let calibration = match calibrated {
        Calibrated::NotAsked => return Err(NoNet::NotCalibrated),
        Calibrated::KernelUnavailable => return Err(NoNet::KernelUnavailable),
        Calibrated::Done(calibration) => calibration,
    };
    let net = median.saturating_sub(calibration.fixed_cost);
    if net.is_zero() {
        return Err(NoNet::NotAboveFixedCost {
            median,
            fixed_cost: calibration.fixed_cost,
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

    fn calibration(fixed_cost_us: f64, uncertainty_us: f64) -> Calibrated {
        let d = |u: f64| Duration::from_secs_f64(u * 1e-6);
        Calibrated::Done(Calibration {
            fixed_cost: d(fixed_cost_us),
            uncertainty: d(uncertainty_us),
            largest_residual: Duration::ZERO,
            slope: Some(1.0),
            slope_uncertainty: 0.0,
            empty: None,
            samples: 1000,
            two_clusters: None,
            drift: None,
        })
    }

    fn close(a: Duration, b_us: f64) -> bool {
        (a.as_secs_f64() * 1e6 - b_us).abs() < 1e-6
    }

    #[test]
    fn net_is_the_median_less_the_fixed_cost() {
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
    fn work_no_longer_than_the_fixed_cost_has_no_net_never_a_negative_one() {
        for median_us in [3.0, 3.25] {
            let median = Duration::from_secs_f64(median_us * 1e-6);
            let refused = net(median, calibration(3.25, 0.0), 0.05);
            assert!(
                matches!(refused, Err(NoNet::NotAboveFixedCost { .. })),
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

    /// The rung of the 1 us kernel.
    const ONE_US: usize = 0;

    /// `samples` all of one rung.
    fn of_rung(samples: &[Duration], rung: usize, work_step: Option<Duration>) -> Option<Calibration> {
        Calibration::of_samples(
            samples,
            &vec![rung; samples.len()],
            &vec![0; samples.len()],
            work_step,
        )
    }

    #[test]
    fn the_uncertainty_comes_from_the_order_statistics() {
        assert_eq!(
            (RUNGS[EMPTY], RUNGS[ONE_US]),
            (Duration::ZERO, Duration::from_micros(1))
        );
        // 100 samples 1..=100 us: the sign test's 95% bounds are the 40th and 61st (40 and 61 us),
        // half-width 10.5 us.
        let v = us(&(1..=100).map(f64::from).collect::<Vec<_>>());
        let c = of_rung(&v, ONE_US, None).unwrap();
        assert!(close(c.uncertainty, 10.5), "{c:?}");
        assert!(close(c.fixed_cost, 49.5), "{c:?}");
        assert_eq!((c.empty, c.slope), (None, None));
        // Only empty kernels: their median is the fixed cost.
        let e = of_rung(&v, EMPTY, None).unwrap();
        assert!(close(e.fixed_cost, 50.5) && close(e.uncertainty, 10.5), "{e:?}");
        assert_eq!(e.empty, Some(e.fixed_cost));
        // Identical samples: no uncertainty, unless the work's samples show the timer's step.
        let same = of_rung(&us(&[3.0; 50]), ONE_US, None).unwrap();
        assert_eq!(same.uncertainty, Duration::ZERO);
        let stepped = of_rung(&us(&[3.0; 50]), ONE_US, Some(Duration::from_nanos(32))).unwrap();
        assert_eq!(stepped.uncertainty, Duration::from_nanos(16));
        // Few samples: half their range.
        let few = of_rung(&us(&[3.0, 4.0, 5.0]), ONE_US, None).unwrap();
        assert!(close(few.uncertainty, 1.0), "{few:?}");
        assert_eq!(of_rung(&[], ONE_US, None), None);
    }

    /// A place for each of `samples`, all the first.
    fn in_one_place(samples: &[Duration]) -> Vec<usize> {
        vec![0; samples.len()]
    }

    /// `rounds` rotations of the rungs, in order: a kernel of length L reads `fixed(i) + L` for
    /// the i-th sample, and the empty kernel `empty`.
    fn rotation(rounds: usize, fixed: impl Fn(usize) -> f64, empty: f64) -> (Vec<Duration>, Vec<usize>) {
        let rungs: Vec<usize> = (0..rounds * RUNGS.len())
            .map(crate::timing::calibration::fixed_cost::rung_of)
            .collect();
        let samples = rungs
            .iter()
            .enumerate()
            .map(|(i, &rung)| match RUNGS[rung] {
                Duration::ZERO => Duration::from_secs_f64(empty * 1e-6),
                length => Duration::from_secs_f64(fixed(i) * 1e-6) + length,
            })
            .collect();
        (samples, rungs)
    }

    #[test]
    fn the_fixed_cost_is_the_kernels_that_run_and_an_empty_kernel_off_their_line_is_reported_beside_it() {
        // As on the H100: kernels that run read 2.85 us of fixed cost, the empty kernel 3.5 us.
        let (samples, rungs) = rotation(50, |i| 2.85 + 0.032 * ((i / 7) % 3) as f64, 3.5);
        let c = Calibration::of_samples(&samples, &rungs, &in_one_place(&samples), None).unwrap();
        assert!(close(c.fixed_cost, 2.882), "{c:?}");
        assert!(close(c.empty.unwrap(), 3.5), "{c:?}");
        assert!((c.slope.unwrap() - 1.0).abs() < 1e-3, "{c:?}");
        assert!(c.uncertainty < Duration::from_nanos(40), "{c:?}");
        assert_eq!((c.two_clusters, c.drift, c.samples), (None, None, 350));
        let fixed = net(Duration::from_secs_f64(12.882e-6), Calibrated::Done(c), 0.05).unwrap();
        assert!(close(fixed, 10.0), "{fixed:?}");
    }

    #[test]
    fn what_the_first_place_adds_is_balanced_not_a_second_mode() {
        // As on the H100: the calibration kernel first in even repetitions, last in odd ones, and
        // an interval first in its repetition reads 0.7 us more, except in a few repetitions
        // (so 44% of the samples, not half, read more).
        let first = |i: usize| i.is_multiple_of(2) && (i * 7919) % 50 >= 6;
        let noise = |i: usize| 0.032 * ((i / 7) % 3) as f64;
        let added = |i: usize| if first(i) { 0.7 } else { 0.0 };
        let (samples, rungs) = rotation(100, |i| 2.85 + noise(i) + added(i), 3.5);
        let places: Vec<usize> = (0..samples.len()).map(|i| i % 2).collect();
        let c = Calibration::of_samples(&samples, &rungs, &places, None).unwrap();
        // The mean of the places' fixed costs, not either one's; no second mode is left.
        assert!(close(c.fixed_cost, 2.882 + 0.35), "{c:?}");
        assert_eq!((c.two_clusters, c.drift), (None, None), "{c:?}");
        // The same samples as if in one place: two clusters, and a fixed cost near one of them.
        let one = Calibration::of_samples(&samples, &rungs, &in_one_place(&samples), None).unwrap();
        assert!(one.two_clusters.is_some(), "{one:?}");
    }

    #[test]
    fn readings_in_two_modes_or_drifting_are_reported_not_averaged_away() {
        // Half the samples, at random places, read 0.7 us more: two clusters.
        let noise = |i: usize| 0.032 * ((i / 7) % 3) as f64;
        let high = |i: usize| 0.7 * f64::from(u8::from((i * 7919) % 13 < 6));
        let (samples, rungs) = rotation(50, |i| 2.85 + noise(i) + high(i), 3.5);
        let c = Calibration::of_samples(&samples, &rungs, &in_one_place(&samples), None).unwrap();
        let k = c.two_clusters.expect("two clusters");
        assert!(close(k.low, 2.882) && close(k.high, 3.582), "{k:?}");
        // The fixed cost moves by 0.7 us halfway through the run: a drift.
        let (samples, rungs) = rotation(50, |i| noise(i) + if i < 175 { 2.85 } else { 3.55 }, 3.5);
        let c = Calibration::of_samples(&samples, &rungs, &in_one_place(&samples), None).unwrap();
        assert!(c.drift.is_some(), "{c:?}");
    }

    #[test]
    fn tied_samples_keep_half_a_step_of_the_timer_as_their_uncertainty() {
        // 32 ns steps, the median's interval all one value: the uncertainty is half a step.
        let mut v = vec![3.2; 90];
        v.extend([3.168, 3.232, 3.264, 3.232, 3.168]);
        let c = of_rung(&us(&v), EMPTY, None).unwrap();
        assert!(close(c.uncertainty, 0.016), "{c:?}");
        // A finer step in the work's samples is the resolution.
        let finer = of_rung(&us(&v), EMPTY, Some(Duration::from_nanos(8))).unwrap();
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
            let (samples, rungs) = rotation(n, |i| 3.0 + ((i * 7919) % 1000) as f64 / 1000.0, 3.5);
            Calibration::of_samples(&samples, &rungs, &in_one_place(&samples), None)
                .unwrap()
                .uncertainty
        };
        assert!(noisy(2_000) < noisy(20) / 5, "{:?} {:?}", noisy(2_000), noisy(20));
    }
}
