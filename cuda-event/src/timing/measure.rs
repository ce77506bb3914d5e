//! [`measure`]: timing a closure's GPU work the way `triton.testing.do_bench` and nvbench do, with
//! the sampler's warm-up, repetitions batched behind a host-held gate (so host launch gaps stay out
//! of the intervals) and optional L2 flush before each repetition, and its own stop rule: on noise,
//! time and a timeout.

use crate::error::Error;
use crate::stream::Stream;
use crate::timing::engine::sampler::Sampler;
use crate::timing::measurement::{Measurement, StopReason};
use crate::timing::options::MeasureOptions;
use crate::timing::statistics::places::relative_deviation_in_places;
use std::time::Duration;

/// Times the GPU work that `work` submits to `stream`, repeatedly, and returns the samples and their
/// statistics (see [`MeasureOptions`] for how it repeats and when it stops).
///
/// ```no_run
/// # fn main() -> cuda_event::Result<()> {
/// use cuda_event::{Stream, check_runtime, sys};
/// use cuda_event::timing::{MeasureOptions, measure};
/// let stream = Stream::new(0)?;
/// # let buffer: *mut std::ffi::c_void = std::ptr::null_mut();
/// let m = measure(&stream, &MeasureOptions::default(), |stream| {
///     // SAFETY: `buffer` is 1 MiB of device memory of the stream's device.
///     check_runtime("cudaMemsetAsync", unsafe {
///         sys::cudaMemsetAsync(buffer, 0, 1 << 20, stream.as_raw())
///     })
/// })?;
/// println!("median {:?}, p10 {:?}, p90 {:?}, noise {:.2}%", m.median(), m.percentile(10.0),
///          m.percentile(90.0), 100.0 * m.noise());
/// # Ok(()) }
/// ```
///
/// `work` returns the caller's own error type `E`, into which this crate's errors convert (an
/// enum with a `From` for [`Error`] and one for each other library's error, say); a closure whose
/// only return is `Ok(())` names it: `Ok::<(), cuda_event::Error>(())`.
///
/// `work` must submit all its work to `stream` (work on other streams is not inside the intervals)
/// and should not wait for it on the host: behind the gate such a wait lasts until the gate's
/// watchdog opens the gate, after about a second, and the measurement then goes on without the
/// gate (see [`Measurement::gated`]). It runs with the stream's device current (its primary context
/// pushed), as it would inside torch's device guard.
///
/// Each repetition is: a stamp of the SM clock (optional, untimed), the L2 flush (optional,
/// untimed), a timing event, `work`, a timing event (and a stamp after a batch); with
/// [`MeasureOptions::calibrate`], the same around one of the calibration's kernels, first or last in turn. Before the samples, after
/// the warm-up, the flush is checked once ([`Measurement::flush_check`]). Repetitions during
/// which the clock was throttled are discarded ([`MeasureOptions::throttle_threshold`]).
/// Repetitions are queued in batches of up to [`MeasureOptions::max_batch`] behind a hold on the
/// stream (a wait on a flag in mapped host memory, `cuStreamWaitValue32`), released once the batch
/// is queued. The timing events come from this thread's event pool and are reused across batches.
/// In graph mode ([`MeasureOptions::graph`]) a batch of repetitions is captured into a graph once,
/// with timing events of its own, and replayed for each batch instead: no hold.
///
/// It never waits for other streams of the device (but for the first measurement with
/// [`MeasureOptions::sm_clock`] or [`MeasureOptions::calibrate`] in a context, which loads the
/// timing kernels, and with [`MeasureOptions::reset_persisting_l2`]: see there): the flush buffer,
/// the flush check's buffers, the gate's flag and the timing kernels are made once per device
/// (per instance of its primary context: again after a device reset) and kept for later
/// measurements, not freed by `measure` (CUDA's frees wait for every stream of the
/// device): [`release_measure_memory`](crate::timing::release_measure_memory) frees them when asked.
/// Measurements on one device at the same time each get their own.
///
/// Its own CUDA calls (allocating, loading, synchronizing, reading the events) run in relaxed
/// capture mode, so that a measurement never breaks a graph capture that another thread makes in
/// global mode (the default of `torch.cuda.graph`), which forbids such calls on every other
/// thread; `work` runs in this thread's own mode (a mode it sets stays this thread's, for its next
/// call and after the measurement, as if measure's calls were not between). Not on the legacy
/// default stream ([`Stream::legacy`](crate::Stream::legacy)): any work queued there, a
/// measurement's too, waits for every blocking stream, and so breaks a capture of one that begins
/// meanwhile (CUDA's implicit synchronization); measure a stream of its own.
///
/// # CUDA's hardware queues
///
/// A device runs the work of all its streams through a few hardware queues (8 by default; set
/// `CUDA_DEVICE_MAX_CONNECTIONS`, up to 32, in the environment before the process's first CUDA
/// call), each stream placed on one of them, in turn, as it is created. What that means here:
/// - **Queue depth.** A queue holds about a thousand operations that cannot run yet; the host
///   blocks on the next one. A held stream cannot run, so a batch queued behind the gate must fit:
///   [`max_batch`](MeasureOptions::max_batch) keeps the default's batches well inside it, and work
///   of very many launches per repetition gets smaller batches, or none
///   ([`Measurement::gated`]). Graph mode has no such limit: a replay is one launch.
/// - **The gate and other streams.** While the gate holds the measured stream, the work of other
///   streams placed on the same queue waits behind the hold (for as long as the host takes to
///   queue one batch). With more queues, fewer streams share the measured one's. More queues are
///   not better for everything, though: in the project's events benchmark, records from several
///   threads, each on its own stream made through the driver (as
///   [`Stream::new`](crate::Stream::new) makes them), scaled worse at 32 queues than at 8, while
///   records on streams made by the runtime (`cudaStreamCreate`) did not.
/// - **Other streams and the samples.** Work of another stream queued before a repetition on the
///   same queue delays it, and that delay can fall inside an interval: measure on an otherwise
///   idle device, or on a stream created when the other streams' queues are known (streams are
///   placed in creation order).
///
/// # Errors
/// [`MeasureError::InvalidOptions`], [`Error::StreamCapturing`], the error `work` returns (after
/// the work queued so far completes), [`MeasureError::NotCapturable`] in graph mode,
/// [`MeasureError::ClockThrottled`] with [`MeasureOptions::sm_clock`],
/// [`MeasureError::CuptiUnavailable`] with [`MeasureOptions::cupti`], CUDA's errors; this crate's
/// errors as `E::from` (a [`MeasureError`] in [`Error::Measure`]).
///
/// [`MeasureError`]: crate::timing::MeasureError
/// [`MeasureError::InvalidOptions`]: crate::timing::MeasureError::InvalidOptions
/// [`MeasureError::NotCapturable`]: crate::timing::MeasureError::NotCapturable
/// [`MeasureError::ClockThrottled`]: crate::timing::MeasureError::ClockThrottled
/// [`MeasureError::CuptiUnavailable`]: crate::timing::MeasureError::CuptiUnavailable
pub fn measure<F, E>(stream: &Stream, options: &MeasureOptions, mut work: F) -> Result<Measurement, E>
where
    F: FnMut(&Stream) -> Result<(), E>,
    E: From<Error>,
{
    let (mut noises, mut seen) = (Vec::new(), 0);
    let mut measurements = Sampler::run(
        stream,
        options,
        1,
        &mut |stream, _| work(stream),
        &mut |arms, places, wall_time| {
            if arms[0].len() < seen {
                // The samples were dropped (the measurement went on without the gate): so goes
                // the noise history they made.
                noises.clear();
            }
            seen = arms[0].len();
            // Without what the places in the repetitions add, as the measurement's noise.
            let noise = relative_deviation_in_places(&arms[0], &places[0]);
            stop_reason(options, arms[0].len(), noise, &mut noises, wall_time)
        },
    )?;
    Ok(measurements.remove(0))
}

/// Whether to stop after a batch, with `samples` samples of relative deviation `noise` taken in
/// `wall_time`; keeps the noise of every batch after the minimum samples and time in `noises`.
fn stop_reason(
    options: &MeasureOptions,
    samples: usize,
    noise: f64,
    noises: &mut Vec<f64>,
    wall_time: Duration,
) -> Option<StopReason> {
    let enough = samples >= options.min_samples && wall_time >= options.min_time;
    if enough {
        noises.push(noise);
    }
    if enough && noise <= options.max_noise {
        Some(StopReason::NoiseBelowMax)
    } else if enough && settled(noises) {
        Some(StopReason::NoiseSettled)
    } else if wall_time >= options.timeout && samples >= 2 {
        Some(StopReason::Timeout)
    } else {
        None
    }
}

/// Whether the last four noise figures lie within 1% of each other (never for a figure that is not
/// a finite number: `min` and `max` would skip it).
fn settled(noises: &[f64]) -> bool {
    let Some(last) = noises.len().checked_sub(4).map(|from| &noises[from..]) else {
        return false;
    };
    if !last.iter().all(|n| n.is_finite()) {
        return false;
    }
    let (low, high) = last.iter().fold((f64::INFINITY, 0.0f64), |(low, high), &n| {
        (low.min(n), high.max(n))
    });
    high <= low * 1.01
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::statistics::relative_deviation;

    #[test]
    fn noise_settles_only_when_four_figures_agree() {
        assert!(!settled(&[0.1, 0.1, 0.1]));
        assert!(settled(&[0.5, 0.1, 0.1005, 0.1, 0.1009]));
        assert!(!settled(&[0.1, 0.1, 0.1, 0.102]));
        assert!(!settled(&[f64::NAN, f64::NAN, f64::NAN, f64::NAN]));
        assert!(!settled(&[0.1, f64::NAN, 0.1, 0.1]));
    }

    #[test]
    fn all_zero_samples_stop_below_the_maximum() {
        let zeros = vec![Duration::ZERO; 20];
        let options = MeasureOptions::default();
        let noise = relative_deviation(&zeros);
        let mut noises = Vec::new();
        let stop = stop_reason(&options, zeros.len(), noise, &mut noises, options.min_time);
        assert_eq!(stop, Some(StopReason::NoiseBelowMax));
    }

    #[test]
    fn stop_waits_for_enough_samples_and_time_then_for_noise_or_the_timeout() {
        let options = MeasureOptions::default();
        let (quiet, noisy) = (options.max_noise / 2.0, 10.0 * options.max_noise);
        let mut noises = Vec::new();
        let early = options.min_time / 2;
        assert_eq!(stop_reason(&options, 100, quiet, &mut noises, early), None);
        assert_eq!(
            stop_reason(&options, 2, quiet, &mut noises, options.min_time),
            None
        );
        assert!(noises.is_empty(), "noise counts only once enough is measured");
        let at = options.min_time;
        for _ in 0..3 {
            assert_eq!(stop_reason(&options, 100, noisy, &mut noises, at), None);
        }
        assert_eq!(
            stop_reason(&options, 100, noisy, &mut noises, at),
            Some(StopReason::NoiseSettled)
        );
        assert_eq!(
            stop_reason(&options, 100, quiet, &mut Vec::new(), at),
            Some(StopReason::NoiseBelowMax)
        );
        let late = options.timeout;
        assert_eq!(
            stop_reason(&options, 1, noisy, &mut Vec::new(), late),
            None,
            "a timeout needs two samples"
        );
        assert_eq!(
            stop_reason(&options, 2, f64::INFINITY, &mut Vec::new(), late),
            Some(StopReason::Timeout)
        );
    }
}
