//! What the check that the L2 flush evicts found
//! ([`MeasureOptions::flush_l2`](crate::timing::MeasureOptions::flush_l2)), and its verdict; the
//! engine takes the check's reads (`flush_probe`).

use std::time::Duration;

/// The flush check's three reads, each the median of a few
/// ([`Measurement::flush_check`](crate::timing::Measurement::flush_check)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct FlushCheck {
    /// Bytes of each read: a quarter of the device's L2, which fits in it.
    pub bytes: usize,
    /// A read of a buffer read just before (no flush between): from L2.
    pub warm: Duration,
    /// A read of a buffer read just before a flush: from memory if the flush evicted it.
    pub after_flush: Duration,
    /// A read of a buffer not read since a flush: from memory.
    pub cold: Duration,
}

/// What a [`FlushCheck`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushVerdict {
    /// The read after the flush lost at least three quarters of what a read from L2 gains over
    /// one from memory: the flush evicted the buffer.
    Evicts,
    /// The read after the flush kept more than a quarter of L2's gain: the flush did not evict
    /// (all of) it, and the samples may have run with a warm cache.
    DoesNotEvict,
    /// A read from L2 was not at least 10% faster than one from memory here, so the reads cannot
    /// tell (another stream's traffic, a device whose copies do not gain from L2).
    CannotTell,
}

impl FlushCheck {
    /// The read after the flush over the cold read: about 1 when the flush evicts.
    pub fn ratio(&self) -> f64 {
        self.after_flush.as_secs_f64() / self.cold.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Whether the flush evicted the buffer read before it.
    pub fn verdict(&self) -> FlushVerdict {
        let (warm, after, cold) = (
            self.warm.as_secs_f64(),
            self.after_flush.as_secs_f64(),
            self.cold.as_secs_f64(),
        );
        let gain = cold - warm;
        if gain <= 0.0 || gain < 0.1 * cold {
            FlushVerdict::CannotTell
        } else if after - warm >= 0.75 * gain {
            FlushVerdict::Evicts
        } else {
            FlushVerdict::DoesNotEvict
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(warm: u64, after_flush: u64, cold: u64) -> FlushCheck {
        FlushCheck {
            bytes: 1 << 20,
            warm: Duration::from_nanos(warm),
            after_flush: Duration::from_nanos(after_flush),
            cold: Duration::from_nanos(cold),
        }
    }

    #[test]
    fn a_read_after_the_flush_as_slow_as_a_cold_one_evicts() {
        let evicts = check(8_700, 12_190, 12_030);
        assert_eq!(evicts.verdict(), FlushVerdict::Evicts);
        assert!((evicts.ratio() - 1.013).abs() < 0.001);
    }

    #[test]
    fn a_read_after_the_flush_as_fast_as_a_warm_one_does_not() {
        assert_eq!(check(8_700, 8_800, 12_000).verdict(), FlushVerdict::DoesNotEvict);
        // Half the gain kept: not evicted either.
        assert_eq!(check(8_000, 10_000, 12_000).verdict(), FlushVerdict::DoesNotEvict);
    }

    #[test]
    fn reads_that_l2_does_not_speed_up_cannot_tell() {
        assert_eq!(check(11_500, 11_900, 12_000).verdict(), FlushVerdict::CannotTell);
        assert_eq!(check(0, 0, 0).verdict(), FlushVerdict::CannotTell);
    }
}
