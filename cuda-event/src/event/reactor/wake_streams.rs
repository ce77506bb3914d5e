//! The crate's own streams that futures' wake-ups are queued on: up to [`MAX_LANES`] per producer
//! stream (an owned or borrowed [`Stream`] that an awaited event was last recorded on), made on
//! first use, and the thread that queues the wake-ups there.
//!
//! A wake-up is a wait on the awaited event followed by a host function, both on one of the
//! producer's wake streams, never on the producer itself: the crate enqueues nothing onto a stream
//! it does not own, so no capture that another thread begins on the producer can swallow a
//! wake-up, and the producer's own work is never held back by one. Wake streams per producer keep
//! each producer's futures in its own order, without one producer's long work delaying another's.
//!
//! A producer runs its work in order, so a wake-up for one of its records also announces every
//! earlier record: its host function rings every wait on the producer for a record up to its own
//! ([`Book::take_through`]). That is what keeps every future prompt when more are pending than
//! can be queued, or when they are asked for out of record order (a wait queued behind a later
//! record is rung by an earlier one's wake-up). Which record came first is judged by a stamp taken
//! at each record, so records racing on one stream from two threads may be judged out of order:
//! a wait rung early is confirmed by a query before it is believed and asks again.
//!
//! Queueing onto a stream can block, for as long as the GPU takes: a stream's hardware queue holds
//! about a thousand commands, and a wake stream shares its hardware queue with other streams (one
//! holding thousands of records behind a long kernel blocks a launch onto a wake stream of another
//! producer until that kernel ends). So the wake-ups are queued by worker threads of the crate's
//! own, never by a future's poll; one worker serves one producer at a time, and while a worker is
//! blocked in CUDA for one producer, others serve the rest (up to [`MAX_WORKERS`] blocked at once).
//! At most [`MAX_QUEUED_PER_STREAM`] wake-ups at a time are queued per wake stream, earliest record
//! first; each host function that runs makes room for the next. While a worker waits, futures are
//! still confirmed by the reactor's queries.
//!
//! Default streams have no wake stream (a future on an event recorded there is polled). A
//! producer's wake streams are destroyed once nothing is queued on them and either the producer
//! is gone or they were idle for [`IDLE`].

use crate::capture_mode::RelaxedCapture;
use crate::driver::{Driver, driver};
use crate::error::Error;
use crate::event::reactor::WaitCell;
use crate::stream::{Stream, StreamId, StreamOptions};
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// Wake-ups queued on one wake stream and not run yet; later ones wait their turn on the host.
const MAX_QUEUED_PER_STREAM: usize = 32;

/// Wake streams a producer may have: its futures' wake-ups go to one whose last wake-up is for an
/// earlier record (so none waits behind a later record), or to a new one.
const MAX_LANES: usize = 2;

/// How long a producer's wake streams stay with nothing queued before they are destroyed (they are
/// made again when needed): a producer dropped after a wait was asked for is never announced.
const IDLE: Duration = Duration::from_secs(1);

/// Waits in a producer's book that the owner gave up on (a `select!` loop over a long-pending
/// event) are swept out once the book holds this many, and then at twice what the sweep kept.
const SWEEP_AT: usize = 256;

/// Worker threads that queue wake-ups at most; one is kept, the others end after [`IDLE`] with
/// nothing to do.
const MAX_WORKERS: usize = 16;

/// What the futures, the host functions and the workers share, behind one lock that is never held
/// across a CUDA call.
#[derive(Default)]
struct Hub {
    producers: HashMap<StreamId, Arc<Entry>>,
    /// Producers waiting for a worker.
    ready: VecDeque<Arc<Entry>>,
    /// Workers running or being started.
    workers: usize,
    /// When idle wake streams were last looked for.
    last_reap: Option<Instant>,
}

/// Where a producer stands with the workers.
#[derive(Clone, Copy, PartialEq)]
enum Turn {
    Idle,
    /// In `ready`.
    Scheduled,
    /// A worker serves it.
    Served,
    /// A worker serves it, and something changed since it began: it serves it again.
    Again,
}

/// A producer, as the hub knows it.
struct Entry {
    id: StreamId,
    /// Its waits, which the host functions ring: no CUDA resource here, so that a host function
    /// never drops the last reference to a stream (CUDA forbids CUDA calls there).
    book: Arc<Mutex<Book>>,
    /// Its wake streams: locked only by the worker that serves it (or tried by one that reaps).
    lanes: Mutex<Lanes>,
    /// Guarded by the hub's lock.
    turn: Mutex<Turn>,
    /// The producer was dropped.
    gone: std::sync::atomic::AtomicBool,
}

static HUB: LazyLock<(Mutex<Hub>, Condvar)> = LazyLock::new(Default::default);

/// Asks for a wake-up of `cell` when the record of `event` now current completes, on a wake
/// stream of `producer`. Never waits for CUDA. Returns whether it was asked for: `false` without
/// a producer (a default stream, an event recorded elsewhere) or when no worker could start; the
/// caller's wait is then polled.
pub(crate) fn request_wake(
    producer: Option<StreamId>,
    stamp: u64,
    device: i32,
    event: sys::cudaEvent_t,
    cell: &Arc<WaitCell>,
) -> bool {
    let Some(producer) = producer else {
        return false;
    };
    let mut hub = HUB.0.lock();
    let entry = hub
        .producers
        .entry(producer)
        .or_insert_with(|| {
            Arc::new(Entry {
                id: producer,
                book: Arc::default(),
                lanes: Mutex::default(),
                turn: Mutex::new(Turn::Idle),
                gone: Default::default(),
            })
        })
        .clone();
    entry.book.lock().add(
        stamp,
        Wanted {
            device,
            event,
            cell: cell.clone(),
            queued: false,
        },
    );
    let spawn = hub.schedule(&entry, true);
    drop(hub);
    if !spawn || start_worker() {
        return true;
    }
    // No worker runs: the wait is polled instead.
    let mut hub = HUB.0.lock();
    if hub.workers > 0 {
        return true;
    }
    hub.ready.retain(|ready| !Arc::ptr_eq(ready, &entry));
    *entry.turn.lock() = Turn::Idle;
    entry
        .book
        .lock()
        .wanted
        .retain(|_, wanted| !Arc::ptr_eq(&wanted.cell, cell));
    false
}

/// The producer is being dropped: its wake streams go once nothing is queued on them.
pub(crate) fn producer_gone(producer: StreamId) {
    nudge_as(producer, true);
}

/// Something changed for `producer` (room on a wake stream): a worker looks at it. Called on
/// CUDA's host-function thread, so it starts no thread: a busy worker comes to it when done.
fn nudge(producer: StreamId) {
    nudge_as(producer, false);
}

fn nudge_as(producer: StreamId, gone: bool) {
    let mut hub = HUB.0.lock();
    if let Some(entry) = hub.producers.get(&producer).cloned() {
        if gone {
            entry.gone.store(true, Ordering::Relaxed);
        }
        hub.schedule(&entry, false);
    }
}

/// Starts a worker, whose place [`Hub::schedule`] counted; `false` (and the place given back) if
/// the thread could not start.
fn start_worker() -> bool {
    let started = std::thread::Builder::new()
        .name("cuda-event-wake".into())
        .spawn(work);
    if started.is_err() {
        HUB.0.lock().workers -= 1;
    }
    started.is_ok()
}

impl Hub {
    /// Has a worker look at `entry`: wakes a waiting one, or, when `may_start` and none waits,
    /// counts a new one and returns `true`: the caller then starts it ([`start_worker`]) once the
    /// lock is let go.
    fn schedule(&mut self, entry: &Arc<Entry>, may_start: bool) -> bool {
        let mut turn = entry.turn.lock();
        match *turn {
            Turn::Idle => {
                *turn = Turn::Scheduled;
                self.ready.push_back(entry.clone());
            }
            Turn::Served => {
                *turn = Turn::Again;
                return false;
            }
            Turn::Scheduled | Turn::Again => return false,
        }
        drop(turn);
        if HUB.1.notify_one() || !may_start || self.workers >= MAX_WORKERS {
            return false;
        }
        self.workers += 1;
        true
    }

    /// Takes out `entry` if no worker serves it and its wake streams can go (gone, or idle for
    /// [`IDLE`]); the caller drops it outside the lock.
    fn reap_one(&mut self, entry: &Arc<Entry>, now: Instant) -> Option<Arc<Entry>> {
        let can_go = *entry.turn.lock() == Turn::Idle
            && entry
                .lanes
                .try_lock()
                .is_some_and(|mut lanes| lanes.can_go(now, &entry.book, entry.gone.load(Ordering::Relaxed)));
        if can_go {
            self.producers.remove(&entry.id)
        } else {
            None
        }
    }

    /// Every producer that can go goes (see [`reap_one`](Self::reap_one)); a producer left with
    /// waits not queued and no worker coming (a wake stream could not be made) is scheduled again.
    fn reap(&mut self, now: Instant) -> Vec<Arc<Entry>> {
        self.last_reap = Some(now);
        let entries: Vec<Arc<Entry>> = self.producers.values().cloned().collect();
        let mut reaped = Vec::new();
        for entry in entries {
            if let Some(gone) = self.reap_one(&entry, now) {
                reaped.push(gone);
            } else if *entry.turn.lock() == Turn::Idle && entry.book.lock().has_unqueued() {
                self.schedule(&entry, false);
            }
        }
        reaped
    }
}

/// A worker: serves ready producers, one at a time.
fn work() {
    let Ok(d) = driver("a wake worker") else {
        HUB.0.lock().workers -= 1;
        return;
    };
    RelaxedCapture::enter(d).forever();
    loop {
        let entry = {
            let mut hub = HUB.0.lock();
            loop {
                if let Some(entry) = hub.ready.pop_front() {
                    *entry.turn.lock() = Turn::Served;
                    break entry;
                }
                let timed_out = HUB.1.wait_for(&mut hub, IDLE).timed_out();
                if timed_out && hub.ready.is_empty() {
                    let reaped = hub.reap(Instant::now());
                    // The last worker stays; the others end (unless the reap found work).
                    let end = hub.workers > 1 && hub.ready.is_empty();
                    if end {
                        hub.workers -= 1;
                    }
                    drop(hub);
                    // Their wake streams are destroyed here, outside the lock.
                    drop(reaped);
                    if end {
                        return;
                    }
                    hub = HUB.0.lock();
                }
            }
        };
        let serving = Serving(Some(entry.clone()));
        loop {
            entry.lanes.lock().queue_waiting(d, &entry);
            let mut hub = HUB.0.lock();
            let mut turn = entry.turn.lock();
            if *turn == Turn::Again {
                *turn = Turn::Served;
                continue;
            }
            *turn = Turn::Idle;
            drop(turn);
            let now = Instant::now();
            let reaped = if hub.last_reap.is_none_or(|at| now - at >= IDLE) {
                hub.reap(now)
            } else if entry.gone.load(Ordering::Relaxed) {
                hub.reap_one(&entry, now).into_iter().collect()
            } else {
                Vec::new()
            };
            drop(hub);
            // Their wake streams are destroyed here, outside the lock.
            drop(reaped);
            break;
        }
        serving.done();
    }
}

/// The producer a worker serves: if the worker unwinds (a waker's or a stream's `Drop` panicked),
/// the producer is handed on and the worker is no longer counted.
struct Serving(Option<Arc<Entry>>);

impl Serving {
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let Some(entry) = self.0.take() else { return };
        let mut hub = HUB.0.lock();
        hub.workers -= 1;
        *entry.turn.lock() = Turn::Idle;
        hub.schedule(&entry, false);
    }
}

/// Where a wait stands in its producer's book: its record's stamp, then the order it came in.
type Key = (u64, u64);

/// A wait asked for and not rung yet.
struct Wanted {
    device: i32,
    event: sys::cudaEvent_t,
    cell: Arc<WaitCell>,
    /// Its own wake-up was queued (or refused: then a later record's wake-up or the reactor's
    /// queries settle it).
    queued: bool,
}

// SAFETY: the event handle is an opaque CUDA handle; it is only used under `cell`'s watch (see
// `WaitCell::while_watched`), which its owner ends before the event goes away.
unsafe impl Send for Wanted {}

/// The waits on one producer not rung yet, by record: shared by the worker serving it, which queues
/// wake-ups for the earliest, and the host functions, which ring them.
#[derive(Default)]
struct Book {
    wanted: BTreeMap<Key, Wanted>,
    /// Waits that came in so far: the second part of their keys.
    arrivals: u64,
    /// When the next sweep of settled waits is due, in waits held.
    sweep_at: usize,
}

impl Book {
    /// Adds a wait for the record made at `stamp`.
    fn add(&mut self, stamp: u64, wanted: Wanted) {
        self.arrivals += 1;
        self.wanted.insert((stamp, self.arrivals), wanted);
        // Waits whose owners gave up (a `select!` loop over a long-pending event) go once there
        // are many, also while the producer's worker is blocked in CUDA.
        if self.wanted.len() >= self.sweep_at.max(SWEEP_AT) {
            self.drop_settled();
            self.sweep_at = 2 * self.wanted.len();
        }
    }

    /// Drops the waits whose owners gave up or whose result is known.
    fn drop_settled(&mut self) {
        self.wanted.retain(|_, wanted| !wanted.cell.settled());
    }

    /// Some wait has no wake-up queued and is still wanted.
    fn has_unqueued(&self) -> bool {
        self.wanted
            .values()
            .any(|wanted| !wanted.queued && !wanted.cell.settled())
    }

    /// Takes every wait for a record up to `stamp`: the wake-up for that record announces them.
    fn take_through(&mut self, stamp: u64) -> BTreeMap<Key, Wanted> {
        let later = self.wanted.split_off(&(stamp.saturating_add(1), 0));
        std::mem::replace(&mut self.wanted, later)
    }
}

struct WakeStream {
    stream: Stream,
    queued: Arc<AtomicUsize>,
    /// The stamp of the last wake-up queued on it.
    last_stamp: u64,
}

/// A producer's wake streams, as the worker serving it keeps them.
#[derive(Default)]
struct Lanes {
    lanes: Vec<WakeStream>,
    /// Since when nothing was queued on its wake streams and no wait was left in its book.
    idle_since: Option<Instant>,
}

impl Lanes {
    /// Queues wake-ups for the earliest waits not queued yet, while a lane has room.
    fn queue_waiting(&mut self, d: &Driver, entry: &Entry) {
        // Lanes that a device reset destroyed go.
        self.lanes.retain(|lane| {
            !matches!(
                lane.stream.made_in().ensure_alive(d, None),
                Err(Error::DeviceWasReset { .. })
            )
        });
        loop {
            // The book is locked only to pick a wait: a host function that rings waits locks it
            // too, and the CUDA calls below can block.
            let picked = {
                let mut book = entry.book.lock();
                // A wait whose owner gave up needs no wake-up (nor a wake stream made for it).
                let mut first = None;
                for (key, wanted) in book.wanted.iter_mut() {
                    if !wanted.queued && wanted.cell.settled() {
                        wanted.queued = true;
                    }
                    if !wanted.queued {
                        first = Some((key, wanted));
                        break;
                    }
                }
                let Some((key, wanted)) = first else {
                    return;
                };
                wanted.queued = true;
                (*key, wanted.device, wanted.event, wanted.cell.clone())
            };
            let (key, device, event, cell) = picked;
            let Some(lane) = self.lane_for(key.0, device) else {
                if let Some(wanted) = entry.book.lock().wanted.get_mut(&key) {
                    wanted.queued = false;
                }
                return;
            };
            let lane = &mut self.lanes[lane];
            // A refused launch is left to a later record's wake-up and to the reactor's queries.
            if queue(d, lane, key.0, event, &cell, entry) {
                lane.last_stamp = lane.last_stamp.max(key.0);
            }
        }
    }

    /// Nothing is queued on its wake streams and no wait is left, and it is gone or was idle for
    /// [`IDLE`]: its wake streams can be destroyed.
    fn can_go(&mut self, now: Instant, book: &Mutex<Book>, gone: bool) -> bool {
        let lanes_idle = self
            .lanes
            .iter()
            .all(|lane| lane.queued.load(Ordering::Relaxed) == 0);
        let idle = lanes_idle && {
            // With nothing queued, no host function will take the settled waits.
            let mut book = book.lock();
            book.drop_settled();
            book.wanted.is_empty()
        };
        if !idle {
            self.idle_since = None;
            return false;
        }
        let since = *self.idle_since.get_or_insert(now);
        gone || now.duration_since(since) >= IDLE
    }

    /// The lane a wake-up recorded at `stamp` goes to: one with room whose last wake-up was
    /// recorded earlier (the latest such), else a new one, else the one with room whose last
    /// wake-up is earliest (an earlier record's wake-up on the other lane still rings it on time).
    /// `None` while no lane has room.
    fn lane_for(&mut self, stamp: u64, device: i32) -> Option<usize> {
        let has_room = |lane: &WakeStream| lane.queued.load(Ordering::Relaxed) < MAX_QUEUED_PER_STREAM;
        let in_order = (0..self.lanes.len())
            .filter(|&i| has_room(&self.lanes[i]) && self.lanes[i].last_stamp <= stamp)
            .max_by_key(|&i| self.lanes[i].last_stamp);
        if in_order.is_some() {
            return in_order;
        }
        if self.lanes.len() < MAX_LANES
            && let Ok(stream) = Stream::unregistered(device, StreamOptions::default().non_blocking(true))
        {
            self.lanes.push(WakeStream {
                stream,
                queued: Arc::new(AtomicUsize::new(0)),
                last_stamp: 0,
            });
            return Some(self.lanes.len() - 1);
        }
        (0..self.lanes.len())
            .filter(|&i| has_room(&self.lanes[i]))
            .min_by_key(|&i| self.lanes[i].last_stamp)
    }
}

/// Queues on `wake` a wait on `event` (recorded at `stamp`) and a host function that rings every
/// wait in `entry`'s book for a record up to `stamp`; returns whether both were queued.
fn queue(
    d: &Driver,
    wake: &WakeStream,
    stamp: u64,
    event: sys::cudaEvent_t,
    cell: &WaitCell,
    entry: &Entry,
) -> bool {
    let stream = wake.stream.as_raw();
    // SAFETY: a live stream of the crate's, and the owner's event, used only while the owner
    // still watches it (so it is alive); CUDA allows an event of any context of the device.
    let waited = cell.while_watched(|| d.stream_wait_event.call(|f| unsafe { f(stream, event, 0) }));
    if !matches!(waited, Some(Ok(()))) {
        return false;
    }
    let queued = wake.queued.clone();
    queued.fetch_add(1, Ordering::Relaxed);
    let counted = queued.clone();
    let (book, producer) = (entry.book.clone(), entry.id);
    // No CUDA call in here, and nothing dropped that makes one.
    let launched = wake.stream.queue_host_fn(d, move || {
        if counted.fetch_sub(1, Ordering::Relaxed) == MAX_QUEUED_PER_STREAM {
            // Waits may be waiting for this room.
            nudge(producer);
        }
        let announced = book.lock().take_through(stamp);
        for wanted in announced.into_values() {
            wanted.cell.ring();
        }
    });
    if launched.is_err() {
        queued.fetch_sub(1, Ordering::Relaxed);
    }
    launched.is_ok()
}
