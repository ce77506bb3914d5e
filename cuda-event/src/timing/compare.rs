//! A/B comparison: two pieces of GPU work timed in alternation on one stream, and a conservative
//! verdict on their ratio.

use crate::error::{Error, MeasureError, Result};
use crate::stream::Stream;
use crate::timing::engine::sampler::Sampler;
use crate::timing::measurement::{Measurement, StopReason};
use crate::timing::options::MeasureOptions;
use crate::timing::statistics::clusters::two_clusters;
use crate::timing::statistics::{median_bounds, median_of_sorted, saturating_secs, smallest_step};
use std::fmt;
use std::time::Duration;

/// How [`compare`] repeats, when it stops and what difference counts.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CompareOptions {
    /// Warm-up, the L2 flush (before each of A and B), the gate, the batch size, the minimum
    /// samples (pairs) and time, and the timeout, as [`measure`](crate::timing::measure) uses them;
    /// `max_noise` is not used: `compare` stops once its verdict is decided.
    pub measure: MeasureOptions,
    /// The smallest relative difference that counts (0.01: 1%). B is "slower" only if the
    /// confidence interval of the ratio B/A lies above 1 and the ratio is at least 1 + margin,
    /// "faster" only if the interval lies below 1 and A/B is at least 1 + margin, "same" only if
    /// the whole interval lies within 1/(1 + margin) and 1 + margin (so that swapping A and B
    /// swaps faster and slower and keeps same). No verdict but "ambiguous" when the timing
    /// events' resolution (the smallest step between two samples) exceeds half the margin of
    /// the work's time: work of a few microseconds needs a wider margin.
    pub margin: f64,
}

impl Default for CompareOptions {
    /// [`MeasureOptions::default`] with at least 30 pairs (the interval needs a dozen to exist at
    /// all), and a margin of 1%.
    fn default() -> Self {
        CompareOptions {
            measure: MeasureOptions::default().min_samples(30),
            margin: 0.01,
        }
    }
}

impl CompareOptions {
    /// Sets [`measure`](Self::measure).
    pub fn measure(mut self, measure: MeasureOptions) -> Self {
        self.measure = measure;
        self
    }
    /// Sets [`margin`](Self::margin).
    pub fn margin(mut self, margin: f64) -> Self {
        self.margin = margin;
        self
    }
}

/// What [`compare`] concluded about B against A.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The whole confidence interval of B/A lies within the margin of 1.
    Same,
    /// B takes less time: the interval lies below 1 and A/B is at least 1 + the margin.
    Faster,
    /// B takes more time: the interval lies above 1 and B/A is at least 1 + the margin.
    Slower,
    /// None of the above before the timeout (a difference about the size of the margin, or too
    /// much noise), or the samples cannot resolve the margin (the timing events' resolution is
    /// too coarse for the work's time, or every sample reads the same), or the pairs' ratios fall
    /// in two clusters ([`Comparison::ratio_clusters`]), or a side is not trusted
    /// ([`Measurement::trust`]).
    Ambiguous,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Same => "same",
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::Ambiguous => "ambiguous",
        })
    }
}

/// The pairs' ratios (B over A) in two clusters, as [`Clusters`](crate::timing::Clusters) finds
/// them in samples: B against A is not one number in this run, as when one side ran two ways in
/// turn that the other did not (a median of the ratios would read one of them as the whole).
/// Tested on the pairs where A or B ran first in its repetition, the ratios of each of the two
/// scaled to the pairs' median (what the first place adds is no second mode); a mode that comes
/// with the place alone, or in the pairs that follow the calibration's kernel, is not seen.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RatioClusters {
    /// The lower cluster's median ratio.
    pub low: f64,
    /// The higher cluster's median ratio.
    pub high: f64,
    /// The share of the pairs tested in the higher cluster.
    pub high_share: f64,
}

impl fmt::Display for RatioClusters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "B/A {:.4} and {:.4}, {:.0}% in the higher",
            self.low,
            self.high,
            100.0 * self.high_share
        )
    }
}

/// The outcome of [`compare`]: each side's samples and B's time as a ratio of A's, with its
/// confidence interval and the verdict.
#[derive(Clone, Debug)]
#[must_use = "a comparison is read with `verdict`"]
pub struct Comparison {
    a: Measurement,
    b: Measurement,
    ratio: Ratio,
    margin: f64,
    confidence: f64,
}

impl Comparison {
    /// A's samples (one per pair) and their statistics.
    pub fn a(&self) -> &Measurement {
        &self.a
    }
    /// B's samples (one per pair, in the same order as A's) and their statistics.
    pub fn b(&self) -> &Measurement {
        &self.b
    }
    /// B's time over A's: the median of the pairs' ratios (each pair ran back to back under the
    /// same conditions). NaN when no pair could be compared.
    pub fn ratio(&self) -> f64 {
        self.ratio.median
    }
    /// The ratio's confidence interval, at [`confidence`](Self::confidence): distribution-free
    /// (the order statistics of the pairs' ratios that bound their median, by the sign test), so
    /// a few outlying pairs do not move it. NaN when no pair could be compared.
    pub fn interval(&self) -> (f64, f64) {
        (self.ratio.low, self.ratio.high)
    }
    /// The confidence of [`interval`](Self::interval): that of the look that decided (see
    /// [`CONFIDENCE`]), at least `CONFIDENCE`.
    pub fn confidence(&self) -> f64 {
        self.confidence
    }
    /// Pairs whose ratio counted (all but those where both samples read 0).
    pub fn pairs(&self) -> usize {
        self.ratio.pairs
    }
    /// The pairs' ratios in two clusters, if they fall in two: then the verdict is
    /// [`Verdict::Ambiguous`]. Two modes that both sides share (the GPU's clocks) leave the ratios
    /// in one; a mode of one side alone splits them (see [`RatioClusters`] for which pairs count).
    pub fn ratio_clusters(&self) -> Option<RatioClusters> {
        self.ratio.clusters
    }
    /// The verdict on B against A: [`Verdict::Ambiguous`] whatever the ratio when the pairs'
    /// ratios fall in two clusters ([`ratio_clusters`](Self::ratio_clusters)) or either side is not
    /// trusted ([`Measurement::trust`]: for a comparison's side, throttling, a lost gate, a flush
    /// that did not evict).
    pub fn verdict(&self) -> Verdict {
        if !(self.a.trust().is_trusted() && self.b.trust().is_trusted()) {
            return Verdict::Ambiguous;
        }
        self.ratio.verdict(self.margin)
    }
}

impl fmt::Display for Comparison {
    /// `B/A <ratio> [<low>, <high>] 99.9%, <n> pairs: <verdict>`, four decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (low, high) = self.interval();
        write!(
            f,
            "B/A {:.4} [{low:.4}, {high:.4}] {}%, {} pairs: {}",
            self.ratio(),
            self.confidence * 100.0,
            self.pairs(),
            self.verdict()
        )
    }
}

/// The confidence of `compare`'s verdict over all its looks. It looks at the pairs when it has
/// [`MeasureOptions::min_samples`] of them (and the minimum time), then each time their number
/// has doubled, and stops at the first decided verdict; the k-th look's interval is at
/// `1 - (1 - CONFIDENCE) / 2^k`, so that the chance that any look's interval misses the ratio
/// is at most `1 - CONFIDENCE`.
pub const CONFIDENCE: f64 = 0.999;

/// Times `a` and `b`, the same way [`measure`](crate::timing::measure) times one piece of work, in pairs
/// on one stream: each repetition runs both (A then B, then B then A in the next, so that neither
/// always runs first), each timed alone, each after its own L2 flush when that is on, behind the
/// gate (or replayed from one captured graph in graph mode). Drift of the GPU's clocks or of
/// other load over the run affects both sides of a pair alike. It stops once the verdict is
/// decided (see [`CONFIDENCE`] for when it looks) or at the timeout.
///
/// ```no_run
/// # fn main() -> cuda_event::Result<()> {
/// use cuda_event::{Stream, check_runtime, sys};
/// use cuda_event::timing::{CompareOptions, compare};
/// let stream = Stream::new(0)?;
/// # let (buffer, other): (*mut std::ffi::c_void, *mut std::ffi::c_void) =
/// #     (std::ptr::null_mut(), std::ptr::null_mut());
/// let memset = |stream: &Stream| {
///     // SAFETY: `buffer` is 64 MiB of device memory of the stream's device.
///     check_runtime("cudaMemsetAsync", unsafe {
///         sys::cudaMemsetAsync(buffer, 0, 64 << 20, stream.as_raw())
///     })
/// };
/// let copy = |stream: &Stream| {
///     // SAFETY: `other` is 64 MiB of device memory of the stream's device, apart from `buffer`.
///     check_runtime("cudaMemcpyAsync", unsafe {
///         sys::cudaMemcpyAsync(other, buffer, 64 << 20,
///             sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice, stream.as_raw())
///     })
/// };
/// let c = compare(&stream, &CompareOptions::default(), memset, copy)?;
/// println!("{c}"); // "B/A <ratio> [<low>, <high>] 99.9%, <n> pairs: <verdict>"
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`measure`](crate::timing::measure)'s; [`MeasureError::InvalidOptions`] for a margin that is
/// not a finite number at least 0.
pub fn compare<A, B, E>(
    stream: &Stream,
    options: &CompareOptions,
    mut a: A,
    mut b: B,
) -> Result<Comparison, E>
where
    A: FnMut(&Stream) -> Result<(), E>,
    B: FnMut(&Stream) -> Result<(), E>,
    E: From<Error>,
{
    let margin = options.margin;
    if !(margin >= 0.0 && margin.is_finite()) {
        let reason = "margin must be a finite number at least 0";
        return Err(Error::from(MeasureError::InvalidOptions { reason }).into());
    }
    let measure = &options.measure;
    let alpha = |look: u32| (1.0 - CONFIDENCE) / 2f64.powi(look as i32);
    // The looks so far, the pairs that make the next one, and the last look's ratio.
    let (mut looks, mut next_look, mut last) = (0, measure.min_samples, None);
    let mut sides = Sampler::run(
        stream,
        measure,
        2,
        &mut |stream, arm| if arm == 0 { a(stream) } else { b(stream) },
        &mut |arms, places, wall_time| {
            let pairs = arms[0].len();
            let timeout = wall_time >= measure.timeout && pairs >= 2;
            if !(timeout || (pairs >= next_look && wall_time >= measure.min_time)) {
                return None;
            }
            looks += 1;
            next_look = 2 * pairs;
            let ratio = Ratio::of_in_places(&arms[0], &arms[1], [&places[0], &places[1]], alpha(looks));
            let decided = ratio.pairs >= measure.min_samples && ratio.verdict(margin) != Verdict::Ambiguous;
            last = Some((ratio, looks));
            match (decided, timeout) {
                (true, _) => Some(StopReason::VerdictReached),
                (false, true) => Some(StopReason::Timeout),
                (false, false) => None,
            }
        },
    )?;
    let (ratio, looks) = last.expect("the sampler stops only after a look");
    let (b, a) = (sides.pop().expect("two arms"), sides.pop().expect("two arms"));
    let (a, b) = (a.in_a_comparison(), b.in_a_comparison());
    Ok(Comparison {
        a,
        b,
        ratio,
        margin,
        confidence: 1.0 - alpha(looks),
    })
}

/// B/A over pairs: the median of the pairs' ratios, its confidence interval, and whether the
/// samples resolve differences of the margin's size.
#[derive(Clone, Copy, Debug)]
struct Ratio {
    median: f64,
    low: f64,
    high: f64,
    pairs: usize,
    /// The smallest step between two different samples, relative to A's median time (infinite
    /// when every sample reads the same, or A's median is 0).
    resolution: f64,
    /// The ratios in two clusters, if they are.
    clusters: Option<RatioClusters>,
}

impl Ratio {
    /// [`of_in_places`](Self::of_in_places) of pairs all in one order, A first.
    #[cfg(test)]
    fn of(a: &[Duration], b: &[Duration], alpha: f64) -> Ratio {
        Ratio::of_in_places(a, b, [&vec![0; a.len()], &vec![1; b.len()]], alpha)
    }

    /// The ratio of `b` to `a`, pair by pair, with an interval at `1 - alpha`; `places` says
    /// where A and B ran in each pair's repetition (`Arms::places`). A pair where both read 0
    /// does not count; one where only one side reads 0 counts (as 0 or infinity).
    fn of_in_places(a: &[Duration], b: &[Duration], places: [&[usize]; 2], alpha: f64) -> Ratio {
        let pairs: Vec<(f64, (usize, usize))> = a
            .iter()
            .zip(b)
            .zip(places[0].iter().zip(places[1]))
            .filter(|((a, b), _)| !(a.is_zero() && b.is_zero()))
            .map(|((a, b), (&at_a, &at_b))| (b.as_secs_f64() / a.as_secs_f64(), (at_a, at_b)))
            .collect();
        let mut ratios: Vec<f64> = pairs.iter().map(|&(ratio, _)| ratio).collect();
        ratios.sort_unstable_by(f64::total_cmp);
        let n = ratios.len();
        let median = |sorted: &[f64]| median_of_sorted(sorted).unwrap_or(f64::NAN);
        let (low, high) = match median_bounds(n, alpha) {
            Some(k) => (ratios[k], ratios[n - 1 - k]),
            None => (f64::NAN, f64::NAN),
        };
        let mut times: Vec<f64> = a.iter().chain(b).map(Duration::as_secs_f64).collect();
        times.sort_unstable_by(f64::total_cmp);
        let step = smallest_step(&times);
        let mut a_times: Vec<f64> = a.iter().map(Duration::as_secs_f64).collect();
        a_times.sort_unstable_by(f64::total_cmp);
        let a_median = median(&a_times);
        let resolution = if a_median > 0.0 {
            step / a_median
        } else {
            f64::INFINITY
        };
        // An interval timed first reads more on some GPUs, which parts the ratios of the pairs
        // where A ran first from those where B did though neither side runs two ways: each of
        // the two placings' ratios scaled from its own median to the pairs' median, pooled.
        // (With the calibration's kernel first, A and B follow it in either order: those pairs
        // are of two orders, not tested.)
        let whole = median(&ratios);
        let mut pooled: Vec<f64> = Vec::with_capacity(n);
        for placing in [(0, 1), (1, 0)] {
            let mut ratios: Vec<f64> = pairs
                .iter()
                .filter(|&&(_, at)| at == placing)
                .map(|&(ratio, _)| ratio)
                .collect();
            ratios.sort_unstable_by(f64::total_cmp);
            let own = median(&ratios);
            pooled.extend(ratios.iter().map(|ratio| ratio / own * whole));
        }
        pooled.sort_unstable_by(f64::total_cmp);
        let clusters = ratio_clusters(&pooled, resolution);
        Ratio {
            median: median(&ratios),
            low,
            high,
            pairs: n,
            resolution,
            clusters,
        }
    }

    /// The verdict for `margin` (NaN bounds compare false everywhere: ambiguous).
    fn verdict(&self, margin: f64) -> Verdict {
        let (low, high, ratio) = (self.low, self.high, self.median);
        let (above, below) = (1.0 + margin, 1.0 / (1.0 + margin));
        if self.resolution > margin / 2.0 || self.clusters.is_some() {
            Verdict::Ambiguous
        } else if low >= below && high <= above {
            Verdict::Same
        } else if low > 1.0 && ratio >= above {
            Verdict::Slower
        } else if high < 1.0 && ratio <= below {
            Verdict::Faster
        } else {
            Verdict::Ambiguous
        }
    }
}

/// Two clusters of `sorted` ratios (ascending), as the samples' test finds them (the ratios read as
/// seconds), but for clusters closer than three steps of the timer relative to the work's time
/// (`resolution`): ratios of samples on a coarse grid fall on a lattice of such values.
fn ratio_clusters(sorted: &[f64], resolution: f64) -> Option<RatioClusters> {
    let as_seconds: Vec<Duration> = sorted.iter().map(|&r| saturating_secs(r)).collect();
    let c = two_clusters(&as_seconds)?;
    let (low, high) = (c.low.as_secs_f64(), c.high.as_secs_f64());
    (high - low >= 3.0 * resolution).then_some(RatioClusters {
        low,
        high,
        high_share: c.high_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(values: &[f64]) -> Vec<Duration> {
        values
            .iter()
            .map(|&v| Duration::from_secs_f64(v * 1e-6))
            .collect()
    }

    const ALPHA: f64 = 0.001;

    /// 100 us with 50 ns of jitter, `n` samples.
    fn jittered(n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| (100.0 + (i * 3 % 7) as f64 * 0.05) * scale)
            .collect()
    }

    #[test]
    fn identical_work_is_the_same_and_a_clear_difference_is_slower_or_faster() {
        let a = jittered(100, 1.0);
        let same: Vec<f64> = (0..100).map(|i| 100.0 + ((i + 3) % 7) as f64 * 0.05).collect();
        let verdict = |a: &[f64], b: &[f64]| Ratio::of(&us(a), &us(b), ALPHA).verdict(0.01);
        assert_eq!(verdict(&a, &same), Verdict::Same);
        assert_eq!(verdict(&a, &jittered(100, 1.03)), Verdict::Slower);
        assert_eq!(verdict(&a, &jittered(100, 0.97)), Verdict::Faster);
        assert_eq!(verdict(&a, &jittered(100, 1.005)), Verdict::Same);
        // Swapping A and B swaps faster and slower.
        assert_eq!(verdict(&jittered(100, 1.03), &a), Verdict::Faster);
        assert_eq!(verdict(&jittered(100, 0.97), &a), Verdict::Slower);
    }

    #[test]
    fn a_difference_at_the_margin_or_few_pairs_or_zero_samples_are_ambiguous() {
        let a = jittered(100, 1.0);
        // Ratios spread from 0.91 to 1.11 around 1.01: the interval straddles both 1 and 1.01.
        let b: Vec<f64> = a
            .iter()
            .enumerate()
            .map(|(i, v)| v * (0.91 + 0.2 * (i * 37 % 100) as f64 / 100.0))
            .collect();
        let verdict = |a: &[f64], b: &[f64]| Ratio::of(&us(a), &us(b), ALPHA).verdict(0.01);
        assert_eq!(verdict(&a, &b), Verdict::Ambiguous);
        assert_eq!(verdict(&a[..5], &a[..5]), Verdict::Ambiguous);
        let zeros = vec![Duration::ZERO; 50];
        let ratio = Ratio::of(&zeros, &zeros, ALPHA);
        assert_eq!((ratio.pairs, ratio.verdict(0.01)), (0, Verdict::Ambiguous));
        assert!(ratio.median.is_nan());
    }

    #[test]
    fn samples_too_coarse_for_the_margin_give_no_verdict() {
        // 2.0 us against 2.1 us read with a 0.5 us step: most pairs read equal, yet they differ
        // by 5%.
        let read = |t: f64, i: usize| ((t + (i % 5) as f64 * 0.1) / 0.5).round() * 0.5;
        let a: Vec<f64> = (0..200).map(|i| read(2.0, i)).collect();
        let b: Vec<f64> = (0..200).map(|i| read(2.1, i)).collect();
        let ratio = Ratio::of(&us(&a), &us(&b), ALPHA);
        assert!(ratio.resolution > 0.2, "{ratio:?}");
        assert_eq!(ratio.verdict(0.01), Verdict::Ambiguous);
        // Every sample the same: nothing shows the resolution.
        let flat = vec![2.0; 200];
        assert_eq!(
            Ratio::of(&us(&flat), &us(&flat), ALPHA).verdict(0.01),
            Verdict::Ambiguous
        );
    }

    #[test]
    fn a_few_outlying_pairs_do_not_move_the_verdict() {
        let a = jittered(200, 1.0);
        let mut b = jittered(200, 1.03);
        for i in (0..200).step_by(20) {
            b[i] = 50.0; // ten pairs where B was interrupted short
        }
        assert_eq!(Ratio::of(&us(&a), &us(&b), ALPHA).verdict(0.01), Verdict::Slower);
    }

    #[test]
    fn a_side_that_reads_zero_counts_as_an_extreme_ratio() {
        let a = jittered(100, 1.0);
        let mut b = jittered(100, 1.0);
        b[0] = 0.0;
        let ratio = Ratio::of(&us(&a), &us(&b), ALPHA);
        assert_eq!(ratio.pairs, 100);
        assert_eq!(ratio.verdict(0.01), Verdict::Same);
    }

    #[test]
    fn a_mode_of_one_side_alone_makes_the_verdict_ambiguous_and_a_shared_one_does_not() {
        // B takes 120 us in three pairs of ten and 100 us otherwise: the ratios' median reads
        // "same", yet B is not A.
        let a = jittered(1000, 1.0);
        let moded = |side: &[f64]| -> Vec<f64> {
            let raised = |i: usize, v: f64| if i % 10 < 3 { v * 1.2 } else { v };
            side.iter().enumerate().map(|(i, &v)| raised(i, v)).collect()
        };
        let other_jitter: Vec<f64> = (0..1000).map(|i| 100.0 + ((i + 3) % 11) as f64 * 0.03).collect();
        let b = moded(&other_jitter);
        let ratio = Ratio::of(&us(&a), &us(&b), ALPHA);
        let clusters = ratio.clusters.expect("two clusters of ratios");
        assert!(
            (clusters.low - 1.0).abs() < 0.01 && (clusters.high - 1.2).abs() < 0.01,
            "{clusters}"
        );
        assert!((clusters.high_share - 0.3).abs() < 0.02, "{clusters}");
        assert_eq!(ratio.verdict(0.01), Verdict::Ambiguous);
        // Both sides slow in the same pairs (the GPU's clocks, say): the ratios stay in one.
        let shared = Ratio::of(&us(&moded(&a)), &us(&b), ALPHA);
        assert_eq!((shared.clusters, shared.verdict(0.01)), (None, Verdict::Same));
        let slower: Vec<f64> = other_jitter.iter().map(|v| v * 1.03).collect();
        let slower = Ratio::of(&us(&moded(&a)), &us(&moded(&slower)), ALPHA);
        assert_eq!((slower.clusters, slower.verdict(0.01)), (None, Verdict::Slower));
    }

    #[test]
    fn what_the_first_place_adds_or_a_coarse_timer_makes_no_clusters_of_ratios() {
        // Identical work, 5 us, where an interval timed first reads 736 ns more; A first in
        // repetitions 0 and 3 of every 4 (the arms' alternation).
        let a_places: Vec<usize> = (0..2000).map(|i| usize::from(!matches!(i % 4, 0 | 3))).collect();
        let jitter = |i: usize, k: usize| ((i * k) % 13) as f64 * 0.01;
        let first = |place: usize| if place == 0 { 0.736 } else { 0.0 };
        let a: Vec<f64> = (0..2000)
            .map(|i| 5.0 + jitter(i, 7) + first(a_places[i]))
            .collect();
        let b: Vec<f64> = (0..2000)
            .map(|i| 5.0 + jitter(i, 11) + first(1 - a_places[i]))
            .collect();
        let b_places: Vec<usize> = a_places.iter().map(|&place| 1 - place).collect();
        let ratio = Ratio::of_in_places(&us(&a), &us(&b), [&a_places, &b_places], ALPHA);
        assert_eq!(ratio.clusters, None, "{ratio:?}");
        // The same pairs as if all in one order: the two orders' ratios read as two clusters.
        assert!(Ratio::of(&us(&a), &us(&b), ALPHA).clusters.is_some());
        // With the calibration's kernel, a third arm: A and B both after it in repetitions 0 and 2
        // of every 4 (A right after it in 0, B in 2), B first in 1, A first in 3; right after the
        // calibration's kernel reads 300 ns more.
        let placing = |i: usize| match i % 4 {
            1 => (1, 0),
            3 => (0, 1),
            _ => (1, 1),
        };
        let (a_places, b_places): (Vec<usize>, Vec<usize>) = (0..2000).map(placing).unzip();
        let after_calibration = |i: usize, side: usize| if i % 4 == side { 0.3 } else { 0.0 };
        let a: Vec<f64> = (0..2000)
            .map(|i| 5.0 + jitter(i, 7) + first(a_places[i]) + after_calibration(i, 0))
            .collect();
        let b: Vec<f64> = (0..2000)
            .map(|i| 5.0 + jitter(i, 11) + first(b_places[i]) + after_calibration(i, 2))
            .collect();
        let ratio = Ratio::of_in_places(&us(&a), &us(&b), [&a_places, &b_places], ALPHA);
        assert_eq!(ratio.clusters, None, "{ratio:?}");
        // 1.5 us with 0.9% of normal jitter read on a 32 ns grid: most pairs read the same or one
        // step apart, ratios on a lattice (1, 48/47, ...) with nothing between: one cluster.
        let mut seed = 12345u64;
        let mut normal = move || {
            let mut uniform = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (u, v) = (uniform(), uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let grid = |t: f64| (t * 1000.0 / 32.0).round() * 32.0 / 1000.0;
        let mut read = || grid(1.5 * (1.0 + 0.009 * normal()));
        let (a, b): (Vec<f64>, Vec<f64>) = (0..2000).map(|_| (read(), read())).unzip();
        let ratio = Ratio::of(&us(&a), &us(&b), ALPHA);
        assert!(ratio.resolution < 0.05 / 2.0, "{ratio:?}");
        assert_eq!(ratio.clusters, None, "{ratio:?}");
    }

    #[test]
    fn a_mode_of_one_side_is_seen_in_a_calibrated_compare_at_its_second_look() {
        // 60 pairs, A first in one of four, B first in one, both after the calibration's kernel
        // in two; B takes 120 us in one pair of five.
        let placing = |i: usize| match i % 4 {
            1 => (1, 0),
            3 => (0, 1),
            _ => (1, 1),
        };
        let (a_places, b_places): (Vec<usize>, Vec<usize>) = (0..60).map(placing).unzip();
        let a = jittered(60, 1.0);
        let b: Vec<f64> = jittered(60, 1.0)
            .iter()
            .enumerate()
            .map(|(i, v)| if i % 5 == 0 { v * 1.2 } else { v + 0.01 })
            .collect();
        let ratio = Ratio::of_in_places(&us(&a), &us(&b), [&a_places, &b_places], ALPHA);
        assert!(ratio.clusters.is_some(), "{ratio:?}");
        assert_eq!(ratio.verdict(0.01), Verdict::Ambiguous);
    }

    #[test]
    fn a_side_that_is_not_trusted_makes_the_verdict_ambiguous() {
        use crate::timing::measurement::Conditions;
        let a = us(&jittered(100, 1.0));
        let b = us(&jittered(100, 1.03));
        let ratio = Ratio::of(&a, &b, ALPHA);
        let comparison = |lost_gate: bool| {
            let mut conditions = Conditions::plain(StopReason::VerdictReached);
            conditions.gate_asked = true;
            conditions.gated = !lost_gate;
            let side = |s: &[Duration]| Measurement::synthetic(s.to_vec(), conditions).in_a_comparison();
            Comparison {
                a: side(&a),
                b: side(&b),
                ratio,
                margin: 0.01,
                confidence: CONFIDENCE,
            }
        };
        assert_eq!(comparison(false).verdict(), Verdict::Slower);
        assert_eq!(comparison(true).verdict(), Verdict::Ambiguous);
    }
}
