//! Reading a trace: the complete ranges taken out, placed on the host's clock.

use super::clock::{self, DeviceClock};
use super::lanes::{Lane, State, What};
use super::{Complete, Trace, TracedRange, Track};
use crate::capture_mode::relaxed_if_loaded;
use crate::error::Error;
use crate::sync::atomic::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl Trace {
    /// Takes the complete ranges out of the trace without waiting for the others, and counts
    /// what it left and what was lost. See [`Trace`] and [`TracedRange`].
    pub fn take_complete(&self) -> Complete {
        if self.made_before_a_fork() {
            // Nothing in a child forked since the trace was made: the parent's threads, which may
            // hold the trace's locks, did not fork, and the parent reads the ranges.
            return Complete::default();
        }
        // The reads and the anchors are the trace's own calls, in relaxed capture mode: a global
        // capture on another thread refuses queries made in global mode, and is broken by them.
        let _relaxed = relaxed_if_loaded();
        let mut clocks = self.clocks.lock();
        let lanes: Vec<Arc<Lane>> = {
            let mut lanes = self.lanes.lock();
            // The lanes of exited threads whose ranges were all read before: no one uses them again.
            lanes.retain(|lane| !lane.done());
            lanes.clone()
        };
        let mut out = Complete::default();
        // First see which GPU ranges are complete; the anchors are made after, so each is later on
        // the GPU than every range it places.
        let mut ready: Vec<(usize, usize, i32, f32)> = Vec::new();
        for (l, lane) in lanes.iter().enumerate() {
            let mut inner = lane.inner.lock();
            for i in 0..inner.slots.len() {
                let Some(slot) = &inner.slots[i] else { continue };
                match (slot.state, &slot.what) {
                    (State::Open, _) => out.open += 1,
                    (State::Failed, _) => {
                        self.release(&mut inner, i, false);
                        out.lost += 1;
                    }
                    (State::Closed, What::Host { start, end }) => {
                        let end = end.unwrap_or(*start);
                        out.ranges.push(TracedRange {
                            name: slot.name.clone(),
                            track: Track::Host { thread: lane.thread },
                            start: start.saturating_duration_since(self.started),
                            duration: end.saturating_duration_since(*start),
                            depth: slot.depth,
                            thread: lane.thread,
                        });
                        self.release(&mut inner, i, true);
                    }
                    (
                        State::Closed,
                        What::Gpu {
                            device, start, end, ..
                        },
                    ) => {
                        // The interval itself says whether both ends are complete: one call, where
                        // two queries would take several times as long.
                        let interval = match end {
                            Some(end) => start.elapsed_time(end),
                            None => Err(Error::NotRecorded),
                        };
                        match interval {
                            Ok(ms) => ready.push((l, i, *device, ms)),
                            Err(Error::NotComplete) => out.pending += 1,
                            Err(_) => {
                                self.release(&mut inner, i, false);
                                out.lost += 1;
                            }
                        }
                    }
                }
            }
        }
        // One anchor per device with ranges to place, then the epoch that ranges opened from now
        // on note (the anchors are complete: they are before any such range).
        let epoch = self.epoch.load(Ordering::Relaxed) + 1;
        let mut anchored: BTreeMap<i32, bool> = BTreeMap::new();
        for &(_, _, device, _) in &ready {
            anchored.entry(device).or_insert_with(|| {
                let made = anchor(&mut clocks, device, epoch);
                if let Some(error) = made {
                    out.max_anchor_error = out.max_anchor_error.max(error);
                }
                made.is_some()
            });
        }
        if !anchored.is_empty() {
            self.epoch.store(epoch, Ordering::Release);
        }
        for (l, i, device, ms) in ready {
            let lane = &lanes[l];
            let mut inner = lane.inner.lock();
            let clock = clocks.get(&device).filter(|_| anchored[&device]);
            let Some(clock) = clock else {
                out.pending += 1;
                continue;
            };
            let Some(Some(slot)) = inner.slots.get(i) else {
                continue;
            };
            let What::Gpu {
                start, stream, id, ..
            } = &slot.what
            else {
                continue;
            };
            let after = clock.anchors.last().expect("anchored");
            let placed = clock::place(start, clock.before(slot.epoch), after);
            let read = placed.is_ok();
            match placed {
                Ok(at) => out.ranges.push(TracedRange {
                    name: slot.name.clone(),
                    track: Track::Gpu {
                        device,
                        stream: *stream,
                        id: *id,
                    },
                    start: at.saturating_duration_since(self.started),
                    duration: crate::timing::timer::from_ms(ms),
                    depth: slot.depth,
                    thread: lane.thread,
                }),
                Err(_) => out.lost += 1,
            }
            self.release(&mut inner, i, read);
        }
        // Anchors no held range needs any more.
        let mut held: BTreeMap<i32, std::collections::BTreeSet<u64>> = BTreeMap::new();
        for lane in &lanes {
            for slot in lane.inner.lock().slots.iter().flatten() {
                if let What::Gpu { device, .. } = slot.what {
                    held.entry(device).or_default().insert(slot.epoch);
                }
            }
        }
        let none = std::collections::BTreeSet::new();
        for (device, clock) in clocks.iter_mut() {
            clock.prune(held.get(device).unwrap_or(&none));
        }
        out
    }
}

/// Makes `device`'s anchor for `epoch` (its clock made at the first, and made anew once if the
/// old one's stream died, as after a device reset). Half its bracket, or `None` if it could not be
/// made this time.
fn anchor(clocks: &mut BTreeMap<i32, DeviceClock>, device: i32, epoch: u64) -> Option<Duration> {
    for _ in 0..2 {
        if let std::collections::btree_map::Entry::Vacant(v) = clocks.entry(device) {
            v.insert(DeviceClock::new(device).ok()?);
        }
        match clocks.get_mut(&device)?.anchor(epoch) {
            Ok(a) => return Some(a.bracket / 2),
            Err(Error::NotComplete) => return None,
            Err(_) => {
                clocks.remove(&device);
            }
        }
    }
    None
}
