//! A batch's intervals as read, and the samples the sampler keeps of them: whole repetitions, each
//! one's intervals all taken at an SM clock the throttle rule keeps.

use crate::timing::engine::calibration_arm::CalibrationArm;
use crate::timing::engine::throttle::Throttle;
use std::time::Duration;

/// A batch's intervals, repetition `i`'s arm `a` at `i * arms + a`: each one's GPU time and the SM
/// clock during it.
pub(crate) struct Intervals {
    /// The number of the batch's first repetition, whose arms' order and calibration kernel
    /// follow from it (`Arms::order`, `rung_of`).
    pub(crate) first: usize,
    pub(crate) times: Vec<Duration>,
    pub(crate) clocks: Vec<Option<f64>>,
    /// Each interval's CUPTI tag (0 without CUPTI, and in graph mode, which CUPTI does not time).
    pub(crate) tags: Vec<u64>,
    /// Each interval's place in its repetition (`Arms::places`).
    pub(crate) places: Vec<usize>,
}

/// Each arm's samples kept so far, with the SM clock during each, its CUPTI tag and its place in
/// its repetition, and the throttle rule that discards repetitions at a low clock.
pub(crate) struct KeptSamples {
    pub(crate) samples: Vec<Vec<Duration>>,
    pub(crate) clocks: Vec<Vec<Option<f64>>>,
    pub(crate) tags: Vec<Vec<u64>>,
    pub(crate) places: Vec<Vec<usize>>,
    pub(crate) throttle: Throttle,
}

impl KeptSamples {
    /// None yet, of `arms` arms.
    pub(crate) fn new(arms: usize, throttle: Throttle) -> KeptSamples {
        KeptSamples {
            samples: vec![Vec::new(); arms],
            clocks: vec![Vec::new(); arms],
            tags: vec![Vec::new(); arms],
            places: vec![Vec::new(); arms],
            throttle,
        }
    }

    /// Keeps the repetitions of `taken` whose clock was not throttled (telling `calibration`, if
    /// any, which were kept); returns the pause before the next batch, if some were throttled.
    pub(crate) fn keep_unthrottled(
        &mut self,
        taken: Intervals,
        mut calibration: Option<&mut CalibrationArm<'_>>,
    ) -> Option<Duration> {
        let arms = self.samples.len();
        let mut discarded = Vec::new();
        let repetitions = taken
            .times
            .chunks(arms)
            .zip(taken.clocks.chunks(arms))
            .zip(taken.tags.chunks(arms))
            .zip(taken.places.chunks(arms));
        for (j, (((times, mhz), tags), places)) in repetitions.enumerate() {
            if mhz.iter().all(|&mhz| self.throttle.keeps(mhz)) {
                if let Some(calibration) = calibration.as_deref_mut() {
                    calibration.keep(taken.first + j);
                }
                let taken = times.iter().zip(mhz).zip(tags).zip(places);
                for (arm, (((&time, &mhz), &tag), &place)) in taken.enumerate() {
                    self.samples[arm].push(time);
                    self.clocks[arm].push(mhz);
                    self.tags[arm].push(tag);
                    self.places[arm].push(place);
                }
            } else {
                let lowest = mhz.iter().flatten().copied().fold(f64::INFINITY, f64::min);
                discarded.push(lowest);
            }
        }
        self.throttle.after_batch(&discarded)
    }

    /// Forgets every sample kept so far, and the count of those discarded: a measurement that
    /// starts over ungated takes every sample one way.
    pub(crate) fn forget(&mut self) {
        self.samples.iter_mut().for_each(Vec::clear);
        self.clocks.iter_mut().for_each(Vec::clear);
        self.tags.iter_mut().for_each(Vec::clear);
        self.places.iter_mut().for_each(Vec::clear);
        self.throttle.forget_discarded();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Two arms, three repetitions: the second's arm 1 ran below the 1000 MHz floor.
    fn batch() -> Intervals {
        Intervals {
            first: 0,
            times: vec![us(10), us(20), us(11), us(21), us(12), us(22)],
            clocks: vec![
                Some(1500.0),
                Some(1500.0),
                Some(1500.0),
                Some(900.0),
                None,
                Some(1000.0),
            ],
            tags: vec![1, 2, 3, 4, 5, 6],
            places: vec![0, 1, 1, 0, 0, 1],
        }
    }

    #[test]
    fn a_repetition_with_an_interval_below_the_floor_is_discarded_whole_and_counted() {
        let mut kept = KeptSamples::new(2, Throttle::new(1000.0));
        let pause = kept.keep_unthrottled(batch(), None);
        assert!(pause.is_some(), "a batch that discarded a repetition pauses");
        assert_eq!(kept.samples, vec![vec![us(10), us(12)], vec![us(20), us(22)]]);
        assert_eq!(kept.clocks[1], vec![Some(1500.0), Some(1000.0)]);
        assert_eq!(kept.tags, vec![vec![1, 5], vec![2, 6]]);
        assert_eq!(kept.places, vec![vec![0, 0], vec![1, 1]]);
        assert_eq!(kept.throttle.discarded_mhz, vec![900.0], "its lowest clock");
        kept.forget();
        assert!(kept.samples.iter().all(Vec::is_empty));
        assert_eq!(kept.throttle.discarded(), 0);
    }

    #[test]
    fn a_floor_of_zero_keeps_every_repetition_and_never_pauses() {
        let mut kept = KeptSamples::new(2, Throttle::new(0.0));
        assert_eq!(kept.keep_unthrottled(batch(), None), None);
        assert_eq!(kept.samples[0].len(), 3);
        assert_eq!(kept.throttle.discarded(), 0);
    }
}
