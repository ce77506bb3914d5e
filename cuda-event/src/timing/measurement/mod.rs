//! [`Measurement`]: the samples that [`measure`](crate::timing::measure) took and their statistics, and
//! why it stopped ([`StopReason`]); the verdict on them (`trust`), and what the flush check found
//! (`flush_check`), which the verdict reads.

pub(crate) mod flush_check;
pub(crate) mod trust;

use crate::timing::calibration::fixed_cost::mean_rung_length;
use crate::timing::calibration::{Calibrated, Calibration, NoNet, net, step_of_sorted};
use crate::timing::cupti::times::CuptiTimes;
use crate::timing::measurement::flush_check::{FlushCheck, FlushVerdict};
use crate::timing::measurement::trust::{Doubt, Trust};
use crate::timing::statistics::clusters::two_clusters;
use crate::timing::statistics::places::{
    balanced_half_width, balanced_median, relative_deviation_in_places, without_places,
};
use crate::timing::statistics::{median, percentile_of_sorted, saturating_secs};
use std::time::Duration;

/// How far (a share of CUPTI's net time, beyond the calibration's uncertainty) the net time may be
/// from CUPTI's before the measurement is in doubt ([`Doubt::DisagreesWithCupti`]).
const CUPTI_AGREEMENT: f64 = 0.02;

/// How far from 1 the calibration's slope may be (beyond twice its uncertainty) before the
/// measurement is in doubt ([`Doubt::CalibrationNotLinear`]).
const SLOPE_TOLERANCE: f64 = 0.01;

/// Why [`measure`](crate::timing::measure) stopped. New reasons may be added, so a `match` needs a
/// wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The noise fell to [`MeasureOptions::max_noise`](crate::timing::MeasureOptions::max_noise) (after
    /// the minimum samples and time).
    NoiseBelowMax,
    /// The noise stayed above the maximum but stopped changing (within 1% over the last four
    /// batches, after the minimum samples and time): more samples would not lower it.
    NoiseSettled,
    /// [`MeasureOptions::timeout`](crate::timing::MeasureOptions::timeout) passed.
    Timeout,
    /// [`compare`](crate::timing::compare)'s ratio was decided (after the minimum samples and time); its
    /// [`verdict`](crate::timing::Comparison::verdict) is still `Ambiguous` where a side is not trusted.
    VerdictReached,
}

/// The samples [`measure`](crate::timing::measure) took, one per repetition, and their statistics.
#[derive(Clone, Debug)]
#[must_use = "a measurement is read with `median`, `net` or `trust`"]
pub struct Measurement {
    samples: Vec<Duration>,
    sorted: Vec<Duration>,
    mean: Duration,
    noise: f64,
    sm_clocks_mhz: Vec<Option<f64>>,
    /// Each sample's place in its repetition (0: first; all 0 where the work ran alone).
    places: Vec<usize>,
    conditions: Conditions,
    calibrated: Calibrated,
    cupti: Option<CuptiTimes>,
}

/// How the samples of a [`Measurement`] were taken and why the measurement stopped: the same for
/// every arm of a [`compare`](crate::timing::compare). Each field is read (and documented) by the
/// `Measurement` method of its name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conditions {
    pub(crate) stop: StopReason,
    pub(crate) l2_flushed: bool,
    pub(crate) gated: bool,
    pub(crate) gate_timeouts: usize,
    pub(crate) graph: bool,
    pub(crate) wall_time: Duration,
    pub(crate) max_sm_clock_mhz: Option<f64>,
    pub(crate) throttled: usize,
    pub(crate) flush_check: Option<FlushCheck>,
    pub(crate) max_calibration_share: f64,
    /// [`MeasureOptions::max_noise`](crate::timing::MeasureOptions::max_noise) as the share of the median
    /// its confidence interval may span; `None` for a side of a comparison.
    pub(crate) max_spread: Option<f64>,
    /// Whether the gate was asked for (gated mode, not graph mode).
    pub(crate) gate_asked: bool,
    /// Whether this is a side of a comparison: its verdict weighs only the conditions of the
    /// pairs (see [`Measurement::trust`]).
    pub(crate) comparison_side: bool,
}

impl Measurement {
    /// Each repetition's GPU time, in the order they ran.
    pub fn samples(&self) -> &[Duration] {
        &self.samples
    }
    /// The median sample.
    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }
    /// The mean sample.
    pub fn mean(&self) -> Duration {
        self.mean
    }
    /// The fastest sample.
    pub fn min(&self) -> Duration {
        self.sorted[0]
    }
    /// The slowest sample.
    pub fn max(&self) -> Duration {
        self.sorted[self.sorted.len() - 1]
    }
    /// The `p`-th percentile (0 to 100; below and above read as 0 and 100, NaN as 50),
    /// interpolated linearly between samples (numpy's and torch's default), to the nanosecond.
    pub fn percentile(&self, p: f64) -> Duration {
        percentile_of_sorted(&self.sorted, p)
    }
    /// The samples' relative standard deviation (standard deviation / mean); 0 when every sample
    /// is 0 (work shorter than the timing events' resolution, such as an empty closure). Where the
    /// repetitions time the work in more than one place (calibrated, or a side of `compare`), of
    /// the samples less what their place adds (see [`net`](Self::net)), as the place-balanced
    /// median leaves it out.
    pub fn noise(&self) -> f64 {
        self.noise
    }
    /// Why the measurement stopped.
    pub fn stop_reason(&self) -> StopReason {
        self.conditions.stop
    }
    /// Whether L2 was flushed before each repetition.
    pub fn l2_flushed(&self) -> bool {
        self.conditions.l2_flushed
    }
    /// Whether the samples were taken behind the host-held gate, so that no interval contains time
    /// the GPU waited for the host.
    ///
    /// `false` when [`MeasureOptions::gate`](crate::timing::MeasureOptions::gate) is off, in graph mode
    /// (no hold is needed: see [`graph`](Self::graph)), when the thread of the gate's watchdog
    /// could not be started (the process's thread limit, say), and when not even one repetition
    /// could be queued behind the gate: the host was still queueing the first repetition of a
    /// batch (or the only one) when the gate's watchdog had to open the gate, after about a second.
    /// That happens when a repetition has more stream operations (kernels, copies, memsets) than
    /// CUDA queues on a held stream, as a model's forward pass can; when it waits on the host for
    /// its own GPU work (a synchronize, a blocking copy: the hold never lets that complete); or when
    /// submitting it takes the host that long. `measure` cannot tell these apart. It then drops
    /// the samples taken so far and times every repetition without the gate, as
    /// `triton.testing.do_bench` does: each interval includes the gaps in which the GPU waited for
    /// the host to submit the repetition's work (and to set the thread's capture mode back to the
    /// caller's for the work and to relaxed after it: see [`measure`](crate::timing::measure)).
    /// [`gate_timeouts`](Self::gate_timeouts) is then at least 1 (in that last case only).
    pub fn gated(&self) -> bool {
        self.conditions.gated
    }
    /// Batches dropped because the host blocked while queueing them (the gate was opened by its
    /// watchdog, so their intervals could contain host time); each cuts the batch by 16, and one
    /// that blocked in its first repetition ends the gating (see [`gated`](Self::gated)).
    pub fn gate_timeouts(&self) -> usize {
        self.conditions.gate_timeouts
    }
    /// Whether the samples came from replays of a captured CUDA graph
    /// ([`MeasureOptions::graph`](crate::timing::MeasureOptions::graph)).
    pub fn graph(&self) -> bool {
        self.conditions.graph
    }
    /// Wall time spent in timed repetitions (cool-down pauses included).
    pub fn wall_time(&self) -> Duration {
        self.conditions.wall_time
    }
    /// The median SM clock of the samples, in MHz
    /// ([`MeasureOptions::sm_clock`](crate::timing::MeasureOptions::sm_clock)); `None` when no clock was
    /// read: the option is off, or the clock's kernel could not be loaded (PTX
    /// compilation disabled with `CUDA_DISABLE_PTX_JIT`, a device the driver's PTX cannot target),
    /// or no block of it ran on SM 0 (all of SM 0 taken by other streams' work).
    pub fn sm_clock_mhz(&self) -> Option<f64> {
        let known: Vec<f64> = self.sm_clocks_mhz.iter().flatten().copied().collect();
        median(&known)
    }
    /// Each sample's SM clock in MHz, in the order of [`samples`](Self::samples); `None` where it
    /// was not read (see [`sm_clock_mhz`](Self::sm_clock_mhz)).
    pub fn sm_clocks_mhz(&self) -> &[Option<f64>] {
        &self.sm_clocks_mhz
    }
    /// The device's maximum SM clock in MHz (`CU_DEVICE_ATTRIBUTE_CLOCK_RATE`), beside which
    /// [`sm_clock_mhz`](Self::sm_clock_mhz) reads; `None` when the clock's kernel was not used
    /// (the option off, or the kernel not loaded).
    pub fn max_sm_clock_mhz(&self) -> Option<f64> {
        self.conditions.max_sm_clock_mhz
    }
    /// Repetitions discarded because the SM clock was below
    /// [`MeasureOptions::throttle_threshold`](crate::timing::MeasureOptions::throttle_threshold) of its
    /// maximum during them (their samples are not in [`samples`](Self::samples)).
    pub fn throttled_samples(&self) -> usize {
        self.conditions.throttled
    }
    /// The calibration: kernels of known lengths timed beside the work
    /// ([`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate)); `None` when they were
    /// not (the option off, or the kernel not loaded: [`net`](Self::net) says which).
    pub fn calibration(&self) -> Option<&Calibration> {
        match &self.calibrated {
            Calibrated::Done(calibration) => Some(calibration),
            Calibrated::NotAsked | Calibrated::KernelUnavailable => None,
        }
    }
    /// The work's time net of the launch's own cost: the samples' place-balanced median less the
    /// [`calibration`](Self::calibration)'s [`fixed_cost`](Calibration::fixed_cost), the time the
    /// work takes beyond an empty kernel (see
    /// [`MeasureOptions::calibrate`](crate::timing::MeasureOptions::calibrate)).
    ///
    /// A calibrated measurement runs the work first in some repetitions and after the calibration
    /// kernel in others, and on some GPUs an interval timed first in its repetition reads more.
    /// The place-balanced median is the mean of the two places' medians, as the fixed cost is of
    /// its kernels': the [`median`](Self::median) of samples half in each place would jump by
    /// that difference as a few samples move between the places' clusters.
    ///
    /// For work of one kernel, that is the kernel's run less an empty kernel's: CUPTI's duration
    /// of the kernel (its start to its end on the GPU) less CUPTI's duration of an empty kernel,
    /// which CUPTI counts inside every kernel's duration (the launch of its blocks). So the net
    /// time reads that much shorter than CUPTI's duration: a fixed amount, a noticeable share of a
    /// kernel of a few microseconds. For work of several launches, every launch but the first
    /// keeps its cost. Work that is not a kernel (a
    /// memset, a copy) has a fixed cost of its own, not a kernel's: its net time is off by the
    /// difference, and a small one can read below the fixed cost (no net time then). Trust it for
    /// kernels on an otherwise idle device; at a few microseconds, read it beside the
    /// calibration's [`uncertainty`](Calibration::uncertainty).
    ///
    /// # Errors
    /// [`NoNet`]: not calibrated, the work's place-balanced median not above the fixed cost (never a negative
    /// or zero net time), or the calibration's uncertainty, alone or with the half-width of the
    /// work's median, above
    /// [`MeasureOptions::max_calibration_share`](crate::timing::MeasureOptions::max_calibration_share) of
    /// the net time.
    pub fn net(&self) -> Result<Duration, NoNet> {
        let max_share = self.conditions.max_calibration_share;
        let net = net(
            balanced_median(&self.samples, &self.places),
            self.calibrated,
            max_share,
        )?;
        let Calibrated::Done(calibration) = self.calibrated else {
            return Ok(net); // unreachable: `net` gives a net time only with a calibration
        };
        let work = balanced_half_width(&self.samples, &self.places, self.timer_step());
        let uncertainty = calibration.uncertainty.saturating_add(work);
        if uncertainty.as_secs_f64() > max_share * net.as_secs_f64() {
            return Err(NoNet::Imprecise {
                net,
                uncertainty,
                max_share,
            });
        }
        Ok(net)
    }
    /// The check of the L2 flush, run once before the samples
    /// ([`MeasureOptions::flush_l2`](crate::timing::MeasureOptions::flush_l2)); `None` without a flush, or
    /// when the device had no memory left for the check's buffers. Its
    /// [`verdict`](FlushCheck::verdict) says whether the flush evicted a buffer read before it.
    /// The check queues the flush on the stream; in graph mode the samples' flushes are nodes of
    /// the captured graph, which CUDA may run differently: there the check vouches for the same
    /// memset, queued on the stream.
    pub fn flush_check(&self) -> Option<&FlushCheck> {
        self.conditions.flush_check.as_ref()
    }
    /// CUPTI's durations of each repetition's work, with
    /// [`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti); `None` without it.
    pub fn cupti(&self) -> Option<&CuptiTimes> {
        self.cupti.as_ref()
    }
    /// Whether the measurement can be trusted, and each reason it cannot ([`Doubt`]): a median
    /// less precise than [`MeasureOptions::max_noise`](crate::timing::MeasureOptions::max_noise) asks
    /// (where the noise did not fall below it), samples in two clusters, more than a twentieth of
    /// the repetitions throttled, the gate lost, an L2 flush that did not evict, a median too
    /// close to the timer's resolution, and with
    /// [`calibrate`](crate::timing::MeasureOptions::calibrate): no net time, a calibration whose samples
    /// are in two clusters or drifted during the run, or (with
    /// [`cupti`](crate::timing::MeasureOptions::cupti) too) a net time away from CUPTI's.
    ///
    /// For [`compare`](crate::timing::compare)'s sides only the conditions of the pairs count (throttling,
    /// the gate lost, a flush that did not evict): the ratio of the pairs has its own interval and
    /// resolution check, a side's two modes that the alternating order made show in both sides'
    /// pairs alike, and the ratio uses no calibration.
    ///
    /// The checks read this measurement's own samples, so they find what varies within the
    /// run; a state that holds for a whole run (a clock locked low, a fixed cost that differs
    /// between runs) shows only beside another run.
    pub fn trust(&self) -> Trust {
        let c = &self.conditions;
        let mut doubts = Vec::new();
        // A comparison's sides: only what changed the conditions of the pairs. Their ratio has its
        // own interval and resolution check, and uses no calibration.
        if !c.comparison_side {
            self.doubts_of_the_samples(&mut doubts);
        }
        let kept = self.samples.len();
        if c.throttled * 20 > c.throttled + kept {
            doubts.push(Doubt::Throttled {
                discarded: c.throttled,
                kept,
            });
        }
        if c.gate_asked && !c.gated {
            doubts.push(Doubt::GateLost {
                gate_timeouts: c.gate_timeouts,
            });
        }
        if let Some(check) = c
            .flush_check
            .filter(|check| check.verdict() == FlushVerdict::DoesNotEvict)
        {
            doubts.push(Doubt::FlushDoesNotEvict { ratio: check.ratio() });
        }
        if !c.comparison_side {
            self.doubts_of_the_calibration(&mut doubts);
        }
        Trust::new(doubts)
    }

    /// The doubts that a measurement's own samples raise: a median less precise than asked (unless
    /// the noise fell below the maximum), two clusters, a median near the timer's resolution.
    fn doubts_of_the_samples(&self, doubts: &mut Vec<Doubt>) {
        let (median, step) = (self.median(), self.timer_step());
        if let (Some(max_share), true) = (
            self.conditions.max_spread,
            self.conditions.stop != StopReason::NoiseBelowMax,
        ) {
            // The place-balanced median's precision: the median the net time takes.
            let balanced = balanced_median(&self.samples, &self.places);
            let half_width = balanced_half_width(&self.samples, &self.places, step);
            if half_width.as_secs_f64() > max_share * balanced.as_secs_f64() {
                doubts.push(Doubt::Spread {
                    median: balanced,
                    half_width,
                    max_share,
                });
            }
        }
        // Clusters that the places in the repetitions make are not in the net time (see `net`).
        let mut without_places = without_places(&self.samples, &self.places);
        without_places.sort_unstable();
        if let Some(clusters) = two_clusters(&without_places) {
            doubts.push(Doubt::TwoClusters(clusters));
        }
        let coarse = step.is_none_or(|step| step.as_secs_f64() * 50.0 > median.as_secs_f64());
        if median.is_zero() || coarse {
            doubts.push(Doubt::BelowResolution { median, step });
        }
    }

    /// The doubts of the calibration and of CUPTI's check of it, with
    /// [`calibrate`](crate::timing::MeasureOptions::calibrate).
    fn doubts_of_the_calibration(&self, doubts: &mut Vec<Doubt>) {
        match self.net() {
            Ok(_) | Err(NoNet::NotCalibrated) => {}
            Err(why) => doubts.push(Doubt::NoNet(why)),
        }
        if let Some(calibration) = self.calibration() {
            // A calibration's second mode or drift matters where it can move the net time by more
            // than the share the calibration may take of it (of the median, without a net time).
            // In seconds: a share the options allow can overflow a Duration.
            let material =
                self.net().unwrap_or(self.median()).as_secs_f64() * self.conditions.max_calibration_share;
            let beyond = |d: Duration| d.as_secs_f64() > material;
            // A slope off 1 moves the fixed cost by about its error times the rungs' mean length.
            let moves = |slope: f64| saturating_secs((slope - 1.0).abs() * mean_rung_length());
            if let Some(slope) = calibration.slope.filter(|&slope| {
                (slope - 1.0).abs() > SLOPE_TOLERANCE.max(2.0 * calibration.slope_uncertainty)
                    && beyond(moves(slope))
            }) {
                doubts.push(Doubt::CalibrationNotLinear {
                    slope,
                    uncertainty: calibration.slope_uncertainty,
                });
            }
            if let Some(clusters) = calibration.two_clusters.filter(|k| beyond(k.high - k.low)) {
                doubts.push(Doubt::CalibrationTwoClusters(clusters));
            }
            if let Some(drift) = calibration
                .drift
                .filter(|d| beyond(d.first_half.abs_diff(d.second_half)))
            {
                doubts.push(Doubt::CalibrationDrifted(drift));
            }
        }
        if let (Ok(net), Some(cupti_net), Some(calibration)) = (
            self.net(),
            self.cupti.as_ref().and_then(CuptiTimes::net),
            self.calibration(),
        ) {
            let allowed = calibration.uncertainty.as_secs_f64() + cupti_net.as_secs_f64() * CUPTI_AGREEMENT;
            if net.abs_diff(cupti_net).as_secs_f64() > allowed {
                doubts.push(Doubt::DisagreesWithCupti { net, cupti_net });
            }
        }
    }

    /// `bytes` per median sample, in GB/s (10^9 bytes per second); 0.0 when the median is 0 (the
    /// work took less than the timing events' resolution, about half a microsecond: its bandwidth
    /// cannot be read from these samples).
    pub fn bandwidth_gb_per_s(&self, bytes: u64) -> f64 {
        let seconds = self.median().as_secs_f64();
        if seconds == 0.0 {
            return 0.0;
        }
        bytes as f64 / seconds / 1e9
    }

    /// The statistics of `samples` (at least one), each taken at the SM clock of the same index
    /// in `sm_clocks_mhz` and in the place of its repetition of the same index in `places`, under
    /// `conditions`.
    pub(crate) fn new(
        samples: Vec<Duration>,
        sm_clocks_mhz: Vec<Option<f64>>,
        places: Vec<usize>,
        conditions: Conditions,
    ) -> Measurement {
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let total: u128 = samples.iter().map(Duration::as_nanos).sum();
        let mean = Duration::from_nanos(u64::try_from(total / samples.len() as u128).unwrap_or(u64::MAX));
        let noise = relative_deviation_in_places(&samples, &places);
        Measurement {
            samples,
            sorted,
            mean,
            noise,
            sm_clocks_mhz,
            places,
            conditions,
            calibrated: Calibrated::NotAsked,
            cupti: None,
        }
    }

    /// This measurement as a side of a comparison: no doubt of its median's own spread (the pairs'
    /// ratio has its interval).
    pub(crate) fn in_a_comparison(mut self) -> Measurement {
        self.conditions.max_spread = None;
        self.conditions.comparison_side = true;
        self
    }

    /// This measurement with CUPTI's times of its work (with [`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti)).
    pub(crate) fn with_cupti(self, cupti: Option<CuptiTimes>) -> Measurement {
        Measurement { cupti, ..self }
    }

    /// This measurement with its calibration.
    pub(crate) fn calibrated(self, calibrated: Calibrated) -> Measurement {
        Measurement { calibrated, ..self }
    }

    /// The smallest step between two different samples: the timing events' resolution, at most.
    pub(crate) fn timer_step(&self) -> Option<Duration> {
        step_of_sorted(&self.sorted)
    }
}

#[cfg(test)]
impl Conditions {
    /// Neither flushed nor gated, without clocks, not calibrated, with measure's default noise.
    pub(crate) fn plain(stop: StopReason) -> Conditions {
        Conditions {
            stop,
            l2_flushed: false,
            gated: false,
            gate_timeouts: 0,
            graph: false,
            wall_time: Duration::from_secs(1),
            max_sm_clock_mhz: None,
            throttled: 0,
            flush_check: None,
            max_calibration_share: 0.05,
            max_spread: Some(0.005),
            gate_asked: false,
            comparison_side: false,
        }
    }
}

#[cfg(test)]
impl Measurement {
    /// A measurement of `samples` (not empty) under `conditions`, without clocks.
    pub(crate) fn synthetic(samples: Vec<Duration>, conditions: Conditions) -> Measurement {
        let places = vec![0; samples.len()];
        Measurement::synthetic_in_places(samples, places, conditions)
    }

    /// [`synthetic`](Self::synthetic), each sample taken in its repetition's place of `places`.
    pub(crate) fn synthetic_in_places(
        samples: Vec<Duration>,
        places: Vec<usize>,
        conditions: Conditions,
    ) -> Measurement {
        let clocks = vec![None; samples.len()];
        Measurement::new(samples, clocks, places, conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::statistics::median_half_width;
    use crate::timing::statistics::relative_deviation;

    fn secs(samples: &[f64]) -> Vec<Duration> {
        samples.iter().map(|&s| Duration::from_secs_f64(s)).collect()
    }

    /// A measurement of `samples`, neither flushed nor gated, without clocks.
    fn plain(samples: Vec<Duration>, stop: StopReason) -> Measurement {
        Measurement::synthetic(samples, Conditions::plain(stop))
    }

    #[test]
    fn bandwidth_is_bytes_per_median_second() {
        let m = plain(secs(&[2e-3, 1e-3, 3e-3]), StopReason::Timeout);
        assert_eq!(m.median(), Duration::from_millis(2));
        assert!((m.bandwidth_gb_per_s(4_000_000_000) - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn the_longest_samples_do_not_overflow_the_statistics() {
        let m = plain(vec![Duration::MAX; 3], StopReason::Timeout);
        assert_eq!(m.mean(), Duration::from_nanos(u64::MAX));
        assert_eq!(m.median(), Duration::MAX);
        // The verdict and the net time, in two places and calibrated, read them without panicking.
        let samples = vec![Duration::MAX; 4];
        let m = Measurement::synthetic_in_places(
            samples,
            vec![0, 1, 0, 1],
            Conditions::plain(StopReason::Timeout),
        )
        .calibrated(Calibrated::Done(of_empty_kernels(
            &[Duration::from_micros(4); 30],
        )));
        let _ = (m.trust().to_string(), m.net());
        assert!(crate::timing::calibration::step_of_sorted(&[Duration::ZERO, Duration::MAX]).is_some());
    }

    #[test]
    fn all_zero_samples_have_noise_zero_and_bandwidth_zero() {
        let zeros = vec![Duration::ZERO; 20];
        assert_eq!(relative_deviation(&zeros), 0.0);
        let m = plain(zeros, StopReason::NoiseBelowMax);
        assert_eq!(
            (m.noise(), m.median(), m.mean()),
            (0.0, Duration::ZERO, Duration::ZERO)
        );
        assert_eq!(m.bandwidth_gb_per_s(1 << 20), 0.0);
    }

    /// `n` samples around `center_ns` on a 32 ns grid, `width_ns` wide, in a scrambled order.
    fn around(center_ns: u64, width_ns: u64, n: usize) -> Vec<Duration> {
        (0..n)
            .map(|i| {
                let x = (i as u64 * 7919 % 1000) * width_ns / 1000;
                Duration::from_nanos((center_ns - width_ns / 2 + x) / 32 * 32)
            })
            .collect()
    }

    fn doubts(m: &Measurement) -> Vec<Doubt> {
        m.trust().doubts().to_vec()
    }

    #[test]
    fn a_tight_single_mode_measurement_is_trusted() {
        let m = plain(around(10_000, 64, 1000), StopReason::NoiseBelowMax);
        assert!(m.trust().is_trusted(), "{}", m.trust());
    }

    #[test]
    fn each_condition_of_the_run_is_a_doubt() {
        let samples = around(10_000, 64, 1000);
        let with = |f: &dyn Fn(&mut Conditions)| {
            let mut c = Conditions::plain(StopReason::NoiseBelowMax);
            f(&mut c);
            doubts(&Measurement::synthetic(samples.clone(), c))
        };
        assert_eq!(
            with(&|c| {
                c.gate_asked = true;
                c.gate_timeouts = 1;
            }),
            [Doubt::GateLost { gate_timeouts: 1 }]
        );
        // A gate asked for and kept is no doubt.
        assert_eq!(
            with(&|c| {
                c.gate_asked = true;
                c.gated = true;
            }),
            []
        );
        // A twentieth throttled is tolerated, more is not.
        assert_eq!(with(&|c| c.throttled = 52), []);
        assert_eq!(
            with(&|c| c.throttled = 53),
            [Doubt::Throttled {
                discarded: 53,
                kept: 1000
            }]
        );
        let check = |after_us: u64| FlushCheck {
            bytes: 1 << 20,
            warm: Duration::from_micros(10),
            after_flush: Duration::from_micros(after_us),
            cold: Duration::from_micros(20),
        };
        assert_eq!(with(&|c| c.flush_check = Some(check(20))), []);
        assert!(matches!(
            with(&|c| c.flush_check = Some(check(11)))[..],
            [Doubt::FlushDoesNotEvict { .. }]
        ));
    }

    #[test]
    fn two_modes_a_wide_median_and_a_coarse_timer_are_doubts() {
        let mut two = around(13_700, 64, 600);
        two.extend(around(14_440, 64, 400));
        let m = plain(two, StopReason::NoiseSettled);
        let found = doubts(&m);
        assert!(
            found.iter().any(|d| matches!(d, Doubt::TwoClusters(_))),
            "{}",
            m.trust()
        );
        // Spread: uniform over 40% of the median, few samples, stopped at the timeout.
        let wide = plain(around(10_000, 4000, 30), StopReason::Timeout);
        assert!(
            matches!(doubts(&wide)[..], [Doubt::Spread { max_share, .. }] if max_share == 0.005),
            "{}",
            wide.trust()
        );
        // ... which is no doubt of a comparison's side.
        assert!(wide.clone().in_a_comparison().trust().is_trusted());
        // 1 us on a 32 ns timer: each step 3% of the median.
        let short = plain(around(1000, 64, 500), StopReason::NoiseSettled);
        assert!(
            doubts(&short)
                .iter()
                .any(|d| matches!(d, Doubt::BelowResolution { .. })),
            "{}",
            short.trust()
        );
        let zeros = plain(vec![Duration::ZERO; 50], StopReason::NoiseBelowMax);
        assert_eq!(
            doubts(&zeros),
            [Doubt::BelowResolution {
                median: Duration::ZERO,
                step: None
            }]
        );
    }

    /// A calibration of empty kernels alone (`samples` in order).
    fn of_empty_kernels(samples: &[Duration]) -> Calibration {
        let rungs = vec![crate::timing::calibration::fixed_cost::EMPTY; samples.len()];
        Calibration::of_samples(samples, &rungs, &vec![0; samples.len()], None).unwrap()
    }

    #[test]
    fn a_calibration_in_two_modes_or_drifting_or_without_a_net_time_is_a_doubt() {
        let work = around(13_700, 64, 1000);
        let calibrated = |empty: Vec<Duration>| {
            let calibration = of_empty_kernels(&empty);
            plain(work.clone(), StopReason::NoiseBelowMax).calibrated(Calibrated::Done(calibration))
        };
        let steady = calibrated(around(3680, 64, 500));
        assert!(steady.trust().is_trusted(), "{}", steady.trust());
        // Two modes, mixed through the run.
        let (low, high) = (around(3680, 64, 500), around(4416, 64, 500));
        let mixed: Vec<Duration> = (0..500)
            .map(|i| if i % 3 == 0 { high[i] } else { low[i] })
            .collect();
        let two = calibrated(mixed);
        assert!(
            doubts(&two)
                .iter()
                .any(|d| matches!(d, Doubt::CalibrationTwoClusters(_))),
            "{}",
            two.trust()
        );
        // A step from one to the other half-way: a drift (and two clusters).
        let mut stepped = around(3680, 64, 250);
        stepped.extend(around(4416, 64, 250));
        let drifted = calibrated(stepped);
        assert!(
            doubts(&drifted)
                .iter()
                .any(|d| matches!(d, Doubt::CalibrationDrifted(_))),
            "{}",
            drifted.trust()
        );
        // A drift of a few timer steps is real but moves a 10 us net time by under 5%: no doubt.
        let mut small = around(3680, 32, 250);
        small.extend(around(3776, 32, 250));
        assert!(of_empty_kernels(&small).drift.is_some());
        let slight = calibrated(small);
        assert!(slight.trust().is_trusted(), "{}", slight.trust());
        // A fixed cost longer than the work: no net time.
        let over = calibrated(around(20_000, 64, 500));
        assert!(
            matches!(doubts(&over)[..], [Doubt::NoNet(NoNet::NotAboveFixedCost { .. })]),
            "{}",
            over.trust()
        );
        // Not asked: no doubt.
        assert!(
            plain(work.clone(), StopReason::NoiseBelowMax)
                .trust()
                .is_trusted()
        );
    }

    #[test]
    fn a_calibration_whose_intervals_do_not_grow_with_its_kernels_lengths_is_a_doubt() {
        let work = around(13_700, 64, 1000);
        let with_slope = |slope: f64, uncertainty: f64| {
            let mut calibration = of_empty_kernels(&around(3680, 64, 500));
            calibration.slope = Some(slope);
            calibration.slope_uncertainty = uncertainty;
            plain(work.clone(), StopReason::NoiseBelowMax).calibrated(Calibrated::Done(calibration))
        };
        assert!(with_slope(1.005, 0.001).trust().is_trusted());
        // 10% off, known to 1%: the fixed cost moves by about 0.7 us, more than 5% of the 10 us
        // net time: a doubt; known only to 6%: none.
        let off = with_slope(1.10, 0.01);
        assert!(
            matches!(doubts(&off)[..], [Doubt::CalibrationNotLinear { .. }]),
            "{}",
            off.trust()
        );
        assert!(with_slope(1.10, 0.06).trust().is_trusted());
        // 3% off, known to 0.5%, moves it by 0.2 us: real, but under 5% of the net time.
        assert!(with_slope(1.03, 0.005).trust().is_trusted());
    }

    #[test]
    fn a_net_time_away_from_cuptis_is_a_doubt() {
        // Work 13.7 us, fixed cost 3.68 us: net 10.02 us.
        let empty = of_empty_kernels(&around(3680, 64, 500));
        let with_cupti = |cupti_us: f64| {
            let us = |u: f64| Some(Duration::from_secs_f64(u * 1e-6));
            let cupti = CuptiTimes::new(vec![us(cupti_us + 0.9); 1000], &[us(0.9); 500], 0);
            plain(around(13_700, 64, 1000), StopReason::NoiseBelowMax)
                .calibrated(Calibrated::Done(empty))
                .with_cupti(Some(cupti))
        };
        assert!(
            with_cupti(10.0).trust().is_trusted(),
            "{}",
            with_cupti(10.0).trust()
        );
        let off = with_cupti(9.3);
        assert!(
            matches!(doubts(&off)[..], [Doubt::DisagreesWithCupti { .. }]),
            "{}",
            off.trust()
        );
        assert_eq!(off.cupti().unwrap().net(), Some(Duration::from_nanos(9300)));
    }

    #[test]
    fn any_share_the_options_allow_and_a_comparisons_sides_never_panic_or_doubt_the_calibration() {
        let mut c = Conditions::plain(StopReason::NoiseBelowMax);
        c.max_calibration_share = 1e300;
        let (low, high) = (around(3680, 64, 500), around(4416, 64, 500));
        let mixed: Vec<Duration> = (0..500)
            .map(|i| if i % 3 == 0 { high[i] } else { low[i] })
            .collect();
        let calibration = of_empty_kernels(&mixed);
        let m = Measurement::synthetic(around(13_700, 64, 1000), c).calibrated(Calibrated::Done(calibration));
        assert!(m.trust().is_trusted(), "{}", m.trust());
        // A side of a comparison: 1 us on a 32 ns timer, two calibration modes: no doubt.
        let side = Measurement::synthetic(
            around(1000, 64, 500),
            Conditions::plain(StopReason::VerdictReached),
        )
        .calibrated(Calibrated::Done(calibration))
        .in_a_comparison();
        assert!(side.trust().is_trusted(), "{}", side.trust());
    }

    #[test]
    fn a_run_whose_noise_fell_below_the_maximum_has_no_spread_doubt() {
        // 2.5 us on a 32 ns timer: half a step is 0.64% of the median, above 0.5%.
        let mut samples = vec![Duration::from_nanos(2496); 90];
        samples.extend(vec![Duration::from_nanos(2528); 10]);
        let settled = plain(samples.clone(), StopReason::NoiseSettled);
        assert!(doubts(&settled).iter().any(|d| matches!(d, Doubt::Spread { .. })));
        let quiet = plain(samples, StopReason::NoiseBelowMax);
        assert!(!doubts(&quiet).iter().any(|d| matches!(d, Doubt::Spread { .. })));
    }

    /// The work of a calibrated measurement, first in its repetition in odd ones and second in
    /// even ones, where an interval first in its repetition reads 736 ns more (as on the H100):
    /// in `first` of the first place's samples and `second` of the second's.
    fn in_two_places(first: f64, second: f64) -> Measurement {
        let (low, high) = (around(4_672, 64, 1000), around(5_408, 64, 1000));
        let (samples, places): (Vec<Duration>, Vec<usize>) = (0..1000)
            .map(|i| {
                let place = i % 2;
                let share = if place == 0 { first } else { second };
                let more = ((i / 2) as f64) < 500.0 * share;
                (if more { high[i] } else { low[i] }, place)
            })
            .unzip();
        let calibration = of_empty_kernels(&around(3_700, 64, 1000));
        Measurement::synthetic_in_places(samples, places, Conditions::plain(StopReason::NoiseBelowMax))
            .calibrated(Calibrated::Done(calibration))
    }

    #[test]
    fn the_net_time_weighs_each_place_once_and_its_clusters_are_no_doubt() {
        // 48% of the samples read more, then 52%: the median jumps from one cluster to the other ...
        let (fewer, more) = (in_two_places(0.96, 0.0), in_two_places(1.0, 0.04));
        assert!(fewer.median().abs_diff(more.median()) > Duration::from_nanos(600));
        // ... and the net time moves by the few samples' share of the places' difference.
        let (a, b) = (fewer.net().unwrap(), more.net().unwrap());
        assert!(a.abs_diff(b) < Duration::from_nanos(60), "{a:?} {b:?}");
        // Two clusters that the places explain are not a doubt; two within a place are.
        assert!(
            !doubts(&more).iter().any(|d| matches!(d, Doubt::TwoClusters(_))),
            "{}",
            more.trust()
        );
        let (low, high) = (around(4_672, 64, 1000), around(9_000, 64, 1000));
        let mixed: Vec<Duration> = (0..1000)
            .map(|i| if i % 3 == 0 { high[i] } else { low[i] })
            .collect();
        let places = (0..1000).map(|i| i % 2).collect();
        let within =
            Measurement::synthetic_in_places(mixed, places, Conditions::plain(StopReason::NoiseBelowMax));
        assert!(doubts(&within).iter().any(|d| matches!(d, Doubt::TwoClusters(_))));
    }

    #[test]
    fn a_net_time_known_less_well_than_the_share_allows_is_none() {
        let calibration = of_empty_kernels(&around(3_600, 64, 1000));
        let measured = |width_ns: u64| {
            plain(around(4_400, width_ns, 1000), StopReason::NoiseSettled)
                .calibrated(Calibrated::Done(calibration))
        };
        let (steady, wide) = (measured(64), measured(1200));
        let net = steady.net().expect("a net time");
        // Each alone within 5% of the net time; together, not.
        let share = |d: Duration| d.as_secs_f64() / net.as_secs_f64();
        let work = balanced_half_width(&wide.samples, &wide.places, wide.timer_step());
        assert!(share(calibration.uncertainty) < 0.05 && share(work) < 0.05);
        assert!(
            matches!(wide.net(), Err(NoNet::Imprecise { .. })),
            "{:?}, work +-{work:?}, calibration +-{:?}",
            wide.net(),
            calibration.uncertainty
        );
    }

    #[test]
    fn what_the_places_add_is_neither_noise_nor_spread() {
        // Every interval timed first reads 736 ns more: a run that stopped with its noise
        // settled (the places' difference would keep the samples' own deviation above 0.5%).
        let settled = |m: Measurement| {
            let mut conditions = m.conditions;
            conditions.stop = StopReason::NoiseSettled;
            Measurement::synthetic_in_places(m.samples.clone(), m.places.clone(), conditions)
                .calibrated(m.calibrated)
        };
        let by_place = settled(in_two_places(1.0, 0.0));
        assert!(by_place.noise() < 0.005, "noise {}", by_place.noise());
        let raw_spread = median_half_width(&by_place.sorted, by_place.timer_step());
        assert!(raw_spread.as_secs_f64() > 0.005 * by_place.median().as_secs_f64());
        assert!(by_place.trust().is_trusted(), "{}", by_place.trust());
        assert!(relative_deviation(&by_place.samples) > 0.05);
        // The same spread within the places is a doubt.
        let (low, high) = (around(4_672, 64, 1000), around(5_408, 64, 1000));
        let within: Vec<Duration> = (0..1000)
            .map(|i| if (i / 2) % 2 == 0 { high[i] } else { low[i] })
            .collect();
        let places = (0..1000).map(|i| i % 2).collect();
        let noisy =
            Measurement::synthetic_in_places(within, places, Conditions::plain(StopReason::NoiseSettled));
        assert!(noisy.noise() > 0.05);
        assert!(
            doubts(&noisy).iter().any(|d| matches!(d, Doubt::Spread { .. })),
            "{}",
            noisy.trust()
        );
    }
}
