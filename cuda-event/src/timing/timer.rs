//! Timing one section of a stream's work with a pair of timing events from the pool.

use crate::capture_mode::relaxed_if_loaded;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::stream::Stream;
use std::sync::Arc;
use std::time::Duration;

/// A section of a stream's work being timed: made by [`Timer::start`], ended by [`Timer::stop`].
///
/// ```no_run
/// # fn main() -> cuda_event::Result<()> {
/// use cuda_event::Stream;
/// use cuda_event::timing::Timer;
/// let stream = Stream::new(0)?;
/// let timer = Timer::start(&stream)?;
/// // ... submit work to stream.as_raw() ...
/// let timing = timer.stop(&stream)?;
/// println!("{:?}", timing.wait()?);          // or timing.elapsed()? without blocking
/// # Ok(()) }
/// ```
///
/// A timer may be stopped more than once: each [`Timing`] runs from the same start (laps), and a
/// stop refused (a stream of another device) leaves the timer as it was.
///
/// The interval is GPU time between the two records, resolution about 0.5 us: it includes any time
/// the stream sat idle waiting for the host to submit the work. To time work apart from host launch
/// gaps, with warm-up, repetitions and statistics, use [`measure`](crate::timing::measure).
#[must_use = "a Timer measures nothing until stopped"]
#[derive(Debug)]
pub struct Timer {
    start: Arc<Event>,
    device: i32,
}

/// A timed section, complete or not: read it with [`elapsed`](Self::elapsed) (never blocks) or
/// [`wait`](Self::wait).
#[derive(Debug)]
#[must_use = "a timing is read with `elapsed` or `wait`"]
pub struct Timing {
    start: Arc<Event>,
    end: Event,
}

impl Timer {
    /// Starts timing the work submitted to `stream` from now on (records a timing event, taken from
    /// this thread's event pool when it has one).
    pub fn start(stream: &Stream) -> Result<Timer> {
        let start = section_event();
        start.record(stream)?;
        Ok(Timer {
            start: Arc::new(start),
            device: stream.device(),
        })
    }

    /// Ends the section: the work submitted to `stream` up to now. `stream` may be another stream of
    /// the same device (work that forked from the start stream and joins here); if it is not joined
    /// to the start stream, the interval is between two unordered points (a negative one reads as
    /// 0), and [`Timing::wait`] waits for both.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] (no CUDA call) for a stream of another device: GPU clocks of two
    /// devices do not compare.
    pub fn stop(&self, stream: &Stream) -> Result<Timing> {
        if stream.device() != self.device {
            return Err(Error::DeviceMismatch {
                event: self.device,
                stream: stream.device(),
            });
        }
        let end = section_event();
        end.record(stream)?;
        Ok(Timing {
            start: self.start.clone(),
            end,
        })
    }
}

impl Timing {
    /// The section's GPU time, or `None` while its work (at its start or its end) is not complete.
    /// Never blocks. Its CUDA calls run in relaxed capture mode, so that reading a timing on one
    /// thread never breaks a graph capture that another makes in global mode.
    ///
    /// # Errors
    /// The CUDA error of the work (what [`Event::query`] returns).
    pub fn elapsed(&self) -> Result<Option<Duration>> {
        // Its reads are the crate's way of answering, not calls the caller asked for one by one.
        let _relaxed = relaxed_if_loaded();
        match self.start.elapsed_time(&self.end) {
            Ok(ms) => Ok(Some(from_ms(ms))),
            // Not complete: the queries say whether the work failed (elapsed_time does not).
            Err(Error::NotComplete) => self.end.query().and(self.start.query()).map(|_| None),
            Err(e) => Err(e),
        }
    }

    /// Waits (sleeping, not spinning) until the section's work is complete and returns its GPU time.
    /// Waits for the start too: when the section was stopped on a stream not joined to the one it
    /// started on, the end can complete before the start.
    ///
    /// # Errors
    /// The CUDA error of the work.
    pub fn wait(&self) -> Result<Duration> {
        self.end.synchronize()?;
        self.start.synchronize()?;
        self.start.elapsed_time(&self.end).map(from_ms)
    }

    /// The start and end events, e.g. to await the end ([`Event::completion`]) or to make another
    /// stream wait for it.
    pub fn events(&self) -> (&Event, &Event) {
        (&self.start, &self.end)
    }
}

/// A timing event whose synchronize sleeps, for a [`Timer`]'s section: its owner may wait for either
/// end (lazy: created, or taken from the pool, at its first record).
fn section_event() -> Event {
    Event::lazy(Event::builder().enable_timing(true).blocking(true))
}

/// A timing event (lazy: created, or taken from the pool, at its first record).
pub(crate) fn timing_event() -> Event {
    Event::lazy(Event::builder().enable_timing(true))
}

/// CUDA's milliseconds as a duration: a negative interval (two unordered points) or NaN reads as
/// 0, one too long for a `Duration` as the longest.
pub(crate) fn from_ms(ms: f32) -> Duration {
    Duration::try_from_secs_f64(f64::from(ms.max(0.0)) / 1e3).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_milliseconds_of_any_value_read_as_a_duration() {
        assert_eq!(from_ms(1.5), Duration::from_micros(1500));
        assert_eq!(from_ms(-0.25), Duration::ZERO);
        assert_eq!(from_ms(f32::NAN), Duration::ZERO);
        assert_eq!(from_ms(f32::INFINITY), Duration::MAX);
        assert!(from_ms(f32::MAX) > Duration::from_secs(1 << 40));
    }
}
