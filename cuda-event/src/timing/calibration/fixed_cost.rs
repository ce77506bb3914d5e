//! The launch's fixed cost, from the calibration's kernels of known lengths: what a timed interval
//! holds beside the work's own run on the GPU, and how sure that is.
//!
//! Each repetition's calibration interval is around one kernel of a rung of lengths ([`RUNGS`]):
//! an empty kernel, and kernels that spin on the GPU's nanosecond timer for 1 to 20 us. Above
//! zero, an interval is the fixed cost plus the kernel's run, and a kernel of length `L` runs
//! `L` plus what an empty kernel runs (the launch of its block): so each rung's median less its
//! length is the fixed cost as a net time reads it, and the rungs must agree on it. An empty
//! kernel's own interval is not on that line on every GPU (it can hold more fixed cost than a
//! kernel that runs), which is why it is reported beside the fixed cost, not taken as it.

use std::time::Duration;

/// The calibration kernel's lengths, in the order the repetitions rotate through them
/// ([`rung_of`]); zero is the empty kernel. The line's two ends come first, so that a measurement
/// of four repetitions already has a slope.
pub(crate) const RUNGS: [Duration; 7] = [
    Duration::from_micros(1),
    Duration::from_micros(20),
    Duration::ZERO,
    Duration::from_micros(2),
    Duration::from_micros(10),
    Duration::from_micros(5),
    Duration::from_micros(3),
];

/// The rung of the empty kernel.
pub(crate) const EMPTY: usize = 2;

/// The rung of repetition `repetition` (counted from the measurement's first, or from a graph's
/// first): each rung for two repetitions in a row, an even one and the next, so that it runs
/// once in each of the calibration's places (first in even repetitions, last in odd ones). Any
/// even number of repetitions so holds every rung it holds in both places equally often, as a
/// graph, which replays the same repetitions, needs.
pub(crate) fn rung_of(repetition: usize) -> usize {
    (repetition / 2) % RUNGS.len()
}

/// The mean length of the rungs that run (seconds).
pub(crate) fn mean_rung_length() -> f64 {
    let lengths: Vec<f64> = RUNGS
        .iter()
        .filter(|l| !l.is_zero())
        .map(Duration::as_secs_f64)
        .collect();
    lengths.iter().sum::<f64>() / lengths.len() as f64
}

/// One rung's samples, summarized: the kernel's length, the median interval around it and the
/// half-width of that median's 95% confidence interval, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rung {
    pub(crate) length: f64,
    pub(crate) median: f64,
    pub(crate) half_width: f64,
}

/// The fixed cost that the rungs of non-zero length give, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fit {
    /// The mean over the rungs of their median less their length.
    pub(crate) fixed_cost: f64,
    /// Its uncertainty: the rungs' half-widths carried through the mean, and the most by which a
    /// rung's own fixed cost lies outside its half-width from the mean (the rungs disagree by more
    /// than their noise: the model does not hold that well in this run).
    pub(crate) uncertainty: f64,
    /// The most by which one rung's fixed cost lies from the mean.
    pub(crate) largest_residual: f64,
    /// The least-squares slope of the medians over the lengths (1 where the GPU's timer and the
    /// timing events count the same time), and its uncertainty from the half-widths; `None` with
    /// fewer than two lengths.
    pub(crate) slope: Option<(f64, f64)>,
}

/// The fit of `rungs` (their lengths above zero, each length once); `None` without any.
pub(crate) fn fit(rungs: &[Rung]) -> Option<Fit> {
    let k = rungs.len();
    if k == 0 {
        return None;
    }
    let kf = k as f64;
    let fixed_costs: Vec<f64> = rungs.iter().map(|r| r.median - r.length).collect();
    let fixed_cost = fixed_costs.iter().sum::<f64>() / kf;
    let carried = rungs
        .iter()
        .map(|r| r.half_width * r.half_width)
        .sum::<f64>()
        .sqrt()
        / kf;
    let residuals = fixed_costs.iter().map(|c| c - fixed_cost);
    let largest_residual = residuals.clone().fold(0.0_f64, |m, r| m.max(r.abs()));
    let beyond_noise = residuals
        .zip(rungs)
        .fold(0.0_f64, |m, (r, rung)| m.max(r.abs() - rung.half_width));
    let slope = (k >= 2).then(|| {
        let mean_length = rungs.iter().map(|r| r.length).sum::<f64>() / kf;
        let mean_median = rungs.iter().map(|r| r.median).sum::<f64>() / kf;
        let sxx = rungs
            .iter()
            .map(|r| (r.length - mean_length).powi(2))
            .sum::<f64>();
        let sxy = rungs
            .iter()
            .map(|r| (r.length - mean_length) * (r.median - mean_median))
            .sum::<f64>();
        let spread = rungs
            .iter()
            .map(|r| ((r.length - mean_length) / sxx * r.half_width).powi(2))
            .sum::<f64>()
            .sqrt();
        (sxy / sxx, spread)
    });
    Some(Fit {
        fixed_cost,
        uncertainty: carried + beyond_noise.max(0.0),
        largest_residual,
        slope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rung(length_us: f64, median_us: f64, half_width_us: f64) -> Rung {
        Rung {
            length: length_us * 1e-6,
            median: median_us * 1e-6,
            half_width: half_width_us * 1e-6,
        }
    }

    fn close(a: f64, b_us: f64) -> bool {
        (a * 1e6 - b_us).abs() < 1e-9
    }

    #[test]
    fn the_rotation_starts_with_the_lines_two_ends_and_visits_every_rung() {
        assert_eq!(
            (RUNGS[rung_of(0)], RUNGS[rung_of(2)]),
            (Duration::from_micros(1), Duration::from_micros(20))
        );
        assert_eq!(RUNGS.iter().position(Duration::is_zero), Some(EMPTY));
        let mut seen: Vec<usize> = (0..RUNGS.len()).map(|k| rung_of(2 * k)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..RUNGS.len()).collect::<Vec<_>>());
        assert!(
            (0..4 * RUNGS.len()).all(|i| rung_of(i) == rung_of(i ^ 1)),
            "pairs"
        );
        assert_eq!(rung_of(2 * RUNGS.len()), 0);
    }

    #[test]
    fn rungs_on_a_line_of_slope_one_give_its_intercept_with_their_noise_carried() {
        // A fixed cost of 2.85 us, each rung's median known within 0.02 us.
        let rungs: Vec<Rung> = [1.0, 2.0, 5.0, 10.0, 20.0]
            .iter()
            .map(|&l| rung(l, l + 2.85, 0.02))
            .collect();
        let fit = fit(&rungs).unwrap();
        assert!(close(fit.fixed_cost, 2.85), "{fit:?}");
        // sqrt(5 * 0.02^2) / 5
        assert!(close(fit.uncertainty, 0.02 / 5f64.sqrt()), "{fit:?}");
        assert!(close(fit.largest_residual, 0.0), "{fit:?}");
        let (slope, spread) = fit.slope.unwrap();
        assert!((slope - 1.0).abs() < 1e-9 && spread > 0.0, "{fit:?}");
    }

    #[test]
    fn rungs_that_disagree_beyond_their_noise_widen_the_uncertainty_by_that_much() {
        // The 2 us rung reads 0.7 us more fixed cost, 0.68 us beyond its own half-width.
        let mut rungs: Vec<Rung> = [1.0, 5.0, 10.0, 20.0]
            .iter()
            .map(|&l| rung(l, l + 2.85, 0.02))
            .collect();
        rungs.push(rung(2.0, 2.0 + 3.55, 0.02));
        let fit = fit(&rungs).unwrap();
        assert!(close(fit.fixed_cost, 2.85 + 0.7 / 5.0), "{fit:?}");
        let residual = 0.7 - 0.7 / 5.0;
        assert!(close(fit.largest_residual, residual), "{fit:?}");
        assert!(
            close(fit.uncertainty, 0.02 / 5f64.sqrt() + residual - 0.02),
            "{fit:?}"
        );
    }

    #[test]
    fn a_slope_off_one_shows_and_one_rung_has_no_slope() {
        // Intervals that grow 2% faster than the kernels' lengths.
        let rungs: Vec<Rung> = [1.0, 20.0]
            .iter()
            .map(|&l| rung(l, 1.02 * l + 3.0, 0.01))
            .collect();
        let (slope, spread) = fit(&rungs).unwrap().slope.unwrap();
        assert!((slope - 1.02).abs() < 1e-9 && spread < 0.002, "{slope} {spread}");
        let one = fit(&[rung(1.0, 4.0, 0.05)]).unwrap();
        assert!(close(one.fixed_cost, 3.0) && close(one.uncertainty, 0.05) && one.slope.is_none());
        assert_eq!(fit(&[]), None);
    }
}
