//! [`MeasureOptions`]: how [`measure`](crate::timing::measure) and
//! [`compare`](crate::timing::compare) repeat and when they stop, and the check that refuses
//! options they cannot honour.

use crate::error::{MeasureError, Result};
use std::time::Duration;

/// How [`measure`](crate::timing::measure) repeats and when it stops. The defaults are nvbench's (noise
/// under 0.5%, at least 10 samples and 0.5 s, at most 15 s) with triton's 25 ms of warm-up.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MeasureOptions {
    /// GPU time spent running the work untimed first (after one call and a 5-call estimate). With
    /// [`sm_clock`](Self::sm_clock), while the SM clock read over it is still rising and below 95%
    /// of the maximum, the warm-up goes on, as long again each time, until a second has passed (the
    /// pass under way then is finished). At most a day.
    pub warmup: Duration,
    /// Fewest samples before stopping.
    pub min_samples: usize,
    /// Least wall time spent in timed repetitions before stopping.
    pub min_time: Duration,
    /// Stop once the samples' relative standard deviation is at most this (0.005 = 0.5%); with
    /// [`calibrate`](Self::calibrate), of the samples less what their place in the repetition
    /// adds ([`Measurement::noise`](crate::timing::Measurement::noise)). Not used by `compare`.
    pub max_noise: f64,
    /// Stop after this much wall time in timed repetitions, whatever the noise. At most a day.
    pub timeout: Duration,
    /// Before each repetition, overwrite a buffer twice the device's L2 size (untimed), so that
    /// every repetition starts with a cold L2 as a single call in a program would.
    ///
    /// Before the samples, the flush is checked once: a timed read of a buffer read just before a
    /// flush, beside one of a buffer not read since a flush and one of a buffer read just before
    /// (no flush). [`Measurement::flush_check`](crate::timing::Measurement::flush_check) reports the
    /// three and whether the flush evicted: a flush that does not is flagged there, never silent.
    /// A flush does not evict L2 lines that an access policy window made persisting: see
    /// [`reset_persisting_l2`](Self::reset_persisting_l2).
    pub flush_l2: bool,
    /// Before the samples, reset the context's persisting L2 lines to normal
    /// (`cuCtxResetPersistingL2Cache`), so that lines which an access policy window (of this
    /// program's streams or kernels) made persisting do not stay in L2 through the flushes. Only
    /// where the context lets lines persist (its `cudaLimitPersistingL2CacheSize` is above zero).
    /// Lines the measured work itself makes persisting persist again at each repetition: no reset
    /// between repetitions can help there; measure such work without its window for a cold time.
    ///
    /// Off by default: the reset is context-wide and can wait for other streams' work, for as
    /// long as that work takes (a stream held on the host: as long as it is held), where `measure`
    /// otherwise never waits for other streams. Turn it on in a program that uses access policy
    /// windows and measures while the device is otherwise idle.
    pub reset_persisting_l2: bool,
    /// Hold the stream while a batch of repetitions is queued, so that they run back to back and
    /// no interval contains time the GPU waited for the host.
    ///
    /// The hold is a `cuStreamWaitValue32` at the head of the stream. While it holds, work of
    /// other streams that CUDA put on the same hardware queue waits too (a device has a few such
    /// queues, `CUDA_DEVICE_MAX_CONNECTIONS`, shared by all its streams), and on the legacy
    /// default stream ([`Stream::legacy`](crate::Stream::legacy)) every blocking stream of the
    /// device waits for it. A hold lasts as long as the host takes to queue one batch (at most
    /// about a second: see [`Measurement::gated`](crate::timing::Measurement::gated) for what happens
    /// when a repetition does not fit).
    pub gate: bool,
    /// Most timed intervals queued behind one hold: a repetition has one per arm (one for
    /// `measure`, two for [`compare`](crate::timing::compare), and one more with
    /// [`calibrate`](Self::calibrate)). CUDA's queue of a stream is finite and the held
    /// GPU does not drain it: a batch of more stream operations than it holds blocks the host until
    /// the gate's watchdog opens the gate (the batch is dropped, and the next is 16 times smaller).
    /// The default leaves room for a few stream operations per interval, the flush and the two
    /// timing events included. In graph mode, the most intervals captured into one graph. A batch
    /// holds at least one repetition whatever this says. A graph replays the same repetitions, so
    /// in graph mode a batch holds whole cycles of the order the arms run in: a calibrated
    /// comparison's a multiple of four (at least four), a comparison's or a calibrated
    /// measurement's an even number (at least two), so that each arm runs first, and each of the
    /// calibration's kernel lengths first and last, equally often.
    pub max_batch: usize,
    /// Graph mode: capture a batch of repetitions (each its flush, a timing event, the work, a
    /// timing event) into a CUDA graph once and replay it, so that they run back to back whatever
    /// the work's number of launches (no launch gap inside or between intervals, and no hold: the
    /// gate is not used) and the flush stays outside every interval. The work is captured once
    /// per measurement, not called again for each sample: it must be work that a CUDA graph can
    /// hold (no wait on the host, no call that capture refuses, all on the stream it is given or
    /// joined back to it). A call inside the work that the capture refuses returns CUDA's error
    /// to the work, which `measure` returns if the work does; if the work goes on, or CUDA
    /// refuses the capture itself (the legacy default stream cannot be captured), the result is
    /// [`MeasureError::NotCapturable`], which names the step and CUDA's answer. Replays of a graph cost
    /// the GPU less than the same launches from the host, so very short work reads shorter than
    /// it does in a program that launches it one call at a time; and CUDA may run a captured
    /// operation differently from the same call on a stream (a device-to-device copy captured as
    /// a memcpy node can take longer): graph mode times the work as a graph runs it.
    pub graph: bool,
    /// Read the SM clock around every repetition, as nvbench does: a kernel of one thread per SM
    /// before each repetition's flush and start event (outside the interval; and one after a
    /// batch's last end event), whose block on SM 0 writes the GPU's timer and SM 0's cycle counter
    /// into mapped host memory; cycles over time between two such stamps is the clock. A clock is
    /// read over at least 200 us of GPU time where the batch has that much: a repetition shorter
    /// than that reads the clock of the stamps around it that span that long (or of its whole
    /// batch). In gated mode the stamps lengthen each sample by a fixed fraction of a microsecond
    /// (a kernel then runs shortly before the start event); in graph mode by no measurable amount.
    /// See [`Measurement::sm_clock_mhz`](crate::timing::Measurement::sm_clock_mhz) and
    /// [`throttle_threshold`](Self::throttle_threshold).
    ///
    /// Off by default, because of what it takes the first time: the stamp kernel is loaded into
    /// the stream's context (once per context instance, by the first measurement with this
    /// option), and loading a kernel into a context waits for all the work queued in it, on every
    /// stream of the device, and holds the context's other CUDA calls meanwhile (as the first
    /// launch of any lazily loaded kernel can; [`calibrate`](Self::calibrate) loads the same
    /// kernels). Otherwise (and without [`reset_persisting_l2`](Self::reset_persisting_l2))
    /// `measure` never waits for other streams:
    /// a measurement beside a stream that waits on the host would wait until it is released.
    /// Turn it on where the device is otherwise idle at the first such measurement (a benchmark
    /// program), or once a measurement with it has run in the context; later measurements in that
    /// context reuse the kernel and do not wait (until
    /// [`release_measure_memory`](crate::timing::release_measure_memory) unloads it).
    pub sm_clock: bool,
    /// With [`sm_clock`](Self::sm_clock), discard every repetition during which the SM clock was
    /// below this fraction of the device's maximum (nvbench's `--throttle-threshold`), count it
    /// ([`Measurement::throttled_samples`](crate::timing::Measurement::throttled_samples)) and pause so
    /// that the GPU can cool down (50 ms, longer if it keeps throttling) before the next batch; 0.0
    /// keeps every repetition. A GPU that has
    /// not ramped up its clock, or that throttles for power or heat, runs the work slower than it
    /// can; so does one whose clocks are locked low (`nvidia-smi -lgc`): lower the threshold to
    /// time it there. The clock is read as SM cycles over the GPU's timer, and on some cards that
    /// timer runs a little slow against the clock: there readings sit a little above the
    /// device's maximum, so a threshold near 1.0 discards less than it would elsewhere.
    pub throttle_threshold: f64,
    /// Time kernels of known lengths beside the work, in the same run and conditions (the same
    /// stream, gated or graph mode, L2 flush, interleaved with the work's repetitions as
    /// [`compare`](crate::timing::compare)'s arms are), derive the launch's fixed cost from them, and
    /// report the work's time net of it: [`Measurement::net`](crate::timing::Measurement::net).
    ///
    /// Every interval between two timing events around a launch holds the GPU's own cost of
    /// starting and ending a launch, the same whatever the kernel does: a large share of a short
    /// kernel's reading. Each repetition times one more kernel, in turn an empty one and ones that
    /// spin on the GPU's timer for 1, 2, 3, 5, 10 and 20 us; each length's median less the length is
    /// a reading of that cost, and the readings must agree: see [`Calibration`](crate::timing::Calibration).
    ///
    /// Off by default, for what it takes the first time: the calibration's kernels are timing
    /// kernels, which [`sm_clock`](Self::sm_clock) loads too (once per context instance, by the first
    /// measurement with either option), and loading waits for all the work queued in the
    /// context, on every stream of the device. Where the driver cannot compile the kernels
    /// (PTX compilation disabled) the measurement goes on without calibration and says so.
    pub calibrate: bool,
    /// With [`calibrate`](Self::calibrate): the most the calibration's
    /// [`uncertainty`](crate::timing::Calibration::uncertainty) may be, as a share of the net time, for
    /// a net time to be given; above it [`Measurement::net`](crate::timing::Measurement::net) says why
    /// there is none. 0.05 (5%) by default.
    pub max_calibration_share: f64,
    /// Also time each repetition's work with CUPTI (the `cupti` feature): the launches it makes on the
    /// measuring thread are tagged (a CUPTI external correlation id; work that another thread launches
    /// for it is not), and CUPTI's records of the kernels, copies and memsets (not peer-to-peer copies)
    /// it launched give its GPU duration, from the first one's start to the last one's end
    /// ([`Measurement::cupti`](crate::timing::Measurement::cupti)), beside the events' interval; with
    /// [`calibrate`](Self::calibrate), CUPTI's duration of the calibration's empty kernel too, so that
    /// the net time is checked against CUPTI's in the same run
    /// ([`Doubt::DisagreesWithCupti`](crate::timing::Doubt::DisagreesWithCupti)).
    ///
    /// libcupti is loaded at run time, never linked: from the file that `CUDA_EVENT_CUPTI_LIBRARY`
    /// names, else `libcupti.so` (and `.13`, `.12`) on the loader's path, else the CUDA toolkit's
    /// `extras/CUPTI/lib64` and `lib64` under `/usr/local/cuda`. PyPI's `nvidia-cuda-cupti` wheel
    /// ships one. Where it is missing, or CUPTI is held by another tool (a profiler), `measure`
    /// returns [`MeasureError::CuptiUnavailable`].
    ///
    /// CUPTI's records lengthen launches a little, the events' intervals with them, and those of
    /// any other thread's work while it runs: compare event times taken with and without it with
    /// care. One measurement with CUPTI runs at a time in a process (another waits for it, for at
    /// most a minute; one inside another's work on the same thread is refused), and CUPTI stays
    /// loaded after it. Where another CUPTI client of the process (a profiler) registers its own
    /// buffers, the records go there: with `calibrate` that is an error, without it the
    /// samples read `None`. Stream mode
    /// only: a graph's replays cannot be told apart by tag (graph mode with it is refused).
    /// Off by default.
    pub cupti: bool,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            warmup: Duration::from_millis(25),
            min_samples: 10,
            min_time: Duration::from_millis(500),
            max_noise: 0.005,
            timeout: Duration::from_secs(15),
            flush_l2: true,
            reset_persisting_l2: false,
            gate: true,
            max_batch: 64,
            graph: false,
            sm_clock: false,
            throttle_threshold: 0.75,
            calibrate: false,
            max_calibration_share: 0.05,
            cupti: false,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {
        impl MeasureOptions {
            $($(#[$doc])* pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            })*
        }
    };
}

setters! {
    /// Sets [`warmup`](Self::warmup).
    warmup: Duration;
    /// Sets [`min_samples`](Self::min_samples).
    min_samples: usize;
    /// Sets [`min_time`](Self::min_time).
    min_time: Duration;
    /// Sets [`max_noise`](Self::max_noise).
    max_noise: f64;
    /// Sets [`timeout`](Self::timeout).
    timeout: Duration;
    /// Sets [`flush_l2`](Self::flush_l2).
    flush_l2: bool;
    /// Sets [`reset_persisting_l2`](Self::reset_persisting_l2).
    reset_persisting_l2: bool;
    /// Sets [`gate`](Self::gate).
    gate: bool;
    /// Sets [`max_batch`](Self::max_batch).
    max_batch: usize;
    /// Sets [`graph`](Self::graph).
    graph: bool;
    /// Sets [`sm_clock`](Self::sm_clock).
    sm_clock: bool;
    /// Sets [`throttle_threshold`](Self::throttle_threshold).
    throttle_threshold: f64;
    /// Sets [`calibrate`](Self::calibrate).
    calibrate: bool;
    /// Sets [`max_calibration_share`](Self::max_calibration_share).
    max_calibration_share: f64;
    /// Sets [`cupti`](Self::cupti).
    cupti: bool;
}

impl MeasureOptions {
    /// Refuses options that `measure` cannot honour.
    pub(crate) fn check(&self) -> Result<()> {
        const LONGEST: Duration = Duration::from_secs(24 * 60 * 60);
        let invalid = |reason| Err(MeasureError::InvalidOptions { reason }.into());
        if self.min_samples < 2 {
            return invalid("min_samples must be at least 2 (the noise needs two samples)");
        }
        if !(self.max_noise >= 0.0 && self.max_noise.is_finite()) {
            return invalid("max_noise must be a finite number at least 0");
        }
        if self.timeout < self.min_time {
            return invalid("timeout must be at least min_time");
        }
        // Longer is no measurement but a hang: the warm-up's repetitions are counted from it, and
        // the samples kept until the timeout grow without bound.
        if self.warmup > LONGEST || self.timeout > LONGEST {
            return invalid("warmup and timeout must be at most a day");
        }
        if self.max_batch == 0 {
            return invalid("max_batch must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.throttle_threshold) {
            return invalid("throttle_threshold must be a number from 0 to 1");
        }
        if !(self.max_calibration_share >= 0.0 && self.max_calibration_share.is_finite()) {
            return invalid("max_calibration_share must be a finite number at least 0");
        }
        if self.cupti && !cfg!(feature = "cupti") {
            return invalid("cupti needs this crate's `cupti` feature");
        }
        if self.cupti && self.graph {
            return invalid("cupti times stream mode only: a graph's replays cannot be told apart");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn refused(options: MeasureOptions) -> &'static str {
        match options.check() {
            Err(Error::Measure(MeasureError::InvalidOptions { reason })) => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_defaults_pass_and_leave_calibration_and_the_reset_off() {
        let options = MeasureOptions::default();
        assert!(options.check().is_ok());
        assert!(!options.calibrate && !options.reset_persisting_l2 && options.flush_l2);
        assert_eq!(options.max_calibration_share, 0.05);
        let on = options
            .calibrate(true)
            .reset_persisting_l2(true)
            .max_calibration_share(0.0);
        assert!(on.check().is_ok());
        assert!(on.calibrate && on.reset_persisting_l2);
    }

    #[test]
    fn a_calibration_share_that_is_not_a_finite_number_at_least_zero_is_refused() {
        for share in [-0.01, f64::NAN, f64::INFINITY] {
            let reason = refused(MeasureOptions::default().max_calibration_share(share));
            assert!(reason.contains("max_calibration_share"), "{reason}");
        }
        assert!(refused(MeasureOptions::default().min_samples(1)).contains("min_samples"));
        assert!(refused(MeasureOptions::default().max_batch(0)).contains("max_batch"));
    }

    #[test]
    fn a_warm_up_or_timeout_over_a_day_is_refused() {
        let day = Duration::from_secs(24 * 60 * 60);
        let endless = MeasureOptions::default().timeout(Duration::MAX);
        assert!(refused(endless).contains("at most a day"));
        assert!(refused(MeasureOptions::default().warmup(day + Duration::from_nanos(1))).contains("warmup"));
        assert!(MeasureOptions::default().warmup(day).timeout(day).check().is_ok());
    }

    #[test]
    fn cupti_is_refused_in_graph_mode_and_without_its_feature() {
        let cupti = MeasureOptions::default().cupti(true);
        match cfg!(feature = "cupti") {
            true => assert!(cupti.check().is_ok()),
            false => assert!(refused(cupti.clone()).contains("`cupti` feature")),
        }
        let reason = refused(cupti.graph(true));
        assert!(reason.contains("cupti"), "{reason}");
    }
}
