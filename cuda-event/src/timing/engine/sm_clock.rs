//! The SM clock during each timed interval, read as nvbench reads it: a kernel of one thread per SM
//! whose block on SM 0 writes the GPU's nanosecond timer (`%globaltimer`) and SM 0's cycle counter
//! (`%clock64`) into mapped host memory, launched before each interval (and its L2 flush) and after
//! a batch's last. Cycles over nanoseconds between two such stamps is the clock the work ran at: a
//! GPU that has not ramped up, or that throttles (power, heat), runs slower than its maximum, and
//! so does the work timed then.
//!
//! The stamp kernel is one of the timing kernels (`engine/kernels.rs`); where the
//! driver cannot compile them, measurements go on without clocks.

use crate::driver::Driver;
use crate::error::Result;
use crate::stream::Stream;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::timing::engine::kernels::TimingKernels;
use cuda_event_sys as sys;
use std::time::Duration;

/// One stamp: the GPU's timer (ns) and SM 0's cycle counter, read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    ns: u64,
    cycles: u64,
}

/// Stamp slots for a batch that runs back to back: slot `k` before interval `k` (and after
/// interval `k - 1`), slot `n` after the last of `n`; in mapped host memory of the measurement's
/// scratch.
pub(crate) struct ClockStamps<'s> {
    kernel: &'s TimingKernels,
    /// The slots' 64-bit words, as the host sees them, two a slot.
    words: &'s [AtomicU64],
    /// The device address of the first word.
    device_ptr: sys::CUdeviceptr,
}

/// Bytes of one stamp slot: two 64-bit words, aligned for the kernel's 16-byte store.
pub(crate) const SLOT_BYTES: usize = 16;

impl<'s> ClockStamps<'s> {
    /// The slots in mapped memory whose words the host sees as `words` and the device at
    /// `device_ptr` (16-byte aligned).
    pub(crate) fn new(
        kernel: &'s TimingKernels,
        words: &'s [AtomicU64],
        device_ptr: sys::CUdeviceptr,
    ) -> ClockStamps<'s> {
        ClockStamps {
            kernel,
            words,
            device_ptr,
        }
    }

    /// How many slots the memory holds.
    pub(crate) fn slots(&self) -> usize {
        self.words.len() * 8 / SLOT_BYTES
    }

    /// The device's maximum SM clock, in MHz.
    pub(crate) fn max_mhz(&self) -> f64 {
        self.kernel.max_mhz
    }

    /// Empties slots `0..n`, which nothing queued writes any more.
    pub(crate) fn clear(&self, n: usize) {
        let words = self.words;
        words[..2 * n.min(self.slots())]
            .iter()
            .for_each(|w| w.store(0, Ordering::Relaxed));
    }

    /// Queues a stamp into `slot` on `stream`, whose context is current (a capture records it).
    pub(crate) fn queue(&self, d: &Driver, stream: &Stream, slot: usize) -> Result<()> {
        assert!(slot < self.slots(), "stamp slot {slot} out of range");
        let out = self.device_ptr + (slot * SLOT_BYTES) as u64;
        // SAFETY: a slot inside mapped memory, 16-byte aligned, that outlives every launch (the
        // measurement drains the stream before giving it back).
        unsafe { self.kernel.launch_stamp(d, stream, out) }
    }

    /// The stamp in `slot`, once the GPU wrote it (the work that wrote it is complete); `None` when
    /// no block ran on SM 0.
    pub(crate) fn read(&self, slot: usize) -> Option<Stamp> {
        let words = self.words;
        let (ns, cycles) = (
            words[2 * slot].load(Ordering::Acquire),
            words[2 * slot + 1].load(Ordering::Acquire),
        );
        (ns != 0).then_some(Stamp { ns, cycles })
    }

    /// The clock (MHz) around each of `n` intervals, from the stamps before and after each (see
    /// [`clocks_mhz`]).
    pub(crate) fn intervals_mhz(&self, n: usize) -> Vec<Option<f64>> {
        let stamps: Vec<_> = (0..n).map(|k| (self.read(k), self.read(k + 1))).collect();
        clocks_mhz(&stamps, CLOCK_WINDOW)
    }
}

/// The least span of GPU time a clock is read over: the timer's steps (as coarse as a microsecond
/// on some GPUs) and the kernel's read of it then err by under 1% of the clock.
pub(crate) const CLOCK_WINDOW: Duration = Duration::from_micros(200);

/// The clock (MHz) around each interval of a batch that ran back to back, given the stamps before
/// and after each: over the interval's own stamps when they span at least `window`, or else over
/// the nearest stamps around it that do (symmetrically widened, up to the whole batch). `None`
/// where no two stamps around the interval were written, or they span no time.
pub(crate) fn clocks_mhz(stamps: &[(Option<Stamp>, Option<Stamp>)], window: Duration) -> Vec<Option<f64>> {
    let n = stamps.len();
    let window = window.as_nanos() as u64;
    // The latest written "before" stamp at or before each interval, the earliest "after" stamp at
    // or after it.
    let mut before = Vec::with_capacity(n);
    for (k, (b, _)) in stamps.iter().enumerate() {
        before.push(b.or_else(|| k.checked_sub(1).and_then(|k| before[k])));
    }
    let mut after = vec![None; n];
    for k in (0..n).rev() {
        after[k] = stamps[k].1.or_else(|| after.get(k + 1).copied().flatten());
    }
    (0..n)
        .map(|k| {
            let (mut first, mut last) = (k, k);
            loop {
                let rate = match (before[first], after[last]) {
                    (Some(b), Some(a)) if a.ns > b.ns => {
                        let span = a.ns - b.ns;
                        Some((span, a.cycles.wrapping_sub(b.cycles) as f64 / span as f64 * 1e3))
                    }
                    _ => None,
                };
                let widest = first == 0 && last == n - 1;
                match rate {
                    Some((span, mhz)) if span >= window || widest => return Some(mhz),
                    None if widest => return None,
                    _ => (first, last) = (first.saturating_sub(1), (last + 1).min(n - 1)),
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(us: f64, mhz: f64) -> Option<Stamp> {
        let ns = (us * 1e3) as u64 + 1_000_000;
        Some(Stamp {
            ns,
            cycles: (ns as f64 * mhz / 1e3) as u64,
        })
    }

    #[test]
    fn a_long_interval_reads_its_own_clock_and_short_ones_widen_to_the_window() {
        let window = Duration::from_micros(200);
        // Three intervals of 300 us at 1980, 1000 and 1980 MHz, back to back.
        let clocked = |start: f64, mhz: f64, base: f64| {
            let b = stamp(start, 1.0).map(|s| Stamp {
                ns: s.ns,
                cycles: (base * 1e3) as u64,
            });
            let a = b.map(|b| Stamp {
                ns: b.ns + 300_000,
                cycles: b.cycles + (300.0 * mhz) as u64,
            });
            (b, a)
        };
        let first = clocked(0.0, 1980.0, 0.0);
        let second = clocked(300.0, 1000.0, 300.0 * 1980.0 / 1e3);
        let mhz = clocks_mhz(&[first, second], window);
        assert!((mhz[0].unwrap() - 1980.0).abs() < 0.1, "{mhz:?}");
        assert!((mhz[1].unwrap() - 1000.0).abs() < 0.1, "{mhz:?}");

        // Ten intervals of 50 us at 1500 MHz: each widens until its stamps span 200 us.
        let short: Vec<_> = (0..10)
            .map(|k| {
                (
                    stamp(50.0 * k as f64, 1500.0),
                    stamp(50.0 * k as f64 + 49.0, 1500.0),
                )
            })
            .collect();
        for mhz in clocks_mhz(&short, window) {
            assert!((mhz.unwrap() - 1500.0).abs() < 1.0);
        }
    }

    #[test]
    fn missing_stamps_are_skipped_and_a_batch_without_two_reads_none() {
        let window = Duration::from_micros(200);
        let stamps = [
            (stamp(0.0, 1800.0), None),
            (None, None),
            (None, stamp(900.0, 1800.0)),
        ];
        for mhz in clocks_mhz(&stamps, window) {
            assert!((mhz.unwrap() - 1800.0).abs() < 1.0);
        }
        assert_eq!(clocks_mhz(&[(None, stamp(5.0, 1.0))], window), vec![None]);
        assert_eq!(
            clocks_mhz(&[(stamp(5.0, 1.0), stamp(5.0, 1.0))], window),
            vec![None]
        );
        // A batch shorter than the window reads over the whole batch.
        let short = [(stamp(0.0, 1700.0), stamp(10.0, 1700.0))];
        assert!((clocks_mhz(&short, window)[0].unwrap() - 1700.0).abs() < 1.0);
    }
}
