//! Samples taken in different places of their repetition (first, second, ... of the arms it
//! runs): a place can add a cost of its own to every interval taken there (the first place reads
//! more on some GPUs), so samples taken half in one place and half in another fall into two
//! clusters, and their median jumps between the clusters as the share in each moves by a few
//! samples. The place-balanced median weighs each place once: the mean of the places' own
//! medians, which moves only as those medians do.

use crate::timing::statistics::{median_duration, median_half_width, saturating_secs};
use std::time::Duration;

/// Each place's samples of `samples` (taken in `places`, one each), sorted, by place (empty for a
/// place without samples).
fn by_place(samples: &[Duration], places: &[usize]) -> Vec<Vec<Duration>> {
    debug_assert_eq!(samples.len(), places.len(), "a place for each sample");
    let count = places.iter().max().map_or(0, |&most| most + 1);
    let mut by_place = vec![Vec::new(); count];
    for (&sample, &place) in samples.iter().zip(places) {
        by_place[place].push(sample);
    }
    by_place.iter_mut().for_each(|samples| samples.sort_unstable());
    by_place
}

/// Each place's median (seconds; `None` for a place without samples), and their mean.
fn place_medians(samples: &[Duration], places: &[usize]) -> (Vec<Option<f64>>, f64) {
    let medians: Vec<Option<f64>> = by_place(samples, places)
        .iter()
        .map(|sorted| (!sorted.is_empty()).then(|| median_duration(sorted).as_secs_f64()))
        .collect();
    let known: Vec<f64> = medians.iter().flatten().copied().collect();
    let mean = known.iter().sum::<f64>() / known.len().max(1) as f64;
    (medians, mean)
}

/// The place-balanced median of `samples` (not empty), taken in `places`: the mean of each
/// place's median. With one place, the median.
pub(crate) fn balanced_median(samples: &[Duration], places: &[usize]) -> Duration {
    saturating_secs(place_medians(samples, places).1)
}

/// The half-width of the 95% confidence interval of [`balanced_median`]: each place's half-width
/// carried through the mean.
pub(crate) fn balanced_half_width(
    samples: &[Duration],
    places: &[usize],
    resolution: Option<Duration>,
) -> Duration {
    let by_place = by_place(samples, places);
    let taken = by_place.iter().filter(|sorted| !sorted.is_empty());
    let squares: f64 = taken
        .clone()
        .map(|sorted| median_half_width(sorted, resolution).as_secs_f64().powi(2))
        .sum();
    saturating_secs(squares.sqrt() / taken.count().max(1) as f64)
}

/// `samples` each moved by what its place adds: less its place's median, plus the
/// [`balanced_median`]. What is left of two clusters then is not the places' doing.
pub(crate) fn without_places(samples: &[Duration], places: &[usize]) -> Vec<Duration> {
    if places.iter().all(|&place| place == places[0]) {
        return samples.to_vec(); // one place: nothing to take away (and nothing to sort)
    }
    let (medians, balanced) = place_medians(samples, places);
    samples
        .iter()
        .zip(places)
        .map(|(&sample, &place)| {
            let own = medians[place].expect("a sample in this place");
            saturating_secs(sample.as_secs_f64() - own + balanced)
        })
        .collect()
}

/// The samples' relative standard deviation (standard deviation / mean) less what their places
/// add: each sample's deviation from its place's mean, pooled, over the mean of the places' means
/// (infinite without two samples in a place, 0 when every sample is 0). Linear in the samples, no
/// sort: the stop rule reads it after every batch.
pub(crate) fn relative_deviation_in_places(samples: &[Duration], places: &[usize]) -> f64 {
    let count = places.iter().max().map_or(0, |&most| most + 1);
    let mut sums = vec![(0usize, 0.0f64); count];
    for (sample, &place) in samples.iter().zip(places) {
        sums[place].0 += 1;
        sums[place].1 += sample.as_secs_f64();
    }
    let means: Vec<Option<f64>> = sums
        .iter()
        .map(|&(n, sum)| (n > 0).then(|| sum / n as f64))
        .collect();
    let taken = means.iter().flatten().count();
    let freedom = samples.len().saturating_sub(taken);
    if freedom == 0 {
        return f64::INFINITY;
    }
    let mean = means.iter().flatten().sum::<f64>() / taken as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let squares: f64 = samples
        .iter()
        .zip(places)
        .map(|(sample, &place)| (sample.as_secs_f64() - means[place].unwrap_or(0.0)).powi(2))
        .sum();
    (squares / freedom as f64).sqrt() / mean
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::statistics::clusters::two_clusters;

    fn ns(v: u64) -> Duration {
        Duration::from_nanos(v)
    }

    /// Like the H100's: the first place reads 700 ns more, and a few samples of the first place
    /// fall in the second place's mode. `first_share` of the samples are in the first place.
    fn two_places(n: usize, first_share: f64) -> (Vec<Duration>, Vec<usize>) {
        let firsts = (n as f64 * first_share) as usize;
        (0..n)
            .map(|i| {
                let jitter = (i as u64 * 7) % 40;
                match i < firsts {
                    true => (ns(4_700 + jitter), 0),
                    false => (ns(4_000 + jitter), 1),
                }
            })
            .unzip()
    }

    #[test]
    fn the_balanced_median_stays_where_the_median_jumps_between_the_places() {
        let (low, low_places) = two_places(1000, 0.44);
        let (high, high_places) = two_places(1000, 0.56);
        let median = |samples: &[Duration]| {
            let mut sorted = samples.to_vec();
            sorted.sort_unstable();
            median_duration(&sorted)
        };
        // The plain median moves by the places' whole difference ...
        assert!(median(&high) - median(&low) > ns(600));
        // ... the balanced one by no more than the jitter within a place.
        let (a, b) = (
            balanced_median(&low, &low_places),
            balanced_median(&high, &high_places),
        );
        assert!(a.abs_diff(b) < ns(40), "{a:?} {b:?}");
        assert!(a.abs_diff(ns(4_370)) < ns(40), "{a:?}");
    }

    #[test]
    fn with_one_place_it_is_the_median_and_its_half_width() {
        let samples: Vec<Duration> = (0..101).map(|i| ns(1_000 + i * 3)).collect();
        let places = vec![0; samples.len()];
        assert_eq!(balanced_median(&samples, &places), ns(1_150));
        assert_eq!(
            balanced_half_width(&samples, &places, None),
            median_half_width(&samples, None)
        );
        assert_eq!(without_places(&samples, &places), samples);
    }

    #[test]
    fn the_places_own_clusters_go_and_others_stay() {
        let (samples, places) = two_places(1000, 0.44);
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        assert!(two_clusters(&sorted).is_some(), "the places' two modes");
        let mut without = without_places(&samples, &places);
        without.sort_unstable();
        assert_eq!(two_clusters(&without), None);
        // Two modes within each place are still two clusters.
        let bimodal_within: Vec<Duration> = (0..1000)
            .map(|i| ns(if i % 3 == 0 { 9_000 } else { 4_000 } + (i as u64 * 7) % 40))
            .collect();
        let alternating: Vec<usize> = (0..1000).map(|i| i % 2).collect();
        let mut without = without_places(&bimodal_within, &alternating);
        without.sort_unstable();
        assert!(two_clusters(&without).is_some());
    }
}
