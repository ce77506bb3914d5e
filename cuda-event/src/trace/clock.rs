//! One clock for a trace: GPU timing events placed on the host's monotonic clock.
//!
//! A GPU event's time is only known relative to another event of its device (`elapsed_time`). So
//! each device gets anchors: a timing event recorded on a private stream (non-blocking, of the
//! highest priority, idle but for anchors) and spun on until it completes. The GPU stamped it
//! between the host's instant before the record and the instant the query saw it complete, so the
//! anchor's host time is the middle of that bracket, wrong by at most half of it (the bracket is
//! reported).
//!
//! A trace makes an anchor each time it collects complete ranges, after seeing them complete, so
//! the newest anchor is later on the GPU than every range being placed. A range opened after an
//! earlier anchor was made (the anchor epoch it noted at its open) also has one before it. With
//! both, the GPU clock's rate against the host's is measured over the pair and the range is placed
//! from the nearer one; that corrects the drift between the two clocks over long traces. With only
//! the later anchor (the first collect), the rate is taken as 1.
//!
//! `elapsed_time` is an `f32` of milliseconds, so its resolution falls with the distance from the
//! anchor (about 4 us at a minute): collect at least every few seconds for sub-microsecond
//! placement.

use crate::error::{Error, Result};
use crate::event::Event;
use crate::stream::{Stream, StreamOptions};
use crate::timing::timer::timing_event;
use std::time::{Duration, Instant};

/// How long an anchor's query may spin before the anchor is given up for this collect (its stream
/// shares a hardware queue with work that is still running).
const ANCHOR_SPIN_LIMIT: Duration = Duration::from_millis(20);

/// Anchors tried per collect and device; the one with the narrowest bracket is kept.
const ANCHOR_TRIES: usize = 3;

/// A timing event whose GPU time is known on the host's clock.
pub(super) struct Anchor {
    pub(super) event: Event,
    /// The middle of the bracket.
    pub(super) host: Instant,
    /// From the record's call to the query that saw it complete: twice the anchor's worst error.
    pub(super) bracket: Duration,
    /// The trace's anchor epoch it was made for.
    pub(super) epoch: u64,
}

/// The anchors of one device, oldest first, and the private stream they are recorded on.
pub(super) struct DeviceClock {
    stream: Stream,
    pub(super) anchors: Vec<Anchor>,
}

impl DeviceClock {
    /// The private stream: non-blocking, so that the legacy default stream's work never holds an
    /// anchor back, and of the highest priority, so that its record is scheduled first.
    pub(super) fn new(device: i32) -> Result<DeviceClock> {
        let options = StreamOptions::default().non_blocking(true).priority(-1_000);
        Ok(DeviceClock {
            stream: Stream::with_options(device, options)?,
            anchors: Vec::new(),
        })
    }

    /// Makes an anchor for `epoch` (the narrowest of a few tries) and keeps it as the newest.
    pub(super) fn anchor(&mut self, epoch: u64) -> Result<&Anchor> {
        let mut best: Option<Anchor> = None;
        let mut error = None;
        for _ in 0..ANCHOR_TRIES {
            match self.try_anchor(epoch) {
                Ok(anchor) if best.as_ref().is_none_or(|b| anchor.bracket < b.bracket) => best = Some(anchor),
                Ok(_) => {}
                // A try that timed out leaves the ones before it good.
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let best = best.ok_or(error.unwrap_or(Error::NotComplete))?;
        self.anchors.push(best);
        Ok(self.anchors.last().expect("just pushed"))
    }

    fn try_anchor(&self, epoch: u64) -> Result<Anchor> {
        let event = timing_event();
        let before = Instant::now();
        event.record(&self.stream)?;
        while !event.query()? {
            if before.elapsed() > ANCHOR_SPIN_LIMIT {
                return Err(Error::NotComplete);
            }
            std::hint::spin_loop();
        }
        let bracket = before.elapsed();
        Ok(Anchor {
            event,
            host: before + bracket / 2,
            bracket,
            epoch,
        })
    }

    /// The newest anchor made no later than `epoch`, other than the newest of all: the one before a
    /// range that noted `epoch` at its open.
    pub(super) fn before(&self, epoch: u64) -> Option<&Anchor> {
        let (_, older) = self.anchors.split_last()?;
        older.iter().rev().find(|a| a.epoch <= epoch)
    }

    /// Forgets the anchors that no held range can need any more: keeps the newest, and for each
    /// epoch a held range of this device noted, the newest anchor made no later than it.
    pub(super) fn prune(&mut self, held_epochs: &std::collections::BTreeSet<u64>) {
        let last = self.anchors.len().saturating_sub(1);
        let needed: std::collections::BTreeSet<usize> = held_epochs
            .iter()
            .filter_map(|&e| self.anchors.iter().rposition(|a| a.epoch <= e))
            .collect();
        let mut i = 0;
        self.anchors.retain(|_| {
            let keep = i == last || needed.contains(&i);
            i += 1;
            keep
        });
    }
}

/// Places `event` on the host's clock, from `after` (later on the GPU than the event) and, when
/// there is one, `before` (earlier).
pub(super) fn place(event: &Event, before: Option<&Anchor>, after: &Anchor) -> Result<Instant> {
    let to_after = f64::from(event.elapsed_time(&after.event)?);
    let before = match before {
        Some(b) => Some((
            b.host,
            f64::from(b.event.elapsed_time(event)?),
            f64::from(b.event.elapsed_time(&after.event)?),
        )),
        None => None,
    };
    Ok(place_ms(before, after.host, to_after))
}

/// The arithmetic of [`place`]: `to_after_ms` is the GPU time from the event to the later anchor
/// (at `after_host`); `before` is the earlier anchor's host time, the GPU time from it to the event
/// and from it to the later anchor.
pub(super) fn place_ms(
    before: Option<(Instant, f64, f64)>,
    after_host: Instant,
    to_after_ms: f64,
) -> Instant {
    let Some((before_host, from_before_ms, between_ms)) = before.filter(|b| b.2 > 0.0) else {
        return back(after_host, to_after_ms);
    };
    // Host seconds per GPU second, over the pair.
    let rate = after_host.saturating_duration_since(before_host).as_secs_f64() * 1e3 / between_ms;
    if from_before_ms < to_after_ms {
        forward(before_host, from_before_ms * rate)
    } else {
        back(after_host, to_after_ms * rate)
    }
}

/// `from` moved by `ms` (NaN and negative read as 0); `from` itself where that is past what an
/// `Instant` holds (only inconsistent GPU timestamps could ask it).
fn forward(from: Instant, ms: f64) -> Instant {
    from.checked_add(duration_of(ms)).unwrap_or(from)
}

fn back(from: Instant, ms: f64) -> Instant {
    from.checked_sub(duration_of(ms)).unwrap_or(from)
}

fn duration_of(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms.max(0.0) / 1e3).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inconsistent_timestamps_place_at_the_anchor_instead_of_panicking() {
        let now = Instant::now();
        for ms in [f64::INFINITY, f64::NAN, -1.0, f64::MAX] {
            assert!(forward(now, ms) >= now, "{ms}");
            assert!(back(now, ms) <= now, "{ms}");
        }
        assert_eq!(forward(now, f64::INFINITY), now);
        assert_eq!(back(now, f64::NAN), now);
        assert_eq!(forward(now, 2.0), now + Duration::from_millis(2));
    }

    #[test]
    fn without_an_earlier_anchor_the_gpu_clock_runs_at_the_hosts_rate() {
        let after = Instant::now() + Duration::from_secs(10);
        assert_eq!(place_ms(None, after, 1500.0), after - Duration::from_millis(1500));
        // A pair with no GPU time between them says nothing of the rate.
        let before = Some((after - Duration::from_secs(1), 0.0, 0.0));
        assert_eq!(place_ms(before, after, 250.0), after - Duration::from_millis(250));
    }

    #[test]
    fn a_drifting_gpu_clock_is_corrected_by_the_pair_of_anchors() {
        // The GPU clock runs 100 ppm fast: 10 s of host time read as 10,001 ms on the GPU.
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        let (between, at) = (10_001.0, 2_000.2);
        // Nearer the earlier anchor: placed forward from it at the measured rate.
        let placed = place_ms(Some((t0, at, between)), t1, between - at);
        let want = t0 + Duration::from_secs(2);
        let err = placed.max(want) - placed.min(want);
        assert!(err < Duration::from_micros(1), "{err:?}");
        // Nearer the later one: back from it.
        let at = 9_001.0;
        let placed = place_ms(Some((t0, at, between)), t1, between - at);
        let want = t0 + Duration::from_secs(9) + Duration::from_micros(100);
        let err = placed.max(want) - placed.min(want);
        assert!(err < Duration::from_micros(2), "{err:?}");
    }
}
