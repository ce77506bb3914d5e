//! [`Wait`]: how a wait on an event or a stream waits, chosen per wait
//! ([`Event::synchronize_with`], [`Stream::synchronize_with`], and for a future
//! [`Completion::with_wait`](crate::Completion::with_wait)), each with what it costs.

use crate::capture_mode::{is_capture_interference, relaxed_if_loaded};
use crate::completion::block_on_until;
use crate::error::Result;
use crate::event::Event;
use crate::stream::Stream;
use crate::sync::thread;
use std::time::{Duration, Instant};

/// How a synchronous wait waits (and a future, as
/// [`Completion::with_wait`](crate::Completion::with_wait) says). Latency is from the GPU's
/// completion of the work to the return; CPU is what the waiting thread spends meanwhile. Every
/// way but [`Driver`](Self::Driver) asks CUDA with queries made in relaxed capture mode, so that a
/// wait never breaks another thread's graph capture in global mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Queries in a loop on this thread. The lowest latency (about one query's cost, a
    /// microsecond); one core busy for the whole wait.
    Spin,
    /// Queries, giving the core to the scheduler between queries (`sched_yield`). About
    /// [`Spin`](Self::Spin)'s latency where cores are idle, and a runnable thread of this machine
    /// gets the core meanwhile; with nothing else to run, the core stays busy.
    Yield,
    /// [`Spin`](Self::Spin) for at most `budget`, then [`Reactor`](Self::Reactor): waits shorter
    /// than the budget return at spin latency, longer ones cost at most `budget` of one core.
    SpinThen {
        /// The most time spent spinning.
        budget: Duration,
    },
    /// Sleeps, woken by the crate's reactor thread, which queries the events of every pending
    /// wait and future in turn. No CPU on this thread; the reactor's wake-up latency (tens of
    /// microseconds, more with thousands of waits pending) and its queries, shared by all. On a
    /// [`flag_lane`](crate::StreamOptions::flag_lane) stream's event, also woken by the lane's
    /// scanner, microseconds after the GPU writes the record's ticket (a core spins meanwhile).
    Reactor,
    /// CUDA's own synchronize (`cuEventSynchronize`, `cuStreamSynchronize`): a
    /// [`blocking`](crate::EventBuilder::blocking) event sleeps in the driver; other events and
    /// streams wait as the context's schedule says (CUDA's heuristic by default: spin while the
    /// process has fewer active contexts than cores, yield otherwise). It has no timeout: with
    /// one, a blocking event waits as [`Reactor`](Self::Reactor) and others as
    /// [`Spin`](Self::Spin), as [`Event::synchronize_timeout`] does.
    Driver,
}

impl Wait {
    /// For a future ([`Completion::with_wait`](crate::Completion::with_wait)): whether it spins
    /// (`Some`), for how long (`None`: for ever) and yielding or not; `None` for the reactor.
    pub(crate) fn spins(self) -> Option<(Option<Duration>, bool)> {
        match self {
            Wait::Spin => Some((None, false)),
            Wait::Yield => Some((None, true)),
            Wait::SpinThen { budget } => Some((Some(budget), false)),
            Wait::Reactor | Wait::Driver => None,
        }
    }
}

impl Event {
    /// Waits on this thread, the way `wait` says, until the work the event captured has completed
    /// (`Ok(true)`; at once if never recorded) or `timeout` has passed (`Ok(false)`; `None`: no
    /// timeout).
    ///
    /// ```no_run
    /// use cuda_event::{Event, Stream, Wait};
    /// use std::time::Duration;
    /// # fn main() -> cuda_event::Result<()> {
    /// let stream = Stream::new(0)?;
    /// let done = stream.record_event()?;
    /// // A short wait expected: spin up to 20 us, then sleep.
    /// let budget = Duration::from_micros(20);
    /// assert!(done.synchronize_with(Wait::SpinThen { budget }, None)?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`query`](Self::query) (and [`synchronize`](Self::synchronize) for
    /// [`Wait::Driver`]); with [`Wait::Reactor`] or after a [`Wait::SpinThen`] budget also as
    /// [`completion`](Self::completion) ([`Error::ReactorUnavailable`](crate::Error::ReactorUnavailable)).
    pub fn synchronize_with(&self, wait: Wait, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        let spin_until = |budget: Duration| {
            let end = Instant::now().checked_add(budget);
            match (end, deadline) {
                (Some(end), Some(deadline)) => Some(end.min(deadline)),
                (end, None) => end,
                (None, deadline) => deadline,
            }
        };
        match wait {
            Wait::Driver => match timeout {
                None => self.synchronize().map(|()| true),
                Some(timeout) => self.synchronize_timeout(timeout),
            },
            Wait::Reactor => block_on_until(self.completion(), deadline),
            Wait::Spin => self.poll_until(deadline, false),
            Wait::Yield => self.poll_until(deadline, true),
            Wait::SpinThen { budget } => match self.poll_until(spin_until(budget), false)? {
                true => Ok(true),
                false if deadline.is_some_and(|deadline| Instant::now() >= deadline) => Ok(false),
                false => block_on_until(self.completion(), deadline),
            },
        }
    }

    /// Queries until complete (`Ok(true)`) or `until` has passed (`Ok(false)`; `None`: never),
    /// yielding the thread between queries if `yielding`, spinning otherwise; in relaxed capture
    /// mode, as the reactor's queries are, and, as they do, reading an answer that another
    /// thread's capture caused as "not yet".
    pub(crate) fn poll_until(&self, until: Option<Instant>, yielding: bool) -> Result<bool> {
        let _relaxed = relaxed_if_loaded();
        loop {
            match self.query() {
                Ok(true) => return Ok(true),
                Err(e) if !is_capture_interference(&e) => return Err(e),
                Ok(false) | Err(_) => {}
            }
            if until.is_some_and(|until| Instant::now() >= until) {
                return Ok(false);
            }
            match yielding {
                true => thread::yield_now(),
                false => std::hint::spin_loop(),
            }
        }
    }
}

impl Stream {
    /// Waits on this thread, the way `wait` says, until all work submitted to the stream so far
    /// has completed (`Ok(true)`) or `timeout` has passed (`Ok(false)`; `None`: no timeout). But
    /// for [`Wait::Driver`] without a timeout (`cuStreamSynchronize`), it records an event on the
    /// stream and waits on that, as [`completion`](Self::completion) does; where CUDA blocks that
    /// record (a full queue), the call blocks past its timeout (see
    /// [`synchronize_timeout`](Self::synchronize_timeout)).
    ///
    /// # Errors
    /// [`Error::StreamCapturing`](crate::Error::StreamCapturing) while the stream is being
    /// captured; as [`Event::synchronize_with`] otherwise.
    pub fn synchronize_with(&self, wait: Wait, timeout: Option<Duration>) -> Result<bool> {
        if let (Wait::Driver, None) = (wait, timeout) {
            return self.synchronize().map(|()| true);
        }
        let event = self.record_for_completion()?;
        match wait {
            // Its event is not blocking: the driver's timed wait is the reactor's, as
            // `synchronize_timeout`'s is.
            Wait::Driver => event.synchronize_with(Wait::Reactor, timeout),
            wait => event.synchronize_with(wait, timeout),
        }
    }
}
