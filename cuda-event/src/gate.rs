//! A host-held gate on a stream, so that timed repetitions run back to back however slowly the host
//! queues them (nvbench's blocking kernel, as a stream memory operation instead of a kernel): the
//! stream waits (`cuStreamWaitValue32`) until a word of mapped host memory reaches the gate's
//! generation, and the host writes it once everything is queued.
//!
//! If the host blocks while queueing (CUDA's queue of a stream is finite, and the GPU does not drain
//! it while the gate holds), nothing would ever release the gate: a [`Watchdog`] thread releases it
//! after [`Watchdog::TIMEOUT`] and counts that, so the caller can drop what it timed.

use crate::context::ContextInstance;
use crate::driver::Driver;
use crate::error::Result;
use crate::scratch_memory::MappedWord;
use crate::stream::Stream;
use cuda_event_sys as sys;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Gate {
    word: MappedWord,
    generation: AtomicU32,
}

/// The gate closed on a stream; dropping it opens the gate.
pub(crate) struct Held<'g> {
    flag: &'g AtomicU32,
    generation: u32,
}

impl Gate {
    /// A gate in `instance`, which is current on this thread.
    pub(crate) fn new(d: &Driver, instance: ContextInstance) -> Result<Gate> {
        Ok(Gate {
            word: MappedWord::new(d, instance)?,
            generation: AtomicU32::new(0),
        })
    }

    /// Closes the gate on `stream`: the work queued on it from now on waits until the returned
    /// guard drops.
    pub(crate) fn hold(&self, d: &Driver, stream: &Stream) -> Result<Held<'_>> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let (raw, address) = (stream.as_raw(), self.word.device_ptr);
        let flag = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ.0;
        stream.in_context(d, || {
            // SAFETY: a live stream, and the device address of mapped memory that outlives every
            // wait on it (the owner synchronizes the stream before dropping the gate).
            d.stream_wait_value32
                .call(|f| unsafe { f(raw, address, generation, flag) })
        })?;
        Ok(Held {
            flag: self.word.value(),
            generation,
        })
    }

    /// The flag the watchdog writes.
    pub(crate) fn flag(&self) -> &AtomicU32 {
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
    /// How long a hold may last before the watchdog opens it.
    pub(crate) const TIMEOUT: Duration = Duration::from_secs(1);

    /// A watchdog that opens holds by writing `flag` (a gate's, [`Gate::flag`]).
    pub(crate) fn new(flag: &'g AtomicU32) -> Self {
        Watchdog {
            flag,
            state: Mutex::new(WatchState::default()),
            changed: Condvar::new(),
        }
    }

    /// Runs it on a thread of `scope` until the returned guard drops, however the scope's body
    /// ends: a panic in it unwinds past the guard, which stops the watchdog, instead of leaving the
    /// scope waiting for the watchdog's thread forever.
    pub(crate) fn run_in<'scope, 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
    ) -> Running<'env, 'g> {
        scope.spawn(|| self.run());
        Running(self)
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
        self.state.lock().armed = Some((held.generation(), Instant::now() + Self::TIMEOUT));
        self.changed.notify_one();
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
    use super::Watchdog;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn a_panic_in_the_scope_stops_the_watchdog_instead_of_hanging() {
        let flag = AtomicU32::new(0);
        let watchdog = Watchdog::new(&flag);
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|scope| {
                let _running = watchdog.run_in(scope);
                panic!("the measured work panicked");
            })
        }));
        assert!(ended.is_err());
    }
}
