//! A/B comparison: two pieces of GPU work timed in alternation on one stream, and a conservative
//! verdict on their ratio.

use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::timing::measure::{MeasureOptions, Measurement, StopReason, sample};
use std::fmt;
use std::time::Duration;

/// How [`compare`] repeats, when it stops and what difference counts.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CompareOptions {
    /// Warm-up, the L2 flush (before each of A and B), the gate, the batch size, the minimum
    /// samples (pairs) and time, and the timeout, as [`measure`](crate::measure) uses them;
    /// `max_noise` is not used: `compare` stops once its verdict is decided.
    pub measure: MeasureOptions,
    /// The smallest relative difference that counts (0.01: 1%). B is "slower" or "faster" only if
    /// the confidence interval of the ratio B/A excludes 1 and the ratio differs from 1 by at
    /// least this much; "same" only if the whole interval lies within 1 ± this.
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
    /// The whole confidence interval of B/A lies within 1 ± the margin.
    Same,
    /// B takes less time: the interval lies below 1 and the ratio is at most 1 - the margin.
    Faster,
    /// B takes more time: the interval lies above 1 and the ratio is at least 1 + the margin.
    Slower,
    /// None of the above before the timeout (a difference about the size of the margin, or too
    /// much noise), or no pair could be compared (samples below the timing events' resolution).
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

/// The outcome of [`compare`]: each side's samples and B's time as a ratio of A's, with its
/// confidence interval and the verdict.
#[derive(Clone, Debug)]
pub struct Comparison {
    a: Measurement,
    b: Measurement,
    ratio: Ratio,
    margin: f64,
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
    /// The ratio's confidence interval, at [`CONFIDENCE`]: distribution-free (the order
    /// statistics of the pairs' ratios that bound their median, by the sign test), so a few
    /// outlying pairs do not move it. NaN when no pair could be compared.
    pub fn interval(&self) -> (f64, f64) {
        (self.ratio.low, self.ratio.high)
    }
    /// Pairs whose ratio counted (both samples above 0).
    pub fn pairs(&self) -> usize {
        self.ratio.pairs
    }
    /// The verdict on B against A.
    pub fn verdict(&self) -> Verdict {
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
            CONFIDENCE * 100.0,
            self.pairs(),
            self.verdict()
        )
    }
}

/// The confidence of [`Comparison::interval`]: high, because `compare` looks at its verdict after
/// every batch and stops at the first decided one.
pub const CONFIDENCE: f64 = 0.999;

/// Times `a` and `b`, the same way [`measure`](crate::measure) times one piece of work, in pairs
/// on one stream: each repetition runs both (A then B, then B then A in the next, so that neither
/// always runs first), each timed alone, each after its own L2 flush when that is on, all behind
/// the gate. Drift of the GPU's clocks or of other load over the run affects both sides of a pair
/// alike. It stops once the verdict is decided (after the minimum pairs and time) or at the
/// timeout.
///
/// ```no_run
/// # fn main() -> cuda_event::Result<()> {
/// use cuda_event::{CompareOptions, Stream, check_runtime, compare, sys};
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
/// As [`measure`](crate::measure)'s; [`Error::InvalidMeasureOptions`] for a margin that is not a
/// finite number at least 0.
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
        return Err(Error::InvalidMeasureOptions { reason }.into());
    }
    let measure = &options.measure;
    let enough =
        |pairs: usize, wall_time: Duration| pairs >= measure.min_samples && wall_time >= measure.min_time;
    let sampled = sample(
        stream,
        measure,
        2,
        &mut |stream, arm| if arm == 0 { a(stream) } else { b(stream) },
        &mut |arms, wall_time| {
            let pairs = arms[0].len();
            if enough(pairs, wall_time) && Ratio::of(&arms[0], &arms[1]).verdict(margin) != Verdict::Ambiguous
            {
                Some(StopReason::VerdictReached)
            } else if wall_time >= measure.timeout && pairs >= 2 {
                Some(StopReason::Timeout)
            } else {
                None
            }
        },
    )?;
    let ratio = Ratio::of(&sampled.arms[0], &sampled.arms[1]);
    let mut sides = sampled.into_measurements();
    let (b, a) = (sides.pop().expect("two arms"), sides.pop().expect("two arms"));
    Ok(Comparison { a, b, ratio, margin })
}

/// B/A over pairs: the median of the pairs' ratios and its confidence interval.
#[derive(Clone, Copy, Debug)]
struct Ratio {
    median: f64,
    low: f64,
    high: f64,
    pairs: usize,
}

impl Ratio {
    fn of(a: &[Duration], b: &[Duration]) -> Ratio {
        let mut ratios: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(a, b)| !a.is_zero() && !b.is_zero())
            .map(|(a, b)| b.as_secs_f64() / a.as_secs_f64())
            .collect();
        ratios.sort_unstable_by(f64::total_cmp);
        let n = ratios.len();
        let median = match n {
            0 => f64::NAN,
            n if n % 2 == 1 => ratios[n / 2],
            n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
        };
        let (low, high) = match median_bounds(n, 1.0 - CONFIDENCE) {
            Some(k) => (ratios[k], ratios[n - 1 - k]),
            None => (f64::NAN, f64::NAN),
        };
        Ratio {
            median,
            low,
            high,
            pairs: n,
        }
    }

    /// The verdict for `margin` (NaN bounds compare false everywhere: ambiguous).
    fn verdict(&self, margin: f64) -> Verdict {
        let (low, high, ratio) = (self.low, self.high, self.median);
        if low >= 1.0 - margin && high <= 1.0 + margin {
            Verdict::Same
        } else if low > 1.0 && ratio >= 1.0 + margin {
            Verdict::Slower
        } else if high < 1.0 && ratio <= 1.0 - margin {
            Verdict::Faster
        } else {
            Verdict::Ambiguous
        }
    }
}

/// The (0-based) rank `k` such that the `k`-th smallest and the `k`-th largest of `n` samples
/// bound their population's median with probability at least `1 - alpha` (the sign test: the
/// number of samples below the median is Binomial(n, 1/2)); `None` when `n` is too small for any.
fn median_bounds(n: usize, alpha: f64) -> Option<usize> {
    if n == 0 {
        return None;
    }
    // P(X <= k) for X ~ Binomial(n, 1/2), summed in logs (0.5^n underflows past n = 1074).
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_pmf = ln_half_n; // ln P(X = 0)
    let mut cdf = ln_pmf.exp();
    // Largest k with P(X <= k - 1) <= alpha / 2, i.e. P(X < k) <= alpha / 2.
    if cdf > alpha / 2.0 {
        return None;
    }
    let mut k = 0;
    while k + 1 < n.div_ceil(2) {
        // ln P(X = k + 1) = ln P(X = k) + ln((n - k) / (k + 1))
        ln_pmf += ((n - k) as f64 / (k + 1) as f64).ln();
        let next = cdf + ln_pmf.exp();
        if next > alpha / 2.0 {
            break;
        }
        cdf = next;
        k += 1;
    }
    // P(X <= k) <= alpha / 2: the (k+1)-th smallest (0-based rank k + 1 - 1 = k) is a lower bound.
    Some(k)
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

    #[test]
    fn the_median_bounds_match_the_sign_tests_tables() {
        // Too few samples for 99.9%: 2 * 0.5^n must be at most 0.001 (n >= 11).
        assert_eq!(median_bounds(10, 0.001), None);
        assert_eq!(median_bounds(11, 0.001), Some(0));
        // n = 100 at 95%: the 40th and 61st of the sorted samples (ranks 39 and 60 from 0).
        assert_eq!(median_bounds(100, 0.05), Some(39));
        // Large n: close to the normal approximation n/2 - z * sqrt(n) / 2.
        let k = median_bounds(10_000, 0.001).unwrap() as f64;
        assert!((k - (5_000.0 - 3.29 * 50.0)).abs() < 3.0, "{k}");
    }

    #[test]
    fn identical_work_is_the_same_and_a_clear_difference_is_slower_or_faster() {
        let a: Vec<f64> = (0..100).map(|i| 100.0 + (i % 7) as f64 * 0.05).collect();
        let same: Vec<f64> = (0..100).map(|i| 100.0 + ((i + 3) % 7) as f64 * 0.05).collect();
        let longer: Vec<f64> = a.iter().map(|v| v * 1.03).collect();
        let shorter: Vec<f64> = a.iter().map(|v| v * 0.97).collect();
        let slightly: Vec<f64> = a.iter().map(|v| v * 1.005).collect();
        let verdict = |b: &[f64]| Ratio::of(&us(&a), &us(b)).verdict(0.01);
        assert_eq!(verdict(&same), Verdict::Same);
        assert_eq!(verdict(&longer), Verdict::Slower);
        assert_eq!(verdict(&shorter), Verdict::Faster);
        assert_eq!(verdict(&slightly), Verdict::Same);
    }

    #[test]
    fn a_difference_at_the_margin_or_few_pairs_or_zero_samples_are_ambiguous() {
        let a: Vec<f64> = (0..100).map(|i| 100.0 + (i % 11) as f64).collect();
        // Ratios spread from 0.9 to 1.1 around 1.01: the interval straddles both 1 and 1.01.
        let b: Vec<f64> = a
            .iter()
            .enumerate()
            .map(|(i, v)| v * (0.91 + 0.2 * (i * 37 % 100) as f64 / 100.0))
            .collect();
        assert_eq!(Ratio::of(&us(&a), &us(&b)).verdict(0.01), Verdict::Ambiguous);
        assert_eq!(
            Ratio::of(&us(&a[..5]), &us(&a[..5])).verdict(0.01),
            Verdict::Ambiguous
        );
        let zeros = vec![Duration::ZERO; 50];
        let ratio = Ratio::of(&zeros, &zeros);
        assert_eq!((ratio.pairs, ratio.verdict(0.01)), (0, Verdict::Ambiguous));
        assert!(ratio.median.is_nan());
    }

    #[test]
    fn a_few_outlying_pairs_do_not_move_the_verdict() {
        let a = vec![100.0; 200];
        let mut b: Vec<f64> = vec![103.0; 200];
        for i in (0..200).step_by(20) {
            b[i] = 50.0; // ten pairs where B was interrupted short
        }
        assert_eq!(Ratio::of(&us(&a), &us(&b)).verdict(0.01), Verdict::Slower);
    }
}
