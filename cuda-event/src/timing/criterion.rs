//! GPU time as a criterion measurement (the `criterion` feature): [`GpuTime`], whose samples are the
//! GPU time between two timing events on a stream, and a helper for `Bencher::iter_custom`.

use crate::context::ContextInstance;
use crate::driver::driver;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::timing::timer::Timer;
use ::criterion::measurement::{Measurement, ValueFormatter, WallTime};
use std::sync::Arc;
use std::time::Duration;

/// GPU time on a stream, as a [criterion](https://docs.rs/criterion) measurement: a
/// [`criterion::measurement::Measurement`](::criterion::measurement::Measurement) whose values are
/// the GPU time between two timing events recorded on the stream (a [`Timer`]), as [`Duration`]s.
/// criterion prints them as it prints wall time (ns, µs, ms), and a benchmark's `Throughput` as
/// bytes or elements per second of GPU time. With the crate's `criterion` feature.
///
/// ```no_run
/// use criterion::{Criterion, Throughput};
/// use cuda_event::{Stream, check_runtime, sys};
/// use cuda_event::timing::GpuTime;
/// use std::sync::Arc;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let gpu = GpuTime::on_device(0)?;
/// let stream = Arc::clone(gpu.stream());               // the routines submit to it
/// # let buffer: *mut std::ffi::c_void = std::ptr::null_mut();
/// let memset = |s: &Stream| {
///     // SAFETY: `buffer` is 1 MiB of device memory of the stream's device.
///     check_runtime("cudaMemsetAsync", unsafe { sys::cudaMemsetAsync(buffer, 0, 1 << 20, s.as_raw()) })
/// };
/// let mut c = Criterion::default().with_measurement(gpu.clone()).configure_from_args();
/// let mut group = c.benchmark_group("memset 1 MiB");
/// group.throughput(Throughput::BytesDecimal(1 << 20));
/// // criterion's loop: one GPU interval around each sample's iterations.
/// group.bench_function("iter", |b| b.iter(|| memset(&stream).expect("memset")));
/// // The same interval, with the work's errors checked (and usable with WallTime too).
/// group.bench_function("iter_custom", |b| {
///     b.iter_custom(|iters| gpu.time_iters(iters, memset).expect("memset"))
/// });
/// group.finish();
/// c.final_summary();
/// # Ok(()) }
/// ```
///
/// The benchmark's routines need the stream too, and criterion keeps its measurement to itself: a
/// `GpuTime` holds its stream in an [`Arc`], which [`stream`](Self::stream) lends out, and a clone
/// shares it. The project's `gpu_time` benchmark (`cargo bench -p cuda-event --features criterion
/// --bench gpu_time`) is a complete one.
///
/// # What a sample is
/// criterion runs a benchmark as samples of `iters` iterations each. `Bencher::iter` calls the
/// measurement's `start` (here: a timing event recorded on the stream), runs the routine `iters`
/// times, then `end` (a second timing event, which the host waits for, sleeping): a sample is one GPU
/// interval around all its iterations' work. The routines must submit their work to this stream, or
/// to streams joined back to it before the sample ends: other work is not inside the interval.
/// criterion's warm-up and measurement times stay wall time on the host, from which it chooses how
/// many iterations a sample gets. `Bencher::iter_batched` works too: the work its setup queues on the
/// stream runs before the sample's start event. criterion's own loop runs the routine on the calling
/// thread as it is; for a stream of another device than the current one, hold a
/// [`DeviceGuard`](crate::DeviceGuard) (or use [`time_iters`](Self::time_iters), which makes the
/// stream's device current).
///
/// # Against [`measure`](crate::timing::measure)
/// - **Host launch gaps are inside.** An interval is everything the stream did between the two
///   events, including the time it sat idle waiting for the host to launch the next iteration (and,
///   at the start of each sample, the first). Work that takes the GPU less time than the host takes
///   to launch it (a small kernel or memset, work of many small launches) is then timed at the host's
///   launch rate, not at the GPU's. [`measure`](crate::timing::measure) queues its repetitions behind a hold
///   on the stream and releases them together, so that they run back to back (or replays them from
///   a captured CUDA graph, [`MeasureOptions::graph`](crate::timing::MeasureOptions::graph)): none of its
///   intervals contains time the GPU waited for the host. `GpuTime` has no such gate: criterion asks
///   for as many iterations in one sample as fit its measurement time, often far more than CUDA
///   queues on a held stream, and a host that blocks while queueing behind a hold never releases
///   it. Work that takes the GPU longer than the host takes to launch it keeps the stream busy, and
///   only each sample's first launch is inside; where launch gaps matter, use `measure` (or
///   [`compare`](crate::timing::compare) for two pieces of work).
/// - **Statistics.** criterion's are its own: a time per iteration estimated from samples of
///   (usually) growing iteration counts, bootstrap confidence intervals, outliers, and a comparison
///   with the last saved run (a change beyond its noise threshold is reported as a regression or an
///   improvement). `measure`'s are per repetition: the median, percentiles and noise of the samples,
///   taken (by default) until the noise is under 0.5% or stops changing, or a timeout, with an L2
///   flush before each repetition so that each is timed as a single call in a program would be.
///   criterion does not flush: its iterations follow each other, and work whose data fits in L2
///   finds it there after the first (a benchmark can queue a flush in the setup of `iter_batched`
///   with `BatchSize::PerIteration`, outside the interval). And a sample ends with the host waiting
///   for the GPU, so the next starts on an idle stream.
///
/// # Panics
/// criterion's `Measurement` methods cannot return errors: a CUDA error in `start` or `end` (the
/// benchmarked work's own error included, which the wait at the end reports) panics, with a
/// message that names the step and CUDA's error, and ends the benchmark. `start` panics on a stream
/// being captured into a CUDA graph. Making a `GpuTime` and [`time_iters`](Self::time_iters) return
/// their errors instead; without a GPU, making one is an [`Err`], never a panic.
#[derive(Clone, Debug)]
pub struct GpuTime {
    stream: Arc<Stream>,
}

impl GpuTime {
    /// Times the GPU work submitted to `stream` (a [`Stream`], or an `Arc` of one that the
    /// benchmark's routines share).
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] for a stream being captured into a CUDA graph, and CUDA's error of
    /// asking that (no driver or no GPU, a device reset since the stream was made, a per-thread
    /// default stream of another thread).
    pub fn new(stream: impl Into<Arc<Stream>>) -> Result<GpuTime> {
        let stream = stream.into();
        if stream.is_capturing()? {
            return Err(Error::StreamCapturing);
        }
        Ok(GpuTime { stream })
    }

    /// Times the GPU work submitted to a new stream on `device` ([`Stream::new`]), which
    /// [`stream`](Self::stream) gives to the benchmark's routines.
    ///
    /// # Errors
    /// CUDA's error of making the stream: without a driver or GPU, for one.
    pub fn on_device(device: i32) -> Result<GpuTime> {
        GpuTime::new(Stream::new(device)?)
    }

    /// The stream whose work is timed: clone the `Arc` to submit work from the benchmark's routines.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The GPU time of `iters` calls of `work`, queued one after another between two timing events
    /// on the stream: what `Bencher::iter` measures with a `GpuTime`, for `Bencher::iter_custom`.
    /// Unlike criterion's loop, it stops at the first error that `work` returns, and it runs `work`
    /// with the stream's device current (its primary context pushed), as
    /// [`measure`](crate::timing::measure) does, so that a closure written for `measure` works here
    /// unchanged. It works inside a criterion of any measurement: with the default `WallTime`,
    /// `b.iter_custom(|iters| gpu.time_iters(iters, work).unwrap())` reports GPU time beside
    /// benchmarks of host time.
    ///
    /// The host launch gaps between the calls are inside the interval, as in a `GpuTime` sample (see
    /// the type's docs).
    ///
    /// # Errors
    /// [`Error::StreamCapturing`], the error `work` returns (its work queued so far is left to
    /// complete), the CUDA error of the work (reported by the wait for the end event), CUDA's errors
    /// of recording and waiting; this crate's errors as `E::from`.
    pub fn time_iters<F, E>(&self, iters: u64, mut work: F) -> Result<Duration, E>
    where
        F: FnMut(&Stream) -> Result<(), E>,
        E: From<Error>,
    {
        let stream = &*self.stream;
        let d = driver("GpuTime::time_iters")?;
        if stream.is_capturing()? {
            return Err(Error::StreamCapturing.into());
        }
        let (_instance, _current) = ContextInstance::enter_primary(d, stream.device())?;
        let timer = Timer::start(stream)?;
        for _ in 0..iters {
            work(stream)?;
        }
        Ok(timer.stop(stream)?.wait()?)
    }
}

impl Measurement for GpuTime {
    /// The sample's section, started on the stream.
    type Intermediate = Timer;
    /// The sample's GPU time.
    type Value = Duration;

    /// Records the sample's start event on the stream.
    ///
    /// # Panics
    /// On a stream being captured into a CUDA graph, and on CUDA's errors (see the type's docs).
    fn start(&self) -> Timer {
        let capturing = or_panic(
            self.stream.is_capturing(),
            "asking whether the stream is captured",
        );
        if capturing {
            panic!(
                "{PANIC_PREFIX}: the stream is being captured into a CUDA graph: {}",
                Error::StreamCapturing
            );
        }
        or_panic(Timer::start(&self.stream), "recording the start event")
    }

    /// Records the sample's end event on the stream, waits for it and returns the GPU time since
    /// the start event.
    ///
    /// # Panics
    /// On CUDA's errors, the benchmarked work's included (see the type's docs).
    fn end(&self, timer: Timer) -> Duration {
        let timing = or_panic(timer.stop(&self.stream), "recording the end event");
        or_panic(timing.wait(), "waiting for the sample's work")
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        nanoseconds(*value)
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        formatter()
    }
}

/// What every panic of the measurement starts with.
const PANIC_PREFIX: &str =
    "cuda_event::timing::GpuTime, criterion's measurement (which cannot return an error)";

/// The value of a CUDA call made for criterion, which takes no errors: or a panic saying what failed.
fn or_panic<T>(result: Result<T>, step: &str) -> T {
    result.unwrap_or_else(|e| panic!("{PANIC_PREFIX}: {step}: {e}"))
}

/// A sample as criterion's statistics take it: nanoseconds, the unit of criterion's wall time.
fn nanoseconds(value: Duration) -> f64 {
    value.as_nanos() as f64
}

/// criterion's formatter of wall time (its values are nanoseconds too, and so are
/// [`nanoseconds`]'s): the same units (ps to s), and throughput per second of GPU time.
fn formatter() -> &'static dyn ValueFormatter {
    static WALL_TIME: WallTime = WallTime;
    WALL_TIME.formatter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::criterion::Throughput;

    #[test]
    fn samples_are_nanoseconds_scaled_like_criterions_wall_time() {
        assert_eq!(nanoseconds(Duration::from_micros(3)), 3000.0);
        assert_eq!(nanoseconds(Duration::from_nanos(1_500_000_007)), 1_500_000_007.0);
        let f = formatter();
        for (ns, unit, scaled) in [
            (0.5, "ps", 500.0),
            (750.0, "ns", 750.0),
            (1500.0, "µs", 1.5),
            (2.5e6, "ms", 2.5),
            (3e9, "s", 3.0),
        ] {
            let mut values = [ns];
            assert_eq!(f.scale_values(ns, &mut values), unit, "{ns} ns");
            assert!((values[0] - scaled).abs() < 1e-9, "{ns} ns: {values:?}");
        }
        assert_eq!(f.format_value(1500.0).trim(), "1.5000 µs");
        assert_eq!(f.scale_for_machines(&mut [1.0]), "ns");
    }

    #[test]
    fn throughput_is_per_second_of_the_samples() {
        let f = formatter();
        // 1 GB in a second (1e9 ns): decimal, binary and elements.
        let mut values = [1e9];
        let unit = f.scale_throughputs(1e9, &Throughput::BytesDecimal(1_000_000_000), &mut values);
        assert_eq!((unit, values[0]), ("GB/s", 1.0));
        let mut values = [0.5e9];
        let unit = f.scale_throughputs(0.5e9, &Throughput::Bytes(1 << 30), &mut values);
        assert_eq!((unit, values[0]), ("GiB/s", 2.0));
        let mut values = [1e6];
        let unit = f.scale_throughputs(1e6, &Throughput::Elements(4000), &mut values);
        assert_eq!(unit, "Melem/s");
        assert!((values[0] - 4.0).abs() < 1e-9, "{values:?}");
    }

    /// The interval of `time_iters` and of a sample holds the time the GPU waited for the host
    /// between the calls: here the host sleeps and the GPU has nothing to do.
    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn host_gaps_between_calls_are_inside_the_interval() {
        let gpu = GpuTime::on_device(0).unwrap();
        let gap = Duration::from_millis(5);
        let sleep = |_: &Stream| {
            crate::sync::thread::sleep(gap);
            Ok::<(), Error>(())
        };
        let batch = gpu.time_iters(4, sleep).unwrap();
        assert!(
            batch >= 4 * gap * 9 / 10 && batch < Duration::from_secs(1),
            "{batch:?}"
        );
        let timer = gpu.start();
        crate::sync::thread::sleep(gap);
        let sample = gpu.end(timer);
        assert!(
            sample >= gap * 9 / 10 && sample < Duration::from_secs(1),
            "{sample:?}"
        );
        assert_eq!(gpu.to_f64(&gpu.add(&sample, &gpu.zero())), nanoseconds(sample));
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn time_iters_stops_at_the_first_error_of_the_work() {
        let gpu = GpuTime::on_device(0).unwrap();
        let mut calls = 0;
        let failed = gpu.time_iters(10, |_| {
            calls += 1;
            if calls == 3 {
                Err(Error::NotComplete)
            } else {
                Ok(())
            }
        });
        assert_eq!((failed, calls), (Err(Error::NotComplete), 3));
        assert!(gpu.stream().query().is_ok());
    }
}
