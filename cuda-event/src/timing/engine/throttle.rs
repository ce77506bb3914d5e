//! The throttle rule for samples taken at a low SM clock (nvbench's): which are discarded, and how
//! long the measurement pauses for the GPU to cool down. The clock itself is read in `sm_clock.rs`.

use std::time::Duration;

/// What is done with samples taken at a low clock: nvbench's rule. A repetition in which the clock
/// around any interval was below `threshold` of the maximum is discarded, and the measurement
/// pauses so that the GPU can cool down: 50 ms, growing after three throttled batches in a row.
pub(crate) struct Throttle {
    /// Below this clock (MHz), a sample is discarded; 0 discards none.
    pub(crate) floor_mhz: f64,
    pause: Duration,
    in_a_row: u32,
    /// The clock of each sample discarded so far.
    pub(crate) discarded_mhz: Vec<f64>,
}

/// The first pause after a throttled batch.
const COOL_DOWN: Duration = Duration::from_millis(50);
/// The most a pause grows by at once.
const COOL_DOWN_STEP: Duration = Duration::from_millis(500);

impl Throttle {
    pub(crate) fn new(floor_mhz: f64) -> Throttle {
        Throttle {
            floor_mhz,
            pause: COOL_DOWN,
            in_a_row: 0,
            discarded_mhz: Vec::new(),
        }
    }

    /// Samples discarded so far.
    pub(crate) fn discarded(&self) -> usize {
        self.discarded_mhz.len()
    }

    /// Forgets the samples discarded so far, when the samples they were discarded from are dropped
    /// (a measurement that starts over ungated): a count against none would read as throttling.
    pub(crate) fn forget_discarded(&mut self) {
        self.discarded_mhz.clear();
    }

    /// Whether a sample at `mhz` (unknown: kept) is kept.
    pub(crate) fn keeps(&self, mhz: Option<f64>) -> bool {
        mhz.is_none_or(|mhz| mhz >= self.floor_mhz)
    }

    /// After a batch that discarded `discarded_mhz` samples: how long to pause (none when it
    /// discarded none).
    pub(crate) fn after_batch(&mut self, discarded_mhz: &[f64]) -> Option<Duration> {
        if discarded_mhz.is_empty() {
            self.in_a_row = 0;
            return None;
        }
        self.discarded_mhz.extend_from_slice(discarded_mhz);
        self.in_a_row += 1;
        if self.in_a_row > 3 {
            // The pause was too short for the GPU to recover: longer, by at most half a second.
            self.pause += self.pause.mul_f64(1.5).min(COOL_DOWN_STEP);
        }
        Some(self.pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_samples_are_dropped_and_the_pause_grows_after_three_batches_in_a_row() {
        let mut throttle = Throttle::new(1485.0);
        assert!(throttle.keeps(None) && throttle.keeps(Some(1485.0)));
        assert!(!throttle.keeps(Some(1484.0)));
        assert_eq!(throttle.after_batch(&[]), None);
        for _ in 0..3 {
            assert_eq!(throttle.after_batch(&[1000.0]), Some(COOL_DOWN));
        }
        assert_eq!(
            throttle.after_batch(&[1000.0, 900.0]),
            Some(COOL_DOWN + COOL_DOWN.mul_f64(1.5))
        );
        assert_eq!(throttle.discarded(), 5);
        assert_eq!(throttle.after_batch(&[]), None);
        assert_eq!(
            throttle.after_batch(&[1000.0]),
            Some(COOL_DOWN + COOL_DOWN.mul_f64(1.5))
        );
        throttle.forget_discarded();
        assert_eq!(throttle.discarded(), 0);
        let never = Throttle::new(0.0);
        assert!(never.keeps(Some(1.0)));
    }
}
