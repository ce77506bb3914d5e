//! Timing a closure's GPU work the way `triton.testing.do_bench` and nvbench do: warm-up,
//! repetitions batched behind a host-held gate (so host launch gaps stay out of the intervals), an
//! optional L2 flush before each repetition, and a stop on noise, time and a timeout.

use crate::context::ContextInstance;
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::gate::{Gate, Watchdog};
use crate::scratch_memory::DeviceBuffer;
use crate::stream::Stream;
use crate::timer::{Timer, from_ms, timing_event};
use cuda_event_sys as sys;
use std::time::{Duration, Instant};

/// How [`measure`] repeats and when it stops. The defaults are nvbench's (noise under 0.5%, at least
/// 10 samples and 0.5 s, at most 15 s) with triton's 25 ms of warm-up.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MeasureOptions {
    /// GPU time spent running the work untimed first (after one call and a 5-call estimate).
    pub warmup: Duration,
    /// Fewest samples before stopping.
    pub min_samples: usize,
    /// Least wall time spent in timed repetitions before stopping.
    pub min_time: Duration,
    /// Stop once the samples' relative standard deviation is at most this (0.005 = 0.5%).
    pub max_noise: f64,
    /// Stop after this much wall time in timed repetitions, whatever the noise.
    pub timeout: Duration,
    /// Before each repetition, overwrite a buffer twice the device's L2 size (untimed), so that
    /// every repetition starts with a cold L2 as a single call in a program would.
    pub flush_l2: bool,
    /// Hold the stream while a batch of repetitions is queued, so that they run back to back and
    /// no interval contains time the GPU waited for the host.
    pub gate: bool,
    /// Most repetitions queued behind one hold. CUDA's queue of a stream is finite and the held
    /// GPU does not drain it: at 256 repetitions of a copy with an L2 flush, the host blocked while
    /// queueing (on an H200, until the watchdog opened the gate), so the default is 64.
    pub max_batch: usize,
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
            gate: true,
            max_batch: 64,
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
    /// Sets [`gate`](Self::gate).
    gate: bool;
    /// Sets [`max_batch`](Self::max_batch).
    max_batch: usize;
}

impl MeasureOptions {
    fn check(&self) -> Result<()> {
        let invalid = |reason| Err(Error::InvalidMeasureOptions { reason });
        if self.min_samples < 2 {
            return invalid("min_samples must be at least 2 (the noise needs two samples)");
        }
        if !(self.max_noise >= 0.0 && self.max_noise.is_finite()) {
            return invalid("max_noise must be a finite number at least 0");
        }
        if self.timeout < self.min_time {
            return invalid("timeout must be at least min_time");
        }
        if self.max_batch == 0 {
            return invalid("max_batch must be at least 1");
        }
        Ok(())
    }
}

/// Why [`measure`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The noise fell to [`MeasureOptions::max_noise`] (after the minimum samples and time).
    NoiseBelowMax,
    /// The noise stayed above the maximum but stopped changing (within 1% over the last four
    /// batches, after the minimum samples and time): more samples would not lower it.
    NoiseSettled,
    /// [`MeasureOptions::timeout`] passed.
    Timeout,
}

/// The samples [`measure`] took, one per repetition, and their statistics.
#[derive(Clone, Debug)]
pub struct Measurement {
    samples: Vec<Duration>,
    sorted: Vec<Duration>,
    mean: Duration,
    noise: f64,
    stop: StopReason,
    l2_flushed: bool,
    gated: bool,
    gate_timeouts: usize,
    wall_time: Duration,
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
    /// The `p`-th percentile (0 to 100), interpolated linearly between samples (numpy's and
    /// torch's default).
    pub fn percentile(&self, p: f64) -> Duration {
        let rank = p.clamp(0.0, 100.0) / 100.0 * (self.sorted.len() - 1) as f64;
        let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
        let (a, b) = (self.sorted[low].as_secs_f64(), self.sorted[high].as_secs_f64());
        Duration::from_secs_f64(a + (b - a) * (rank - low as f64))
    }
    /// The samples' relative standard deviation (standard deviation / mean).
    pub fn noise(&self) -> f64 {
        self.noise
    }
    /// Why the measurement stopped.
    pub fn stop_reason(&self) -> StopReason {
        self.stop
    }
    /// Whether L2 was flushed before each repetition.
    pub fn l2_flushed(&self) -> bool {
        self.l2_flushed
    }
    /// Whether the repetitions ran behind the host-held gate.
    pub fn gated(&self) -> bool {
        self.gated
    }
    /// Batches dropped because the host blocked while queueing them (the gate was opened by its
    /// watchdog, so their intervals could contain host time); each cuts the batch by 16.
    pub fn gate_timeouts(&self) -> usize {
        self.gate_timeouts
    }
    /// Wall time spent in timed repetitions.
    pub fn wall_time(&self) -> Duration {
        self.wall_time
    }
    /// `bytes` per median sample, in GB/s (10^9 bytes per second).
    pub fn bandwidth_gb_per_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.median().as_secs_f64() / 1e9
    }
}

/// Times the GPU work that `work` submits to `stream`, repeatedly, and returns the samples and their
/// statistics (see [`MeasureOptions`] for how it repeats and when it stops).
///
/// ```no_run
/// # fn main() -> cuda_event::Result<()> {
/// use cuda_event::{MeasureOptions, Stream, measure};
/// let stream = Stream::new(0)?;
/// let m = measure(&stream, &MeasureOptions::default(), |stream| {
///     // submit the work to stream.as_raw() here
///     # let _ = stream;
///     Ok(())
/// })?;
/// println!("median {:?}, p10 {:?}, p90 {:?}, noise {:.2}%", m.median(), m.percentile(10.0),
///          m.percentile(90.0), 100.0 * m.noise());
/// # Ok(()) }
/// ```
///
/// `work` must submit all its work to `stream` (work on other streams is not inside the intervals)
/// and must not wait for it on the host: behind the gate it would wait forever, until the gate's
/// watchdog opens it after a second ([`Error::WorkBlockedOnTheHost`]). It runs with the stream's device
/// current (its primary context pushed), as it would inside torch's device guard.
///
/// Each repetition is: the L2 flush (optional, untimed), a timing event, `work`, a timing event.
/// Repetitions are queued in batches of up to [`MeasureOptions::max_batch`] behind a hold on the
/// stream (a wait on a flag in mapped host memory, `cuStreamWaitValue32`), released once the batch
/// is queued. The timing events come from this thread's event pool and are reused across batches.
///
/// # Errors
/// [`Error::InvalidMeasureOptions`], [`Error::StreamCapturing`], [`Error::WorkBlockedOnTheHost`],
/// the error `work` returns (after the work queued so far completes), CUDA's errors.
pub fn measure<F>(stream: &Stream, options: &MeasureOptions, mut work: F) -> Result<Measurement>
where
    F: FnMut(&Stream) -> Result<()>,
{
    options.check()?;
    let d = driver("measure")?;
    if stream.is_capturing()? {
        return Err(Error::StreamCapturing);
    }
    let instance = ContextInstance::of_primary(d, stream.device())?;
    let _current = instance.context()?.enter(d)?;
    let flush = match options.flush_l2 {
        true => Some(L2Flush::new(d, instance)?),
        false => None,
    };
    let gate = match options.gate {
        true => Some(Gate::new(d, instance)?),
        false => None,
    };
    let watchdog = gate.as_ref().map(|gate| Watchdog::new(gate.flag()));
    let mut run = Run {
        d,
        stream,
        options,
        flush: flush.as_ref(),
        gate: gate.as_ref(),
        watchdog: watchdog.as_ref(),
        work: &mut work,
    };
    std::thread::scope(|scope| {
        let _watchdog = watchdog.as_ref().map(|watchdog| watchdog.run_in(scope));
        let _drained = Drained(stream);
        run.measure()
    })
}

/// Waits for the stream on drop, however the measurement ends (done, an error, a panic in the work),
/// so that nothing still waits on the gate's word or writes the flush buffer when they are freed.
/// After a complete measurement nothing is left to wait for.
struct Drained<'s>(&'s Stream);

impl Drop for Drained<'_> {
    fn drop(&mut self) {
        // Its error, if any, is the one the measurement already returned (or the panic's cause).
        let _ = self.0.synchronize();
    }
}

/// A buffer twice the size of the device's L2, overwritten to evict what the work left there.
struct L2Flush {
    buffer: DeviceBuffer,
}

impl L2Flush {
    fn new(d: &Driver, instance: ContextInstance) -> Result<L2Flush> {
        let mut l2 = 0;
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE;
        let device = instance.context()?.cu_device();
        // SAFETY: a device the driver handed out; writes through a live local.
        d.device_get_attribute
            .call(|f| unsafe { f(&mut l2, attribute, device) })?;
        let bytes = 2 * usize::try_from(l2).unwrap_or(0).max(1 << 20);
        Ok(L2Flush {
            buffer: DeviceBuffer::new(d, instance, bytes)?,
        })
    }

    fn queue(&self, d: &Driver, stream: &Stream) -> Result<()> {
        let (ptr, words, raw) = (self.buffer.ptr, self.buffer.bytes / 4, stream.as_raw());
        // 32-bit words, the widest cuMemset writes (the buffer's size is a multiple of 4).
        // SAFETY: writes `words` 32-bit words of a live allocation of that size on a live stream of
        // its device, whose context is current (measure entered it).
        d.memset_d32_async.call(|f| unsafe { f(ptr, 0, words, raw) })
    }
}

/// One call of [`measure`].
struct Run<'r, F> {
    d: &'static Driver,
    stream: &'r Stream,
    options: &'r MeasureOptions,
    flush: Option<&'r L2Flush>,
    gate: Option<&'r Gate>,
    watchdog: Option<&'r Watchdog<'r>>,
    work: &'r mut F,
}

/// GPU time a batch aims at: long enough that the host's queueing of the next one is hidden, short
/// enough that the stop criterion is checked often.
const BATCH_TIME: Duration = Duration::from_millis(20);

impl<F: FnMut(&Stream) -> Result<()>> Run<'_, F> {
    fn measure(&mut self) -> Result<Measurement> {
        // One call: its errors and first-call costs (module loads, lazy allocations) come first.
        self.repeat_untimed(1)?;
        // The cost of one repetition, on the GPU and on the host, from five.
        let queued = Instant::now();
        let timer = Timer::start(self.stream)?;
        self.repeat_untimed(5)?;
        let host = queued.elapsed() / 5;
        let gpu = timer.stop(self.stream)?.wait()? / 5;
        let per_rep = gpu.max(host).max(Duration::from_micros(1));
        let count = |budget: Duration| (budget.as_secs_f64() / per_rep.as_secs_f64()).ceil() as usize;
        self.repeat_untimed(count(self.options.warmup).max(1))?;

        let options = self.options;
        let mut max_batch = options.max_batch;
        let mut events: Vec<(Event, Event)> = Vec::new();
        let (mut samples, mut noises) = (Vec::new(), Vec::new());
        let mut gate_timeouts = 0;
        let started = Instant::now();
        loop {
            let n = count(BATCH_TIME).clamp(1, max_batch);
            while events.len() < n {
                events.push((timing_event(), timing_event()));
            }
            let opened_by_watchdog = self.timed_batch(&events[..n])?;
            if opened_by_watchdog {
                // The host blocked while queueing: CUDA's queue was full (try a smaller batch), or the
                // work itself waits on the host (then even one repetition blocks).
                if n == 1 {
                    return Err(Error::WorkBlockedOnTheHost);
                }
                gate_timeouts += 1;
                max_batch = (n / 16).max(1);
            } else {
                for (start, end) in &events[..n] {
                    samples.push(from_ms(start.elapsed_time(end)?));
                }
            }
            let wall_time = started.elapsed();
            let noise = relative_deviation(&samples);
            let enough = samples.len() >= options.min_samples && wall_time >= options.min_time;
            if enough {
                noises.push(noise);
            }
            let stop = if enough && noise <= options.max_noise {
                Some(StopReason::NoiseBelowMax)
            } else if enough && settled(&noises) {
                Some(StopReason::NoiseSettled)
            } else if wall_time >= options.timeout && samples.len() >= 2 {
                Some(StopReason::Timeout)
            } else {
                None
            };
            if let Some(stop) = stop {
                return Ok(Measurement::new(
                    samples,
                    noise,
                    stop,
                    self,
                    gate_timeouts,
                    wall_time,
                ));
            }
        }
    }

    /// Queues the flush (if any) and the work `n` times, and waits for them.
    fn repeat_untimed(&mut self, n: usize) -> Result<()> {
        for _ in 0..n {
            self.flush()?;
            (self.work)(self.stream)?;
        }
        self.stream.synchronize()
    }

    fn flush(&self) -> Result<()> {
        match self.flush {
            Some(flush) => flush.queue(self.d, self.stream),
            None => Ok(()),
        }
    }

    /// One batch of timed repetitions, queued behind the gate and waited for. Returns whether the
    /// gate's watchdog had to open it.
    fn timed_batch(&mut self, events: &[(Event, Event)]) -> Result<bool> {
        let held = self.gate.map(|gate| gate.hold(self.d, self.stream)).transpose()?;
        if let (Some(watchdog), Some(held)) = (self.watchdog, &held) {
            watchdog.arm(held);
        }
        let queued = events.iter().try_for_each(|(start, end)| {
            self.flush()?;
            start.record(self.stream)?;
            (self.work)(self.stream)?;
            end.record(self.stream)
        });
        let opened_by_watchdog = self.watchdog.is_some_and(|watchdog| watchdog.disarm());
        drop(held);
        queued?;
        events.last().map_or(Ok(()), |(_, end)| end.synchronize())?;
        Ok(opened_by_watchdog)
    }
}

impl Measurement {
    fn new<F>(
        samples: Vec<Duration>,
        noise: f64,
        stop: StopReason,
        run: &Run<'_, F>,
        gate_timeouts: usize,
        wall_time: Duration,
    ) -> Measurement {
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        Measurement {
            samples,
            sorted,
            mean,
            noise,
            stop,
            l2_flushed: run.flush.is_some(),
            gated: run.gate.is_some(),
            gate_timeouts,
            wall_time,
        }
    }
}

/// Standard deviation (of a sample, n - 1) over mean; infinite for fewer than two samples.
fn relative_deviation(samples: &[Duration]) -> f64 {
    if samples.len() < 2 {
        return f64::INFINITY;
    }
    let n = samples.len() as f64;
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / n;
    let variance = samples
        .iter()
        .map(|s| (s.as_secs_f64() - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0);
    variance.sqrt() / mean
}

/// Whether the last four noise figures lie within 1% of each other.
fn settled(noises: &[f64]) -> bool {
    let Some(last) = noises.len().checked_sub(4).map(|from| &noises[from..]) else {
        return false;
    };
    let (low, high) = last.iter().fold((f64::INFINITY, 0.0f64), |(low, high), &n| {
        (low.min(n), high.max(n))
    });
    high <= low * 1.01
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_deviation_of_known_samples() {
        let samples: Vec<_> = [1.0, 2.0, 3.0]
            .iter()
            .map(|&s| Duration::from_secs_f64(s))
            .collect();
        assert!((relative_deviation(&samples) - 0.5).abs() < 1e-12);
        assert!(relative_deviation(&samples[..1]).is_infinite());
    }

    #[test]
    fn noise_settles_only_when_four_figures_agree() {
        assert!(!settled(&[0.1, 0.1, 0.1]));
        assert!(settled(&[0.5, 0.1, 0.1005, 0.1, 0.1009]));
        assert!(!settled(&[0.1, 0.1, 0.1, 0.102]));
    }
}
