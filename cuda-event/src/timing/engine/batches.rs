//! How big a batch of timed repetitions is, and what follows one that the gate's watchdog opened.

/// The most intervals of a batch with the SM clock's stamps (each needs a slot of mapped host
/// memory): enough for a batch of the sampler's 20 ms of repetitions a few microseconds long.
pub(crate) const MOST_CLOCKED_INTERVALS: usize = 8192;

/// How a batch of timed repetitions went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Its samples are good.
    Timed,
    /// The host blocked while queueing it behind the gate, and the gate's watchdog opened the gate:
    /// its samples may contain host time. `first_blocked`: the first repetition was not queued yet
    /// when the watchdog opened the gate.
    Opened { first_blocked: bool },
}

/// What follows a batch of `n` repetitions that the gate's watchdog opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterOpened {
    /// Batches of at most this many: the batch did not fit in CUDA's queue of a held stream.
    Smaller(usize),
    /// No more gate: not even one repetition could be queued behind it.
    Ungated,
}

/// The most repetitions of `arms` arms a batch can stamp with `slots` stamp slots (one more stamp
/// than intervals), in whole cycles of `cycle` repetitions (see [`batch_repetitions`]): at least
/// one cycle.
pub(crate) fn most_clocked(slots: usize, arms: usize, cycle: usize) -> usize {
    whole_cycles((slots.saturating_sub(1) / arms).max(1), cycle)
}

/// Of `wanted` repetitions of `arms` arms, as many as fit in `max_intervals` intervals and in the
/// clock's stamp slots (if stamped), in whole cycles of `cycle` repetitions: at least one cycle.
/// A graph replays the same repetitions, so what the arm order balances over a cycle (which arm
/// runs first; each calibration rung in both places) holds in every replay only if the graph
/// holds whole cycles.
pub(crate) fn batch_repetitions(
    wanted: usize,
    max_intervals: usize,
    arms: usize,
    cycle: usize,
    stamp_slots: Option<usize>,
) -> usize {
    let most = (max_intervals / arms).max(1);
    let most = stamp_slots.map_or(most, |slots| most.min(most_clocked(slots, arms, cycle)));
    whole_cycles(wanted.clamp(1, most), cycle)
}

/// `n` rounded down to whole cycles, at least one.
fn whole_cycles(n: usize, cycle: usize) -> usize {
    let cycle = cycle.max(1);
    (n - n % cycle).max(cycle)
}

/// The bound on a sampler's batches, and the batches whose gate the watchdog opened.
pub(crate) struct BatchBound {
    /// The bound on a batch's intervals, as
    /// [`MeasureOptions::max_batch`](crate::timing::MeasureOptions::max_batch): the option's, cut
    /// when a batch did not fit behind the gate.
    pub(crate) max_batch: usize,
    /// Batches whose gate the watchdog opened.
    pub(crate) gate_timeouts: usize,
}

impl BatchBound {
    pub(crate) fn new(max_batch: usize) -> BatchBound {
        BatchBound {
            max_batch,
            gate_timeouts: 0,
        }
    }

    /// Counts a batch of `n` repetitions of `arms` arms that the gate's watchdog opened, and cuts
    /// the bound where smaller batches follow.
    pub(crate) fn opened(&mut self, n: usize, arms: usize, first_blocked: bool) -> AfterOpened {
        self.gate_timeouts += 1;
        let after = after_opened(n, first_blocked);
        if let AfterOpened::Smaller(batch) = after {
            // `max_batch` counts intervals, `batch` repetitions.
            self.max_batch = batch * arms;
        }
        after
    }
}

fn after_opened(n: usize, first_blocked: bool) -> AfterOpened {
    // A batch of one that the watchdog opened took about the whole timeout to queue, even if its
    // last call returned just before the watchdog fired: no smaller batch exists to try.
    if first_blocked || n == 1 {
        AfterOpened::Ungated
    } else {
        AfterOpened::Smaller((n / 16).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_with_stamps_fits_its_slots() {
        // 256 slots: 255 intervals.
        assert_eq!(most_clocked(256, 1, 1), 255);
        assert_eq!(most_clocked(256, 2, 1), 127);
        assert_eq!(most_clocked(256, 2, 2), 126);
        assert_eq!(most_clocked(256, 3, 4), 84);
        let slots = MOST_CLOCKED_INTERVALS + 1;
        assert!(most_clocked(slots, 2, 2) * 2 < slots);
        assert!(most_clocked(slots, 3, 4) * 3 < slots);
        // Never none.
        assert_eq!(most_clocked(1, 1, 1), 1);
        assert_eq!(most_clocked(2, 2, 2), 2);
    }

    #[test]
    fn a_batch_stays_within_max_batch_intervals_but_holds_at_least_one_repetition() {
        // measure, compare, each calibrated: 1, 2, 2 and 3 arms.
        for arms in 1..=3 {
            for cycle in [1, 2, 4] {
                for max in [1, 2, 3, 5, 63, 64, 1000] {
                    for wanted in [1, 2, 7, 100, 10_000] {
                        for slots in [None, Some(256), Some(MOST_CLOCKED_INTERVALS + 1)] {
                            let n = batch_repetitions(wanted, max, arms, cycle, slots);
                            let least = cycle;
                            assert!(n >= least && n.is_multiple_of(cycle), "{n}");
                            assert!(n == least || n * arms <= max, "{n} x {arms} > {max}");
                            assert!(n == least || n <= wanted, "{n} > {wanted}");
                            if let Some(slots) = slots {
                                assert!(n == least || n * arms < slots, "{n} x {arms} vs {slots}");
                            }
                        }
                    }
                }
            }
        }
        // The default 64 for a calibrated compare in graph mode: 20 repetitions, 60 intervals; a
        // calibrated measure: 32 repetitions, 64 intervals.
        assert_eq!(batch_repetitions(10_000, 64, 3, 4, None), 20);
        assert_eq!(batch_repetitions(10_000, 64, 2, 2, None), 32);
        assert_eq!(batch_repetitions(10_000, 64, 1, 1, None), 64);
        assert_eq!(batch_repetitions(5, 64, 2, 2, None), 4);
    }

    #[test]
    fn a_repetition_that_cannot_be_queued_behind_the_gate_ends_gating_and_a_batch_shrinks() {
        // The first repetition was still being queued when the watchdog opened the gate: no batch
        // fits, whatever its size (thousands of launches per repetition, or a wait on the host).
        assert_eq!(after_opened(64, true), AfterOpened::Ungated);
        assert_eq!(after_opened(1, true), AfterOpened::Ungated);
        // A batch of one opened by the watchdog: nothing smaller to try.
        assert_eq!(after_opened(1, false), AfterOpened::Ungated);
        // Repetitions fit, the batch did not: smaller batches.
        assert_eq!(after_opened(64, false), AfterOpened::Smaller(4));
        assert_eq!(after_opened(3, false), AfterOpened::Smaller(1));
    }
}
