//! A value published once by whichever thread gets there first, then read without a lock: what
//! `OnceLock::set` does, with one atomic read-modify-write instead of two (an event's first record
//! is on the hot path of a new event, and is measured against a plain record).

use crate::sync::atomic::{AtomicU8, Ordering};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

const EMPTY: u8 = 0;
/// A thread won the race and is writing the value (a move: it cannot block or fail).
const WRITING: u8 = 1;
const READY: u8 = 2;

pub(crate) struct PublishOnce<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is written once, by the thread that won the EMPTY -> WRITING exchange, and read
// only after READY is seen with Acquire (published with Release): shared access is to a T that no
// one mutates, so T: Sync suffices for sharing and T: Send for moving it between threads.
unsafe impl<T: Send + Sync> Sync for PublishOnce<T> {}
// SAFETY: owning it is owning a T.
unsafe impl<T: Send> Send for PublishOnce<T> {}

impl<T> PublishOnce<T> {
    pub(crate) const fn new() -> Self {
        PublishOnce {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == READY {
            // SAFETY: READY, seen with Acquire, follows the one write of the value.
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// Publishes `value`, or, if another thread publishes first, gives it back with the value
    /// published.
    #[inline]
    pub(crate) fn set(&self, value: T) -> Result<&T, (T, &T)> {
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            return Err((value, self.wait()));
        }
        // SAFETY: this thread alone moved the state out of EMPTY, so it alone writes, once; no
        // reader reads before READY.
        unsafe { (*self.value.get()).write(value) };
        self.state.store(READY, Ordering::Release);
        // SAFETY: written just above.
        Ok(unsafe { (*self.value.get()).assume_init_ref() })
    }

    /// The value another thread is publishing: it is a move away, so spin.
    #[cold]
    fn wait(&self) -> &T {
        loop {
            if let Some(value) = self.get() {
                return value;
            }
            std::hint::spin_loop();
        }
    }

    pub(crate) fn take(&mut self) -> Option<T> {
        if *self.state.get_mut() != READY {
            return None;
        }
        *self.state.get_mut() = EMPTY;
        // SAFETY: READY means written; EMPTY now, so it is read out once.
        Some(unsafe { (*self.value.get()).assume_init_read() })
    }
}

impl<T> Drop for PublishOnce<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

#[cfg(test)]
mod tests {
    use super::PublishOnce;
    use std::sync::Arc;

    #[test]
    fn first_set_wins_and_the_others_get_theirs_back() {
        let cell = PublishOnce::new();
        assert!(cell.get().is_none());
        assert_eq!(
            cell.set(String::from("a")).map_err(|(v, _)| v),
            Ok(&String::from("a"))
        );
        let Err((back, winner)) = cell.set(String::from("b")) else {
            panic!("set twice")
        };
        assert_eq!((back.as_str(), winner.as_str()), ("b", "a"));
    }

    #[test]
    fn racing_threads_agree_on_one_value_and_nothing_leaks() {
        for _ in 0..200 {
            let cell = PublishOnce::new();
            let token = Arc::new(());
            let seen: Vec<usize> = crate::sync::thread::scope(|s| {
                let threads: Vec<_> = (0..8)
                    .map(|i| {
                        let (cell, token) = (&cell, token.clone());
                        s.spawn(move || match cell.set((i, token)) {
                            Ok(v) => v.0,
                            Err((_, v)) => v.0,
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            assert!(seen.iter().all(|&i| i == seen[0]));
            drop(cell);
            assert_eq!(
                Arc::strong_count(&token),
                1,
                "the published value was dropped with the cell"
            );
        }
    }
}
