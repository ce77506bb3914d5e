//! Keeps the calls that read an event from overlapping where CUDA crashes: a record of it into a
//! graph capture, and the end of that capture.
//!
//! Probed with C programs on the GPU (the project's benchmark results, "captured records"): a query
//! of an event on one thread while another thread records it into a stream being captured, or ends
//! that capture (`cuStreamEndCapture`), crashes inside the driver (SIGSEGV in the querying thread),
//! in either capture mode. Queries before or at the capture's start, while it is open, after it
//! ended, and around the destruction of its graph did not crash (they answer
//! `CUDA_ERROR_CAPTURED_EVENT` while it is open, invalidating it, and an invalid-value error
//! after).
//!
//! The crate cannot see when a capture ends (the caller ends it), so an event whose last record
//! went into a capture as a plain record (swallowed: not an external node) is not read from CUDA
//! again: [`read`](RecordGate::read) tells the reader so, and the reader refuses with the error
//! CUDA gives such an event during the capture, until a record outside a capture replaces it. That
//! needs to know, at every record, whether the stream is being captured (one driver call). A record
//! into a capture holds the gate: readers that come meanwhile wait for it (it never waits on the
//! GPU: a capture queues nothing), and it waits for the reads in flight to leave first: for as long
//! as they take if they never block (queries, elapsed times), at most [`LONGEST_READ`] for those
//! that may block in CUDA (a synchronize waiting for work, a stream wait waiting for room in a full
//! hardware queue), since what they wait for may depend on the recording thread; a synchronize
//! already waiting when the record came did not crash. (The limit counts from the reader's entry,
//! not from its blocking call: a reader descheduled that long before it reaches CUDA is not told.)
//! A record outside a capture overlaps reads as it always could (CUDA handles that), and touches
//! the gate with one load, unless it replaces a swallowed record: then it holds the gate too, and
//! readers that come meanwhile read the swallowed record without waiting (such a record can block
//! in CUDA while its stream's queue is full).
//!
//! A stream wait on a swallowed record is how a capture forks into other streams, so readers are
//! also told whether the record was made on their own thread: a wait there still reaches CUDA, a
//! wait from another thread, which could overlap the capture's end, is refused too. That assumes
//! the thread that records into a capture is not racing the capture's end made by another thread
//! (CUDA lets any thread add to a stream another thread captures); a wait it makes then is the
//! caller's race.

use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set while a record holds the gate.
const RECORDING: u64 = 1 << 63;
/// Set while the event's last record is a plain record into a capture.
const SWALLOWED: u64 = 1 << 62;
/// Readers in flight that may block in CUDA (a synchronize, a stream wait), counted from this bit.
const ONE_BLOCKING: u64 = 1 << 31;
/// The readers in flight that may block in CUDA.
const BLOCKING: u64 = (SWALLOWED - 1) & !(ONE_BLOCKING - 1);
/// The readers in flight whose calls never block (queries, elapsed times).
const SHORT: u64 = ONE_BLOCKING - 1;
/// Every reader in flight.
const READERS: u64 = BLOCKING | SHORT;

/// A call that reads the event: whether it may block in CUDA decides how long a record into a
/// capture waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Never blocks (a query, an elapsed time): a record into a capture waits until it is done.
    Short,
    /// May wait in CUDA for the GPU (a synchronize) or for room in a full hardware queue (a stream
    /// wait): a record into a capture waits for it at most [`LONGEST_READ`].
    MayBlock,
}

impl Read {
    fn one(self) -> u64 {
        match self {
            Read::Short => 1,
            Read::MayBlock => ONE_BLOCKING,
        }
    }
}

/// How long a record into a capture waits for readers in flight that may block in CUDA: one still
/// running after this long is taken to be waiting there (for the GPU, or for room in a queue).
const LONGEST_READ: Duration = Duration::from_millis(20);

/// How a record goes into the stream, as the recorder found it (one capture check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordInto {
    /// The stream is not being captured: the record replaces any swallowed one.
    Stream,
    /// A plain record into a capture: it is swallowed by the capture.
    Capture,
    /// An external node of a capture: the event itself is recorded only when the graph launches.
    GraphNode,
}

/// What a reader is told of the event's last record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastRecord {
    /// None yet, or a record into a stream: CUDA may be asked.
    Plain,
    /// A plain record into a capture, made on the reading thread (`here`) or another.
    Swallowed { here: bool },
}

/// One per `Event`: see the module's docs.
pub(crate) struct RecordGate {
    state: AtomicU64,
    /// The [`thread_token`] of the thread that made the swallowed record (while `SWALLOWED`).
    swallowed_on: AtomicU64,
}

impl RecordGate {
    pub(crate) const fn new() -> RecordGate {
        RecordGate {
            state: AtomicU64::new(0),
            swallowed_on: AtomicU64::new(0),
        }
    }

    /// Runs `read`, a call of kind `kind` that reads the event's CUDA state, while no record of it
    /// into a capture runs. `read` is told what the event's last record was.
    #[inline]
    pub(crate) fn read<T>(&self, kind: Read, read: impl FnOnce(LastRecord) -> T) -> T {
        let mut backoff = Backoff::default();
        loop {
            match self.try_enter(kind) {
                Entry::In(last) => {
                    let _leave = Leave(self, kind);
                    return read(last);
                }
                Entry::Swallowed => return read(LastRecord::Swallowed { here: false }),
                Entry::Held => backoff.pause(),
            }
        }
    }

    /// Runs `read` as a short read of both `self` and `other` (an elapsed time between two events),
    /// told of both last records; once `self`'s is known to be swallowed, `other` is not read and
    /// is reported swallowed too (a pair read refuses if either is). It never holds one gate while
    /// it waits for the other (which could deadlock with two records into captures, each waiting
    /// for the other's reader).
    pub(crate) fn read_both<T>(
        &self,
        other: &RecordGate,
        read: impl FnOnce(LastRecord, LastRecord) -> T,
    ) -> T {
        let mut backoff = Backoff::default();
        loop {
            let swallowed = LastRecord::Swallowed { here: false };
            let first = match self.try_enter(Read::Short) {
                Entry::In(LastRecord::Plain) => LastRecord::Plain,
                Entry::In(last) => {
                    drop(Leave(self, Read::Short));
                    return read(last, swallowed);
                }
                Entry::Swallowed => return read(swallowed, swallowed),
                Entry::Held => {
                    backoff.pause();
                    continue;
                }
            };
            let leave = Leave(self, Read::Short);
            match other.try_enter(Read::Short) {
                Entry::In(last) => {
                    let _leave_other = Leave(other, Read::Short);
                    return read(first, last);
                }
                Entry::Swallowed => return read(first, swallowed),
                // Leaves `self` (dropping `leave`) before it waits.
                Entry::Held => {}
            }
            drop(leave);
            backoff.pause();
        }
    }

    /// Enters as a reader of `kind` unless a record holds the gate. A reader enters only from a
    /// word without RECORDING, by compare-and-swap: the word's one order of modifications puts
    /// each reader's entry before or after each record's claim (`fetch_or`), and a record that
    /// claimed the gate sees every reader that entered before.
    fn try_enter(&self, kind: Read) -> Entry {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & RECORDING != 0 {
                // A record replacing a swallowed one: read as before it, without waiting (a record
                // outside a capture can block in CUDA while its queue is full).
                return match state & SWALLOWED != 0 {
                    true => Entry::Swallowed,
                    false => Entry::Held,
                };
            }
            match self.state.compare_exchange_weak(
                state,
                state + kind.one(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                // SWALLOWED changes only with the gate held: fixed until this reader leaves.
                Ok(_) => {
                    return Entry::In(match state & SWALLOWED != 0 {
                        // Written before the record released the gate, which this entry acquired.
                        true => LastRecord::Swallowed {
                            here: self.swallowed_on.load(Ordering::Relaxed) == thread_token(),
                        },
                        false => LastRecord::Plain,
                    });
                }
                Err(now) => state = now,
            }
        }
    }

    /// Runs `record`, which records the event `into` what the recorder found: with the gate held,
    /// unless it is a record into a stream replacing no swallowed record (the usual record: one
    /// atomic load), which reads may overlap as they always could.
    #[inline]
    pub(crate) fn record<T>(&self, into: RecordInto, record: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.goes_unheld(into) {
            return record();
        }
        self.record_held(into, record)
    }

    /// Whether a record `into` goes unheld: one on a stream that replaces no swallowed record
    /// (reads may overlap it, as they always could), while no other record holds the gate.
    fn goes_unheld(&self, into: RecordInto) -> bool {
        into == RecordInto::Stream && self.state.load(Ordering::Acquire) & (SWALLOWED | RECORDING) == 0
    }

    #[cold]
    fn record_held<T>(&self, into: RecordInto, record: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut backoff = Backoff::default();
        let claimed = loop {
            let state = self.state.fetch_or(RECORDING, Ordering::Acquire);
            if state & RECORDING == 0 {
                break state;
            }
            // Another thread's record holds it.
            while self.state.load(Ordering::Relaxed) & RECORDING != 0 {
                backoff.pause();
            }
            // That record may have replaced the swallowed one: then this one holds nothing, so
            // that reads never wait behind it.
            if self.goes_unheld(into) {
                return record();
            }
        };
        let mut release = Release {
            gate: self,
            claimed,
            into,
            recorded: false,
        };
        if claimed & READERS != 0 && into != RecordInto::Stream {
            self.wait_for_readers();
        }
        if into == RecordInto::Capture {
            self.swallowed_on.store(thread_token(), Ordering::Relaxed);
        }
        let recorded = record();
        release.recorded = recorded.is_ok();
        recorded
    }

    /// Waits until no reader is in flight: without a limit for short ones (they never wait for
    /// anything), at most [`LONGEST_READ`] for those that may block in CUDA. Readers that come now
    /// see the record holding the gate and wait, so only those already in flight are waited for.
    #[cold]
    fn wait_for_readers(&self) {
        let deadline = Instant::now() + LONGEST_READ;
        let mut backoff = Backoff::default();
        loop {
            let state = self.state.load(Ordering::Acquire);
            let blocking_done = state & BLOCKING == 0 || Instant::now() >= deadline;
            if state & SHORT == 0 && blocking_done {
                return;
            }
            backoff.pause();
        }
    }
}

/// What a reader found at the gate.
enum Entry {
    /// Entered: leaves with [`Leave`].
    In(LastRecord),
    /// Not entered: a record replacing a swallowed one holds the gate, so the swallowed record is
    /// what it reads.
    Swallowed,
    /// Not entered: a record into a capture holds the gate.
    Held,
}

/// A number for the calling thread, unique in the process (`ThreadId` has no stable integer
/// form); 0 on a thread whose thread-locals are gone, which matches no record's thread.
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.try_with(|token| *token).unwrap_or(0)
}

struct Leave<'a>(&'a RecordGate, Read);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.state.fetch_sub(self.1.one(), Ordering::Release);
    }
}

/// Releases a record's hold on the gate (also when the record panics), leaving SWALLOWED as the
/// record decides.
struct Release<'a> {
    gate: &'a RecordGate,
    /// The word the record claimed the gate from.
    claimed: u64,
    into: RecordInto,
    /// Whether the CUDA record succeeded.
    recorded: bool,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let swallowed = match self.into {
            // Even a failed record may have reached the capture: never read it again.
            RecordInto::Capture => SWALLOWED,
            RecordInto::Stream if self.recorded => 0,
            _ => self.claimed & SWALLOWED,
        };
        if self.claimed & READERS == 0 {
            // No reader was in flight and none can enter while RECORDING is set, so nothing else
            // changed the word: a store releases it (one atomic read-modify-write per record).
            self.gate.state.store(swallowed, Ordering::Release);
        } else {
            // Readers in flight leave (fetch_sub) meanwhile: keep their count.
            let _ = self
                .gate
                .state
                .fetch_update(Ordering::Release, Ordering::Relaxed, |state| {
                    Some(state & READERS | swallowed)
                });
        }
    }
}

/// Spins briefly (a record lasts a few hundred nanoseconds), then yields the core.
#[derive(Default)]
struct Backoff {
    spins: u32,
}

impl Backoff {
    fn pause(&mut self) {
        if self.spins < 64 {
            self.spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Holds for about a microsecond, so that overlaps are likely wherever the gate lets them be.
    fn hold(busy: &AtomicU64, other: &AtomicU64, overlaps: &AtomicU64) {
        busy.fetch_add(1, Ordering::SeqCst);
        for _ in 0..200 {
            if other.load(Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::Relaxed);
            }
            std::hint::spin_loop();
        }
        busy.fetch_sub(1, Ordering::SeqCst);
    }

    #[test]
    fn a_record_into_a_capture_never_overlaps_a_read_that_reaches_cuda() {
        let gate = RecordGate::new();
        let (reading, recording) = (AtomicU64::new(0), AtomicU64::new(0));
        let (overlaps, stop) = (AtomicU64::new(0), AtomicBool::new(false));
        std::thread::scope(|s| {
            // One reader, so that on a two-core machine it is not descheduled mid-read for longer
            // than LONGEST_READ (after which a record goes ahead by design).
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    gate.read(Read::Short, |last| {
                        // What the crate's readers do: only a plain record reaches CUDA (the
                        // recording thread's waits aside, which this reader is not).
                        if last == LastRecord::Plain {
                            hold(&reading, &recording, &overlaps);
                        }
                    });
                }
            });
            for _ in 0..20_000 {
                // A record on a stream makes the reader reach CUDA again, then one into a capture.
                gate.record(RecordInto::Stream, || Ok(())).unwrap();
                let recorded = gate.record(RecordInto::Capture, || {
                    hold(&recording, &reading, &overlaps);
                    Ok(())
                });
                recorded.unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(
            overlaps.load(Ordering::Relaxed),
            0,
            "a captured record ran beside a read"
        );
        assert_eq!(
            gate.state.load(Ordering::Relaxed),
            SWALLOWED,
            "the gate was left held"
        );
    }

    #[test]
    fn readers_are_told_of_a_swallowed_record_until_a_record_outside_a_capture() {
        let gate = RecordGate::new();
        let swallowed = || gate.read(Read::Short, |last| last != LastRecord::Plain);
        assert!(!swallowed());
        gate.record(RecordInto::GraphNode, || Ok(())).unwrap();
        assert!(!swallowed(), "an external node is not the event's record");
        let failed: Result<()> = gate.record(RecordInto::Capture, || Err(crate::Error::StreamCapturing));
        assert!(failed.is_err());
        assert!(swallowed(), "a failed record into a capture may have reached it");
        let failed: Result<()> = gate.record(RecordInto::Stream, || Err(crate::Error::StreamCapturing));
        assert!(failed.is_err());
        assert!(swallowed(), "a failed record replaces nothing");
        gate.record(RecordInto::Stream, || Ok(())).unwrap();
        assert!(!swallowed());
        assert_eq!(gate.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn readers_are_told_whether_the_swallowed_record_was_made_on_their_thread() {
        let gate = RecordGate::new();
        gate.record(RecordInto::Capture, || Ok(())).unwrap();
        assert_eq!(
            gate.read(Read::Short, |last| last),
            LastRecord::Swallowed { here: true }
        );
        let elsewhere =
            std::thread::scope(|s| s.spawn(|| gate.read(Read::Short, |last| last)).join().unwrap());
        assert_eq!(elsewhere, LastRecord::Swallowed { here: false });
    }

    #[test]
    fn a_usual_record_does_not_hold_the_gate() {
        let gate = RecordGate::new();
        // A read inside the record would wait for ever if the record held the gate.
        let last = gate
            .record(RecordInto::Stream, || Ok(gate.read(Read::Short, |last| last)))
            .unwrap();
        assert_eq!(last, LastRecord::Plain);
        assert_eq!(gate.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_record_replacing_a_swallowed_one_never_holds_readers_up() {
        let gate = &RecordGate::new();
        gate.record(RecordInto::Capture, || Ok(())).unwrap();
        let (inside, go) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            // It holds the gate (it replaces a swallowed record) while blocked in CUDA.
            blocked_record(s, gate, &inside, &go);
            while !inside.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let last = gate.read(Read::Short, |last| last);
            go.store(true, Ordering::SeqCst);
            assert_eq!(last, LastRecord::Swallowed { here: false });
        });
        assert_eq!(gate.read(Read::Short, |last| last), LastRecord::Plain);
    }

    /// A record into a capture while a reader of `kind` holds the gate for `held`: when the record
    /// ended, counted from the read's start, and whether the read had ended by then.
    fn record_beside_a_reader(kind: Read, held: Duration) -> (Duration, bool) {
        let gate = RecordGate::new();
        let (started, left) = (std::sync::OnceLock::new(), AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                gate.read(kind, |_| {
                    started.set(Instant::now()).unwrap();
                    std::thread::sleep(held);
                    left.store(true, Ordering::SeqCst);
                })
            });
            while started.get().is_none() {
                std::thread::yield_now();
            }
            gate.record(RecordInto::Capture, || Ok(())).unwrap();
            let read_had_ended = left.load(Ordering::SeqCst);
            (started.get().unwrap().elapsed(), read_had_ended)
        })
    }

    #[test]
    fn a_record_into_a_capture_waits_out_a_short_read_and_a_blocked_one_at_most_longest_read() {
        let (_, read_had_ended) = record_beside_a_reader(Read::Short, LONGEST_READ * 3);
        assert!(read_had_ended, "a captured record ran beside a short read");
        // Long enough that a loaded machine does not end the read before the record looks.
        let (after, read_had_ended) = record_beside_a_reader(Read::MayBlock, LONGEST_READ * 50);
        assert!(
            after >= LONGEST_READ,
            "waited only {after:?} for a read that may block"
        );
        assert!(
            !read_had_ended,
            "waited for a blocked read longer than LONGEST_READ"
        );
    }

    #[test]
    fn reading_two_events_never_holds_one_while_waiting_for_the_other() {
        let gates = (RecordGate::new(), RecordGate::new());
        let (a, b) = (&gates.0, &gates.1);
        let (b_held, release) = (AtomicBool::new(false), AtomicBool::new(false));
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            // A record of b into a capture holds b's gate.
            s.spawn(|| {
                b.record(RecordInto::Capture, || {
                    b_held.store(true, Ordering::SeqCst);
                    while !release.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    Ok(())
                })
            });
            while !b_held.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            s.spawn(|| a.read_both(b, |_, _| ()));
            // A record of a into a capture waits for a's short readers without a limit: it would
            // never end if the pair read held a's gate while waiting for b's.
            s.spawn(move || {
                a.record(RecordInto::Capture, || Ok(())).unwrap();
                done.send(()).unwrap();
            });
            let recorded = finished.recv_timeout(Duration::from_secs(10));
            release.store(true, Ordering::SeqCst);
            recorded.expect("the record of a waited for the pair read");
        });
    }

    /// Runs a record on a stream on a new thread that stays inside its CUDA call (as one blocked on
    /// a full queue) until `go`; returns once it is inside.
    fn blocked_record<'scope, 'env>(
        s: &'scope std::thread::Scope<'scope, 'env>,
        gate: &'env RecordGate,
        inside: &'env AtomicBool,
        go: &'env AtomicBool,
    ) {
        s.spawn(move || {
            gate.record(RecordInto::Stream, || {
                inside.store(true, Ordering::SeqCst);
                while !go.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                Ok(())
            })
        });
    }

    #[test]
    fn a_record_that_waited_behind_one_replacing_a_swallowed_record_then_holds_nothing() {
        let gate = &RecordGate::new();
        gate.record(RecordInto::Capture, || Ok(())).unwrap();
        let flags: [AtomicBool; 4] = Default::default();
        let [first_in, first_go, second_in, second_go] = &flags;
        let (read, answered) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            blocked_record(s, gate, first_in, first_go);
            while !first_in.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // The second waits behind the first, which holds the gate to replace the swallowed one.
            blocked_record(s, gate, second_in, second_go);
            std::thread::sleep(Duration::from_millis(20));
            first_go.store(true, Ordering::SeqCst);
            while !second_in.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            s.spawn(move || read.send(gate.read(Read::Short, |last| last)).unwrap());
            let last = answered.recv_timeout(Duration::from_secs(10));
            second_go.store(true, Ordering::SeqCst);
            assert_eq!(
                last,
                Ok(LastRecord::Plain),
                "a read waited behind a record on a stream"
            );
        });
    }

    #[test]
    fn a_panic_leaves_the_gate_open() {
        let gate = RecordGate::new();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.read(Read::Short, |_| panic!("read"))
        }));
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gate.record(RecordInto::Stream, || -> Result<()> { panic!("record") })
        }));
        assert_eq!(gate.state.load(Ordering::Relaxed), 0);
    }
}
