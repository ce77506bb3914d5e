//! The check that the L2 flush evicts
//! ([`MeasureOptions::flush_l2`](crate::timing::MeasureOptions::flush_l2)): once per measurement,
//! timed reads (device-to-device copies) of a quarter of L2 read just before a flush, of one not
//! read since a flush, and of one read just before with no flush between.

use crate::driver::Driver;
use crate::error::Result;
use crate::stream::Stream;
use crate::timing::scratch_memory::DeviceBuffer;
use crate::timing::statistics::median_duration;
use crate::timing::timer::{from_ms, timing_event};
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

    /// Bytes of scratch memory the check needs for a device of `l2` bytes of L2: three buffers
    /// of a quarter of it (two read, one the copies' destination).
    pub(crate) fn scratch_bytes(l2: usize) -> usize {
        3 * part_bytes(l2)
    }

    /// Runs the check on `stream` (its context current, nothing of the caller's queued that the
    /// reads could overlap), with `probe` (at least [`scratch_bytes`](Self::scratch_bytes) of
    /// `l2`) and `flush`, which queues the L2 flush. Waits for its own reads.
    pub(crate) fn run(
        d: &Driver,
        stream: &Stream,
        probe: &DeviceBuffer,
        l2: usize,
        flush: &dyn Fn() -> Result<()>,
    ) -> Result<FlushCheck> {
        let bytes = part_bytes(l2);
        debug_assert!(probe.bytes >= 3 * bytes, "the flush check's scratch is too small");
        let bytes = bytes.min(probe.bytes / 3);
        let (read, other, to) = (probe.ptr, probe.ptr + bytes as u64, probe.ptr + 2 * bytes as u64);
        let copy = |from| {
            // SAFETY: copies `bytes` between two disjoint parts of one live allocation of at
            // least three times that, on a live stream of its device, whose context is current.
            d.memcpy_dtod_async
                .call(|f| unsafe { f(to, from, bytes, stream.as_raw()) })
        };
        let (start, end) = (timing_event(), timing_event());
        let timed = |from| -> Result<Duration> {
            start.record(stream)?;
            copy(from)?;
            end.record(stream)?;
            end.synchronize()?;
            Ok(from_ms(start.elapsed_time(&end)?))
        };
        const ROUNDS: usize = 5;
        let (mut warm, mut after_flush, mut cold) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            copy(read)?;
            flush()?;
            after_flush.push(timed(read)?);
            flush()?;
            cold.push(timed(other)?);
            copy(read)?;
            warm.push(timed(read)?);
        }
        Ok(FlushCheck {
            bytes,
            warm: median(warm),
            after_flush: median(after_flush),
            cold: median(cold),
        })
    }
}

/// A quarter of `l2` bytes, a multiple of 4 KiB (at least that).
fn part_bytes(l2: usize) -> usize {
    (l2 / 4 / 4096).max(1) * 4096
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    median_duration(&v)
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

    #[test]
    fn the_reads_are_a_quarter_of_l2_in_whole_pages() {
        assert_eq!(part_bytes(62_914_560), 15_728_640);
        assert_eq!(part_bytes(1000), 4096);
        assert_eq!(FlushCheck::scratch_bytes(62_914_560), 3 * 15_728_640);
    }
}
