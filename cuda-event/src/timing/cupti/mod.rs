//! CUPTI as the measurement's own referee ([`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti),
//! the `cupti` feature): each timed repetition's work is tagged (an external correlation id), and
//! CUPTI's records of the kernels, copies and memsets it launched give its GPU duration beside the
//! events' interval; and CUPTI's times as a measurement reports them (`times`, with or without the
//! feature).

#[cfg(feature = "cupti")]
mod library;
pub(crate) mod times;

use crate::error::{Error, MeasureError, Result};
#[cfg(feature = "cupti")]
use library::{CONCURRENT_KERNEL, Cupti, DRIVER, EXTERNAL_CORRELATION, MEMCPY, MEMSET, RUNTIME};
use std::collections::HashMap;
use std::time::Duration;

/// Without the `cupti` feature no session exists (`MeasureOptions::check` refuses the option):
/// the sampler's code is the same either way.
#[cfg(not(feature = "cupti"))]
pub(crate) struct Session {
    never: std::convert::Infallible,
}

#[cfg(not(feature = "cupti"))]
impl Session {
    pub(crate) fn begin() -> Result<Session> {
        Err(unavailable("this build has no `cupti` feature".into()))
    }

    pub(crate) fn tagged<R>(&self, _tag: u64, _work: impl FnOnce() -> R) -> Result<R> {
        match self.never {}
    }

    pub(crate) fn finish(self) -> Result<Spans> {
        match self.never {}
    }
}

#[cfg(feature = "cupti")]
/// One measurement's use of CUPTI: its record kinds enabled, from [`begin`](Self::begin) to
/// [`finish`](Self::finish) (or the drop). One at a time in a process: CUPTI's records are
/// process-wide.
pub(crate) struct Session {
    cupti: &'static Cupti,
    /// Added to the sampler's tags, so that a record an earlier session left late can never be
    /// read as this one's.
    base: u64,
    _one_at_a_time: parking_lot::MutexGuard<'static, ()>,
}

/// The tags of one session lie in `[base, base + SESSION_TAGS)`.
#[cfg(feature = "cupti")]
const SESSION_TAGS: u64 = 1 << 40;

/// Sessions so far (see [`session_base`]).
#[cfg(feature = "cupti")]
static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The `n`-th session's base: `SESSION_TAGS` times 1 to 2^24 - 1 in turn (never 0), so a base comes
/// round again only millions of sessions later.
#[cfg(feature = "cupti")]
fn session_base(n: u64) -> u64 {
    (n % ((1 << 24) - 1) + 1) * SESSION_TAGS
}

/// The tags of the session with `base`: the last base's reach the top of the tags, `u64::MAX`,
/// which a range closed above could not name.
#[cfg(feature = "cupti")]
fn session_tags(base: u64) -> std::ops::RangeInclusive<u64> {
    base..=base + (SESSION_TAGS - 1)
}

/// How long a measurement with CUPTI waits for another thread's to end before it gives up: its
/// work may itself be waiting for this thread.
#[cfg(feature = "cupti")]
const WAIT_FOR_ANOTHER: Duration = Duration::from_secs(60);

#[cfg(feature = "cupti")]
std::thread_local! {
    /// Whether this thread holds a session: a measurement with CUPTI inside another's work.
    static IN_A_SESSION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "cupti")]
static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The kinds a session enables.
#[cfg(feature = "cupti")]
const KINDS: [u32; 6] = [
    CONCURRENT_KERNEL,
    MEMCPY,
    MEMSET,
    DRIVER,
    RUNTIME,
    EXTERNAL_CORRELATION,
];

fn unavailable(reason: String) -> Error {
    MeasureError::CuptiUnavailable { reason }.into()
}

#[cfg(feature = "cupti")]
impl Session {
    /// Loads CUPTI (once) and enables its records of kernels, copies, memsets and the crate's tags;
    /// waits for another thread's measurement with CUPTI to end first (for at most a minute).
    ///
    /// # Errors
    /// [`MeasureError::CuptiUnavailable`]: the library is missing, CUPTI refused (another tool, a
    /// profiler, holds it), this thread is inside a measurement with CUPTI already, or another
    /// thread's held CUPTI for a minute.
    pub(crate) fn begin() -> Result<Session> {
        let cupti = library::cupti().map_err(unavailable)?;
        if IN_A_SESSION.get() {
            let reason = "a measurement with cupti inside another's work on the same thread";
            return Err(unavailable(reason.into()));
        }
        let guard = ONE_AT_A_TIME.try_lock_for(WAIT_FOR_ANOTHER).ok_or_else(|| {
            unavailable("another thread's measurement with cupti held CUPTI for a minute".into())
        })?;
        cupti.clear();
        for (i, &kind) in KINDS.iter().enumerate() {
            if let Err(reason) = cupti.enable(kind) {
                KINDS[..i].iter().for_each(|&kind| cupti.disable(kind));
                return Err(unavailable(reason));
            }
        }
        let base = session_base(SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        IN_A_SESSION.set(true);
        Ok(Session {
            cupti,
            base,
            _one_at_a_time: guard,
        })
    }

    /// Runs `work` with the GPU work that it launches on this thread tagged `tag` (below 2^40).
    pub(crate) fn tagged<R>(&self, tag: u64, work: impl FnOnce() -> R) -> Result<R> {
        /// Ends the tag however the work ends (a panic included), so that none stays on the
        /// thread's stack of CUPTI tags.
        struct Untag<'c>(&'c Cupti, bool);
        impl Drop for Untag<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    let _ = self.0.untag();
                }
            }
        }
        self.cupti.tag(self.base + tag).map_err(unavailable)?;
        let mut tagged = Untag(self.cupti, false);
        let done = work();
        tagged.1 = true;
        self.cupti.untag().map_err(unavailable)?;
        Ok(done)
    }

    /// Once the tagged work has completed: each tag's span, from its first operation's start to
    /// its last one's end, and the records CUPTI dropped.
    pub(crate) fn finish(self) -> Result<Spans> {
        // Delivered first, then disabled, then what is left delivered: no record still being
        // written is lost to the disabling.
        self.cupti.flush().map_err(unavailable)?;
        KINDS.iter().for_each(|&kind| self.cupti.disable(kind));
        let (records, dropped) = self.cupti.take().map_err(unavailable)?;
        let ours = session_tags(self.base);
        let tag_of: HashMap<u32, u64> = records
            .tags
            .into_iter()
            .filter(|(_, external)| ours.contains(external))
            .map(|(correlation, external)| (correlation, external - self.base))
            .collect();
        let mut by_tag: HashMap<u64, (u64, u64)> = HashMap::new();
        for (correlation, start, end) in records.spans {
            // A record without timestamps (CUPTI had no device memory for them) tells nothing.
            let Some(&tag) = tag_of.get(&correlation).filter(|_| start != 0 && end >= start) else {
                continue;
            };
            let span = by_tag.entry(tag).or_insert((start, end));
            *span = (span.0.min(start), span.1.max(end));
        }
        Ok(Spans::new(by_tag, dropped))
    }
}

#[cfg(feature = "cupti")]
impl Drop for Session {
    fn drop(&mut self) {
        // After `finish` they are disabled already, which disabling again leaves so.
        KINDS.iter().for_each(|&kind| self.cupti.disable(kind));
        IN_A_SESSION.set(false);
    }
}

/// CUPTI's spans of a session's tags.
pub(crate) struct Spans {
    by_tag: HashMap<u64, (u64, u64)>,
    pub(crate) dropped: usize,
}

impl Spans {
    #[cfg(feature = "cupti")]
    fn new(by_tag: HashMap<u64, (u64, u64)>, dropped: usize) -> Spans {
        Spans { by_tag, dropped }
    }

    /// The span of `tag`'s operations; none if CUPTI recorded none.
    pub(crate) fn of(&self, tag: u64) -> Option<Duration> {
        self.by_tag
            .get(&tag)
            .map(|&(start, end)| Duration::from_nanos(end - start))
    }
}

#[cfg(all(test, feature = "cupti"))]
mod tests {
    use super::*;

    #[test]
    fn every_sessions_tags_are_its_own_and_the_last_bases_reach_the_top() {
        let last = session_base((1 << 24) - 2);
        assert_eq!(last, ((1 << 24) - 1) * SESSION_TAGS);
        assert_eq!(
            session_base((1 << 24) - 1),
            SESSION_TAGS,
            "round again from the first"
        );
        assert!(session_tags(last).contains(&(last + 3)));
        assert_eq!(*session_tags(last).end(), u64::MAX);
        let first = session_base(0);
        assert!(!session_tags(first).contains(&0), "0 is no session's");
        assert!(!session_tags(first).contains(&session_base(1)));
        assert!(session_tags(session_base(1)).contains(&session_base(1)));
    }
}
