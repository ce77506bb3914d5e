//! The reactor thread's bookkeeping: which waits it queries, and when. A wait is filed once, either
//! - **in a lane** ([`Order`]): the waits on events recorded on one stream complete in the order
//!   they were recorded, so a sweep queries each lane from its oldest wait until one is still
//!   pending, which costs one query per busy stream however many waits it has; or
//! - **unordered** (an event recorded on a default stream or by other code, an imported one):
//!   queried in steps of [`CHUNK`] (or fewer, [`QUERY_STEP`]), as the thread paces them (see
//!   [`reactor`](super::reactor)).
//!
//! Sweeps follow each other closely after news (a wait registered, a completion found) and back
//! off as time passes without any, from [`FASTEST`] to [`STEPPING`] apart while the lane's news
//! is recent (futures on a stream stepping through work), and to [`SLOWEST`] once it has been
//! quiet for [`QUIET_AFTER`] (a stream held long, or one whose awaited work is far apart): short
//! waits are seen quickly, steps of work soon after they end, long holds cost little, and no
//! wait in a lane is seen later than about [`SLOWEST`] after its event completes. A wait behind
//! its lane's front cannot be complete before the front is, unless its event's order was not its
//! stream's (the front's event was recorded again on another stream, or two threads recorded on
//! one stream at once): every wait is also queried about every [`BEHIND_FRONT`] at most (while
//! the walk keeps its pace, see there), by a slow walk over all of them in short steps.
//!
//! Nothing here runs a thread or waits: the reactor thread calls in, and [`check`] is the one
//! place that asks CUDA.

use crate::capture_mode::is_capture_interference;
use crate::context::ContextInstance;
use crate::driver::Driver;
use crate::error::Result;
use crate::event::handle::{QueryTarget, query_checked};
use crate::event::watchers::{Order, WaitCell};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a wait in a lane goes without a query of its own event, while the walk keeps its
/// pace: with more waits than the reactor thread can query in half of it at the share of a core it
/// gives the walk (see [`reactor`](super::reactor)), or slower queries, the walk takes longer.
const BEHIND_FRONT: Duration = Duration::from_secs(1);
/// The shortest pause between two sweeps, right after news.
const FASTEST: Duration = Duration::from_micros(5);
/// The longest pause between two sweeps of a lane whose last news is older than [`QUIET_AFTER`]:
/// the latency a wait in a lane can see at worst, however long it has waited.
pub(super) const SLOWEST: Duration = Duration::from_micros(500);
/// The longest pause between two sweeps of a lane whose last news is more recent.
pub(super) const STEPPING: Duration = Duration::from_micros(250);
/// How long a lane goes without news before its sweeps may be [`SLOWEST`] apart.
const QUIET_AFTER: Duration = Duration::from_millis(100);
/// The pause between sweeps is the time since the last news divided by this: a wait is seen at
/// most about 1/PATIENCE of its own duration late.
const PATIENCE: u32 = 32;
/// Unordered queries in one step.
const CHUNK: usize = 256;
/// The longest one step of the walk over all waits (see [`Walk`]) or of the polling of unordered
/// waits goes on querying: the sweeps of the lanes are what wakes a future soon after its work, so
/// a step of each holds the next sweep up for about this at most (a walk behind its pace catches
/// up in short steps between sweeps). A step makes at least [`FEWEST_IN_A_STEP`] queries, which
/// may take longer, and in each lane where the walk finds disorder asks again at least as many of
/// the waits ahead of it.
const QUERY_STEP: Duration = Duration::from_micros(50);

/// The fewest queries a step makes, whatever the clock says: reading it costs about as much as a
/// query, so it is read once every `FEWEST_IN_A_STEP + 1` of them.
const FEWEST_IN_A_STEP: usize = 15;

/// One step of queries, [`QUERY_STEP`] long.
struct Step {
    ends: Instant,
}

impl Step {
    fn new(now: Instant) -> Step {
        Step {
            ends: now + QUERY_STEP,
        }
    }

    /// Whether a step that made `made` queries so far is over: the clock is read before every
    /// `FEWEST_IN_A_STEP + 1`th query, so a step makes at least [`FEWEST_IN_A_STEP`].
    fn over(&self, made: usize) -> bool {
        (made + 1).is_multiple_of(FEWEST_IN_A_STEP + 1) && Instant::now() >= self.ends
    }
}

/// One registered wait.
pub(super) struct Wait {
    pub(super) target: QueryTarget,
    pub(super) cell: Arc<WaitCell>,
}

/// A new wait, sent to the thread.
pub(super) struct Registered {
    pub(super) wait: Wait,
    pub(super) order: Option<Order>,
}

/// The thread's own state: no one else touches it.
pub(super) struct Waits {
    /// Waits in lanes, by lane.
    lanes: HashMap<u64, StreamWaits>,
    /// Arrivals so far, to order waits of one stamp.
    arrivals: u64,
    /// Unordered waits, walked a chunk a step.
    polled: Vec<Wait>,
    /// Where the walk over `polled` is.
    next: usize,
    /// The walk that queries every wait in the lanes, not only those in front.
    walk: Walk,
}

/// The waits on one stream's events, in record order (stamp, then arrival), and its own pace:
/// news in one lane does not make the others be swept more often.
struct StreamWaits {
    waits: BTreeMap<(u64, u64), Wait>,
    /// When a wait was last filed in it or finished.
    news: Instant,
    /// When its front is queried next.
    due: Instant,
}

impl StreamWaits {
    /// The pause before its next sweep: short after news, longer as time passes without any.
    fn pause(&self, now: Instant) -> Duration {
        let quiet = now.saturating_duration_since(self.news);
        let longest = if quiet < QUIET_AFTER { STEPPING } else { SLOWEST };
        (quiet / PATIENCE).clamp(FASTEST, longest)
    }
}

/// A walk over every wait in the lanes, a step at a time: one starts every [`BEHIND_FRONT`]/2
/// (or as soon as the last one ended, if later) over the lanes there are then, each up to the last
/// wait it held then (a wait filed later behind it is the next walk's), and is paced to end within
/// [`BEHIND_FRONT`]/2, so that a wait waits for the next walk and then through it,
/// [`BEHIND_FRONT`] at most, where the steps keep that pace. A wait it finds complete behind waits
/// still pending in its lane shows that the lane's order is not its events' (see the module's
/// docs): those pending waits ahead of it (asked again first, as far as the step's time allows)
/// leave the lane for the unordered ones, so that they hold up no one; those behind it stay.
struct Walk {
    started: Instant,
    /// The lanes as they were at the start, each with its last wait then (waits filed later are
    /// the next walk's), and how many waits they held.
    lanes: Vec<(u64, (u64, u64))>,
    total: usize,
    /// Where it is: a lane, and the first key not yet queried in it.
    at: usize,
    from: (u64, u64),
    queried: usize,
    /// The waits of the current lane that it found pending.
    pending: Vec<(u64, u64)>,
}

impl Walk {
    fn new(now: Instant) -> Walk {
        Walk {
            started: now,
            lanes: Vec::new(),
            total: 0,
            at: 0,
            from: (0, 0),
            queried: 0,
            pending: Vec::new(),
        }
    }

    fn next_lane(&mut self) {
        self.at += 1;
        self.from = (0, 0);
        self.pending.clear();
    }
}

/// What a query of a wait's target decided.
pub(super) enum Outcome {
    Finished(Result<()>),
    Pending,
    Forget,
}

impl Waits {
    pub(super) fn new(now: Instant) -> Waits {
        Waits {
            lanes: HashMap::new(),
            arrivals: 0,
            polled: Vec::new(),
            next: 0,
            walk: Walk::new(now),
        }
    }

    /// Files newly registered waits, but for those that already ended (given up at once, as a
    /// zero-timeout wait does): behind a pending front, only the walk would meet them.
    pub(super) fn take(&mut self, registered: Vec<Registered>) {
        let now = Instant::now();
        for Registered { wait, order } in registered {
            if wait.cell.is_settled() {
                continue;
            }
            let Some(order) = order else {
                self.polled.push(wait);
                continue;
            };
            self.arrivals += 1;
            let lane = self.lanes.entry(order.lane).or_insert_with(|| StreamWaits {
                waits: BTreeMap::new(),
                news: now,
                due: now,
            });
            let key = (order.stamp, self.arrivals);
            lane.waits.insert(key, wait);
            // A wait behind a pending front is no news: it cannot complete before the front.
            if lane
                .waits
                .first_key_value()
                .is_some_and(|(front, _)| *front == key)
            {
                lane.news = now;
                lane.due = lane.due.min(now + FASTEST);
            }
        }
    }

    /// Queries each lane that is due (or nearly: lanes swept together stay together, so that many
    /// quiet lanes cost one wake-up of the thread, not one each) from its front until a wait is
    /// still pending; finishes or forgets the waits it can. Returns whether a lane is stepping
    /// (its news is under [`QUIET_AFTER`] old), which bounds the thread's rest by [`STEPPING`].
    pub(super) fn sweep_lanes(&mut self, check: &impl Fn(&Wait) -> Outcome) -> bool {
        let mut gone = Vec::new();
        let start = Instant::now();
        let due = start + SLOWEST / 8;
        let mut stepping = false;
        self.lanes.retain(|_, lane| {
            stepping |= start.saturating_duration_since(lane.news) < QUIET_AFTER;
            if lane.due > due {
                return true;
            }
            let mut news = false;
            for (key, wait) in lane.waits.iter() {
                match check(wait) {
                    Outcome::Pending => break,
                    Outcome::Finished(result) => {
                        wait.cell.finish(result);
                        news = true;
                        gone.push(*key);
                    }
                    Outcome::Forget => gone.push(*key),
                }
            }
            for key in gone.drain(..) {
                lane.waits.remove(&key);
            }
            let now = Instant::now();
            if news {
                lane.news = now;
            }
            lane.due = now + lane.pause(now);
            !lane.waits.is_empty()
        });
        stepping
    }

    /// Every wait filed, for a thread that ends.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Wait> + '_ {
        let lanes = self.lanes.drain().flat_map(|(_, lane)| lane.waits.into_values());
        lanes.chain(self.polled.drain(..))
    }

    /// When the next lane is due (`None` when there are none).
    pub(super) fn next_sweep(&self) -> Option<Instant> {
        self.lanes.values().map(|lane| lane.due).min()
    }

    /// Queries waits of the walk over all waits in the lanes, as many as it is behind its pace
    /// (at least [`CHUNK`]), for at most about [`QUERY_STEP`]. True if the walk is still behind its
    /// pace after it: its next step is due as soon as the thread can spare the time.
    pub(super) fn walk_a_chunk(&mut self, check: &impl Fn(&Wait) -> Outcome) -> bool {
        let now = Instant::now();
        let step = Step::new(now);
        let walk = &mut self.walk;
        if walk.at >= walk.lanes.len() {
            if now < walk.started + BEHIND_FRONT / 2 || self.lanes.is_empty() {
                return false;
            }
            *walk = Walk::new(now);
            walk.lanes = self
                .lanes
                .iter()
                .filter_map(|(id, lane)| Some((*id, *lane.waits.last_key_value()?.0)))
                .collect();
            walk.total = self.lanes.values().map(|lane| lane.waits.len()).sum();
        }
        let elapsed = now.saturating_duration_since(walk.started);
        let due = (walk.total as f64 * (2.0 * elapsed.as_secs_f64() / BEHIND_FRONT.as_secs_f64())) as usize;
        let Some(mut budget) = due
            .checked_sub(walk.queried)
            .map(|behind| behind.clamp(CHUNK, 16 * CHUNK))
        else {
            return false;
        };
        let mut gone = Vec::new();
        let mut asked = 0_usize;
        while budget > 0 && walk.at < walk.lanes.len() {
            let (id, end) = walk.lanes[walk.at];
            let Some(lane) = self.lanes.get_mut(&id) else {
                walk.next_lane();
                continue;
            };
            let mut rest = None;
            // How many of the pending waits found so far stand ahead of a completed one.
            let mut ahead = 0;
            for (key, wait) in lane.waits.range(walk.from..=end) {
                if budget == 0 || step.over(asked) {
                    budget = 0;
                    rest = Some(*key);
                    break;
                }
                asked += 1;
                budget -= 1;
                walk.queried += 1;
                match check(wait) {
                    Outcome::Pending => walk.pending.push(*key),
                    Outcome::Finished(result) => {
                        wait.cell.finish(result);
                        ahead = walk.pending.len();
                        gone.push(*key);
                    }
                    Outcome::Forget => gone.push(*key),
                }
            }
            for key in gone.drain(..) {
                lane.waits.remove(&key);
            }
            if ahead > 0 {
                // Asked again: one that has completed since is no sign of disorder. Past the
                // step's time (at least `FEWEST_IN_A_STEP` asked), the rest move unasked: the
                // polling finds them.
                let (mut asked_again, mut in_time) = (0, true);
                for key in walk.pending.drain(..ahead) {
                    // Those a sweep finished since are gone: no query, and not counted.
                    let Some(wait) = lane.waits.get(&key) else {
                        continue;
                    };
                    in_time = in_time && (asked_again < FEWEST_IN_A_STEP || Instant::now() < step.ends);
                    let outcome = match in_time {
                        true => {
                            asked_again += 1;
                            check(wait)
                        }
                        false => Outcome::Pending,
                    };
                    let wait = lane.waits.remove(&key);
                    match (outcome, wait) {
                        (Outcome::Pending, Some(wait)) => self.polled.push(wait),
                        (Outcome::Finished(result), Some(wait)) => wait.cell.finish(result),
                        _ => {}
                    }
                }
                lane.news = Instant::now();
            }
            if lane.waits.is_empty() {
                self.lanes.remove(&id);
            }
            match rest {
                Some(key) => walk.from = key,
                None => walk.next_lane(),
            }
        }
        walk.at < walk.lanes.len() && walk.queried < due
    }

    /// Queries the next chunk of unordered waits ([`CHUNK`] of them, or as many as
    /// [`QUERY_STEP`] allows); returns the share of a pass over them that it made (what it queried
    /// over how many there were), or `None` when there are none left.
    pub(super) fn poll_chunk(&mut self, check: &impl Fn(&Wait) -> Outcome) -> Option<f64> {
        let step = Step::new(Instant::now());
        let there_were = self.polled.len();
        let mut at = self.next.min(there_were);
        let mut queried = 0;
        while at < self.polled.len() && queried < CHUNK {
            if step.over(queried) {
                break;
            }
            queried += 1;
            match check(&self.polled[at]) {
                Outcome::Pending => at += 1,
                Outcome::Finished(result) => self.polled.swap_remove(at).cell.finish(result),
                Outcome::Forget => drop(self.polled.swap_remove(at)),
            }
        }
        self.next = if at < self.polled.len() { at } else { 0 };
        (!self.polled.is_empty()).then(|| queried as f64 / there_were as f64)
    }
}

/// Queries `wait`'s target and decides what happens to it.
pub(super) fn check(d: &Driver, wait: &Wait, alive: &RefCell<Vec<ContextInstance>>) -> Outcome {
    match wait.cell.while_watched(|| query_in_sweep(&wait.target, d, alive)) {
        None => Outcome::Forget,
        Some(Ok(false)) => Outcome::Pending,
        Some(Err(e)) if is_capture_interference(&e) => Outcome::Pending,
        Some(answer) => Outcome::Finished(answer.map(drop)),
    }
}

/// [`QueryTarget::query`] in a sweep: the reset check once per context instance per phase of a
/// sweep (the lanes, the walk, the poll; `alive` holds the instances found alive in it). A reset
/// that another thread makes meanwhile is a race CUDA leaves to the caller (`cudaDeviceReset`: no
/// other thread may use the device then); this widens it from one call to one phase.
fn query_in_sweep(target: &QueryTarget, d: &Driver, alive: &RefCell<Vec<ContextInstance>>) -> Result<bool> {
    if let Some(instance) = target.made_in.instance()
        && !alive.borrow().contains(&instance)
    {
        target.made_in.ensure_alive(d, None)?;
        alive.borrow_mut().push(instance);
    }
    query_checked(d, target.raw, target.exporter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::MadeIn;
    use crate::sync::Mutex;
    use crate::sync::atomic::{AtomicUsize, Ordering};
    use cuda_event_sys as sys;
    use std::ops::RangeInclusive;
    use std::task::Waker;

    /// A wait on a pretend event: `id` names it for the test's `check`.
    fn wait(id: usize) -> (Wait, Arc<WaitCell>) {
        let cell = Arc::new(WaitCell::default());
        let target = QueryTarget {
            raw: id as sys::cudaEvent_t,
            made_in: MadeIn::new(0, None),
            exporter: None,
        };
        (
            Wait {
                target,
                cell: cell.clone(),
            },
            cell,
        )
    }

    /// The pretend events: the ids of those complete, and how many queries were made.
    struct Events {
        complete: Mutex<Vec<usize>>,
        queries: AtomicUsize,
    }

    impl Events {
        fn complete(ids: impl IntoIterator<Item = usize>) -> Events {
            Events {
                complete: Mutex::new(ids.into_iter().collect()),
                queries: AtomicUsize::new(0),
            }
        }

        /// A `check` that answers from `complete` and counts its queries.
        fn check(&self) -> impl Fn(&Wait) -> Outcome + '_ {
            move |wait: &Wait| {
                self.queries.fetch_add(1, Ordering::Relaxed);
                match wait
                    .cell
                    .while_watched(|| self.complete.lock().contains(&(wait.target.raw as usize)))
                {
                    None => Outcome::Forget,
                    Some(true) => Outcome::Finished(Ok(())),
                    Some(false) => Outcome::Pending,
                }
            }
        }

        fn queries(&self) -> usize {
            self.queries.load(Ordering::Relaxed)
        }

        /// [`check`](Self::check), each query taking at least `each`.
        fn slow_check(&self, each: Duration) -> impl Fn(&Wait) -> Outcome + '_ {
            move |wait: &Wait| {
                std::thread::sleep(each);
                self.check()(wait)
            }
        }
    }

    fn file(waits: &mut Waits, lane: u64, ids: impl IntoIterator<Item = usize>) -> Vec<Arc<WaitCell>> {
        let mut cells = Vec::new();
        let registered = ids
            .into_iter()
            .map(|id| {
                let (wait, cell) = wait(id);
                cells.push(cell);
                let order = Some(Order {
                    lane,
                    stamp: id as u64,
                });
                Registered { wait, order }
            })
            .collect();
        waits.take(registered);
        cells
    }

    fn done(cell: &WaitCell) -> bool {
        cell.look(Waker::noop()).is_some()
    }

    /// Waits on `ids` in lane 7, whose first walk is due at once, and events of which `complete`
    /// are complete.
    fn walk_due(ids: RangeInclusive<usize>, complete: Vec<usize>) -> (Events, Waits, Vec<Arc<WaitCell>>) {
        let mut waits = Waits::new(Instant::now() - BEHIND_FRONT);
        let cells = file(&mut waits, 7, ids);
        (Events::complete(complete), waits, cells)
    }

    /// Makes every lane due now.
    fn due_now(waits: &mut Waits) {
        let now = Instant::now();
        for lane in waits.lanes.values_mut() {
            lane.due = now;
        }
    }

    #[test]
    fn a_sweep_queries_each_lane_from_its_front_until_a_wait_is_pending() {
        let events = Events::complete([1, 2]);
        let check = events.check();
        let mut waits = Waits::new(Instant::now());
        let cells = file(&mut waits, 7, 1..=100);
        let other = file(&mut waits, 8, 1000..=1000);
        due_now(&mut waits);
        waits.sweep_lanes(&check);
        // Lane 7: 1 and 2 done, 3 pending, nothing behind it asked; lane 8: its one wait.
        assert_eq!(events.queries(), 3 + 1);
        assert!(done(&cells[0]) && done(&cells[1]) && !done(&cells[2]));
        assert!(!done(&other[0]));
        events.complete.lock().extend(3..=100);
        due_now(&mut waits);
        waits.sweep_lanes(&check);
        assert!(cells.iter().all(|cell| done(cell)));
        assert_eq!(waits.lanes.len(), 1, "an emptied lane stays");
        // An abandoned front is forgotten, and the wait behind it is asked.
        let cells = file(&mut waits, 8, [1001, 1002]);
        other[0].abandon();
        events.complete.lock().push(1001);
        due_now(&mut waits);
        waits.sweep_lanes(&check);
        assert!(done(&cells[0]) && !done(&cells[1]));
    }

    #[test]
    fn waits_given_up_before_they_are_filed_are_not_filed() {
        let mut waits = Waits::new(Instant::now());
        let front = file(&mut waits, 7, [1]);
        let (given_up, kept) = ((wait(2), wait(3)), wait(4));
        given_up.0.1.abandon();
        given_up.1.1.abandon();
        let order = |stamp| Some(Order { lane: 7, stamp });
        waits.take(vec![
            Registered {
                wait: given_up.0.0,
                order: order(2),
            },
            Registered {
                wait: given_up.1.0,
                order: None,
            },
            Registered {
                wait: kept.0,
                order: order(4),
            },
        ]);
        // Behind the pending front, only the walk would have met the given-up one.
        assert_eq!(waits.lanes[&7].waits.len(), 2);
        assert!(waits.polled.is_empty());
        drop(front);
    }

    #[test]
    fn the_walk_asks_every_wait_and_moves_a_lanes_out_of_order_front_to_the_unordered_ones() {
        // Wait 1's event was recorded again elsewhere: it stays pending while 2..=10 complete.
        let (events, mut waits, cells) = walk_due(1..=10, (2..=10).collect());
        let check = events.check();
        due_now(&mut waits);
        waits.sweep_lanes(&check);
        assert!(cells.iter().all(|cell| !done(cell)), "the front holds the lane");
        waits.walk_a_chunk(&check);
        assert!(cells[1..].iter().all(|cell| done(cell)), "the walk finds them");
        assert!(!done(&cells[0]));
        assert!(waits.lanes.is_empty(), "the pending front left its lane");
        assert_eq!(waits.polled.len(), 1, "for the unordered ones");
        events.complete.lock().push(1);
        waits.poll_chunk(&check);
        assert!(done(&cells[0]));
    }

    #[test]
    fn the_walk_moves_only_the_pending_waits_ahead_of_a_completed_one() {
        // 1 was recorded again elsewhere; 2 and 3 are done; 4..=100 are pending in order.
        let (events, mut waits, cells) = walk_due(1..=100, vec![2, 3]);
        waits.walk_a_chunk(&events.check());
        assert!(done(&cells[1]) && done(&cells[2]));
        assert_eq!(
            waits.polled.len(),
            1,
            "only the wait ahead of the completed ones moved"
        );
        assert_eq!(
            waits.lanes[&7].waits.len(),
            97,
            "the waits behind them stay in the lane"
        );
    }

    #[test]
    fn a_walk_covers_the_waits_there_were_when_it_started() {
        let (events, mut waits, _) = walk_due(1..=10, vec![]);
        let check = events.check();
        waits.walk.queried = usize::MAX / 2; // paced out: the walk starts, queries nothing yet
        waits.walk_a_chunk(&check);
        assert_eq!(waits.walk.total, 10);
        file(&mut waits, 7, 11..=5000); // filed during the walk
        waits.walk.queried = 0;
        waits.walk_a_chunk(&check);
        assert_eq!(events.queries(), 10, "later waits are the next walk's");
        assert!(waits.walk.at >= waits.walk.lanes.len(), "the walk ended");
    }

    #[test]
    fn a_walk_far_behind_its_pace_queries_for_one_short_step_at_a_time() {
        // Queries so slow that 15 outlast a step.
        let (events, mut waits, _) = walk_due(1..=4096, vec![]);
        let slow = events.slow_check(QUERY_STEP / 8);
        assert!(!waits.walk_a_chunk(&slow), "a walk just started is not behind");
        assert_eq!(
            events.queries(),
            15,
            "the step ended at its first look at the clock"
        );
        waits.walk.started -= BEHIND_FRONT; // now every wait is due
        assert!(waits.walk_a_chunk(&slow), "still behind");
        assert_eq!(events.queries(), 30, "a step of a walk far behind is as short");
        assert_eq!(waits.walk.from.0, 31, "the walk goes on from the 31st wait");
    }

    #[test]
    fn a_step_of_the_unordered_polling_is_as_short_and_says_what_share_of_a_pass_it_made() {
        let events = Events::complete([]);
        let mut waits = Waits::new(Instant::now());
        let unordered = (1..=600).map(|id| Registered {
            wait: wait(id).0,
            order: None,
        });
        waits.take(unordered.collect());
        // Queries so slow that 15 outlast a step.
        let slow = events.slow_check(QUERY_STEP / 8);
        assert_eq!(waits.poll_chunk(&slow), Some(15.0 / 600.0), "15 of 600 waits");
        assert_eq!(events.queries(), 15);
        assert_eq!(waits.poll_chunk(&slow), Some(15.0 / 600.0));
        assert_eq!(
            (events.queries(), waits.next),
            (30, 30),
            "each step goes on from the last"
        );
        // The last step of a pass, cut short by the end: its own share.
        waits.next = 590;
        assert_eq!(waits.poll_chunk(&slow), Some(10.0 / 600.0));
        assert_eq!(waits.next, 0, "the next pass starts over");
    }

    #[test]
    fn the_waits_ahead_of_a_completed_one_are_asked_again_only_in_the_steps_time() {
        // 1..=2000 pending, then 2001 complete: out of order. The walk's queries are quick until
        // it finds 2001, and slow after, when it asks those ahead again.
        let (events, mut waits, cells) = walk_due(1..=2001, vec![2001]);
        let check = |wait: &Wait| {
            if events.queries() >= 2001 {
                std::thread::sleep(QUERY_STEP / 8);
            }
            events.check()(wait)
        };
        while !done(&cells[2000]) {
            waits.walk.started -= BEHIND_FRONT; // every wait due
            waits.walk_a_chunk(&check);
        }
        assert_eq!(events.queries(), 2001 + 15, "15 of those ahead asked again");
        assert_eq!(waits.polled.len(), 2000, "every one ahead moved all the same");
        assert!(waits.lanes.is_empty());
    }

    #[test]
    fn the_waits_a_sweep_finished_count_for_none_of_those_asked_again() {
        // The walk, halfway through the lane, has found its waits pending; then 1..=100 complete,
        // in order, and a sweep finishes them; then the walk goes on and finds 2001 complete: of
        // those ahead it asks 15 still in the lane again and moves the rest. Queries so slow that
        // each step makes 15.
        let (events, mut waits, cells) = walk_due(1..=2001, vec![]);
        let slow = events.slow_check(QUERY_STEP / 8);
        while waits.walk.pending.len() < 1000 {
            waits.walk.started -= BEHIND_FRONT;
            waits.walk_a_chunk(&slow);
        }
        let walked = waits.walk.pending.len();
        events.complete.lock().extend((1..=100).chain([2001]));
        due_now(&mut waits);
        waits.sweep_lanes(&events.check());
        assert!(cells[..100].iter().all(|cell| done(cell)));
        let queried = events.queries();
        while !done(&cells[2000]) {
            waits.walk.started -= BEHIND_FRONT;
            waits.walk_a_chunk(&slow);
        }
        assert_eq!(events.queries(), queried + (2001 - walked) + 15);
        assert_eq!(waits.polled.len(), 1900);
    }

    #[test]
    fn a_walk_behind_its_pace_steps_at_its_own_time_whatever_wakes_the_thread() {
        use crate::completion::reactor::Pacing;
        // Queries so slow that a walk's step of 15 takes 750 us, and its rest three times that.
        let (events, mut waits, _) = walk_due(1..=4096, vec![]);
        let slow = events.slow_check(QUERY_STEP);
        let mut pacing = Pacing::default();
        pacing.turn(&mut waits, &slow, || {}); // the walk starts
        waits.walk.started -= BEHIND_FRONT; // and is far behind
        let turn_start = Instant::now();
        let deadline = pacing.turn(&mut waits, &slow, || {});
        let next_walk = pacing.next_walk.expect("behind: its next step is due");
        assert!(
            next_walk >= turn_start + 4 * 15 * QUERY_STEP,
            "a step and its rest"
        );
        assert!(deadline.is_some_and(|deadline| deadline <= next_walk));
        // A turn before that time (news woke the thread) takes no step of the walk. (Only
        // where the whole turn ended before it, on a machine that held this test up longer.)
        let walked = waits.walk.queried;
        pacing.turn(&mut waits, &slow, || {});
        if Instant::now() < next_walk {
            assert_eq!(waits.walk.queried, walked, "no step before its time");
        }
        std::thread::sleep(next_walk.saturating_duration_since(Instant::now()));
        pacing.turn(&mut waits, &slow, || {});
        assert!(waits.walk.queried >= walked + 15, "a step at its time");
    }

    #[test]
    fn one_unordered_wait_costs_the_pollings_share_of_a_core_its_wake_ups_included() {
        use crate::completion::reactor::{Pacing, thread_cpu_time};
        let events = Events::complete([]);
        let mut waits = Waits::new(Instant::now());
        let (pending, _cell) = wait(1);
        waits.take(vec![Registered {
            wait: pending,
            order: None,
        }]);
        // The reactor's loop: a turn, then a sleep until the next is due.
        let mut pacing = Pacing::default();
        let (cpu, start) = (thread_cpu_time(), Instant::now());
        let mut turns = 0;
        while start.elapsed() < Duration::from_millis(300) {
            turns += 1;
            let next = pacing.turn(&mut waits, &events.check(), || {});
            let next = next.expect("a pending wait: a next poll");
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let share = (thread_cpu_time() - cpu).as_secs_f64() / start.elapsed().as_secs_f64();
        // About 1/CPU_SHARE (0.5%) of a core; a sleep's wake-up alone costs microseconds, which
        // uncounted made turns every MIN_POLL and several percent.
        assert!(share < 0.02, "{:.2}% of a core over {turns} turns", share * 100.0);
    }

    #[test]
    fn the_walk_keeps_a_lane_whose_waits_complete_in_order() {
        let (events, mut waits, cells) = walk_due(1..=10, vec![]);
        waits.walk_a_chunk(&events.check());
        assert_eq!(events.queries(), 10);
        assert!(cells.iter().all(|cell| !done(cell)));
        assert_eq!(waits.lanes[&7].waits.len(), 10);
        assert!(waits.polled.is_empty());
    }

    #[test]
    fn a_lane_is_swept_soon_after_its_news_and_less_often_as_it_grows_quiet() {
        let now = Instant::now();
        let lane = |quiet: Duration| StreamWaits {
            waits: BTreeMap::new(),
            news: now - quiet,
            due: now,
        };
        assert_eq!(lane(Duration::ZERO).pause(now), FASTEST);
        assert_eq!(lane(Duration::from_secs(1)).pause(now), SLOWEST);
        assert_eq!(lane(Duration::from_millis(20)).pause(now), STEPPING);
        assert_eq!(lane(QUIET_AFTER - Duration::from_millis(1)).pause(now), STEPPING);
        assert_eq!(lane(QUIET_AFTER + Duration::from_millis(1)).pause(now), SLOWEST);
        let middle = lane(Duration::from_millis(2)).pause(now);
        assert!(middle > FASTEST && middle < STEPPING, "{middle:?}");
        // Filing a wait makes its lane due soon, and only its lane.
        let mut waits = Waits::new(now);
        file(&mut waits, 1, [1]);
        file(&mut waits, 2, [2]);
        let events = Events::complete([]);
        let check = events.check();
        for lane in waits.lanes.values_mut() {
            lane.news = now - Duration::from_secs(10);
            lane.due = now;
        }
        assert!(!waits.sweep_lanes(&check), "quiet lanes are not stepping");
        assert!(
            waits
                .lanes
                .values()
                .all(|lane| lane.due >= now + SLOWEST - Duration::from_micros(1))
        );
        // Behind the pending front: no news, the lane's next sweep stays where it was. (Compared
        // with the sweep's own schedule, not with the clock: under an emulator, or on a loaded
        // machine, this test's own steps take longer than SLOWEST.)
        let (due_1, due_2) = (waits.lanes[&1].due, waits.lanes[&2].due);
        file(&mut waits, 2, [3]);
        assert_eq!(waits.lanes[&2].due, due_2);
        // In front: news for its lane only.
        file(&mut waits, 2, [1]);
        assert!(waits.lanes[&2].due <= Instant::now() + FASTEST);
        assert_eq!(waits.lanes[&1].due, due_1);
        assert!(waits.sweep_lanes(&check), "a lane with news is stepping");
    }
}
