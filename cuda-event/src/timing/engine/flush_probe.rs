//! The flush check's reads ([`MeasureOptions::flush_l2`](crate::timing::MeasureOptions::flush_l2)):
//! once per measurement, after the warm-up, timed reads (device-to-device copies) of a quarter of
//! L2 read just before a flush, of one not read since a flush, and of one read just before with no
//! flush between. What they found is a [`FlushCheck`].

use crate::driver::Driver;
use crate::error::Result;
use crate::stream::Stream;
use crate::timing::engine::scratch_memory::DeviceBuffer;
use crate::timing::measurement::flush_check::FlushCheck;
use crate::timing::statistics::median_duration;
use crate::timing::timer::{from_ms, timing_event};
use std::time::Duration;

/// The flush check of one measurement: due until it has run, then what it found.
pub(crate) enum FlushProbe<'b> {
    /// No check: no L2 flush, or no memory for the check's buffers.
    Off,
    /// To run once: its reads in `buffer` (at least [`scratch_bytes`](FlushProbe::scratch_bytes)
    /// of `l2`, the device's L2 in bytes).
    Due { buffer: &'b DeviceBuffer, l2: usize },
    /// Run.
    Found(FlushCheck),
}

impl<'b> FlushProbe<'b> {
    /// Due where there are both the check's buffer and the device's L2 size (with the flush).
    pub(crate) fn new(buffer: Option<&'b DeviceBuffer>, l2: Option<usize>) -> FlushProbe<'b> {
        match buffer.zip(l2) {
            Some((buffer, l2)) => FlushProbe::Due { buffer, l2 },
            None => FlushProbe::Off,
        }
    }

    /// Bytes of scratch memory the check needs for a device of `l2` bytes of L2: three buffers
    /// of a quarter of it (two read, one the copies' destination).
    pub(crate) fn scratch_bytes(l2: usize) -> usize {
        3 * part_bytes(l2)
    }

    /// What the check found, once it has run.
    pub(crate) fn found(&self) -> Option<FlushCheck> {
        match self {
            FlushProbe::Found(check) => Some(*check),
            FlushProbe::Off | FlushProbe::Due { .. } => None,
        }
    }
}

/// Runs the check on `stream` (its context current, nothing of the caller's queued that the
/// reads could overlap), with `probe` (at least [`scratch_bytes`](FlushProbe::scratch_bytes) of
/// `l2`) and `flush`, which queues the L2 flush. Waits for its own reads.
pub(crate) fn run_check(
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

    #[test]
    fn the_reads_are_a_quarter_of_l2_in_whole_pages() {
        assert_eq!(part_bytes(62_914_560), 15_728_640);
        assert_eq!(part_bytes(1000), 4096);
        assert_eq!(FlushProbe::scratch_bytes(62_914_560), 3 * 15_728_640);
    }
}
