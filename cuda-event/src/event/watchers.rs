//! The futures that wait on an event's CUDA event, as the event sees them: the cells each shares
//! with the crate's reactor thread, and where its waits stand in their stream's order.

use crate::error::Result;
use crate::stream::flag_lane::FlagSlot;
use crate::stream::{Stream, StreamId};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use std::task::Waker;

/// An event's futures: the cells of those that wait on its CUDA event, and what they need of its
/// last record on a stream to wait in order.
pub(crate) struct Watchers {
    /// The wait cells of futures that waited on the CUDA event: abandoned before the CUDA event is
    /// given up, so that nothing queries it after (a leaked future's included).
    cells: Mutex<Vec<Weak<WaitCell>>>,
    /// The stream last recorded on, if owned or borrowed ([`StreamId::to_word`]): the lane its
    /// futures wait in, in the reactor.
    last_stream: AtomicU64,
    /// When it was last recorded ([`record_stamp`]), so that the futures of events recorded on one
    /// stream are checked in record order, whatever order they are polled in.
    last_record: AtomicU64,
    /// The flag lane's ticket behind the last record, 0 if none (not a lane stream's record)...
    lane_ticket: AtomicU64,
    /// ...and the slot it goes to.
    lane_slot: AtomicPtr<FlagSlot>,
}

impl Watchers {
    pub(crate) fn new() -> Watchers {
        Watchers {
            cells: Mutex::new(Vec::new()),
            last_stream: AtomicU64::new(0),
            last_record: AtomicU64::new(0),
            lane_ticket: AtomicU64::new(0),
            lane_slot: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// When a record is about to be made: taken before the CUDA call, so that a wait filed with
    /// it never stands ahead of work recorded on its stream before the record.
    #[inline]
    pub(crate) fn stamp() -> u64 {
        record_stamp()
    }

    /// After a record of the event's CUDA event on `stream`, made now (not swallowed by a
    /// capture), with the [`stamp`](Self::stamp) taken before it.
    ///
    /// The stamp is stored before the stream, which a read loads first (release, acquire): a read
    /// that sees this record's stream sees this stamp or a later one, so a first poll never files
    /// a wait at the front of the new stream's lane with the old record's stamp (review 3's S11).
    /// A read that sees the old stream with the new stamp files the wait behind its real place,
    /// which only delays it until the lane's front completes.
    #[inline]
    pub(crate) fn note_record(&self, stream: &Stream, stamp: u64) {
        self.last_record.store(stamp, Ordering::Relaxed);
        // Written only when it changes: records from many threads on one stream share the line.
        let stream_id = StreamId::to_word(stream.id());
        if self.last_stream.load(Ordering::Relaxed) != stream_id {
            self.last_stream.store(stream_id, Ordering::Release);
        }
    }

    /// After a record made now: the flag lane's ticket behind it, if its stream is a lane stream
    /// ([`Stream::mark_lane`]). A wait that reads the mark of another record than the one it
    /// queries (a record made meanwhile on another thread) watches a ticket that lands early or
    /// late: the scanner queries before it wakes anyone, and the reactor keeps the wait anyway.
    #[inline]
    pub(crate) fn note_lane(&self, mark: Option<(&'static FlagSlot, u64)>) {
        match mark {
            Some((slot, ticket)) => {
                self.lane_slot
                    .store(std::ptr::from_ref(slot).cast_mut(), Ordering::Relaxed);
                self.lane_ticket.store(ticket, Ordering::Release);
            }
            // Written only when it changes: most events never meet a lane stream.
            None if self.lane_ticket.load(Ordering::Relaxed) != 0 => {
                self.lane_ticket.store(0, Ordering::Relaxed)
            }
            None => {}
        }
    }

    /// The flag lane's ticket behind the last record, and its slot.
    pub(crate) fn lane_mark(&self) -> Option<(&'static FlagSlot, u64)> {
        let ticket = self.lane_ticket.load(Ordering::Acquire);
        if ticket == 0 {
            return None;
        }
        let slot = self.lane_slot.load(Ordering::Relaxed);
        // SAFETY: a non-null slot pointer is one of the crate's slots, which are never freed.
        let slot = unsafe { slot.as_ref() }?;
        Some((slot, ticket))
    }

    /// Where a wait on the last record stands: in its stream's lane, or `None` (a default stream,
    /// or never recorded through the crate) for the reactor's unordered waits.
    pub(crate) fn order(&self) -> Option<Order> {
        let lane = self.last_stream.load(Ordering::Acquire);
        // 0: no stream's (`StreamId::to_word`).
        (lane != 0).then(|| Order {
            lane,
            stamp: self.last_record.load(Ordering::Relaxed),
        })
    }

    /// `cell` may query the event's CUDA event until abandoned: it is abandoned before the CUDA
    /// event is given up.
    pub(crate) fn watch(&self, cell: &Arc<WaitCell>) {
        let mut cells = self.cells.lock();
        // Cells of futures already dropped go, so that a loop making futures stays bounded.
        if cells.len() >= 8 && cells.len().is_power_of_two() {
            cells.retain(|cell| cell.strong_count() > 0);
        }
        cells.push(Arc::downgrade(cell));
    }

    /// Abandons every cell that may query the CUDA event: after this, nothing does.
    pub(crate) fn abandon_all(&mut self) {
        for cell in self.cells.get_mut().drain(..) {
            if let Some(cell) = cell.upgrade() {
                cell.abandon();
            }
        }
    }
}

/// A clock that orders records: the time-stamp counter where there is one (a few nanoseconds, no
/// shared cache line), the monotonic clock elsewhere.
#[inline]
fn record_stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: reads the time-stamp counter, which every x86-64 processor has.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: crate::sync::Lazy<std::time::Instant> = crate::sync::Lazy::new(std::time::Instant::now);
        START.get().elapsed().as_nanos() as u64
    }
}

/// Where a wait stands among others whose events complete in order: `lane` names the stream its
/// event was recorded on (any number, the same for one stream), `stamp` when it was recorded
/// (later records, larger stamps).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Order {
    pub(crate) lane: u64,
    pub(crate) stamp: u64,
}

/// What a wait's owner and the reactor share.
#[derive(Default)]
pub(crate) struct WaitCell {
    state: Mutex<WaitState>,
    /// Held while the reactor queries the target; `true` once the owner gave up. Apart from
    /// `state`, so that a poll never waits for a query.
    target_in_use: Mutex<bool>,
}

#[derive(Default)]
struct WaitState {
    /// The wait's result, once known.
    result: Option<Result<()>>,
    waker: Option<Waker>,
    /// The owner gave up: the target may no longer be queried.
    abandoned: bool,
}

impl WaitCell {
    /// Stores `waker` (unless it would wake the same task); the result, once known.
    pub(crate) fn look(&self, waker: &Waker) -> Option<Result<()>> {
        let mut state = self.state.lock();
        if let Some(result) = &state.result {
            return Some(result.clone());
        }
        match &mut state.waker {
            Some(stored) if stored.will_wake(waker) => {}
            stored => *stored = Some(waker.clone()),
        }
        None
    }

    pub(crate) fn finish(&self, result: Result<()>) {
        let waker = {
            let mut state = self.state.lock();
            if state.abandoned {
                return;
            }
            state.result.get_or_insert(result);
            state.waker.take()
        };
        wake(waker);
    }

    /// The owner stops waiting: the waker goes, and once this returns the target is never queried
    /// again (a query in flight holds the lock this takes).
    pub(crate) fn abandon(&self) {
        let waker = {
            let mut state = self.state.lock();
            state.abandoned = true;
            state.waker.take()
        };
        drop(waker);
        *self.target_in_use.lock() = true;
    }

    /// Ends the wait with `result` on the owner's side (unless the reactor finished it first) and,
    /// as [`abandon`](Self::abandon), returns once the target is never queried again. Returns the
    /// waker, for the caller to [`wake`] once it holds nothing a woken task's poll may wait for.
    #[cfg(test)]
    pub(crate) fn end_unwoken(&self, result: Result<()>) -> Option<Waker> {
        let waker = {
            let mut state = self.state.lock();
            state.result.get_or_insert(result);
            state.waker.take()
        };
        *self.target_in_use.lock() = true;
        waker
    }

    /// Whether the wait is over: its result known, or its owner gone.
    pub(crate) fn is_settled(&self) -> bool {
        let state = self.state.lock();
        state.abandoned || state.result.is_some()
    }

    /// Runs `call`, which uses the target, unless the owner gave up or the result is known; the
    /// owner's [`abandon`](Self::abandon) waits for it.
    pub(crate) fn while_watched<R>(&self, call: impl FnOnce() -> R) -> Option<R> {
        let abandoned = self.target_in_use.lock();
        if *abandoned {
            return None;
        }
        {
            let state = self.state.lock();
            if state.abandoned || state.result.is_some() {
                return None;
            }
        }
        let answer = call();
        drop(abandoned);
        Some(answer)
    }
}

/// Wakes a task outside every lock; a panicking waker is contained.
pub(crate) fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::sync::atomic::AtomicUsize;
    use std::task::Wake;
    use std::time::{Duration, Instant};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    struct Panics;

    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("a waker that panics");
        }
    }

    /// A cell whose wait a counting waker waits on, and the count.
    fn waited_on() -> (WaitCell, Arc<Count>) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let cell = WaitCell::default();
        assert!(cell.look(&Waker::from(count.clone())).is_none());
        (cell, count)
    }

    #[test]
    fn an_abandoned_cell_is_neither_finished_nor_queried_and_its_waker_is_dropped() {
        let (cell, count) = waited_on();
        cell.abandon();
        cell.finish(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "woken after it was abandoned");
        assert_eq!(Arc::strong_count(&count), 1, "the cell still holds the waker");
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after abandon") })
                .is_none()
        );
    }

    #[test]
    fn a_wait_its_owner_ends_wakes_once_with_that_result_and_is_never_queried_again() {
        let (cell, count) = waited_on();
        let unwoken = cell.end_unwoken(Err(Error::StreamCapturing));
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            0,
            "woken before the caller wakes it"
        );
        wake(unwoken);
        cell.finish(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(matches!(
            cell.look(Waker::noop()),
            Some(Err(Error::StreamCapturing))
        ));
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after it was ended") })
                .is_none()
        );
    }

    #[test]
    fn ending_a_wait_returns_only_once_a_query_in_flight_is_done() {
        let cell = Arc::new(WaitCell::default());
        let (started, query_started) = std::sync::mpsc::channel();
        let querying = {
            let cell = cell.clone();
            crate::sync::thread::spawn(move || {
                cell.while_watched(|| {
                    started.send(()).unwrap();
                    crate::sync::thread::sleep(Duration::from_millis(50));
                    Instant::now()
                })
            })
        };
        query_started.recv().unwrap();
        wake(cell.end_unwoken(Ok(())));
        let ended = Instant::now();
        let query_ended = querying.join().unwrap().expect("the query ran");
        assert!(
            query_ended <= ended,
            "end_unwoken returned while the query was in flight"
        );
    }

    #[test]
    fn a_result_wakes_once_and_ends_the_queries() {
        let (cell, count) = waited_on();
        assert_eq!(cell.while_watched(|| 7), Some(7));
        cell.finish(Ok(()));
        cell.finish(Err(Error::ReactorUnavailable {
            reason: "a second answer".into(),
        }));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(matches!(cell.look(Waker::noop()), Some(Ok(()))));
        assert!(
            cell.while_watched(|| -> bool { panic!("queried after its result") })
                .is_none()
        );
    }

    #[test]
    fn a_panicking_waker_is_contained() {
        let cell = WaitCell::default();
        let _ = cell.look(&Waker::from(Arc::new(Panics)));
        cell.finish(Ok(()));
        assert!(matches!(cell.look(&Waker::noop().clone()), Some(Ok(()))));
    }
}
