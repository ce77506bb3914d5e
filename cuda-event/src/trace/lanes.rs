//! Where a trace keeps its ranges: one lane per thread that opens them, so that opening and closing
//! a range locks only the opening thread's lane (which only the trace's reader also takes, briefly).
//!
//! A lane's slots are reused: a range takes a free slot, the reader frees it when the range is
//! read, and the slots grow to the lane's peak and no further. Each lane also keeps the timing
//! events of the ranges it read, for its next ranges, so that a steady trace neither allocates nor
//! creates CUDA events. When its thread exits, the lane is orphaned; the reader drops it once
//! nothing in it is left to read.

use crate::event::Event;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};
use std::borrow::Cow;
use std::time::Instant;

/// One thread's ranges.
pub(super) struct Lane {
    /// The trace's number for the thread (its host track).
    pub(super) thread: u64,
    /// The thread's name, if it has one.
    pub(super) name: Option<String>,
    /// Set when its thread exits: once its ranges are read, the reader drops the lane.
    orphaned: AtomicBool,
    pub(super) inner: Mutex<LaneInner>,
    /// The forks this process descended from when the lane was made (`fork::forks`).
    forks: u64,
}

#[derive(Default)]
pub(super) struct LaneInner {
    pub(super) slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Timing events of read ranges, each already of the device it was recorded on.
    spare: Vec<Event>,
    /// Ranges open on this lane now: the nesting depth of the next one.
    pub(super) depth: u32,
}

/// A range, open or closed.
pub(super) struct Slot {
    pub(super) name: Cow<'static, str>,
    pub(super) depth: u32,
    /// The trace's anchor epoch when the range opened (see `clock`).
    pub(super) epoch: u64,
    /// Its NVTX range (see `nvtx`), 0 for none.
    pub(super) nvtx: u64,
    pub(super) what: What,
    pub(super) state: State,
}

// The slots are reused in place, so the size of a GPU range's two events costs nothing per range;
// boxing them would allocate per range.
#[allow(clippy::large_enum_variant)]
pub(super) enum What {
    Host {
        start: Instant,
        end: Option<Instant>,
    },
    Gpu {
        device: i32,
        /// The raw handle of the stream it opened on, as a number.
        stream: u64,
        /// Which stream that is (see `Track::Gpu`).
        id: u64,
        start: Event,
        end: Option<Event>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Open,
    Closed,
    /// Its end could not be recorded: read as lost.
    Failed,
}

impl Lane {
    pub(super) fn new(thread: u64, name: Option<String>) -> Lane {
        Lane {
            thread,
            name,
            orphaned: AtomicBool::new(false),
            inner: Mutex::new(LaneInner::default()),
            forks: crate::fork::forks(),
        }
    }

    /// Whether this process forked since the lane was made: then its lock may be held by a thread
    /// that did not fork, and the child takes it not (see `Trace`'s `made_before_a_fork`).
    pub(super) fn made_before_a_fork(&self) -> bool {
        crate::fork::forked_since(self.forks)
    }

    /// Its thread exited (or, for the lane of threads past their thread-locals, never does).
    pub(super) fn orphan(&self) {
        self.orphaned.store(true, Ordering::Release);
    }

    /// Orphaned and with nothing left to read: no one will use it again.
    pub(super) fn done(&self) -> bool {
        self.orphaned.load(Ordering::Acquire) && self.inner.lock().slots.iter().all(Option::is_none)
    }
}

impl LaneInner {
    /// Stores an open range and returns its slot.
    pub(super) fn open(&mut self, slot: Slot) -> usize {
        self.depth += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Frees a slot (its range was read or given up) and keeps its timing events for reuse.
    pub(super) fn free(&mut self, i: usize) -> Option<Slot> {
        let slot = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(slot)
    }

    /// Keeps a read range's timing events for the lane's next ranges.
    pub(super) fn keep_events(&mut self, what: What) {
        if let What::Gpu { start, end, .. } = what {
            self.spare.push(start);
            self.spare.extend(end);
        }
    }

    /// A timing event for `device`: a kept one of that device (or one never created), else a new
    /// (lazy) one.
    pub(super) fn timing_event(&mut self, device: i32) -> Event {
        match self
            .spare
            .iter()
            .rposition(|e| e.device().is_none_or(|d| d == device))
        {
            Some(i) => self.spare.swap_remove(i),
            None => crate::timing::timer::timing_event(),
        }
    }

    /// Gives back an event taken by [`timing_event`](Self::timing_event) and not used.
    pub(super) fn give_back(&mut self, event: Event) {
        // One that a capture may hold (its record refused after the fact) is dropped instead.
        if event.is_private() {
            self.spare.push(event);
        }
    }

    /// Drops the kept events of `device`: its context ended (a device reset), and so did they.
    pub(super) fn forget_spares(&mut self, device: i32) {
        self.spare.retain(|e| e.device() != Some(device));
    }

    /// Marks the end of an open range: closed (`end` recorded) or failed. Returns its NVTX range,
    /// for the caller to end outside the lane's lock.
    pub(super) fn close(&mut self, i: usize, end: Result<Option<Event>, ()>) -> u64 {
        self.depth = self.depth.saturating_sub(1);
        let Some(Some(slot)) = self.slots.get_mut(i) else {
            return 0;
        };
        match (&mut slot.what, end) {
            (What::Gpu { end: slot_end, .. }, Ok(Some(event))) => {
                *slot_end = Some(event);
                slot.state = State::Closed;
            }
            (What::Host { end: slot_end, .. }, Ok(None)) => {
                *slot_end = Some(Instant::now());
                slot.state = State::Closed;
            }
            _ => slot.state = State::Failed,
        }
        std::mem::take(&mut slot.nvtx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &'static str) -> Slot {
        Slot {
            name: name.into(),
            depth: 0,
            epoch: 0,
            nvtx: 0,
            what: What::Host {
                start: Instant::now(),
                end: None,
            },
            state: State::Open,
        }
    }

    #[test]
    fn slots_are_reused_and_grow_only_to_the_peak() {
        let mut lane = LaneInner::default();
        let a = lane.open(host("a"));
        let b = lane.open(host("b"));
        assert_eq!((a, b, lane.depth), (0, 1, 2));
        lane.close(b, Ok(None));
        lane.close(a, Ok(None));
        assert_eq!(lane.depth, 0);
        assert!(lane.slots.iter().flatten().all(|s| s.state == State::Closed));
        assert!(lane.free(a).is_some());
        assert!(lane.free(a).is_none(), "a slot is freed once");
        let c = lane.open(host("c"));
        assert_eq!(c, a, "the freed slot is taken again");
        assert_eq!(lane.slots.len(), 2);
    }

    #[test]
    fn a_range_whose_end_was_not_recorded_is_marked_failed() {
        let mut lane = LaneInner::default();
        let a = lane.open(host("a"));
        lane.close(a, Err(()));
        assert_eq!(lane.slots[a].as_ref().unwrap().state, State::Failed);
        // A close of a slot that is gone changes nothing but the depth.
        lane.free(a);
        lane.close(a, Ok(None));
        assert!(lane.slots[a].is_none());
    }
}
