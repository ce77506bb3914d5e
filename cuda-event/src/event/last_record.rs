//! What an event's last record was: made on a stream, or swallowed by a graph capture (and on
//! which thread). One word, written by records and read with one load by every read.
//!
//! # Why two CUDA events and one word
//! CUDA crashes (SIGSEGV in the reading thread) when a query, synchronize or stream wait of an
//! event overlaps, on another thread, a record of that same event into a stream capture, or the
//! end of that capture; and a query while such a record sits in an open capture invalidates the
//! capture (the project's benchmark results, "captured records" and "two events"). Keeping reads
//! off such records with a lock costs every read and every record, and each version of that lock
//! had races of its own. Instead, an [`Event`](crate::Event) that is recorded into a capture
//! records a second CUDA event of the same flags there, which no other thread ever reads:
//!
//! - the **published** CUDA event (`Event::as_raw`) takes every record made outside a capture,
//!   and every read (query, synchronize, elapsed time, stream waits, the futures' queries) from
//!   any thread. It is never recorded into a capture by the crate, so no read of it can overlap a
//!   captured record of it or the end of a capture that holds it: there is nothing to exclude,
//!   and no read waits for anything.
//! - the **captured** CUDA events take the plain records made on a stream being captured: one per
//!   thread that makes such records (and device), which only that thread calls CUDA on again, with
//!   further captured records and the stream waits that fork its capture into other streams
//!   (CUDA's multi-stream capture). Two threads' captured records of one CUDA event at once crash
//!   CUDA too. Each is bound to the capture it went into and kept, whoever drops the `Event`,
//!   until that capture is over (see `captured`): a record into another capture, on a stream, or a
//!   destroy beside that capture's end crashes CUDA too.
//! - this **word** says which of the two holds the event's last record: 0, or the token of the
//!   thread whose record a capture swallowed. A read loads it once: 0, it reads the published
//!   event; otherwise it refuses with CUDA's own answer for such an event
//!   (`CUDA_ERROR_CAPTURED_EVENT`, 907), except a stream wait on the recording thread, which waits
//!   on that thread's captured event.
//!
//! | last record | word | published event | captured event | a read on any thread | a wait on the recording thread |
//! |---|---|---|---|---|---|
//! | none | 0 | not created | none | "never recorded" answers | nothing to wait for |
//! | on a stream | 0 | its record | absent, or an old capture's | reads the published event | waits on the published event |
//! | plain, into a capture | token | an older record (or none) | the recording thread's: this record | 907, no CUDA call | forks the capture |
//! | external node of a capture | 0 | a node of the graph | untouched | reads the published event | waits on the published event |
//!
//! Records of one event on two threads at once, into captures or not, write different CUDA events
//! and then the word in either order: each order names a record that really was made last by one
//! of the two, and every read is of the published event, which no capture holds, in both. (A fork
//! on a thread whose captured record is no longer the last is refused with 907: it cannot join the
//! other thread's capture.)
//!
//! The first record is made under the event's creation lock, and the published event is
//! published only after it, so the word is only ever written for the CUDA event that is the
//! event's (a first record cannot lose a publish race).
//!
//! What the word cannot cover: a capture that another thread begins by raw CUDA on a stream
//! between the crate's capture check and its record (`cuStreamBeginCapture` racing `cuEventRecord`
//! on one stream). The record is then captured on the published CUDA event, and the crate cannot
//! know. Captures the crate begins (`Stream::capture`, `measure`'s graph mode) hold the stream's
//! gate against it (`stream::capture_gate`); for raw ones, `Event`'s capture-safety table says
//! what holds.

use crate::sync::atomic::{AtomicU64, Ordering};

/// What a read is told of the event's last record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastRecord {
    /// None yet, a record on a stream, or an external node: the published event may be read.
    Plain,
    /// A plain record into a capture, made on the reading thread (`here`) or another.
    Swallowed { here: bool },
}

/// One per `Event`: see the module's docs.
pub(crate) struct LastRecordWord(AtomicU64);

impl LastRecordWord {
    pub(crate) const fn new() -> LastRecordWord {
        LastRecordWord(AtomicU64::new(0))
    }

    /// After a record of the published event on a stream. Written only when it changes: records
    /// from many threads share the line.
    #[inline]
    pub(crate) fn made_on_a_stream(&self) {
        if self.0.load(Ordering::Relaxed) != 0 {
            self.0.store(0, Ordering::Release);
        }
    }

    /// After a plain record into a capture, made by `thread` (a [`thread_token`], or
    /// [`NO_THREAD`]).
    pub(crate) fn swallowed_by(&self, thread: u64) {
        self.0.store(thread, Ordering::Release);
    }

    /// What the last record was.
    #[inline]
    pub(crate) fn get(&self) -> LastRecord {
        match self.0.load(Ordering::Acquire) {
            0 => LastRecord::Plain,
            token => LastRecord::Swallowed {
                here: token != NO_THREAD && Some(token) == thread_token(),
            },
        }
    }
}

/// The word after a captured record made by a thread whose thread-locals were gone: no thread's.
pub(crate) const NO_THREAD: u64 = u64::MAX;

/// A number for the calling thread, unique in the process, never 0 nor [`NO_THREAD`] (`ThreadId`
/// has no stable integer form); `None` on a thread whose thread-locals are gone.
pub(crate) fn thread_token() -> Option<u64> {
    use crate::sync::thread_local;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.try_with(|token| *token).ok()
}

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::{LastRecord, LastRecordWord, thread_token};

    #[test]
    fn a_read_is_told_of_a_swallowed_record_until_a_record_on_a_stream() {
        let word = LastRecordWord::new();
        assert_eq!(word.get(), LastRecord::Plain);
        word.swallowed_by(thread_token().unwrap());
        assert_eq!(word.get(), LastRecord::Swallowed { here: true });
        let elsewhere = std::thread::scope(|s| s.spawn(|| word.get()).join().unwrap());
        assert_eq!(elsewhere, LastRecord::Swallowed { here: false });
        word.made_on_a_stream();
        assert_eq!(word.get(), LastRecord::Plain);
    }
}
