//! [`CuptiTimes`]: CUPTI's durations of a measurement's work, beside its events' samples
//! ([`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti)).

use crate::timing::statistics::median_duration;
use std::time::Duration;

/// CUPTI's durations of the work of each repetition of a [`Measurement`](crate::timing::Measurement)
/// ([`Measurement::cupti`](crate::timing::Measurement::cupti)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CuptiTimes {
    /// One per sample of [`Measurement::samples`](crate::timing::Measurement::samples), in the same
    /// order: CUPTI's span of that repetition's kernels, copies and memsets (the first one's start
    /// to the last one's end); `None` where CUPTI recorded none of them (work that launched none,
    /// or records CUPTI dropped).
    pub samples: Vec<Option<Duration>>,
    /// The median of the known [`samples`](Self::samples); `None` when none is known.
    pub median: Option<Duration>,
    /// With [`calibrate`](crate::timing::MeasureOptions::calibrate): CUPTI's median duration of the
    /// calibration's empty kernel, which CUPTI counts inside every kernel's duration.
    pub empty: Option<Duration>,
    /// Records CUPTI dropped during the measurement (its buffers were full): some samples may be
    /// `None` or short.
    pub dropped: usize,
}

impl CuptiTimes {
    /// The times of `samples` (one per sample) and of the calibration's `empty` kernels.
    pub(crate) fn new(
        samples: Vec<Option<Duration>>,
        empty: &[Option<Duration>],
        dropped: usize,
    ) -> CuptiTimes {
        let median_of = |values: &[Option<Duration>]| {
            let mut known: Vec<Duration> = values.iter().flatten().copied().collect();
            known.sort_unstable();
            (!known.is_empty()).then(|| median_duration(&known))
        };
        CuptiTimes {
            median: median_of(&samples),
            empty: median_of(empty),
            samples,
            dropped,
        }
    }

    /// CUPTI's net time: its [`median`](Self::median) less its [`empty`](Self::empty) kernel, what
    /// [`Measurement::net`](crate::timing::Measurement::net) estimates; `None` without both, or when the
    /// median is not above the empty kernel.
    pub fn net(&self) -> Option<Duration> {
        let net = self.median?.checked_sub(self.empty?)?;
        (!net.is_zero()).then_some(net)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuptis_net_is_its_median_less_its_empty_kernel() {
        let us = |u: u64| Some(Duration::from_micros(u));
        let times = CuptiTimes::new(vec![us(11), None, us(12), us(10)], &[us(1), us(1), None], 0);
        assert_eq!(times.median, us(11));
        assert_eq!(times.empty, us(1));
        assert_eq!(times.net(), us(10));
        assert_eq!(CuptiTimes::new(vec![None], &[], 3).net(), None);
        assert_eq!(CuptiTimes::new(vec![us(1)], &[us(2)], 0).net(), None);
    }
}
