//! The engine that [`measure`](crate::timing::measure) and [`compare`](crate::timing::compare)
//! share: one or more arms of work timed in repetitions, after a warm-up that waits for the SM
//! clock's ramp; batched behind a host-held gate (or, once a repetition could not be queued behind
//! it, without), or replayed from a captured graph; an optional L2 flush before each arm;
//! repetitions at a throttled clock discarded; until the caller's stop rule says so.

use crate::capture_mode::RelaxedCapture;
use crate::context::ContextInstance;
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::stream::Stream;
use crate::timing::batches::{AfterOpened, Batch, MOST_CLOCKED_INTERVALS, after_opened, batch_repetitions};
use crate::timing::calibration::{Calibrated, Calibration};
use crate::timing::cupti::Session;
use crate::timing::cupti_times::CuptiTimes;
use crate::timing::fixed_cost::{EMPTY, RUNGS, rung_of};
use crate::timing::flush_check::FlushCheck;
use crate::timing::gate::{Gate, Watchdog};
use crate::timing::graph::{self, GraphBatch};
use crate::timing::kernels::TimingKernels;
use crate::timing::l2_flush::{L2Flush, reset_persisting_l2};
use crate::timing::measurement::{Conditions, Measurement, StopReason};
use crate::timing::options::MeasureOptions;
use crate::timing::scratch_memory::{DeviceBuffer, Needs, ScratchLease};
use crate::timing::sm_clock::ClockStamps;
use crate::timing::statistics::median;
use crate::timing::throttle::Throttle;
use crate::timing::timer::{Timer, from_ms, timing_event};
use std::time::{Duration, Instant};

/// The work of one arm (`0..arms`) of a repetition, submitted to the stream.
pub(crate) type ArmWork<'w, E> = dyn FnMut(&Stream, usize) -> Result<(), E> + 'w;
/// Whether to stop, given each arm's samples so far and the wall time spent in timed repetitions.
pub(crate) type StopRule<'s> = dyn FnMut(&[Vec<Duration>], Duration) -> Option<StopReason> + 's;

/// One call of [`Sampler::run`]: what it times, how, and what it has kept so far.
pub(crate) struct Sampler<'r, 'w, E> {
    d: &'static Driver,
    stream: &'r Stream,
    options: &'r MeasureOptions,
    flush: Option<&'r L2Flush<'r>>,
    mode: Mode<'r>,
    /// The SM clock's stamps, when read.
    clock: Option<ClockStamps<'r>>,
    throttle: Throttle,
    /// Arms, the calibration's included.
    arms: usize,
    /// The calibration's arm, when calibrating: numbered last (run first and last in turn,
    /// [`order`](Self::order)), a kernel of `kernels` whose length rotates over the repetitions
    /// ([`rung_of`]).
    calibration_arm: Option<usize>,
    kernels: Option<&'r TimingKernels>,
    /// The flush check's buffers and the device's L2 size in bytes, until the check has run.
    probe: Option<(&'r DeviceBuffer, usize)>,
    flush_check: Option<FlushCheck>,
    work: &'r mut ArmWork<'w, E>,
    /// This thread's relaxed capture mode for the measurement; the work runs in the caller's.
    relaxed: &'r RelaxedCapture<'static>,
    stop: &'r mut StopRule<'w>,
    /// Timed repetitions queued so far, for the alternation of arms across batches.
    reps: usize,
    /// The bound on a batch, as [`MeasureOptions::max_batch`]: the option's, cut when a batch did
    /// not fit behind the gate.
    max_batch: usize,
    /// Batches whose gate the watchdog opened.
    gate_timeouts: usize,
    /// Each arm's samples kept so far.
    samples: Vec<Vec<Duration>>,
    /// The SM clock during each of `samples`.
    clocks: Vec<Vec<Option<f64>>>,
    /// With [`MeasureOptions::cupti`]: CUPTI's session, whose tags mark each timed interval's work.
    cupti: Option<Session>,
    /// The tag of the next interval queued with CUPTI: every interval queued gets its own, also
    /// those of a batch that is then dropped.
    next_tag: u64,
    /// The tag of the first interval of the batch last queued.
    batch_tag: u64,
    /// The CUPTI tag of each of `samples`.
    tags: Vec<Vec<u64>>,
    /// The calibration kernel's rung ([`RUNGS`]) of each of the calibration arm's
    /// `samples`.
    rungs: Vec<usize>,
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
    /// order (0, 1, ... then ..., 1, 0) so that none always runs first ([`order`](Self::order));
    /// until `stop`
    /// says so (after at least one batch with two samples per arm, unless the timeout ended it).
    /// Returns one [`Measurement`] per arm of the caller's, each with the calibration.
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
        // A stamp before each interval of the largest batch (a two-arm graph may add a repetition)
        // and one after the last; larger batches are cut to fit (see `Sampler::batch_size`).
        let asked_arms = arms + usize::from(options.calibrate);
        let stamp_slots = match options.sm_clock {
            true => {
                ((options.max_batch / asked_arms).max(1).saturating_add(1))
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
            probe_bytes: l2.map(FlushCheck::scratch_bytes),
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
        let kernels = scratch.kernels();
        let calibration_arm = kernels.filter(|_| options.calibrate).map(|_| arms);
        let all_arms = arms + usize::from(calibration_arm.is_some());
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
        let mut sampler = Sampler {
            d,
            stream,
            options,
            flush: flush.as_ref(),
            mode,
            clock,
            throttle: Throttle::new(floor_mhz),
            arms: all_arms,
            calibration_arm,
            kernels,
            probe: scratch.probe().zip(l2),
            flush_check: None,
            work,
            relaxed: &relaxed,
            stop,
            reps: 0,
            max_batch: options.max_batch,
            gate_timeouts: 0,
            samples: vec![Vec::new(); all_arms],
            clocks: vec![Vec::new(); all_arms],
            cupti,
            next_tag: 1,
            batch_tag: 1,
            tags: vec![Vec::new(); all_arms],
            rungs: Vec::new(),
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

/// A batch's intervals, repetition `i`'s arm `a` at `i * arms + a`: each one's GPU time and the SM
/// clock during it.
struct Intervals {
    /// The number of the batch's first repetition, whose arms' order and calibration kernel
    /// follow from it ([`order`](Sampler::order), [`rung_of`]).
    first: usize,
    times: Vec<Duration>,
    clocks: Vec<Option<f64>>,
    /// Each interval's CUPTI tag (0 in graph mode, which CUPTI does not time).
    tags: Vec<u64>,
}

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
        if let Some((probe, l2)) = self.probe.take() {
            let flush = || self.flush();
            self.flush_check = Some(FlushCheck::run(self.d, self.stream, probe, l2, &flush)?);
        }

        let wanted = count(BATCH_TIME);
        let mut events: Vec<(Event, Event)> = Vec::new();
        let started = Instant::now();
        loop {
            let n = self.batch_size(wanted);
            let taken = self.next_batch(n, &mut events)?;
            let pause = taken.and_then(|taken| self.keep_unthrottled(taken));
            let wall_time = started.elapsed();
            if let Some(stop) = (self.stop)(&self.samples, wall_time) {
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
    /// clock's stamp slots hold. A graph of two of the caller's arms holds an even number of
    /// repetitions, so that each runs first equally often in every replay.
    fn batch_size(&self, wanted: usize) -> usize {
        let even = matches!(self.mode, Mode::Graph(_)) && self.user_arms() > 1;
        let slots = self
            .clock
            .as_ref()
            .map(|clock| clock.slots().min(MOST_CLOCKED_INTERVALS + 1));
        batch_repetitions(wanted, self.max_batch, self.arms, even, slots)
    }

    /// Takes a batch of `n` repetitions, timed between `events` (grown to fit) or replayed from a
    /// graph; none when the gate's watchdog opened the gate (the batch may hold host time): later
    /// batches are smaller, or, if not even one repetition could be queued behind the gate,
    /// ungated.
    fn next_batch(&mut self, n: usize, events: &mut Vec<(Event, Event)>) -> Result<Option<Intervals>, E> {
        if let Mode::Graph(_) = self.mode {
            return Ok(Some(self.graph_batch(n)?));
        }
        while events.len() < n * self.arms {
            events.push((timing_event(), timing_event()));
        }
        let events = &events[..n * self.arms];
        match self.timed_batch(events)? {
            Batch::Timed => Ok(Some(self.intervals(events)?)),
            Batch::Opened { first_blocked } => {
                self.gate_timeouts += 1;
                match after_opened(n, first_blocked) {
                    // `max_batch` counts intervals, `batch` repetitions.
                    AfterOpened::Smaller(batch) => self.max_batch = batch * self.arms,
                    AfterOpened::Ungated => {
                        // Every sample is taken one way: the gated ones so far go.
                        self.mode = Mode::Ungated;
                        self.samples.iter_mut().for_each(Vec::clear);
                        self.clocks.iter_mut().for_each(Vec::clear);
                        self.tags.iter_mut().for_each(Vec::clear);
                        self.throttle.forget_discarded();
                        self.rungs.clear();
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
            gate_timeouts: self.gate_timeouts,
            graph: matches!(self.mode, Mode::Graph(_)),
            wall_time,
            max_sm_clock_mhz: self.clock.as_ref().map(ClockStamps::max_mhz),
            throttled: self.throttle.discarded(),
            flush_check: self.flush_check,
            max_calibration_share: self.options.max_calibration_share,
            max_spread: Some(self.options.max_noise),
            gate_asked: self.options.gate && !self.options.graph,
            comparison_side: false,
        };
        let mut samples = std::mem::take(&mut self.samples);
        let mut clocks = std::mem::take(&mut self.clocks);
        let mut cupti_times = match self.cupti.take() {
            Some(session) => {
                let spans = session.finish()?;
                let times = |tags: &Vec<u64>| tags.iter().map(|&tag| spans.of(tag)).collect::<Vec<_>>();
                let mut by_arm: Vec<Vec<Option<Duration>>> = self.tags.iter().map(times).collect();
                // CUPTI's empty kernels: the calibration's samples of the rung without a length.
                let empty: Vec<_> = self
                    .calibration_arm
                    .map(|arm| by_arm.remove(arm))
                    .unwrap_or_default()
                    .into_iter()
                    .zip(&self.rungs)
                    .filter(|&(_, &rung)| rung == EMPTY)
                    .map(|(time, _)| time)
                    .collect();
                // The calibration's kernels always launch: none recorded means CUPTI's records go
                // elsewhere (another CUPTI client of this process registered its own buffers).
                if !empty.is_empty() && empty.iter().all(Option::is_none) && spans.dropped == 0 {
                    let reason = "CUPTI delivered no record of the calibration's kernels: another \
                                  CUPTI client of this process (a profiler) may be taking its records";
                    return Err(Error::CuptiUnavailable {
                        reason: reason.into(),
                    }
                    .into());
                }
                let of_arm = |arm| Some(CuptiTimes::new(arm, &empty, spans.dropped));
                by_arm.into_iter().map(of_arm).collect()
            }
            None => vec![None; self.user_arms()],
        };
        let calibration = self.calibration_arm.map(|arm| {
            clocks.remove(arm);
            samples.remove(arm)
        });
        let measured: Vec<Measurement> = samples
            .into_iter()
            .zip(clocks)
            .zip(cupti_times.drain(..))
            .map(|((samples, clocks), cupti)| Measurement::new(samples, clocks, conditions).with_cupti(cupti))
            .collect();
        let calibrated = match calibration {
            Some(in_order) => {
                // The stop rules take at least two samples of every arm.
                debug_assert!(!in_order.is_empty(), "a calibration without samples");
                let work_step = measured.iter().filter_map(Measurement::timer_step).min();
                Calibration::of_samples(&in_order, &self.rungs, work_step)
                    .map_or(Calibrated::NotAsked, Calibrated::Done)
            }
            None if self.options.calibrate => Calibrated::KernelUnavailable,
            None => Calibrated::NotAsked,
        };
        Ok(measured.into_iter().map(|m| m.calibrated(calibrated)).collect())
    }

    /// Keeps the repetitions of `taken` whose clock was not throttled; returns the pause before the
    /// next batch, if some were throttled.
    fn keep_unthrottled(&mut self, taken: Intervals) -> Option<Duration> {
        let mut discarded = Vec::new();
        let repetitions = taken
            .times
            .chunks(self.arms)
            .zip(taken.clocks.chunks(self.arms))
            .zip(taken.tags.chunks(self.arms));
        for (j, ((times, mhz), tags)) in repetitions.enumerate() {
            if mhz.iter().all(|&mhz| self.throttle.keeps(mhz)) {
                if self.calibration_arm.is_some() {
                    self.rungs.push(rung_of(taken.first + j));
                }
                for (arm, ((&time, &mhz), &tag)) in times.iter().zip(mhz).zip(tags).enumerate() {
                    self.samples[arm].push(time);
                    self.clocks[arm].push(mhz);
                    self.tags[arm].push(tag);
                }
            } else {
                let lowest = mhz.iter().flatten().copied().fold(f64::INFINITY, f64::min);
                discarded.push(lowest);
            }
        }
        self.throttle.after_batch(&discarded)
    }

    /// The error once the timeout has passed (`wall_time`) with fewer than two samples kept, the
    /// other repetitions throttled: nothing to stop on.
    fn throttled_throughout(&self, wall_time: Duration) -> Option<Error> {
        let timeout = wall_time >= self.options.timeout;
        if !(timeout && self.samples[0].len() < 2 && self.throttle.discarded() > 0) {
            return None;
        }
        Some(Error::ClockThrottled {
            sm_clock_mhz: median(&self.throttle.discarded_mhz).unwrap_or(0.0),
            max_sm_clock_mhz: self.clock.as_ref().map_or(0.0, ClockStamps::max_mhz),
            threshold: self.options.throttle_threshold,
            discarded: self.throttle.discarded(),
        })
    }

    /// The arms of repetition `i` in the order they run, over a cycle of four: the caller's
    /// forward, backward, backward, forward (0, 1, ... then ..., 1, 0), so that none of them always
    /// runs first or always right after another given one, and any two repetitions in a row
    /// balance; the calibration's (if any) before them in even repetitions and after them in odd
    /// ones, so that with two of the caller's arms each follows the calibration equally often.
    /// `i` counts across batches (a batch may hold an odd number of repetitions, or one).
    fn order(&self, i: usize) -> impl Iterator<Item = usize> + use<E> {
        arm_order(i, self.user_arms(), self.calibration_arm)
    }

    /// The caller's arms (the calibration's is after them).
    fn user_arms(&self) -> usize {
        self.calibration_arm.unwrap_or(self.arms)
    }

    /// Queues one interval, the `at`-th of its batch: a stamp of the clock into slot `at`, the flush
    /// (untimed), the start event, the arm's work, the end event. The next interval's stamp (or the
    /// batch's last, [`end_stamp`](Self::end_stamp)) ends this one's clock; the stamp comes
    /// before the flush, so that what precedes the start event is what precedes it without stamps.
    /// `record(stream, end)` records an event. In a capture, an error of the crate's own steps
    /// that the capture caused is [`Error::NotCapturable`].
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
            (Some(_), false) => {
                let tag = self.batch_tag + at as u64;
                self.run_tagged_arm(arm, repetition, tag)?;
            }
            _ => self.run_arm(arm, repetition, capturing)?,
        }
        if capturing {
            // Outside a capture the end event's record through the crate checks the stream.
            self.ensure_alive_after(arm)?;
        }
        Ok(record(self.stream, true)?)
    }

    /// [`run_arm`](Self::run_arm), not capturing, with the work's launches tagged `tag` for CUPTI.
    fn run_tagged_arm(&mut self, arm: usize, repetition: usize, tag: u64) -> Result<(), E> {
        let session = self.cupti.take().expect("a CUPTI session");
        let ran = session.tagged(tag, || self.run_arm(arm, repetition, false));
        self.cupti = Some(session);
        ran?
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
            return vec![None; n * self.arms];
        };
        let by_queue = clock.intervals_mhz(n * self.arms);
        let mut clocks = vec![None; n * self.arms];
        for i in 0..n {
            for (k, arm) in self.order(first + i).enumerate() {
                clocks[i * self.arms + arm] = by_queue[i * self.arms + k];
            }
        }
        clocks
    }

    /// One replay of `n` repetitions captured into a graph (captured, and replayed once untimed,
    /// on first use).
    fn graph_batch(&mut self, n: usize) -> Result<Intervals, E> {
        let intervals = n * self.arms;
        let Mode::Graph(graph) = &mut self.mode else {
            unreachable!("graph batches are graph mode's");
        };
        if graph.as_ref().is_some_and(|batch| batch.intervals() != intervals) {
            // Another batch size: a new graph (the stream has run the old one to its end).
            *graph = None;
        }
        if graph.is_none() {
            let (d, stream, arms) = (self.d, self.stream, self.arms);
            let batch = GraphBatch::capture(d, stream, intervals, |recorded| {
                for i in 0..n {
                    for (k, arm) in self.order(i).enumerate() {
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
        })
    }

    /// The CUPTI tag of each of the last queued batch's intervals (repetition `i`'s arm `a` at
    /// `i * arms + a`), its repetitions numbered from `first` for their order: the tag of the
    /// place it was queued in.
    fn tags_of(&self, first: usize, n: usize) -> Vec<u64> {
        let mut tags = vec![0; n * self.arms];
        for i in 0..n {
            for (k, arm) in self.order(first + i).enumerate() {
                tags[i * self.arms + arm] = self.batch_tag + (i * self.arms + k) as u64;
            }
        }
        tags
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
            for arm in self.order(i) {
                self.flush()?;
                self.run_arm(arm, i, false)?;
                self.ensure_alive_after(arm)?;
            }
        }
        Ok(())
    }

    /// Queues arm `arm`'s work in repetition `repetition`: the caller's, or the calibration's
    /// kernel of that repetition's rung (`capturing`: into a graph's capture).
    fn run_arm(&mut self, arm: usize, repetition: usize, capturing: bool) -> Result<(), E> {
        // The calibration's kernel too, so that its interval holds the same mode changes as the
        // work's (a launch is a call that no capture forbids).
        let relaxed = self.relaxed;
        let calibration = self.kernels.filter(|_| self.calibration_arm == Some(arm));
        relaxed.in_callers_mode(|| match calibration {
            Some(kernels) => {
                let launched = match RUNGS[rung_of(repetition)] {
                    Duration::ZERO => kernels.launch_empty(self.d, self.stream),
                    length => kernels.launch_spin(self.d, self.stream, length),
                };
                Ok(our_step(capturing, launched, "the calibration's kernel")?)
            }
            None => (self.work)(self.stream, arm),
        })
    }

    /// After the caller's work of `arm` where no record through the crate follows it (which checks
    /// as much): the work may have reset the device, and then the stream is gone with its context,
    /// and the sampler's own calls on it (a flush, a stamp, a launch) would reach freed driver
    /// state, which CUDA does not refuse but crashes on. One `cuCtxGetId`.
    fn ensure_alive_after(&self, arm: usize) -> Result<()> {
        match self.calibration_arm == Some(arm) {
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
        let n = events.len() / self.arms;
        self.clear_stamps(n * self.arms);
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
        self.batch_tag = self.next_tag;
        self.next_tag += (n * self.arms) as u64;
        let queued = (0..n)
            .try_for_each(|i| {
                for (k, arm) in self.order(first + i).enumerate() {
                    let (start, end) = &events[i * self.arms + arm];
                    let at = i * self.arms + k;
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
            .and_then(|()| Ok(self.end_stamp(n * self.arms, false)?));
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
        let n = events.len() / self.arms;
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
        })
    }
}

/// [`Sampler::order`]: the arms of repetition `i`, of `users` of the caller's and the calibration's
/// (numbered `users`, if any).
fn arm_order(i: usize, users: usize, calibration: Option<usize>) -> impl Iterator<Item = usize> {
    let forward = matches!(i % 4, 0 | 3);
    let alternating = (0..users).map(move |k| if forward { k } else { users - 1 - k });
    // The calibration's kernel runs first, then last: an interval's fixed cost can depend on
    // where it runs in the repetition (measured: the first place read more), and so the
    // calibration and the caller's arms each follow one another equally often; with an odd
    // number of rungs, each rung runs first and last equally often too.
    let even = i.is_multiple_of(2);
    let first = calibration.filter(|_| even);
    let last = calibration.filter(|_| !even);
    first.into_iter().chain(alternating).chain(last)
}

/// The result of one of the sampler's own steps (`step`): in a capture, an error that the capture
/// caused is [`Error::NotCapturable`].
fn our_step(capturing: bool, result: Result<()>, step: &str) -> Result<()> {
    match capturing {
        true => graph::in_capture(result, step),
        false => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Counts by a pair of arms, or by an arm and its place.
    type Tally = HashMap<(usize, usize), usize>;

    /// How often each arm runs right after each other one, and in each place, over `reps`
    /// repetitions in a row from repetition 0.
    fn tally(reps: usize, users: usize, calibration: bool) -> (Tally, Tally) {
        let calibration = calibration.then_some(users);
        let (mut after, mut place) = (HashMap::new(), HashMap::new());
        let mut previous = None;
        for i in 0..reps {
            for (k, arm) in arm_order(i, users, calibration).enumerate() {
                *place.entry((arm, k)).or_insert(0) += 1;
                if let Some(p) = previous {
                    *after.entry((p, arm)).or_insert(0) += 1;
                }
                previous = Some(arm);
            }
        }
        (after, place)
    }

    #[test]
    fn every_arm_runs_once_a_repetition() {
        for users in 1..=3 {
            for calibration in [None, Some(users)] {
                for i in 0..8 {
                    let mut arms: Vec<usize> = arm_order(i, users, calibration).collect();
                    arms.sort_unstable();
                    let all = users + usize::from(calibration.is_some());
                    assert_eq!(arms, (0..all).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn the_calibration_runs_first_and_last_in_turn_and_each_side_of_a_comparison_follows_it_equally() {
        // measure: the calibration (1) first, then last.
        let order = |i| arm_order(i, 1, Some(1)).collect::<Vec<_>>();
        assert_eq!((order(0), order(1)), (vec![1, 0], vec![0, 1]));
        // compare, calibrated: over whole cycles of four, each side follows the calibration, and
        // each takes each place, equally often.
        let (after, place) = tally(400, 2, true);
        assert_eq!(after.get(&(2, 0)), after.get(&(2, 1)), "{after:?}");
        assert!(after.get(&(2, 0)).is_some_and(|&n| n > 0));
        for k in 0..3 {
            assert_eq!(place.get(&(0, k)), place.get(&(1, k)), "{place:?}");
        }
        assert_eq!(place[&(2, 0)], place[&(2, 2)]);
        // compare without calibration: in any two repetitions in a row from an even one, each
        // side runs first once.
        for start in (0..16).step_by(2) {
            let firsts: Vec<usize> = (start..start + 2)
                .map(|i| arm_order(i, 2, None).next().unwrap())
                .collect();
            assert!(firsts.contains(&0) && firsts.contains(&1), "{start}: {firsts:?}");
        }
    }

    #[test]
    fn each_rung_runs_first_and_last_equally_often() {
        use crate::timing::fixed_cost::{RUNGS, rung_of};
        let n = 2 * RUNGS.len() * 4;
        for rung in 0..RUNGS.len() {
            let firsts = (0..n).filter(|&i| rung_of(i) == rung && arm_order(i, 1, Some(1)).next() == Some(1));
            let lasts = (0..n).filter(|&i| rung_of(i) == rung && arm_order(i, 1, Some(1)).last() == Some(1));
            assert_eq!(firsts.count(), lasts.count(), "rung {rung}");
        }
    }
}
