//! [`Trust`]: whether a [`Measurement`](crate::timing::Measurement) can be trusted, and each reason
//! ([`Doubt`]) it cannot.

use crate::timing::calibration::NoNet;
use crate::timing::statistics::clusters::{Clusters, Drift};
use std::fmt;
use std::time::Duration;

/// Whether a measurement can be trusted: trusted when it has no [`Doubt`]
/// ([`Measurement::trust`](crate::timing::Measurement::trust)).
#[derive(Clone, Debug, PartialEq)]
pub struct Trust {
    doubts: Vec<Doubt>,
}

impl Trust {
    pub(crate) fn new(doubts: Vec<Doubt>) -> Trust {
        Trust { doubts }
    }
    /// No doubt was found.
    pub fn is_trusted(&self) -> bool {
        self.doubts.is_empty()
    }
    /// Every reason found not to trust the measurement, in the order of [`Doubt`]'s variants.
    pub fn doubts(&self) -> &[Doubt] {
        &self.doubts
    }
}

impl fmt::Display for Trust {
    /// `trusted`, or `not trusted: <doubt>; <doubt>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.doubts.is_empty() {
            return f.write_str("trusted");
        }
        f.write_str("not trusted: ")?;
        for (i, doubt) in self.doubts.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{doubt}")?;
        }
        Ok(())
    }
}

/// A reason not to trust a [`Measurement`](crate::timing::Measurement). New reasons may be added, so a
/// `match` needs a wildcard arm.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Doubt {
    /// The median's 95% confidence half-width (at least half the timer's step) is more than
    /// [`MeasureOptions::max_noise`](crate::timing::MeasureOptions::max_noise) of the median, in a
    /// measurement that stopped at its timeout or with its noise settled above the maximum. In a
    /// calibrated measurement, the place-balanced median's, which the net time takes (see
    /// [`Measurement::net`](crate::timing::Measurement::net)). Not
    /// a doubt of [`compare`](crate::timing::compare)'s sides, whose pairs' ratio has its own interval.
    Spread {
        /// The median.
        median: Duration,
        /// The half-width of its 95% confidence interval (the sign test's order statistics, at
        /// least half the timer's step).
        half_width: Duration,
        /// The share of the median allowed.
        max_share: f64,
    },
    /// The samples fall in two separate clusters (see [`Clusters`]): the work ran two ways (two
    /// clock states, two placements, a cache that sometimes hits), and the median is one of
    /// them or neither. Clusters that the work's place in its repetitions makes (calibrated, it
    /// runs first in some and after the calibration kernel in others) are not counted: each
    /// sample is read less what its place adds, as the net time weighs each place once.
    TwoClusters(Clusters),
    /// More than a twentieth of the repetitions ran at a throttled SM clock and were discarded
    /// ([`MeasureOptions::throttle_threshold`](crate::timing::MeasureOptions::throttle_threshold)): the
    /// GPU's clock moved during the measurement.
    Throttled {
        /// Repetitions discarded.
        discarded: usize,
        /// Samples kept.
        kept: usize,
    },
    /// The gate was asked for but could not be kept
    /// ([`Measurement::gated`](crate::timing::Measurement::gated)): the samples include gaps in which
    /// the GPU waited for the host.
    GateLost {
        /// [`Measurement::gate_timeouts`](crate::timing::Measurement::gate_timeouts).
        gate_timeouts: usize,
    },
    /// The flush check found that the L2 flush did not evict a buffer read before it
    /// ([`FlushVerdict::DoesNotEvict`](crate::timing::FlushVerdict::DoesNotEvict)): the samples may
    /// have run with a warm cache.
    FlushDoesNotEvict {
        /// [`FlushCheck::ratio`](crate::timing::FlushCheck::ratio).
        ratio: f64,
    },
    /// The median is within 50 steps of the timing events' resolution (as the samples show it)
    /// or zero: each step is more than 2% of it.
    BelowResolution {
        /// The median.
        median: Duration,
        /// The smallest step between two different samples (none when they are all equal).
        step: Option<Duration>,
    },
    /// [`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate) was asked for and there
    /// is no net time: the work is below what the calibration can resolve, or it could not run.
    NoNet(NoNet),
    /// The calibration's intervals do not grow as its kernels' lengths do: their slope over the
    /// lengths is further from 1 than 1% and twice its own uncertainty, by enough to move the fixed
    /// cost (by the error times the lengths' mean) by more than
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share) of
    /// the net time. The GPU's timer and the
    /// timing events do not count the same time, or the kernels did not run their lengths (a
    /// preempted or shared GPU): the fixed cost read from them is not the launch's.
    CalibrationNotLinear {
        /// [`Calibration::slope`](crate::timing::Calibration::slope).
        slope: f64,
        /// [`Calibration::slope_uncertainty`](crate::timing::Calibration::slope_uncertainty).
        uncertainty: f64,
    },
    /// The calibration's readings of the fixed cost fall in two clusters further apart than
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share) of
    /// the net time (of the median, without a net time): the fixed cost it takes away is not one
    /// number in this run.
    CalibrationTwoClusters(Clusters),
    /// The calibration's readings' median moved between the first and the second half of the run by more
    /// than both halves' 95% confidence intervals allow, and by more than
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share) of
    /// the net time (of the median, without a net time): the fixed cost drifted while the work was
    /// measured.
    CalibrationDrifted(Drift),
    /// [`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti) timed the work too, and the net
    /// time is further from CUPTI's net time ([`CuptiTimes::net`](crate::timing::CuptiTimes::net)) than
    /// the calibration's uncertainty and 2% of CUPTI's: the calibration does not take away what
    /// CUPTI counts as the launch, on this device, in this run.
    DisagreesWithCupti {
        /// [`Measurement::net`](crate::timing::Measurement::net).
        net: Duration,
        /// CUPTI's net time.
        cupti_net: Duration,
    },
}

impl fmt::Display for Doubt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Doubt::Spread {
                median,
                half_width,
                max_share,
            } => write!(
                f,
                "the median ({median:?}) is known to +-{half_width:?}, more than {:.2}% of it",
                100.0 * max_share
            ),
            Doubt::TwoClusters(c) => write!(f, "the samples are in two clusters ({c})"),
            Doubt::Throttled { discarded, kept } => write!(
                f,
                "{discarded} repetitions ran throttled and were discarded ({kept} kept)"
            ),
            Doubt::GateLost { gate_timeouts } => write!(
                f,
                "the gate was lost ({gate_timeouts} timeouts): the samples include host gaps"
            ),
            Doubt::FlushDoesNotEvict { ratio } => write!(
                f,
                "the L2 flush did not evict (read after it / cold read = {ratio:.3})"
            ),
            Doubt::BelowResolution { median, step } => write!(
                f,
                "the median ({median:?}) is within 50 steps of the timer's resolution ({step:?})"
            ),
            Doubt::NoNet(why) => write!(f, "no net time: {why}"),
            Doubt::CalibrationNotLinear { slope, uncertainty } => write!(
                f,
                "the calibration's intervals grow {slope:.4} +- {uncertainty:.4} times as fast as its \
                 kernels' lengths, not 1"
            ),
            Doubt::CalibrationTwoClusters(c) => {
                write!(f, "the calibration's samples are in two clusters ({c})")
            }
            Doubt::CalibrationDrifted(d) => write!(f, "the calibration drifted ({d})"),
            Doubt::DisagreesWithCupti { net, cupti_net } => {
                write!(f, "the net time ({net:?}) is not CUPTI's ({cupti_net:?})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_says_each_doubt() {
        assert!(Trust::new(vec![]).is_trusted());
        assert_eq!(Trust::new(vec![]).to_string(), "trusted");
        let t = Trust::new(vec![
            Doubt::GateLost { gate_timeouts: 1 },
            Doubt::Throttled {
                discarded: 9,
                kept: 10,
            },
        ]);
        assert!(!t.is_trusted());
        let text = t.to_string();
        assert!(text.starts_with("not trusted: the gate was lost"), "{text}");
        assert!(text.contains("; 9 repetitions ran throttled"), "{text}");
    }
}
