//! Awaiting the GPU: an event's or a stream's completion as a `Future`, for any async runtime (only
//! `std::task::Waker` is used), and the bounded blocking waits built on it.
//!
//! See [`Completion`] for how a future learns of completion.

mod lanes;
mod reactor;
// The model's tests arm it directly: a lane stream cannot be made under the driver model.
pub(crate) mod scanner;
pub(crate) mod wait;

use crate::capture_mode::{RelaxedCapture, is_capture_interference};
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::event::handle::QueryTarget;
use crate::event::watchers::WaitCell;
use crate::stream::Stream;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use wait::Wait;

/// The completion of an event's or a stream's work, as a `Future` whose output is the CUDA error
/// of that work, if any. Made by [`Event::completion`], [`Stream::completion`], or `.await` on
/// `&Event` / `&Stream`.
///
/// # How it wakes
///
/// The crate's reactor thread queries the events that pending futures wait on and wakes a task
/// once its event is complete. It asks nothing of the GPU: no host function, no wait queued on any
/// stream, so a future is never held up by a blocking host function (CUDA runs all host functions
/// of a context on one thread), never holds up other work, and still resolves after a kernel
/// fault (when CUDA runs no host function). The events recorded on one [`Stream`] made or
/// borrowed through this crate complete in order, so the reactor queries each such stream's
/// oldest pending event only, however many futures wait on it; its queries follow each other
/// closely after news and back off as a wait grows long, so a future is woken at most a fraction
/// of its wait after its work completes, and at most about a quarter of a millisecond while
/// futures on its stream resolved or began waiting within the last 100 ms (about half a
/// millisecond after a longer quiet spell), as long as the
/// one reactor thread keeps up: with futures pending on many streams it queries each stream's
/// front in turn, and the delays grow with the cost of a query (which a larger
/// `CUDA_DEVICE_MAX_CONNECTIONS` raises; see the crate's Performance section). Every pending
/// future's own event is also queried at least once a second (for an event recorded again on
/// another stream, whose order is then not its first stream's). Events recorded on a default
/// stream or by other code, and imported ones, are queried at least every 100 ms, and otherwise
/// as often as about 0.5% of a core allows.
///
/// On a [`flag_lane`](crate::StreamOptions::flag_lane) stream, which writes a ticket behind each
/// record, the crate's scanner thread also watches the future's ticket while it is pending,
/// spinning, and queries the event as soon as the ticket lands: the same answer, microseconds
/// after the GPU, at the price of a core while any lane wait is pending.
///
/// A future can instead wait by its own polls, each a query that wakes its task again while the
/// work is pending, for ever or for a budget ([`with_wait`](Self::with_wait)): spin latency,
/// paid for with the executor's thread.
///
/// Every CUDA call a future makes, on the polling thread or the reactor's, is made in relaxed
/// capture mode: awaiting never invalidates a graph capture that another thread makes in global
/// mode, and an answer caused by such a capture is read as "not yet".
///
/// Creating a future makes no CUDA call for an event; for a stream, it records an event on it (the
/// one stream operation asked for, which blocks only where CUDA blocks any stream operation: when
/// the stream's hardware queue is full) after checking that the stream is not being captured. The
/// first poll queries the event once and hands it to the reactor. Polling and dropping never wait
/// for the GPU; dropping waits at most for a query of the event that the reactor has under way
/// (microseconds), and drops the stored waker: once `drop` has returned the waker is not called,
/// but for a wake-up that was already under way.
///
/// After a kernel fault, CUDA reports the events of the work it killed as complete, and for a
/// while (a fraction of a second on the drivers tried) reports the fault nowhere. A future answers
/// what a query of its event answers: it may resolve to `Ok` for killed work in that window; once
/// the fault shows, a stream's future resolves to its error. The next CUDA call reports it either
/// way.
///
/// Dropping it does not cancel the GPU work; it only stops waiting. The waker is called from the
/// crate's reactor thread: it should only schedule the task (as every async runtime's does), not
/// run it inline.
///
/// ```no_run
/// # async fn example() -> Result<(), cuda_event::Error> {
/// let stream = cuda_event::Stream::new(0)?;
/// // ... submit work to stream.as_raw() ...
/// stream.completion().await?;                      // or (&stream).await?
/// # Ok(()) }
/// ```
///
/// In a spawned task: a stream's future is `Completion<'static>` (it owns what it waits on), so
/// it can be spawned as it is; an event's future borrows the event (`tokio::spawn(event.completion())`
/// does not compile, E0597), so move the event into the task and make the future there:
///
/// ```no_run
/// # async fn example() -> Result<(), cuda_event::Error> {
/// use cuda_event::Stream;
/// let stream = Stream::new(0)?;
/// // ... submit work to stream.as_raw() ...
/// let whole_stream = tokio::spawn(stream.completion());
/// let event = stream.record_event()?;
/// let one_event = tokio::spawn(async move { event.completion().await });
/// whole_stream.await.expect("the task ran")?;
/// one_event.await.expect("the task ran")?;
/// # Ok(()) }
/// ```
#[must_use = "a Completion waits only when polled: an event's makes no CUDA call until then"]
pub struct Completion<'a> {
    state: State<'a>,
    /// How it waits ([`with_wait`](Self::with_wait)).
    wait: Wait,
}

enum State<'a> {
    /// Ready with this result (again, if polled again).
    Done(Result<()>),
    /// Between two states while a poll hands the wait over (to the reactor, or to its own polls):
    /// left so only where that poll panicked (a waker's `clone` may), and then ready with
    /// [`Error::ReactorUnavailable`], never with `Ok`: the work may still be pending.
    HandingOver,
    /// Not polled yet.
    Fresh(Source<'a>),
    /// Queried at each poll, which wakes its own task while the work is pending
    /// ([`Wait::Spin`], [`Wait::Yield`], [`Wait::SpinThen`]), until `until` (`None`: for ever),
    /// after which the wait is the reactor's. `target` is what the first poll found to wait on,
    /// as a reactor wait keeps it: a later record into a capture does not touch it.
    Spinning {
        source: Source<'a>,
        d: &'static Driver,
        target: QueryTarget,
        until: Option<Instant>,
        yielding: bool,
    },
    /// Registered with the reactor. `registration` is declared first so that it drops first:
    /// nothing queries an owned event once that event drops.
    Waiting {
        registration: Registration,
        source: Source<'a>,
    },
}

/// A future's wait on the reactor, which abandons its cell when it drops: nothing queries the
/// event after, and the waker goes.
struct Registration {
    cell: Arc<WaitCell>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A forked child has no reactor thread and takes none of the crate's locks (see `fork`).
        if !crate::fork::in_forked_child() {
            self.cell.abandon();
        }
    }
}

/// The event a future waits on.
// The owned event lives in the future itself (a box would cost a stream's future one allocation).
#[allow(clippy::large_enum_variant)]
enum Source<'a> {
    /// An event's completion borrows it.
    Borrowed(&'a Event),
    /// A stream's completion owns the event it recorded.
    Owned(Event),
}

impl Source<'_> {
    fn event(&self) -> &Event {
        match self {
            Source::Borrowed(event) => event,
            Source::Owned(event) => event,
        }
    }
}

impl Completion<'_> {
    fn done(result: Result<()>) -> Self {
        Completion {
            state: State::Done(result),
            wait: Wait::Reactor,
        }
    }

    /// This future, waiting the way `wait` says instead of by the reactor. Effective only before
    /// the first poll; a future already polled keeps waiting as it began.
    ///
    /// - [`Wait::Reactor`] (the default) and [`Wait::Driver`]: the crate's reactor thread (and,
    ///   on a [`flag_lane`](crate::StreamOptions::flag_lane) stream, its scanner) wakes the task
    ///   (see [How it wakes](Self#how-it-wakes)). No blocking wait is made for a future: it would
    ///   hold the executor's thread, or a thread per wait.
    /// - [`Wait::Spin`]: each poll queries the event (in relaxed capture mode) and, while the work
    ///   is pending, wakes the future's own task at once, so the executor polls it again at its
    ///   next turn. No thread of the crate takes part: the latency is the executor's round of its
    ///   ready tasks plus a query, and the cost a share of one executor thread for the whole wait
    ///   (all of it where the task is alone). For short waits on a runtime that has threads to
    ///   spare.
    /// - [`Wait::Yield`]: as [`Wait::Spin`], and each pending poll also yields the executor's
    ///   thread to the OS scheduler (`sched_yield`) before returning.
    /// - [`Wait::SpinThen`]: as [`Wait::Spin`] until `budget` has passed since the first poll,
    ///   then as [`Wait::Reactor`]: short waits end at spin latency, long ones cost at most the
    ///   budget of spinning.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), cuda_event::Error> {
    /// use cuda_event::Wait;
    /// use std::time::Duration;
    /// let stream = cuda_event::Stream::new(0)?;
    /// let done = stream.record_event()?;
    /// let budget = Duration::from_micros(50);
    /// done.completion().with_wait(Wait::SpinThen { budget }).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_wait(self, wait: Wait) -> Self {
        Completion { wait, ..self }
    }
}

/// What a first poll finds: the result, once there is one (the work done, an error, an event never
/// recorded), or the target to wait on while the work is pending.
fn look(event: &Event) -> std::result::Result<(&'static Driver, QueryTarget), Result<()>> {
    let target = event.query_target().ok_or(Ok(()))?;
    let d = driver("Completion::poll").map_err(Err)?;
    // The published CUDA event, which no capture holds; refused, as a query is, while the last
    // record is a capture's.
    event.refuse_if_swallowed(&d.event_query).map_err(Err)?;
    match ask(d, target) {
        Ok(true) => Err(Ok(())),
        Ok(false) => Ok((d, target)),
        Err(e) => Err(Err(e)),
    }
}

impl<'a> Completion<'a> {
    /// The first poll: asks once, and if the work is pending, registers the wait with the reactor
    /// ([`Wait::Reactor`]), or waits by its own polls.
    fn start(source: Source<'a>, wait: Wait, waker: &Waker) -> State<'a> {
        let (d, target) = match look(source.event()) {
            Ok(found) => found,
            Err(result) => return State::Done(result),
        };
        let Some((budget, yielding)) = wait.spins() else {
            return Completion::register(source, target, waker);
        };
        if budget == Some(Duration::ZERO) {
            return Completion::register(source, target, waker);
        }
        let until = budget.and_then(|budget| Instant::now().checked_add(budget));
        State::Spinning {
            source,
            d,
            target,
            until,
            yielding,
        }
    }

    /// Hands the wait on `target`, pending, to the reactor (and, on a lane stream, to the
    /// scanner).
    fn register(source: Source<'a>, target: QueryTarget, waker: &Waker) -> State<'a> {
        let event = source.event();
        let registration = Registration {
            cell: Arc::new(WaitCell::default()),
        };
        let _ = registration.cell.look(waker);
        if let Source::Borrowed(event) = source {
            // Abandoned before the event gives its CUDA event up (drop, into_raw).
            event.watchers().watch(&registration.cell);
        }
        let order = event.watchers().order();
        if let Err(e) = reactor::register(target, registration.cell.clone(), order) {
            return State::Done(Err(e));
        }
        if let Some((slot, ticket)) = event.watchers().lane_mark() {
            scanner::arm(slot, ticket, target, registration.cell.clone());
        }
        State::Waiting { registration, source }
    }
}

impl Future for Completion<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if crate::fork::in_forked_child() && !matches!(this.state, State::Done(_)) {
            // No reactor thread in a forked child, and its cell's lock may be held for ever.
            this.state = State::Done(Err(Error::ForkedChild));
        }
        if let State::Fresh(_) = this.state {
            let State::Fresh(source) = std::mem::replace(&mut this.state, State::HandingOver) else {
                unreachable!("just matched")
            };
            this.state = Completion::start(source, this.wait, cx.waker());
            if let State::Spinning { .. } = this.state {
                cx.waker().wake_by_ref(); // asked once already: again at the next poll
                return Poll::Pending;
            }
        }
        if let State::Spinning {
            d,
            target,
            until,
            yielding,
            ..
        } = &this.state
        {
            match ask(d, *target) {
                Ok(true) => this.state = State::Done(Ok(())),
                Err(e) => this.state = State::Done(Err(e)),
                Ok(false) if until.is_some_and(|until| Instant::now() >= until) => {
                    let State::Spinning { source, target, .. } =
                        std::mem::replace(&mut this.state, State::HandingOver)
                    else {
                        unreachable!("just matched")
                    };
                    this.state = Completion::register(source, target, cx.waker());
                }
                Ok(false) => {
                    if *yielding {
                        crate::sync::thread::yield_now();
                    }
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        let result = match &this.state {
            State::Done(result) => return Poll::Ready(result.clone()),
            State::HandingOver => Err(Error::ReactorUnavailable {
                reason: "a panic (of a waker's clone, say) interrupted an earlier poll of this \
                         future while it handed its wait over: its work may still be pending"
                    .into(),
            }),
            State::Fresh(_) | State::Spinning { .. } => unreachable!("started above"),
            State::Waiting { registration, .. } => match registration.cell.look(cx.waker()) {
                None => return Poll::Pending,
                Some(result) => result,
            },
        };
        this.state = State::Done(result.clone());
        Poll::Ready(result)
    }
}

/// Whether the target is complete, asked on the polling thread in relaxed capture mode; an answer
/// caused by another thread's capture is "not yet".
fn ask(d: &Driver, target: QueryTarget) -> Result<bool> {
    let _relaxed = RelaxedCapture::enter(d);
    match target.query(d) {
        Err(e) if is_capture_interference(&e) => Ok(false),
        answer => answer,
    }
}

impl fmt::Debug for Completion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Completion");
        match &self.state {
            State::Done(result) => s.field("done", result),
            State::HandingOver => s.field("interrupted", &"a poll panicked handing its wait over"),
            State::Fresh(source) => s.field("not_polled", source.event()),
            State::Spinning { source, .. } => s.field("spinning_on", source.event()),
            State::Waiting { source, .. } => s.field("waiting_on", source.event()),
        };
        s.finish()
    }
}

impl Event {
    /// The completion of the work this event captured, as a future: `Ok(())` once it is complete,
    /// at once for an event never recorded (as [`synchronize`](Self::synchronize) returns at
    /// once), or the error [`query`](Self::query) would return (a CUDA error of the work, an
    /// event recorded during a graph capture, [`Error::ExporterGone`]...). `(&event).await` does
    /// the same.
    ///
    /// Making it calls no CUDA function; the first poll queries the event and, while it is
    /// pending, hands it to the crate's reactor thread (see [`Completion`]). It waits for the
    /// record current at its first poll, and follows a later record of the event outside a
    /// capture; a later record into a capture does not touch what it waits on (see `Event`'s
    /// "Recorded into a graph capture"). A future first polled while the event's last record is a
    /// capture's resolves to `CUDA_ERROR_CAPTURED_EVENT` without a query, as `query` does.
    ///
    /// The future borrows the event. To move a wait into a spawned task, move the event in:
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), cuda_event::Error> {
    /// let stream = cuda_event::Stream::new(0)?;
    /// let done = stream.record_event()?;
    /// let task = tokio::spawn(async move { done.completion().await });
    /// task.await.expect("the task ran")?;
    /// # Ok(()) }
    /// ```
    ///
    /// After a kernel fault CUDA reports the events of the work it killed as complete, so this
    /// future, like [`query`](Self::query), may then resolve to `Ok` (see [`Completion`]).
    #[doc(alias = "synchronize_async")]
    pub fn completion(&self) -> Completion<'_> {
        Completion {
            state: State::Fresh(Source::Borrowed(self)),
            wait: Wait::Reactor,
        }
    }

    /// [`synchronize`](Self::synchronize) for at most `timeout`: `Ok(true)` once the work the
    /// event captured has completed (at once if never recorded), `Ok(false)` if it has not when
    /// the time is up. A `blocking` event's wait sleeps (woken by the crate's reactor thread, as
    /// a [`completion`](Self::completion) is); another event's spins, as its
    /// `synchronize` would. For diagnosing hangs: work stuck behind a host function, an imported
    /// event whose exporter stalled. Either way its queries run in relaxed capture mode, so that
    /// it never breaks a graph capture that another thread makes in global mode.
    ///
    /// # Errors
    /// As [`query`](Self::query); for a `blocking` event also as [`completion`](Self::completion)
    /// ([`Error::ReactorUnavailable`]).
    #[doc(alias = "cudaEventSynchronize")]
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now().checked_add(timeout);
        match self.is_blocking() {
            true => block_on_until(self.completion(), deadline),
            false => self.poll_until(deadline, false),
        }
    }
}

impl<'a> IntoFuture for &'a Event {
    type Output = Result<()>;
    type IntoFuture = Completion<'a>;

    fn into_future(self) -> Completion<'a> {
        self.completion()
    }
}

impl Stream {
    /// The completion of all work submitted to this stream so far, as a future: `Ok(())` once it
    /// is complete, or the CUDA error of that work. `(&stream).await` does the same.
    ///
    /// It records an event on the stream now (the one stream operation it makes) and owns it, so
    /// the future does not borrow the stream: `tokio::spawn(stream.completion())` works, and the
    /// future may outlive the `Stream`. Nothing else is ever queued on the stream for it.
    ///
    /// It answers what a query of that event answers: after a kernel fault, CUDA reports the
    /// killed work's events as complete and the fault itself a moment later, so a future pending
    /// at the fault may resolve to `Ok`; one made or polled once the fault shows gets its error
    /// (see [`Completion`]).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), cuda_event::Error> {
    /// let stream = cuda_event::Stream::new(0)?;
    /// // ... submit work to stream.as_raw() ...
    /// let task = tokio::spawn(stream.completion());
    /// task.await.expect("the task ran")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] while the stream is being captured into a graph (at the first
    /// poll). A capture that another thread begins on the stream while this records on it is
    /// outside the crate's guarantees (see `Event`'s "Recorded into a graph capture"); when the
    /// crate sees it, it returns this error too and never reuses the event.
    #[doc(alias = "synchronize_async")]
    pub fn completion(&self) -> Completion<'static> {
        match self.record_for_completion() {
            Ok(event) => Completion {
                state: State::Fresh(Source::Owned(event)),
                wait: Wait::Reactor,
            },
            Err(e) => Completion::done(Err(e)),
        }
    }

    pub(crate) fn record_for_completion(&self) -> Result<Event> {
        let event = Event::new();
        // Refuses a stream being captured, also one whose capture began around the record.
        event.record_as(self, true)?;
        Ok(event)
    }

    /// [`synchronize`](Self::synchronize) for at most `timeout`: `Ok(true)` once all work
    /// submitted so far has completed, `Ok(false)` if it has not when the time is up. It sleeps
    /// (it waits as [`completion`](Self::completion) does), so no core spins while it waits. For
    /// diagnosing hangs: a stream stuck behind a host function or an event of a dead process.
    ///
    /// It records an event on the stream first, and CUDA blocks a record while the stream's
    /// hardware queue is full (about a thousand operations queued behind the stuck one): then this
    /// call blocks with it, past its timeout. A watchdog of a stream that may fill its queue
    /// records an event as the work is submitted and waits on that with
    /// [`Event::synchronize_timeout`](crate::Event::synchronize_timeout), which queues nothing.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] while the stream is being captured; CUDA's errors otherwise.
    #[doc(alias = "cudaStreamSynchronize")]
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<bool> {
        block_on_until(self.completion(), Instant::now().checked_add(timeout))
    }
}

impl IntoFuture for &Stream {
    type Output = Result<()>;
    type IntoFuture = Completion<'static>;

    fn into_future(self) -> Completion<'static> {
        self.completion()
    }
}

crate::sync::thread_local! {
    /// Set on the crate's threads that run wakers (the reactor's, the lane's scanner's).
    static WAKING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one of the crate's threads that run wakers: a waker that runs its
/// task there, and a task that then sleeps until those threads wake it, would wait for itself.
pub(crate) fn mark_waking_thread() {
    WAKING_THREAD.with(|waking| waking.set(true));
}

/// Runs `completion` on this thread, sleeping between polls, until it is ready (`Ok(true)`, or its
/// error) or `deadline` passes (`Ok(false)`; `None`: no deadline). On a thread of the crate's that
/// runs wakers (a waker that ran its task there), a pending one is
/// [`Error::ReactorUnavailable`] at once: nothing else would wake it.
pub(crate) fn block_on_until(completion: Completion<'_>, deadline: Option<Instant>) -> Result<bool> {
    struct Unpark(crate::sync::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(crate::sync::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut completion = std::pin::pin!(completion);
    loop {
        if let Poll::Ready(result) = completion.as_mut().poll(&mut cx) {
            return result.map(|()| true);
        }
        if WAKING_THREAD.with(std::cell::Cell::get) {
            return Err(Error::ReactorUnavailable {
                reason: "a wait by the reactor on the crate's own thread that runs wakers (a \
                         waker that runs its task there)"
                    .into(),
            });
        }
        match deadline {
            None => crate::sync::thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                crate::sync::thread::park_timeout(deadline - now);
            }
        }
    }
}
