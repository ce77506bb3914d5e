//! The engine that [`measure`](crate::timing::measure) and [`compare`](crate::timing::compare)
//! share: one or more arms of work timed in repetitions, after a warm-up that waits for the SM
//! clock's ramp; batched behind a host-held gate (or, once a repetition could not be queued behind
//! it, without), or replayed from a captured graph; an optional L2 flush before each arm;
//! repetitions at a throttled clock discarded; until the caller's stop rule says so.

use crate::capture_mode::RelaxedCapture;
use crate::context::ContextInstance;
use crate::driver::{Driver, driver};
use crate::error::{Error, MeasureError, Result};
use crate::event::Event;
use crate::stream::Stream;
use crate::timing::calibration::Calibrated;
use crate::timing::cupti::Session;
use crate::timing::engine::arms::{ArmWork, Arms, graph_cycle};
use crate::timing::engine::batches::{
    AfterOpened, Batch, BatchBound, MOST_CLOCKED_INTERVALS, batch_repetitions,
};
use crate::timing::engine::calibration_arm::CalibrationArm;
use crate::timing::engine::cupti_tags::CuptiTags;
use crate::timing::engine::flush_probe::{FlushProbe, run_check};
use crate::timing::engine::gate::{Gate, Watchdog};
use crate::timing::engine::graph::{GraphBatch, our_step};
use crate::timing::engine::kept_samples::{Intervals, KeptSamples};
use crate::timing::engine::l2_flush::{L2Flush, reset_persisting_l2};
use crate::timing::engine::scratch_memory::{Needs, ScratchLease};
use crate::timing::engine::sm_clock::ClockStamps;
use crate::timing::engine::throttle::Throttle;
use crate::timing::measurement::{Conditions, Measurement, StopReason};
use crate::timing::options::MeasureOptions;
use crate::timing::statistics::median;
use crate::timing::timer::{Timer, from_ms, timing_event};
use std::time::{Duration, Instant};

/// Whether to stop, given each arm's samples so far and the wall time spent in timed repetitions.
/// Whether to stop, from each arm's samples so far, their places in their repetitions
/// (`Arms::places`) and the wall time.
pub(crate) type StopRule<'s> =
    dyn FnMut(&[Vec<Duration>], &[Vec<usize>], Duration) -> Option<StopReason> + 's;

/// One call of [`Sampler::run`]: what it times, how, and what it has kept so far.
pub(crate) struct Sampler<'r, 'w, E> {
    d: &'static Driver,
    stream: &'r Stream,
    options: &'r MeasureOptions,
    flush: Option<&'r L2Flush<'r>>,
    /// The flush's check, run once after the warm-up.
    flush_check: FlushProbe<'r>,
    mode: Mode<'r>,
    /// The SM clock's stamps, when read.
    clock: Option<ClockStamps<'r>>,
    /// The caller's arms and the calibration's: their order, and what each runs.
    arms: Arms<'r, 'w, E>,
    stop: &'r mut StopRule<'w>,
    /// Timed repetitions queued so far, for the alternation of arms across batches.
    reps: usize,
    /// The bound on a batch, cut when one did not fit behind the gate.
    bound: BatchBound,
    /// With [`MeasureOptions::cupti`]: CUPTI's session, whose tags mark each timed interval's work.
    cupti: Option<CuptiTags>,
    /// Each arm's samples kept so far.
    kept: KeptSamples,
}

/// How a sampler queues its timed repetitions.
enum Mode<'r> {
    /// Behind the gate, whose watchdog opens it if the host blocks while queueing a batch: while
    /// there is a gate, until a repetition could not be queued behind it.
    Gated {
        gate: &'r Gate<'r>,
        watchdog: &'r Watchdog<'r>,
    },
    /// Straight onto the stream.
    Ungated,
    /// Replays of a batch captured into a graph, once captured; dropped with the sampler, after
    /// the stream is drained.
    Graph(Option<GraphBatch>),
}

impl<E> Sampler<'_, '_, E>
where
    E: From<Error>,
{
    /// Times `arms` pieces of work repeatedly (and the calibration's kernel as one more arm,
    /// with [`MeasureOptions::calibrate`], first and last in turn): each repetition runs every arm
    /// once, each arm timed alone (L2 flushed before it, if asked), the caller's in alternating
    /// order (0, 1, ... then ..., 1, 0) so that none always runs first ([`Arms::order`]); until
    /// `stop` says so (after at least one batch with two samples per arm, unless the timeout
    /// ended it). Returns one [`Measurement`] per arm of the caller's, each with the calibration.
    pub(crate) fn run(
        stream: &Stream,
        options: &MeasureOptions,
        arms: usize,
        work: &mut ArmWork<'_, E>,
        stop: &mut StopRule<'_>,
    ) -> Result<Vec<Measurement>, E> {
        options.check()?;
        let d = driver("measure")?;
        if stream.is_capturing()? {
            return Err(Error::StreamCapturing.into());
        }
        let (instance, _current) = ContextInstance::enter_primary(d, stream.device())?;
        // The measurement's own calls (allocating, loading the timing kernels, synchronizing,
        // reading the events) are made on the crate's account, in relaxed capture mode, so that
        // they never break a capture in global mode on another thread (which forbids such calls
        // on every other thread and is invalidated by them); the work runs in the caller's mode.
        let relaxed = RelaxedCapture::enter(d);
        let l2 = match options.flush_l2 {
            true => Some(L2Flush::l2_bytes(d, instance)?),
            false => None,
        };
        let gated = options.gate && !options.graph;
        // A stamp before each interval of the largest batch (a graph rounds up to whole cycles of
        // the arm order) and one after the last; larger batches are cut to fit (see
        // `Sampler::batch_size`).
        let asked_arms = arms + usize::from(options.calibrate);
        let stamp_slots = match options.sm_clock {
            true => {
                ((options.max_batch / asked_arms)
                    .max(1)
                    .saturating_add(graph_cycle(arms, options.calibrate)))
                .saturating_mul(asked_arms)
                .min(MOST_CLOCKED_INTERVALS)
                    + 1
            }
            false => 0,
        };
        // CUPTI first: where it cannot be had, the measurement is refused before it takes memory.
        let cupti = options.cupti.then(Session::begin).transpose()?;
        let mut scratch = ScratchLease::take(stream.device(), instance);
        let needs = Needs {
            flush_bytes: l2.map(|l2| 2 * l2),
            probe_bytes: l2.map(FlushProbe::scratch_bytes),
            word: gated,
            kernels: options.calibrate,
            stamp_slots,
        };
        scratch.prepare(d, &needs)?;
        if options.reset_persisting_l2 {
            reset_persisting_l2(d)?;
        }
        let flush = scratch
            .flush()
            .filter(|_| l2.is_some())
            .map(|buffer| L2Flush { buffer });
        let calibration = scratch
            .kernels()
            .filter(|_| options.calibrate)
            .map(|kernels| CalibrationArm::new(arms, kernels));
        let gate = scratch.word().filter(|_| gated).map(Gate::new);
        let watchdog = gate
            .as_ref()
            .map(|gate| Watchdog::new(gate.flag(), Watchdog::TIMEOUT));
        let clock = scratch.clock_stamps().filter(|_| options.sm_clock);
        let floor_mhz = clock
            .as_ref()
            .map_or(0.0, |clock| options.throttle_threshold * clock.max_mhz());
        let mode = match (&gate, &watchdog) {
            (Some(gate), Some(watchdog)) => Mode::Gated { gate, watchdog },
            _ if options.graph => Mode::Graph(None),
            _ => Mode::Ungated,
        };
        let arms = Arms::new(arms, work, &relaxed, calibration);
        let mut sampler = Sampler {
            d,
            stream,
            options,
            flush: flush.as_ref(),
            flush_check: FlushProbe::new(scratch.probe(), l2),
            mode,
            clock,
            kept: KeptSamples::new(arms.count, Throttle::new(floor_mhz)),
            arms,
            stop,
            reps: 0,
            bound: BatchBound::new(options.max_batch),
            cupti: cupti.map(CuptiTags::new),
        };
        // From the first flush on, the GPU may use the scratch memory until the stream is drained.
        scratch.in_use(true);
        crate::sync::thread::scope(|scope| {
            let running = watchdog.as_ref().map(|watchdog| watchdog.run_in(scope));
            // Without its watchdog the gate could hold the stream for good: measured ungated
            // (`Measurement::gated` says so), as when not even one repetition fits behind it.
            if let Some(None) = running {
                sampler.mode = Mode::Ungated;
            }
            let _watchdog = running.flatten();
            let _drained = Drained {
                stream,
                scratch: &scratch,
            };
            sampler.time_until_stopped()
        })
    }
}

/// Waits for the stream on drop, however the measurement ends (done, an error, a panic in the work),
/// so that nothing still waits on the gate's word or writes the flush buffer when another
/// measurement takes them; if the wait fails, the scratch memory is not used again. After a
/// complete measurement nothing is left to wait for.
struct Drained<'s> {
    stream: &'s Stream,
    scratch: &'s ScratchLease,
}

impl Drop for Drained<'_> {
    fn drop(&mut self) {
        // Its error, if any, is the one the measurement already returned (or the panic's cause).
        if self.stream.synchronize().is_ok() {
            self.scratch.in_use(false);
        }
    }
}

/// GPU time a batch aims at: long enough that the host's queueing of the next one is hidden, short
/// enough that the stop criterion is checked often.
const BATCH_TIME: Duration = Duration::from_millis(20);

/// The most wall time the warm-up goes on while the SM clock is still ramping up.
const RAMP_AT_MOST: Duration = Duration::from_secs(1);

/// A clock at least this fraction of the maximum has ramped up: it cannot rise much more.
const RAMPED: f64 = 0.95;

impl<E> Sampler<'_, '_, E>
where
    E: From<Error>,
{
    /// The warm-up, then timed batches until the stop rule (or the throttle) ends them.
    fn time_until_stopped(&mut self) -> Result<Vec<Measurement>, E> {
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
        self.warm_up(count(self.options.warmup).max(1))?;
        if let FlushProbe::Due { buffer, l2 } = self.flush_check {
            let flush = || self.flush();
            self.flush_check = FlushProbe::Found(run_check(self.d, self.stream, buffer, l2, &flush)?);
        }

        let wanted = count(BATCH_TIME);
        let mut events: Vec<(Event, Event)> = Vec::new();
        let started = Instant::now();
        loop {
            let n = self.batch_size(wanted);
            let taken = self.next_batch(n, &mut events)?;
            let pause =
                taken.and_then(|taken| self.kept.keep_unthrottled(taken, self.arms.calibration.as_mut()));
            let wall_time = started.elapsed();
            if let Some(stop) = (self.stop)(&self.kept.samples, &self.kept.places, wall_time) {
                return self.measurements(stop, wall_time);
            }
            if let Some(throttled) = self.throttled_throughout(wall_time) {
                return Err(throttled.into());
            }
            if let Some(pause) = pause {
                // Let the GPU cool down before the next batch, within the time left.
                crate::sync::thread::sleep(pause.min(self.options.timeout.saturating_sub(wall_time)));
            }
        }
    }

    /// The repetitions of the next batch, of the `wanted` that fill [`BATCH_TIME`]: at most
    /// `max_batch` intervals behind one hold (each repetition has every arm's), and as many as the
    /// clock's stamp slots hold. A graph replays the same repetitions, so it holds whole cycles of
    /// the arm order ([`graph_cycle`]).
    fn batch_size(&self, wanted: usize) -> usize {
        let cycle = match self.mode {
            Mode::Graph(_) => graph_cycle(self.arms.users(), self.arms.calibration.is_some()),
            _ => 1,
        };
        let slots = self
            .clock
            .as_ref()
            .map(|clock| clock.slots().min(MOST_CLOCKED_INTERVALS + 1));
        batch_repetitions(wanted, self.bound.max_batch, self.arms.count, cycle, slots)
    }

    /// Takes a batch of `n` repetitions, timed between `events` (grown to fit) or replayed from a
    /// graph; none when the gate's watchdog opened the gate (the batch may hold host time): later
    /// batches are smaller, or, if not even one repetition could be queued behind the gate,
    /// ungated.
    fn next_batch(&mut self, n: usize, events: &mut Vec<(Event, Event)>) -> Result<Option<Intervals>, E> {
        if let Mode::Graph(_) = self.mode {
            return Ok(Some(self.graph_batch(n)?));
        }
        while events.len() < n * self.arms.count {
            events.push((timing_event(), timing_event()));
        }
        let events = &events[..n * self.arms.count];
        match self.timed_batch(events)? {
            Batch::Timed => Ok(Some(self.intervals(events)?)),
            Batch::Opened { first_blocked } => {
                if let AfterOpened::Ungated = self.bound.opened(n, self.arms.count, first_blocked) {
                    // Every sample is taken one way: the gated ones so far go.
                    self.mode = Mode::Ungated;
                    self.kept.forget();
                    if let Some(calibration) = &mut self.arms.calibration {
                        calibration.forget();
                    }
                }
                Ok(None)
            }
        }
    }

    /// One [`Measurement`] per arm, once the stop rule said `stop` after `wall_time` (the stream
    /// drained: every interval read), with CUPTI's times of each when it timed them.
    fn measurements(&mut self, stop: StopReason, wall_time: Duration) -> Result<Vec<Measurement>, E> {
        let conditions = Conditions {
            stop,
            l2_flushed: self.flush.is_some(),
            gated: matches!(self.mode, Mode::Gated { .. }),
            gate_timeouts: self.bound.gate_timeouts,
            graph: matches!(self.mode, Mode::Graph(_)),
            wall_time,
            max_sm_clock_mhz: self.clock.as_ref().map(ClockStamps::max_mhz),
            throttled: self.kept.throttle.discarded(),
            flush_check: self.flush_check.found(),
            max_calibration_share: self.options.max_calibration_share,
            max_spread: Some(self.options.max_noise),
            gate_asked: self.options.gate && !self.options.graph,
            comparison_side: false,
        };
        let mut samples = std::mem::take(&mut self.kept.samples);
        let mut clocks = std::mem::take(&mut self.kept.clocks);
        let mut places = std::mem::take(&mut self.kept.places);
        let mut cupti_times = match self.cupti.take() {
            Some(cupti) => {
                let times = cupti.finish(&self.kept.tags, self.arms.calibration.as_ref())?;
                times.into_iter().map(Some).collect()
            }
            None => vec![None; self.arms.users()],
        };
        let calibration = self.arms.calibration.as_ref().map(|calibration| {
            clocks.remove(calibration.arm);
            let in_order = samples.remove(calibration.arm);
            (calibration, in_order, places.remove(calibration.arm))
        });
        let measured: Vec<Measurement> = samples
            .into_iter()
            .zip(clocks)
            .zip(places)
            .zip(cupti_times.drain(..))
            .map(|(((samples, clocks), places), cupti)| {
                Measurement::new(samples, clocks, places, conditions).with_cupti(cupti)
            })
            .collect();
        let calibrated = match calibration {
            Some((calibration, in_order, places)) => {
                // The stop rules take at least two samples of every arm.
                debug_assert!(!in_order.is_empty(), "a calibration without samples");
                let work_step = measured.iter().filter_map(Measurement::timer_step).min();
                calibration.calibrated(&in_order, &places, work_step)
            }
            None if self.options.calibrate => Calibrated::KernelUnavailable,
            None => Calibrated::NotAsked,
        };
        Ok(measured.into_iter().map(|m| m.calibrated(calibrated)).collect())
    }

    /// The error once the timeout has passed (`wall_time`) with fewer than two samples kept, the
    /// other repetitions throttled: nothing to stop on.
    fn throttled_throughout(&self, wall_time: Duration) -> Option<Error> {
        let timeout = wall_time >= self.options.timeout;
        let throttle = &self.kept.throttle;
        if !(timeout && self.kept.samples[0].len() < 2 && throttle.discarded() > 0) {
            return None;
        }
        Some(Error::Measure(MeasureError::ClockThrottled {
            sm_clock_mhz: median(&throttle.discarded_mhz).unwrap_or(0.0),
            max_sm_clock_mhz: self.clock.as_ref().map_or(0.0, ClockStamps::max_mhz),
            threshold: self.options.throttle_threshold,
            discarded: throttle.discarded(),
        }))
    }

    /// Queues one interval, the `at`-th of its batch: a stamp of the clock into slot `at`, the flush
    /// (untimed), the start event, the arm's work, the end event. The next interval's stamp (or the
    /// batch's last, [`end_stamp`](Self::end_stamp)) ends this one's clock; the stamp comes
    /// before the flush, so that what precedes the start event is what precedes it without stamps.
    /// `record(stream, end)` records an event. In a capture, an error of the crate's own steps
    /// that the capture caused is [`MeasureError::NotCapturable`].
    fn queue_interval(
        &mut self,
        arm: usize,
        repetition: usize,
        at: usize,
        capturing: bool,
        mut record: impl FnMut(&Stream, bool) -> Result<()>,
    ) -> Result<(), E> {
        our_step(capturing, self.stamp(at), "a stamp of the SM clock")?;
        our_step(capturing, self.flush(), "the L2 flush")?;
        record(self.stream, false)?;
        match (&self.cupti, capturing) {
            (Some(cupti), false) => {
                let tag = cupti.tag(at);
                self.run_tagged_arm(arm, repetition, tag)?;
            }
            _ => self.arms.run(self.d, self.stream, arm, repetition, capturing)?,
        }
        if capturing {
            // Outside a capture the end event's record through the crate checks the stream.
            self.ensure_alive_after(arm)?;
        }
        Ok(record(self.stream, true)?)
    }

    /// [`Arms::run`], not capturing, with the work's launches tagged `tag` for CUPTI.
    fn run_tagged_arm(&mut self, arm: usize, repetition: usize, tag: u64) -> Result<(), E> {
        let cupti = self.cupti.as_ref().expect("a CUPTI session");
        cupti.tagged(tag, || self.arms.run(self.d, self.stream, arm, repetition, false))?
    }

    /// The stamp after a batch's `intervals` intervals.
    fn end_stamp(&self, intervals: usize, capturing: bool) -> Result<()> {
        our_step(capturing, self.stamp(intervals), "a stamp of the SM clock")
    }

    fn stamp(&self, slot: usize) -> Result<()> {
        match &self.clock {
            Some(clock) => clock.queue(self.d, self.stream, slot),
            None => Ok(()),
        }
    }

    /// The SM clock during each of a batch's intervals (repetition `i`'s arm `a` at
    /// `i * arms + a`), its repetitions numbered from `first` for their order; all unknown
    /// without the clock.
    fn clocks(&self, first: usize, n: usize) -> Vec<Option<f64>> {
        let Some(clock) = &self.clock else {
            return vec![None; n * self.arms.count];
        };
        self.arms
            .by_arm(&clock.intervals_mhz(n * self.arms.count), first, n)
    }

    /// One replay of `n` repetitions captured into a graph (captured, and replayed once untimed,
    /// on first use).
    fn graph_batch(&mut self, n: usize) -> Result<Intervals, E> {
        let intervals = n * self.arms.count;
        let Mode::Graph(graph) = &mut self.mode else {
            unreachable!("graph batches are graph mode's");
        };
        if graph.as_ref().is_some_and(|batch| batch.intervals() != intervals) {
            // Another batch size: a new graph (the stream has run the old one to its end).
            *graph = None;
        }
        if graph.is_none() {
            let (d, stream, arms) = (self.d, self.stream, self.arms.count);
            let batch = GraphBatch::capture(d, stream, intervals, |recorded| {
                for i in 0..n {
                    for (k, arm) in self.arms.order(i).enumerate() {
                        let interval = &recorded[i * arms + arm];
                        self.queue_interval(arm, i, i * arms + k, true, |stream, end| {
                            GraphBatch::record(d, interval, end, stream)
                        })?;
                    }
                }
                Ok::<(), E>(self.end_stamp(intervals, true)?)
            })?;
            // Kept by the sampler before its first launch, so that it drops only after the stream
            // is drained (`Drained`), also when the launch or the wait fails.
            self.mode = Mode::Graph(Some(batch));
            let Mode::Graph(Some(batch)) = &self.mode else {
                unreachable!("kept just now");
            };
            batch.launch(stream)?;
            self.stream.synchronize()?;
        }
        self.clear_stamps(intervals);
        let Mode::Graph(Some(batch)) = &self.mode else {
            unreachable!("captured above");
        };
        batch.launch(self.stream)?;
        self.stream.synchronize()?;
        let times = (0..intervals).map(|i| batch.elapsed(i)).collect::<Result<_>>()?;
        Ok(Intervals {
            first: 0,
            times,
            clocks: self.clocks(0, n),
            tags: vec![0; intervals],
            places: self.arms.places(0, n),
        })
    }

    /// The CUPTI tag of each of the last queued batch's intervals (repetition `i`'s arm `a` at
    /// `i * arms + a`), its repetitions numbered from `first` for their order: the tag of the
    /// place it was queued in; all 0 without CUPTI.
    fn tags_of(&self, first: usize, n: usize) -> Vec<u64> {
        let Some(cupti) = &self.cupti else {
            return vec![0; n * self.arms.count];
        };
        let by_queue: Vec<u64> = (0..n * self.arms.count).map(|at| cupti.tag(at)).collect();
        self.arms.by_arm(&by_queue, first, n)
    }

    /// Empties the stamp slots of a batch of `intervals` intervals.
    fn clear_stamps(&self, intervals: usize) {
        if let Some(clock) = &self.clock {
            clock.clear(intervals + 1);
        }
    }

    /// The warm-up: `reps` repetitions untimed, then as many again while the SM clock over them
    /// rises and is below [`RAMPED`] of its maximum, for at most [`RAMP_AT_MOST`].
    fn warm_up(&mut self, reps: usize) -> Result<(), E> {
        let started = Instant::now();
        let mut last: Option<f64> = None;
        loop {
            self.clear_stamps(1);
            self.stamp(0)?;
            self.queue_untimed(reps)?;
            self.stamp(1)?;
            self.stream.synchronize()?;
            let Some(clock) = &self.clock else {
                return Ok(());
            };
            let mhz = clock.intervals_mhz(1)[0];
            let ramped = match (mhz, last) {
                (None, _) => true,
                (Some(mhz), _) if mhz >= RAMPED * clock.max_mhz() => true,
                (Some(mhz), Some(last)) => mhz <= last * 1.01,
                (Some(_), None) => false,
            };
            if ramped || started.elapsed() >= RAMP_AT_MOST {
                return Ok(());
            }
            last = mhz;
        }
    }

    /// Queues `n` repetitions (each arm after a flush, if any), and waits for them.
    fn repeat_untimed(&mut self, n: usize) -> Result<(), E> {
        self.queue_untimed(n)?;
        Ok(self.stream.synchronize()?)
    }

    fn queue_untimed(&mut self, n: usize) -> Result<(), E> {
        for i in 0..n {
            for arm in self.arms.order(i) {
                self.flush()?;
                self.arms.run(self.d, self.stream, arm, i, false)?;
                self.ensure_alive_after(arm)?;
            }
        }
        Ok(())
    }

    /// After the caller's work of `arm` where no record through the crate follows it (which checks
    /// as much): the work may have reset the device, and then the stream is gone with its context,
    /// and the sampler's own calls on it (a flush, a stamp, a launch) would reach freed driver
    /// state, which CUDA does not refuse but crashes on. One `cuCtxGetId`.
    fn ensure_alive_after(&self, arm: usize) -> Result<()> {
        match self.arms.is_calibration(arm) {
            true => Ok(()),
            false => self.stream.made_in().ensure_alive(self.d, None).map(drop),
        }
    }

    fn flush(&self) -> Result<()> {
        match self.flush {
            Some(flush) => flush.queue(self.d, self.stream),
            None => Ok(()),
        }
    }

    /// One batch of timed repetitions, queued behind the gate (while gated) and waited for: the
    /// interval of repetition `i`'s arm `a` is between the events `events[i * arms + a]`.
    fn timed_batch(&mut self, events: &[(Event, Event)]) -> Result<Batch, E> {
        let n = events.len() / self.arms.count;
        self.clear_stamps(n * self.arms.count);
        let (held, watchdog) = match self.mode {
            Mode::Gated { gate, watchdog } => {
                let held = gate.hold(self.d, self.stream)?;
                watchdog.arm(&held);
                (Some(held), Some(watchdog))
            }
            Mode::Ungated | Mode::Graph(_) => (None, None),
        };
        let mut first_blocked = false;
        let first = self.reps;
        // Tags by the interval's place in the queue (as its clock slot): `intervals` reads them.
        if let Some(cupti) = &mut self.cupti {
            cupti.next_batch(n * self.arms.count);
        }
        let queued = (0..n)
            .try_for_each(|i| {
                for (k, arm) in self.arms.order(first + i).enumerate() {
                    let (start, end) = &events[i * self.arms.count + arm];
                    let at = i * self.arms.count + k;
                    self.queue_interval(arm, first + i, at, false, |stream, end_of_it| match end_of_it {
                        false => start.record(stream),
                        true => end.record(stream),
                    })?;
                }
                if i == 0 {
                    first_blocked = watchdog.is_some_and(Watchdog::opened);
                }
                Ok::<(), E>(())
            })
            .and_then(|()| Ok(self.end_stamp(n * self.arms.count, false)?));
        let opened = watchdog.is_some_and(Watchdog::disarm);
        drop(held);
        queued?;
        self.stream.synchronize()?;
        Ok(match opened {
            true => Batch::Opened { first_blocked },
            false => Batch::Timed,
        })
    }

    /// The intervals of a timed batch between `events` (complete), with their clocks; the next
    /// batch's repetitions are numbered after them.
    fn intervals(&mut self, events: &[(Event, Event)]) -> Result<Intervals> {
        let n = events.len() / self.arms.count;
        let times = events
            .iter()
            .map(|(start, end)| Ok(from_ms(start.elapsed_time(end)?)))
            .collect::<Result<_>>()?;
        let first = self.reps;
        let clocks = self.clocks(first, n);
        let tags = self.tags_of(first, n);
        self.reps += n;
        Ok(Intervals {
            first,
            times,
            clocks,
            tags,
            places: self.arms.places(first, n),
        })
    }
}
