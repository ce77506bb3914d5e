//! Statistics of timing samples that measure, compare and the calibration share: medians, the
//! sign test's bounds of a median, the timer's step as the samples show it, the relative deviation;
//! the tests for two clusters and a drift (`clusters`); and the median that weighs each place of
//! a repetition once (`places`).

pub(crate) mod clusters;
pub(crate) mod places;

use std::time::Duration;

/// `secs` seconds as a `Duration`, saturating: `Duration::MAX` above what one holds (a sample of an
/// infinite or huge reading, see `Timer`'s elapsed time), zero below zero or for NaN. Arithmetic
/// in seconds on such samples must never panic.
pub(crate) fn saturating_secs(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX)
}

/// The median of `values` (none when there are none).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    median_of_sorted(&sorted)
}

/// The median of `sorted` (in ascending order; none when empty).
pub(crate) fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The (0-based) rank `k` such that the `k`-th smallest and the `k`-th largest of `n` samples
/// bound their population's median with probability at least `1 - alpha` (the sign test: the
/// number of samples below the median is Binomial(n, 1/2)); `None` when `n` is too small for any.
pub(crate) fn median_bounds(n: usize, alpha: f64) -> Option<usize> {
    if n == 0 {
        return None;
    }
    // P(X <= k) for X ~ Binomial(n, 1/2), summed in logs (0.5^n underflows past n = 1074).
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_pmf = ln_half_n; // ln P(X = 0)
    let mut cdf = ln_pmf.exp();
    // The largest k with P(X <= k) <= alpha / 2.
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

/// The median of `sorted` durations (ascending, not empty), the mean of the middle two for an even
/// count (to the nanosecond).
pub(crate) fn median_duration(sorted: &[Duration]) -> Duration {
    percentile_of_sorted(sorted, 50.0)
}

/// The `p`-th percentile (0 to 100, NaN read as 50) of `sorted` durations (ascending, not empty),
/// interpolated linearly between the two nearest samples (numpy's and torch's default), to the
/// nanosecond.
pub(crate) fn percentile_of_sorted(sorted: &[Duration], p: f64) -> Duration {
    let p = if p.is_nan() { 50.0 } else { p.clamp(0.0, 100.0) };
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let low = rank.floor() as usize;
    let (a, b) = (sorted[low], sorted[rank.ceil() as usize]);
    // At most b - a: a whole number of nanoseconds times a fraction below 1, rounded.
    let between = ((b - a).as_nanos() as f64 * (rank - low as f64)).round();
    a + Duration::from_nanos(between as u64)
}

/// The smallest step between two different values of `sorted` (ascending): the timing events'
/// resolution as the samples show it; infinite when all are equal.
pub(crate) fn smallest_step(sorted: &[f64]) -> f64 {
    sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0.0)
        .fold(f64::INFINITY, f64::min)
}

/// Half the width of the distribution-free 95% confidence interval of the median of `sorted` (not
/// empty; the sign test's bounds, as `compare`'s), and at least half of `resolution` (the timing
/// events' step: tied samples do not make a median exact); half the whole range when there are
/// too few samples for the interval.
pub(crate) fn median_half_width(sorted: &[Duration], resolution: Option<Duration>) -> Duration {
    let n = sorted.len();
    let interval = match median_bounds(n, 0.05) {
        Some(k) => sorted[n - 1 - k] - sorted[k],
        None => sorted[n - 1] - sorted[0],
    };
    interval.max(resolution.unwrap_or(Duration::ZERO)) / 2
}

/// The samples' relative standard deviation (standard deviation / mean), all in one place.
#[cfg(test)]
pub(crate) fn relative_deviation(samples: &[Duration]) -> f64 {
    places::relative_deviation_in_places(samples, &vec![0; samples.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(samples: &[f64]) -> Vec<Duration> {
        samples.iter().map(|&s| Duration::from_secs_f64(s)).collect()
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
    fn the_smallest_step_is_between_different_values() {
        assert_eq!(smallest_step(&[1.0, 1.0, 1.5, 3.0]), 0.5);
        assert!(smallest_step(&[2.0, 2.0]).is_infinite());
        assert!(smallest_step(&[]).is_infinite());
    }

    #[test]
    fn percentiles_interpolate_to_the_nanosecond_and_never_panic() {
        let ns = |v: &[u64]| v.iter().map(|&n| Duration::from_nanos(n)).collect::<Vec<_>>();
        let sorted = ns(&[3200, 3232, 3264, 13_568]);
        // numpy: rank p/100 * (n - 1), linear between its neighbours.
        assert_eq!(percentile_of_sorted(&sorted, 0.0), Duration::from_nanos(3200));
        assert_eq!(percentile_of_sorted(&sorted, 50.0), Duration::from_nanos(3248));
        assert_eq!(percentile_of_sorted(&sorted, 90.0), Duration::from_nanos(10_477)); // 3264 + 0.7 * 10304
        assert_eq!(percentile_of_sorted(&sorted, 100.0), Duration::from_nanos(13_568));
        // Out of range reads as the ends, NaN as the median; one sample is every percentile.
        assert_eq!(percentile_of_sorted(&sorted, -5.0), sorted[0]);
        assert_eq!(percentile_of_sorted(&sorted, f64::INFINITY), sorted[3]);
        assert_eq!(percentile_of_sorted(&sorted, f64::NAN), median_duration(&sorted));
        assert_eq!(percentile_of_sorted(&sorted[..1], 37.0), sorted[0]);
        // An odd count's median is its middle sample, exactly, however long the samples.
        let long = ns(&[u64::MAX / 4, u64::MAX / 4 + 1, u64::MAX / 2]);
        assert_eq!(median_duration(&long), long[1]);
    }

    #[test]
    fn median_of_clocks() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn relative_deviation_of_known_samples() {
        let samples = secs(&[1.0, 2.0, 3.0]);
        assert!((relative_deviation(&samples) - 0.5).abs() < 1e-12);
        assert!(relative_deviation(&samples[..1]).is_infinite());
    }
}
