//! CUPTI's session of a measurement
//! ([`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti)), and the tags that mark each
//! timed interval's work for it: by the interval's place in the queue, as its clock's stamp slot.

use crate::error::{MeasureError, Result};
use crate::timing::cupti::Session;
use crate::timing::cupti::times::CuptiTimes;
use crate::timing::engine::calibration_arm::CalibrationArm;
use std::time::Duration;

/// CUPTI's session, and the tags of the intervals queued so far.
pub(crate) struct CuptiTags {
    session: Session,
    /// The tag of the next interval queued: every interval queued gets its own, also those of a
    /// batch that is then dropped.
    next: u64,
    /// The tag of the first interval of the batch last queued.
    batch: u64,
}

impl CuptiTags {
    pub(crate) fn new(session: Session) -> CuptiTags {
        CuptiTags {
            session,
            next: 1,
            batch: 1,
        }
    }

    /// Tags a batch of `intervals` intervals about to be queued.
    pub(crate) fn next_batch(&mut self, intervals: usize) {
        self.batch = self.next;
        self.next += intervals as u64;
    }

    /// The tag of the interval queued `at`-th in the last batch.
    pub(crate) fn tag(&self, at: usize) -> u64 {
        self.batch + at as u64
    }

    /// Runs `work` with its launches tagged `tag`.
    pub(crate) fn tagged<R>(&self, tag: u64, work: impl FnOnce() -> R) -> Result<R> {
        self.session.tagged(tag, work)
    }

    /// Ends the session: CUPTI's times of each of the caller's arms, from `tags`, those of each
    /// arm's samples kept (the calibration's among them, when `calibration`).
    pub(crate) fn finish(
        self,
        tags: &[Vec<u64>],
        calibration: Option<&CalibrationArm<'_>>,
    ) -> Result<Vec<CuptiTimes>> {
        let spans = self.session.finish()?;
        let times = |tags: &Vec<u64>| tags.iter().map(|&tag| spans.of(tag)).collect::<Vec<_>>();
        let mut by_arm: Vec<Vec<Option<Duration>>> = tags.iter().map(times).collect();
        // CUPTI's empty kernels: the calibration's samples of the rung without a length.
        let empty = match calibration {
            Some(calibration) => calibration.empty_kernels(by_arm.remove(calibration.arm)),
            None => Vec::new(),
        };
        // The calibration's kernels always launch: none recorded means CUPTI's records go
        // elsewhere (another CUPTI client of this process registered its own buffers).
        if !empty.is_empty() && empty.iter().all(Option::is_none) && spans.dropped == 0 {
            let reason = "CUPTI delivered no record of the calibration's kernels: another \
                          CUPTI client of this process (a profiler) may be taking its records";
            return Err(MeasureError::CuptiUnavailable {
                reason: reason.into(),
            }
            .into());
        }
        let of_arm = |arm| CuptiTimes::new(arm, &empty, spans.dropped);
        Ok(by_arm.into_iter().map(of_arm).collect())
    }
}
