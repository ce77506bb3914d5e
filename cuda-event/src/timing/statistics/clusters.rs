//! The tests on a measurement's samples that find two clusters ([`Clusters`]) or a drift between
//! the first and the second half of a run ([`Drift`]).

use crate::timing::statistics::{median_duration, median_half_width, median_of_sorted, smallest_step};
use std::fmt;
use std::time::Duration;

/// Two clusters of samples (among at least 20): each at least a tenth of them (and ten samples),
/// their medians apart by at least 1% of the whole median and three steps of the timer, by more
/// than three times their spreads (median absolute deviations) together, and few samples between
/// them (in the middle third of the gap between the medians, under a tenth of the smaller
/// cluster).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Clusters {
    /// The lower cluster's median.
    pub low: Duration,
    /// The higher cluster's median.
    pub high: Duration,
    /// The share of the samples in the higher cluster.
    pub high_share: f64,
}

impl fmt::Display for Clusters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} and {:?}, {:.0}% in the higher",
            self.low,
            self.high,
            100.0 * self.high_share
        )
    }
}

/// The calibration's median in the first and the second half of its samples, in the order they
/// were taken.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Drift {
    /// The first half's median.
    pub first_half: Duration,
    /// The second half's median.
    pub second_half: Duration,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "median {:?} in the first half, {:?} in the second",
            self.first_half, self.second_half
        )
    }
}

/// Fewest samples in which clusters or a drift are looked for.
const FEWEST_TO_TEST: usize = 20;

/// The two clusters of `sorted` (ascending), if it has them (see [`Clusters`]). The split is the
/// one that leaves the least variance within the two sides (Otsu's), then checked.
pub(crate) fn two_clusters(sorted: &[Duration]) -> Option<Clusters> {
    let n = sorted.len();
    if n < FEWEST_TO_TEST {
        return None;
    }
    let ns: Vec<f64> = sorted.iter().map(|d| d.as_nanos() as f64).collect();
    // At least ten samples a side: a side of three has the gap to its nearest neighbour for a
    // spread, and a tail's few samples pass for a mode.
    let least = n.div_ceil(10).max(10);
    let split = best_split(&ns, least)?;
    let (low_median, high_median) = (median_of(&ns[..split]), median_of(&ns[split..]));
    // The split may pull samples of one mode into the other side (it must leave `least` on
    // each): the clusters are the samples nearer to each median, each at least a tenth.
    let middle = (low_median + high_median) / 2.0;
    let at = ns.partition_point(|&x| x < middle);
    let (low, high) = ns.split_at(at);
    if low.len() * 10 < n || high.len() * 10 < n {
        return None;
    }
    let (low_median, high_median) = (median_of(low), median_of(high));
    let apart = high_median - low_median;
    let step = smallest_step(&ns);
    let step = if step.is_finite() { step } else { 0.0 };
    let spreads = deviation(low, low_median) + deviation(high, high_median);
    let between = ns
        .iter()
        .filter(|&&x| x > low_median + apart / 3.0 && x < high_median - apart / 3.0)
        .count();
    let separate = apart >= 0.01 * median_of(&ns)
        && apart >= 3.0 * step
        && apart > 3.0 * spreads
        && between * 10 < low.len().min(high.len());
    separate.then(|| Clusters {
        low: Duration::from_nanos(low_median.round() as u64),
        high: Duration::from_nanos(high_median.round() as u64),
        high_share: high.len() as f64 / n as f64,
    })
}

/// The split of `sorted` (at least `2 * least` values) into a lower and a higher side of at least
/// `least` values each that leaves the least sum of squares within the sides; `None` when it has
/// too few values.
fn best_split(sorted: &[f64], least: usize) -> Option<usize> {
    let n = sorted.len();
    if n < 2 * least.max(1) {
        return None;
    }
    let mean = sorted.iter().sum::<f64>() / n as f64;
    // Centred prefix sums keep the squares small.
    let mut prefix = vec![(0.0, 0.0); n + 1];
    for (i, &x) in sorted.iter().enumerate() {
        let c = x - mean;
        prefix[i + 1] = (prefix[i].0 + c, prefix[i].1 + c * c);
    }
    let within = |from: usize, to: usize| {
        let (s, q) = (prefix[to].0 - prefix[from].0, prefix[to].1 - prefix[from].1);
        q - s * s / (to - from) as f64
    };
    (least.max(1)..=n - least.max(1))
        .map(|k| (k, within(0, k) + within(k, n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// The median of `sorted` (ascending, not empty).
fn median_of(sorted: &[f64]) -> f64 {
    median_of_sorted(sorted).unwrap_or(0.0)
}

/// The median absolute deviation of `values` from `center`.
fn deviation(values: &[f64], center: f64) -> f64 {
    let mut d: Vec<f64> = values.iter().map(|x| (x - center).abs()).collect();
    d.sort_unstable_by(f64::total_cmp);
    median_of(&d)
}

/// The drift of `in_order` (samples in the order they were taken), if the medians of its two
/// halves differ by more than the halves' 95% confidence half-widths together (each at least half
/// the timer's step `step`).
pub(crate) fn drift(in_order: &[Duration], step: Option<Duration>) -> Option<Drift> {
    let n = in_order.len();
    if n < FEWEST_TO_TEST {
        return None;
    }
    let half = |part: &[Duration]| {
        let mut sorted = part.to_vec();
        sorted.sort_unstable();
        (median_duration(&sorted), median_half_width(&sorted, step))
    };
    let (first, first_width) = half(&in_order[..n / 2]);
    let (second, second_width) = half(&in_order[n / 2..]);
    (first.abs_diff(second) > first_width + second_width).then_some(Drift {
        first_half: first,
        second_half: second,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        let mut v: Vec<Duration> = values.into_iter().map(Duration::from_nanos).collect();
        v.sort();
        v
    }

    /// A deterministic spread of `n` values around `center`, `width` wide, on a `step` grid.
    fn around(center: u64, width: u64, step: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|i| {
                let x = ((i as u64 * 7919) % 1000) * width / 1000;
                (center - width / 2 + x) / step * step
            })
            .collect()
    }

    #[test]
    fn two_modes_like_the_h100_empty_kernels_are_two_clusters() {
        // 3.68 us and 4.42 us, each +-50 ns on a 32 ns grid, 30% in the higher.
        let mut v = around(3680, 100, 32, 700);
        v.extend(around(4416, 100, 32, 300));
        let c = two_clusters(&ns(v)).expect("two clusters");
        assert!(c.low.as_nanos().abs_diff(3680) < 40, "{c}");
        assert!(c.high.as_nanos().abs_diff(4416) < 40, "{c}");
        assert!((c.high_share - 0.3).abs() < 1e-9, "{c}");
    }

    #[test]
    fn one_mode_with_a_tail_or_a_few_timer_steps_is_not_two_clusters() {
        // Three adjacent values of a 32 ns timer.
        let steps = ns((0..300).map(|i| 3200 + 32 * (i % 3)));
        assert_eq!(two_clusters(&steps), None);
        // Uniform over 10% of the median.
        assert_eq!(two_clusters(&ns(around(10_000, 1000, 32, 500))), None);
        // A long tail: most near 10 us, a tenth spread up to 20 us.
        let mut tail = around(10_000, 100, 32, 900);
        tail.extend((0..100).map(|i| 10_100 + i * 100));
        assert_eq!(two_clusters(&ns(tail)), None);
        // Too few samples to tell.
        let mut few = vec![3680; 10];
        few.extend([4416; 9]);
        assert_eq!(two_clusters(&ns(few)), None);
    }

    #[test]
    fn a_group_under_a_tenth_or_a_short_tail_is_not_two_clusters() {
        // 940 around 10 us and 60 at 20 us: 6%, under a tenth.
        let mut v = around(10_000, 64, 32, 940);
        v.extend([20_000; 60]);
        assert_eq!(two_clusters(&ns(v)), None);
        // 28 around 20 us and two a little above; 27 and three scattered above.
        let mut w = around(20_000, 64, 32, 28);
        w.extend([20_864, 20_864]);
        assert_eq!(two_clusters(&ns(w)), None);
        let mut x = around(20_000, 64, 32, 27);
        x.extend([20_800, 20_896, 22_016]);
        assert_eq!(two_clusters(&ns(x)), None);
    }

    #[test]
    fn a_small_cluster_is_an_outlier_not_a_mode() {
        let mut v = around(10_000, 100, 32, 950);
        v.extend([20_000; 50]);
        assert_eq!(two_clusters(&ns(v)), None);
    }

    #[test]
    fn a_step_in_the_middle_of_the_run_is_a_drift() {
        let mut v: Vec<Duration> = around(3680, 64, 32, 200)
            .into_iter()
            .map(Duration::from_nanos)
            .collect();
        let steady = v.clone();
        assert_eq!(drift(&steady, Some(Duration::from_nanos(32))), None);
        v.extend(around(3900, 64, 32, 200).into_iter().map(Duration::from_nanos));
        let d = drift(&v, Some(Duration::from_nanos(32))).expect("a drift");
        assert!(d.second_half > d.first_half, "{d}");
        // One timer step of difference is within the resolution.
        let mut one_step = vec![Duration::from_nanos(3200); 100];
        one_step.extend(vec![Duration::from_nanos(3232); 100]);
        assert_eq!(drift(&one_step, Some(Duration::from_nanos(32))), None);
    }
}
