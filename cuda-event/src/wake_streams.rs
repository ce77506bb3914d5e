//! The crate's own streams that futures' wake-ups are queued on: one per producer stream (an owned
//! or borrowed [`Stream`] that an awaited event was last recorded on), made on first use, and the
//! thread that queues the wake-ups there.
//!
//! A wake-up is a wait on the awaited event followed by a host function, both on the producer's
//! wake stream, never on the producer itself: the crate enqueues nothing onto a stream it does not
//! own, so no capture that another thread begins on the producer can swallow a wake-up, and the
//! producer's own work is never held back by one. One wake stream per producer keeps each
//! producer's futures in its own order, without one producer's long work delaying another's.
//!
//! Queueing onto a stream can block: a stream's hardware queue holds about a thousand commands, and
//! a wake stream shares a hardware queue with other streams once there are more streams than
//! queues (`CUDA_DEVICE_MAX_CONNECTIONS`). So the wake-ups are queued by a thread of the crate's
//! own, never by a future's poll, and at most [`MAX_QUEUED_PER_STREAM`] at a time per wake stream:
//! further ones wait in order, and each host function that runs makes room for the next. While
//! that thread waits, futures are still confirmed by the reactor's queries.
//!
//! Default streams have no wake stream (a future on an event recorded there is polled), and a
//! producer's wake stream is destroyed with the producer.

use crate::capture_mode::RelaxedCapture;
use crate::driver::{Driver, driver};
use crate::error::Error;
use crate::reactor::WaitCell;
use crate::stream::{Stream, StreamId, StreamOptions};
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

/// Wake-ups queued on one wake stream and not run yet; later ones wait their turn on the host.
const MAX_QUEUED_PER_STREAM: usize = 32;

/// Wake streams a producer may have: its futures' wake-ups go to one whose last wake-up is for an
/// earlier record (so none waits behind a later record), or to a new one.
const MAX_LANES: usize = 2;

/// A wake-up to queue: ring `cell` once `event` (its record now) has completed.
struct Request {
    producer: StreamId,
    /// When the event was recorded: the order its wake-up is queued in.
    stamp: u64,
    device: i32,
    event: sys::cudaEvent_t,
    cell: Arc<WaitCell>,
}

// SAFETY: the event handle is an opaque CUDA handle; it is only used under `cell`'s watch (see
// `WaitCell::while_watched`), which its owner ends before the event goes away.
unsafe impl Send for Request {}

enum Command {
    Queue(Request),
    /// The producer is being dropped: its wake stream goes too (wake-ups queued on it still run).
    Gone(StreamId),
}

#[derive(Default)]
struct Inbox {
    commands: Vec<Command>,
    running: bool,
}

struct Waker {
    inbox: Mutex<Inbox>,
    changed: Condvar,
    /// A host function made room on a wake stream that had none.
    room: AtomicBool,
}

static WAKER: LazyLock<Waker> = LazyLock::new(|| Waker {
    inbox: Mutex::new(Inbox::default()),
    changed: Condvar::new(),
    room: AtomicBool::new(false),
});

/// Asks for a wake-up of `cell` when the record of `event` now current completes, on the wake
/// stream of `producer`. Never waits for CUDA. Returns whether it was asked for: `false` without
/// a producer (a default stream, an event recorded elsewhere) or when the thread could not start;
/// the caller's wait is then polled.
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
    send(Command::Queue(Request {
        producer,
        stamp,
        device,
        event,
        cell: cell.clone(),
    }))
}

/// The producer is being dropped.
pub(crate) fn producer_gone(producer: StreamId) {
    let mut inbox = WAKER.inbox.lock();
    // Nothing to destroy if the thread never started.
    if inbox.running {
        inbox.commands.push(Command::Gone(producer));
        WAKER.changed.notify_one();
    }
}

fn send(command: Command) -> bool {
    let mut inbox = WAKER.inbox.lock();
    if !inbox.running {
        let started = std::thread::Builder::new()
            .name("cuda-event-wake".into())
            .spawn(run);
        if started.is_err() {
            return false;
        }
        inbox.running = true;
    }
    inbox.commands.push(command);
    WAKER.changed.notify_one();
    true
}

struct WakeStream {
    stream: Stream,
    queued: Arc<AtomicUsize>,
    /// The stamp of the last wake-up queued on it.
    last_stamp: u64,
}

/// What the thread keeps per producer.
#[derive(Default)]
struct Producer {
    lanes: Vec<WakeStream>,
    /// Wake-ups not queued yet, in record order.
    waiting: VecDeque<Request>,
}

fn run() {
    let Ok(d) = driver("the wake thread") else {
        return;
    };
    RelaxedCapture::enter(d).forever();
    let mut producers: HashMap<StreamId, Producer> = HashMap::new();
    loop {
        let commands = {
            let mut inbox = WAKER.inbox.lock();
            while inbox.commands.is_empty() && !WAKER.room.swap(false, Ordering::Relaxed) {
                WAKER.changed.wait(&mut inbox);
            }
            std::mem::take(&mut inbox.commands)
        };
        for command in commands {
            match command {
                Command::Queue(request) => {
                    let waiting = &mut producers.entry(request.producer).or_default().waiting;
                    let at = waiting.partition_point(|r| r.stamp <= request.stamp);
                    waiting.insert(at, request);
                }
                Command::Gone(producer) => drop(producers.remove(&producer)),
            }
        }
        for producer in producers.values_mut() {
            producer.queue_waiting(d);
        }
        producers.retain(|_, p| !p.lanes.is_empty() || !p.waiting.is_empty());
    }
}

impl Producer {
    /// Queues waiting wake-ups, earliest record first, while a lane has room.
    fn queue_waiting(&mut self, d: &Driver) {
        // Lanes that a device reset destroyed go.
        self.lanes.retain(|lane| {
            !matches!(
                lane.stream.made_in().ensure_alive(d, None),
                Err(Error::DeviceWasReset { .. })
            )
        });
        while let Some(request) = self.waiting.front() {
            let Some(lane) = self.lane_for(request.stamp, request.device) else {
                return;
            };
            let request = self.waiting.pop_front().expect("just seen");
            let lane = &mut self.lanes[lane];
            // A refused launch is left to the reactor's queries.
            if queue(d, lane, &request) {
                lane.last_stamp = lane.last_stamp.max(request.stamp);
            }
        }
    }

    /// The lane a wake-up recorded at `stamp` goes to: one with room whose last wake-up was
    /// recorded earlier (the latest such), else a new one, else the one with room whose last
    /// wake-up is earliest (the wake-up then waits behind a later record: the reactor's queries
    /// bound that). `None` while no lane has room.
    fn lane_for(&mut self, stamp: u64, device: i32) -> Option<usize> {
        let has_room = |lane: &WakeStream| lane.queued.load(Ordering::Relaxed) < MAX_QUEUED_PER_STREAM;
        let in_order = (0..self.lanes.len())
            .filter(|&i| has_room(&self.lanes[i]) && self.lanes[i].last_stamp <= stamp)
            .max_by_key(|&i| self.lanes[i].last_stamp);
        if in_order.is_some() {
            return in_order;
        }
        if self.lanes.len() < MAX_LANES {
            if let Ok(stream) = Stream::unregistered(device, StreamOptions::default().non_blocking(true)) {
                self.lanes.push(WakeStream {
                    stream,
                    queued: Arc::new(AtomicUsize::new(0)),
                    last_stamp: 0,
                });
                return Some(self.lanes.len() - 1);
            }
        }
        (0..self.lanes.len())
            .filter(|&i| has_room(&self.lanes[i]))
            .min_by_key(|&i| self.lanes[i].last_stamp)
    }
}

/// Queues `request`'s wait and host function on `wake`; returns whether both were queued.
fn queue(d: &Driver, wake: &WakeStream, request: &Request) -> bool {
    let stream = wake.stream.as_raw();
    let event = request.event;
    // SAFETY: a live stream of the crate's, and the owner's event, used only while the owner
    // still watches it (so it is alive); CUDA allows an event of any context of the device.
    let waited = request
        .cell
        .while_watched(|| d.stream_wait_event.call(|f| unsafe { f(stream, event, 0) }));
    if !matches!(waited, Some(Ok(()))) {
        return false;
    }
    let queued = wake.queued.clone();
    queued.fetch_add(1, Ordering::Relaxed);
    let cell = request.cell.clone();
    let counted = queued.clone();
    let launched = wake.stream.queue_host_fn(d, move || {
        if counted.fetch_sub(1, Ordering::Relaxed) == MAX_QUEUED_PER_STREAM {
            // The wake thread may be waiting for this room.
            WAKER.room.store(true, Ordering::Relaxed);
            let _inbox = WAKER.inbox.lock();
            WAKER.changed.notify_one();
        }
        cell.ring();
    });
    if launched.is_err() {
        queued.fetch_sub(1, Ordering::Relaxed);
    }
    launched.is_ok()
}
