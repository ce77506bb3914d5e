//! The calibration's arm of a measurement
//! ([`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate)): one more arm after
//! the caller's, whose work is a calibration kernel of the rung its repetition rotates to
//! ([`rung_of`]); and the rung of each of its samples kept, from which the calibration is read.

use crate::driver::Driver;
use crate::error::Result;
use crate::stream::Stream;
use crate::timing::calibration::fixed_cost::{EMPTY, RUNGS, rung_of};
use crate::timing::calibration::{Calibrated, Calibration};
use crate::timing::engine::kernels::TimingKernels;
use std::time::Duration;

/// The calibration's arm: numbered after the caller's arms (so run first and last in turn, see
/// `Arms::order`), a kernel of `kernels` whose length rotates over the repetitions.
pub(crate) struct CalibrationArm<'k> {
    /// Its number among the arms: the count of the caller's.
    pub(crate) arm: usize,
    kernels: &'k TimingKernels,
    /// The calibration kernel's rung ([`RUNGS`]) of each of its samples kept.
    rungs: Vec<usize>,
}

impl<'k> CalibrationArm<'k> {
    pub(crate) fn new(arm: usize, kernels: &'k TimingKernels) -> CalibrationArm<'k> {
        CalibrationArm {
            arm,
            kernels,
            rungs: Vec::new(),
        }
    }

    /// Queues the kernel of repetition `repetition`'s rung on `stream`.
    pub(crate) fn launch(&self, d: &Driver, stream: &Stream, repetition: usize) -> Result<()> {
        match RUNGS[rung_of(repetition)] {
            Duration::ZERO => self.kernels.launch_empty(d, stream),
            length => self.kernels.launch_spin(d, stream, length),
        }
    }

    /// Repetition `repetition` was kept: one more sample, of its rung.
    pub(crate) fn keep(&mut self, repetition: usize) {
        self.rungs.push(rung_of(repetition));
    }

    /// Forgets the samples kept so far, with the rest of the measurement's (one that starts over
    /// ungated).
    pub(crate) fn forget(&mut self) {
        self.rungs.clear();
    }

    /// Of CUPTI's `times` of this arm's samples (one each), those of the empty kernel.
    pub(crate) fn empty_kernels(&self, times: Vec<Option<Duration>>) -> Vec<Option<Duration>> {
        times
            .into_iter()
            .zip(&self.rungs)
            .filter(|&(_, &rung)| rung == EMPTY)
            .map(|(time, _)| time)
            .collect()
    }

    /// The calibration of this arm's samples `in_order` (as they were taken), each taken in its
    /// repetition's place of `places`, with `work_step` the smallest step of the work's samples
    /// ([`Calibration::of_samples`]).
    pub(crate) fn calibrated(
        &self,
        in_order: &[Duration],
        places: &[usize],
        work_step: Option<Duration>,
    ) -> Calibrated {
        Calibration::of_samples(in_order, &self.rungs, places, work_step)
            .map_or(Calibrated::NotAsked, Calibrated::Done)
    }
}
