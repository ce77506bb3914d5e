//! The arms of a measurement's repetitions: how many, the order in which each repetition runs
//! them, and what each runs (the caller's work, or the calibration's kernel) in the caller's
//! capture mode.

use crate::capture_mode::RelaxedCapture;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::timing::engine::calibration_arm::CalibrationArm;
use crate::timing::engine::graph::our_step;

/// The work of one arm (`0..arms`) of a repetition, submitted to the stream.
pub(crate) type ArmWork<'w, E> = dyn FnMut(&Stream, usize) -> Result<(), E> + 'w;

/// A measurement's arms: the caller's, and the calibration's after them when calibrating.
pub(crate) struct Arms<'r, 'w, E> {
    /// Arms, the calibration's included.
    pub(crate) count: usize,
    work: &'r mut ArmWork<'w, E>,
    /// This thread's relaxed capture mode for the measurement; the arms run in the caller's.
    relaxed: &'r RelaxedCapture<'static>,
    /// The calibration's arm, when calibrating.
    pub(crate) calibration: Option<CalibrationArm<'r>>,
}

impl<'r, 'w, E> Arms<'r, 'w, E>
where
    E: From<Error>,
{
    /// The caller's `work` for `users` arms, with the `calibration`'s after them if any.
    pub(crate) fn new(
        users: usize,
        work: &'r mut ArmWork<'w, E>,
        relaxed: &'r RelaxedCapture<'static>,
        calibration: Option<CalibrationArm<'r>>,
    ) -> Arms<'r, 'w, E> {
        Arms {
            count: users + usize::from(calibration.is_some()),
            work,
            relaxed,
            calibration,
        }
    }

    /// The caller's arms (the calibration's is after them).
    pub(crate) fn users(&self) -> usize {
        self.calibration
            .as_ref()
            .map_or(self.count, |calibration| calibration.arm)
    }

    /// Whether `arm` is the calibration's.
    pub(crate) fn is_calibration(&self, arm: usize) -> bool {
        self.calibration
            .as_ref()
            .is_some_and(|calibration| calibration.arm == arm)
    }

    /// The arms of repetition `i` in the order they run ([`arm_order`]).
    pub(crate) fn order(&self, i: usize) -> impl Iterator<Item = usize> + use<E> {
        let calibration = self.calibration.as_ref().map(|calibration| calibration.arm);
        arm_order(i, self.users(), calibration)
    }

    /// A batch's readings in the order they were queued (repetition `i`'s `k`-th interval at
    /// `i * arms + k`) in the place of their arm (`i * arms + a`), its `n` repetitions numbered
    /// from `first` for their order.
    pub(crate) fn by_arm<T: Copy + Default>(&self, by_queue: &[T], first: usize, n: usize) -> Vec<T> {
        let mut by_arm = vec![T::default(); n * self.count];
        for i in 0..n {
            for (k, arm) in self.order(first + i).enumerate() {
                by_arm[i * self.count + arm] = by_queue[i * self.count + k];
            }
        }
        by_arm
    }

    /// The place in its repetition of each interval of a batch of `n` repetitions numbered from
    /// `first`: 0 if it ran first, 1 if after another arm; in the place of its arm
    /// (`i * arms + a`), as [`by_arm`](Self::by_arm) lays out readings.
    ///
    /// First or not, not the rank: an interval timed first reads more on some GPUs, and the
    /// calibration kernel is first in half the repetitions and last in the others, so a caller's
    /// arm weighed by rank (first, middle, last of three in a comparison) would weigh the first
    /// place's cost otherwise than the fixed cost does.
    pub(crate) fn places(&self, first: usize, n: usize) -> Vec<usize> {
        let by_queue: Vec<usize> = (0..n * self.count).map(|k| place(k % self.count)).collect();
        self.by_arm(&by_queue, first, n)
    }

    /// Queues arm `arm`'s work in repetition `repetition` on `stream`: the caller's, or the
    /// calibration's kernel of that repetition's rung (`capturing`: into a graph's capture).
    pub(crate) fn run(
        &mut self,
        d: &Driver,
        stream: &Stream,
        arm: usize,
        repetition: usize,
        capturing: bool,
    ) -> Result<(), E> {
        // The calibration's kernel too, so that its interval holds the same mode changes as the
        // work's (a launch is a call that no capture forbids).
        let relaxed = self.relaxed;
        let calibration = self
            .calibration
            .as_ref()
            .filter(|calibration| calibration.arm == arm);
        relaxed.in_callers_mode(|| match calibration {
            Some(calibration) => {
                let launched = calibration.launch(d, stream, repetition);
                Ok(our_step(capturing, launched, "the calibration's kernel")?)
            }
            None => (self.work)(stream, arm),
        })
    }
}

/// The fewest repetitions in a row over which [`arm_order`] balances the places, of `users` of
/// the caller's arms and the calibration's (if `calibrated`): each of the caller's arms first
/// overall and right beside the calibration equally often, and each calibration rung first and
/// last equally often. A graph replays the same repetitions, so it holds a multiple of this.
pub(crate) fn graph_cycle(users: usize, calibrated: bool) -> usize {
    match (users > 1, calibrated) {
        // The caller's order turns every other repetition; the calibration's place too.
        (true, true) => 4,
        // The caller's order, or a rung's two places (`rung_of`).
        (true, false) | (false, true) => 2,
        (false, false) => 1,
    }
}

/// The place of the arm that runs `position`-th in its repetition (`Arms::places`): 0 first, 1
/// after another arm.
fn place(position: usize) -> usize {
    position.min(1)
}

/// The arms of repetition `i` in the order they run, of `users` of the caller's and the
/// calibration's (numbered `users`, if any), over a cycle of four: the caller's forward, backward,
/// backward, forward (0, 1, ... then ..., 1, 0), so that none of them always runs first or always
/// right after another given one, and any two repetitions in a row balance; the calibration's
/// before them in even repetitions and after them in odd ones, so that with two of the caller's
/// arms each follows the calibration equally often. `i` counts across batches (a batch may hold an
/// odd number of repetitions, or one).
fn arm_order(i: usize, users: usize, calibration: Option<usize>) -> impl Iterator<Item = usize> {
    let forward = matches!(i % 4, 0 | 3);
    let alternating = (0..users).map(move |k| if forward { k } else { users - 1 - k });
    // The calibration's kernel runs first, then last: an interval's fixed cost can depend on
    // where it runs in the repetition (measured: the first place read more), and so the
    // calibration and the caller's arms each follow one another equally often; each rung runs
    // in an even repetition and the next (`rung_of`), so first and last equally often too.
    let even = i.is_multiple_of(2);
    let first = calibration.filter(|_| even);
    let last = calibration.filter(|_| !even);
    first.into_iter().chain(alternating).chain(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    /// Counts by a pair of arms, or by an arm and its place.
    type Tally = HashMap<(usize, usize), usize>;

    /// How often each arm runs right after each other one, and in each place, over `reps`
    /// repetitions in a row from repetition 0.
    fn tally(reps: usize, users: usize, calibration: bool) -> (Tally, Tally) {
        let calibration = calibration.then_some(users);
        let (mut after, mut place) = (HashMap::new(), HashMap::new());
        let mut previous = None;
        for i in 0..reps {
            for (k, arm) in arm_order(i, users, calibration).enumerate() {
                *place.entry((arm, k)).or_insert(0) += 1;
                if let Some(p) = previous {
                    *after.entry((p, arm)).or_insert(0) += 1;
                }
                previous = Some(arm);
            }
        }
        (after, place)
    }

    #[test]
    fn every_arm_runs_once_a_repetition() {
        for users in 1..=3 {
            for calibration in [None, Some(users)] {
                for i in 0..8 {
                    let mut arms: Vec<usize> = arm_order(i, users, calibration).collect();
                    arms.sort_unstable();
                    let all = users + usize::from(calibration.is_some());
                    assert_eq!(arms, (0..all).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn the_calibration_runs_first_and_last_in_turn_and_each_side_of_a_comparison_follows_it_equally() {
        // measure: the calibration (1) first, then last.
        let order = |i| arm_order(i, 1, Some(1)).collect::<Vec<_>>();
        assert_eq!((order(0), order(1)), (vec![1, 0], vec![0, 1]));
        // compare, calibrated: over whole cycles of four, each side follows the calibration, and
        // each takes each place, equally often.
        let (after, place) = tally(400, 2, true);
        assert_eq!(after.get(&(2, 0)), after.get(&(2, 1)), "{after:?}");
        assert!(after.get(&(2, 0)).is_some_and(|&n| n > 0));
        for k in 0..3 {
            assert_eq!(place.get(&(0, k)), place.get(&(1, k)), "{place:?}");
        }
        assert_eq!(place[&(2, 0)], place[&(2, 2)]);
        // compare without calibration: in any two repetitions in a row from an even one, each
        // side runs first once.
        for start in (0..16).step_by(2) {
            let firsts: Vec<usize> = (start..start + 2)
                .map(|i| arm_order(i, 2, None).next().unwrap())
                .collect();
            assert!(firsts.contains(&0) && firsts.contains(&1), "{start}: {firsts:?}");
        }
    }

    /// An interval timed first reads `d` more: weighed by place, every arm's balanced median
    /// holds half of it, the calibration's as the caller's, in a measurement and in a comparison,
    /// so that the net time holds none of it.
    #[test]
    fn by_place_every_arm_holds_half_the_first_places_cost() {
        use crate::timing::statistics::places::balanced_median;
        let d = Duration::from_nanos(700);
        for users in [1, 2] {
            let (mut samples, mut places) = (vec![Vec::new(); users + 1], vec![Vec::new(); users + 1]);
            for i in 0..4 * graph_cycle(users, true) {
                for (position, arm) in arm_order(i, users, Some(users)).enumerate() {
                    samples[arm].push(if position == 0 { d } else { Duration::ZERO });
                    places[arm].push(place(position));
                }
            }
            for arm in 0..=users {
                assert_eq!(
                    balanced_median(&samples[arm], &places[arm]),
                    d / 2,
                    "{users} arms, arm {arm}"
                );
            }
        }
    }

    #[test]
    fn every_graph_of_whole_cycles_balances_the_places() {
        use crate::timing::calibration::fixed_cost::{RUNGS, rung_of};
        for users in [1, 2] {
            let cycle = graph_cycle(users, true);
            // A graph of n repetitions replays repetitions 0..n: in every one of whole cycles,
            // each rung runs first as often as last, and each of the caller's arms runs first
            // overall, and right beside the calibration, equally often.
            for n in (cycle..=20 * cycle).step_by(cycle) {
                for rung in 0..RUNGS.len() {
                    let place = |i: usize| arm_order(i, users, Some(users)).next() == Some(users);
                    let firsts = (0..n).filter(|&i| rung_of(i) == rung && place(i)).count();
                    let lasts = (0..n).filter(|&i| rung_of(i) == rung && !place(i)).count();
                    assert_eq!(firsts, lasts, "{n} repetitions, {users} arms, rung {rung}");
                }
                let (after, place) = tally(n, users, true);
                for arm in 0..users {
                    assert_eq!(place[&(arm, 0)], place[&(0, 0)], "{n} repetitions: first place");
                    let beside =
                        after.get(&(users, arm)).unwrap_or(&0) + after.get(&(arm, users)).unwrap_or(&0);
                    let beside_0 =
                        after.get(&(users, 0)).unwrap_or(&0) + after.get(&(0, users)).unwrap_or(&0);
                    assert_eq!(beside, beside_0, "{n} repetitions: beside the calibration");
                }
            }
        }
        // Without the calibration, two of the caller's arms take turns first every two.
        let (_, place) = tally(2, 2, false);
        assert_eq!(place[&(0, 0)], place[&(1, 0)]);
        // Why a calibrated comparison's graph holds a multiple of four, not of two: in 14
        // repetitions, one of the caller's arms runs first overall more often than the other.
        let (_, place) = tally(14, 2, true);
        assert_ne!(place.get(&(0, 0)), place.get(&(1, 0)));
    }
}
