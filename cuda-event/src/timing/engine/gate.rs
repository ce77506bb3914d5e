//! A host-held gate on a stream, so that timed repetitions run back to back however slowly the host
//! queues them (nvbench's blocking kernel, as a stream memory operation instead of a kernel): the
//! stream waits (`cuStreamWaitValue32`) until a word of mapped host memory reaches the gate's
//! generation, and the host writes it once everything is queued.
//!
//! If the host blocks while queueing (CUDA's queue of a stream is finite, and the GPU does not drain
//! it while the gate holds; or the queued work itself waits on the host), nothing would ever release
//! the gate: a [`Watchdog`] thread releases it after a timeout and says so, so the caller can drop
//! what it timed.

use crate::driver::Driver;
use crate::error::Result;
use crate::stream::Stream;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::{Condvar, Mutex};
use crate::timing::engine::scratch_memory::MappedWord;
use cuda_event_sys as sys;
use std::time::{Duration, Instant};

/// A gate on a word that outlives it: the word is kept across measurements (see the
/// `scratch_memory` module), so each gate continues the generations where the last one on the word
/// stopped.
pub(crate) struct Gate<'w> {
    word: &'w MappedWord,
    generation: AtomicU32,
}

/// The gate closed on a stream; dropping it opens the gate.
pub(crate) struct Held<'g> {
    flag: &'g AtomicU32,
    generation: u32,
}

impl<'w> Gate<'w> {
    /// A gate on `word`, open. Nothing may wait on the word any more (whoever used it last drained
    /// its stream), so its value is the last generation written, which every later hold exceeds.
    pub(crate) fn new(word: &'w MappedWord) -> Gate<'w> {
        Gate {
            word,
            generation: AtomicU32::new(word.value().load(Ordering::Acquire)),
        }
    }

    /// Closes the gate on `stream`: the work queued on it from now on waits until the returned
    /// guard drops.
    pub(crate) fn hold(&self, d: &Driver, stream: &Stream) -> Result<Held<'w>> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let (raw, address) = (stream.as_raw(), self.word.device_ptr());
        let flag = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
        stream.in_context(d, || {
            // SAFETY: a live stream, and the device address of mapped memory that outlives every
            // wait on it (freed only while idle in the cache, never while a lease holds it, and the
            // owner synchronizes the stream before giving it back).
            d.stream_wait_value32
                .call(|f| unsafe { f(raw, address, generation, flag) })
        })?;
        Ok(Held {
            flag: self.word.value(),
            generation,
        })
    }

    /// The flag the watchdog writes.
    pub(crate) fn flag(&self) -> &'w AtomicU32 {
        self.word.value()
    }
}

impl Held<'_> {
    /// The generation this hold waits for, for the watchdog.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // The wait is cyclic (GEQ on the difference): a later generation also opens it.
        self.flag.store(self.generation, Ordering::Release);
    }
}

/// Opens a held gate that its holder did not open in time.
pub(crate) struct Watchdog<'g> {
    flag: &'g AtomicU32,
    timeout: Duration,
    state: Mutex<WatchState>,
    changed: Condvar,
}

#[derive(Default)]
struct WatchState {
    /// The generation held, and when to open it.
    armed: Option<(u32, Instant)>,
    stop: bool,
}

impl<'g> Watchdog<'g> {
    /// How long a hold may last before the watchdog opens it: far longer than queueing a batch
    /// takes a host that is not blocked, short enough that a blocked measurement moves on soon.
    pub(crate) const TIMEOUT: Duration = Duration::from_secs(1);

    /// A watchdog that opens holds older than `timeout` by writing `flag` (a gate's, [`Gate::flag`]).
    pub(crate) fn new(flag: &'g AtomicU32, timeout: Duration) -> Self {
        Watchdog {
            flag,
            timeout,
            state: Mutex::new(WatchState::default()),
            changed: Condvar::new(),
        }
    }

    /// Runs it on a thread of `scope` until the returned guard drops, however the scope's body
    /// ends: a panic in it unwinds past the guard, which stops the watchdog, instead of leaving the
    /// scope waiting for the watchdog's thread forever. None where no thread could be started
    /// (the process's thread limit, say): nothing then opens the gate.
    pub(crate) fn run_in<'scope, 'env>(
        &'env self,
        scope: &'scope crate::sync::thread::Scope<'scope, 'env>,
    ) -> Option<Running<'env, 'g>> {
        crate::sync::spawn_scoped(scope, "cuda-event measure watchdog", || self.run()).ok()?;
        Some(Running(self))
    }

    fn run(&self) {
        let mut state = self.state.lock();
        while !state.stop {
            match state.armed {
                Some((generation, deadline)) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out()
                        && state.armed == Some((generation, deadline))
                    {
                        self.flag.store(generation, Ordering::Release);
                        state.armed = None;
                    }
                }
                None => self.changed.wait(&mut state),
            }
        }
    }

    pub(crate) fn arm(&self, held: &Held<'_>) {
        self.state.lock().armed = Some((held.generation(), Instant::now() + self.timeout));
        self.changed.notify_one();
    }

    /// Whether it has opened the gate since it was last armed (asked between [`arm`](Self::arm)
    /// and [`disarm`](Self::disarm)).
    pub(crate) fn opened(&self) -> bool {
        self.state.lock().armed.is_none()
    }

    /// Disarms it; returns whether it opened the gate since it was armed.
    pub(crate) fn disarm(&self) -> bool {
        let mut state = self.state.lock();
        let fired = state.armed.take().is_none();
        self.changed.notify_one();
        fired
    }

    fn stop(&self) {
        self.state.lock().stop = true;
        self.changed.notify_one();
    }
}

/// A running [`Watchdog`]; dropping it stops it.
pub(crate) struct Running<'w, 'g>(&'w Watchdog<'g>);

impl Drop for Running<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::{Held, Watchdog};
    use crate::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[test]
    fn a_panic_in_the_scope_stops_the_watchdog_instead_of_hanging() {
        let flag = AtomicU32::new(0);
        let watchdog = Watchdog::new(&flag, Watchdog::TIMEOUT);
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::sync::thread::scope(|scope| {
                let _running = watchdog.run_in(scope);
                panic!("the measured work panicked");
            })
        }));
        assert!(ended.is_err());
    }

    #[test]
    fn a_hold_past_the_timeout_is_opened_and_reported_and_a_short_one_is_not() {
        let flag = AtomicU32::new(0);
        let watchdog = Watchdog::new(&flag, Duration::from_millis(20));
        crate::sync::thread::scope(|scope| {
            let _running = watchdog.run_in(scope);
            // The host blocks while queueing: the watchdog opens the gate.
            let held = Held {
                flag: &flag,
                generation: 1,
            };
            watchdog.arm(&held);
            crate::sync::thread::sleep(Duration::from_millis(200));
            assert!(watchdog.opened());
            assert_eq!(
                flag.load(Ordering::Acquire),
                1,
                "the watchdog wrote the generation"
            );
            assert!(watchdog.disarm());
            drop(held);
            // The host queues in time: the holder opens it, the watchdog reports nothing.
            let held = Held {
                flag: &flag,
                generation: 2,
            };
            watchdog.arm(&held);
            assert!(!watchdog.opened());
            assert!(!watchdog.disarm());
            drop(held);
            assert_eq!(flag.load(Ordering::Acquire), 2);
            // Disarmed: it never writes an old generation later.
            crate::sync::thread::sleep(Duration::from_millis(60));
            assert_eq!(flag.load(Ordering::Acquire), 2);
        });
    }
}
