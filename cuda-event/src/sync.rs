//! Every atomic, lock, condition variable, thread-local and thread of the crate comes from here:
//! std and parking_lot in a build, the model checker's types (shuttle) in the model's test build
//! (the library's unit tests under `RUSTFLAGS="--cfg cuda_event_model"`, what `ci/test model` runs;
//! never a library build, so the published crate holds no model), so that the model checker
//! sees, and schedules, every point where the crate's threads meet.
//!
//! Both sides offer parking_lot's shape (a lock returns its guard, a condition variable waits on
//! `&mut` guard), which is what the crate is written against.
//!
//! `OnceLock` is std's in both: every initializer the crate gives one makes no call that the model
//! checker schedules (no lock, no atomic of this facade, no driver call of the model that yields),
//! so no other model thread can run while one initializes it, and none can block on it.

pub(crate) use std::sync::OnceLock;

#[cfg(not(all(test, cuda_event_model)))]
pub(crate) use self::build::*;
#[cfg(all(test, cuda_event_model))]
pub(crate) use self::model::*;

#[cfg(not(all(test, cuda_event_model)))]
mod build {
    pub(crate) use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
    pub(crate) use std::sync::atomic;
    pub(crate) use std::thread;
    pub(crate) use std::thread_local;

    /// Spawns `f` on a thread of `scope`, or says why the operating system would not start one.
    pub(crate) fn spawn_scoped<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        name: &str,
        f: impl FnOnce() + Send + 'scope,
    ) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, f)
            .map(drop)
    }

    /// A static made on first use, once per process.
    pub(crate) struct Lazy<T>(std::sync::LazyLock<T>);

    impl<T> Lazy<T> {
        pub(crate) const fn new(init: fn() -> T) -> Lazy<T> {
            Lazy(std::sync::LazyLock::new(init))
        }

        pub(crate) fn get(&'static self) -> &'static T {
            &self.0
        }
    }
}

#[cfg(all(test, cuda_event_model))]
mod model {
    pub(crate) use shuttle::sync::atomic;
    pub(crate) use shuttle::sync::{RwLockReadGuard, RwLockWriteGuard};
    pub(crate) use shuttle::thread;
    pub(crate) use shuttle::thread_local;
    use std::ops::{Deref, DerefMut};
    use std::sync::PoisonError;
    use std::time::Instant;

    /// Spawns `f` on a thread of `scope` (the model's threads always start).
    pub(crate) fn spawn_scoped<'scope, 'env>(
        scope: &'scope shuttle::thread::Scope<'scope, 'env>,
        _name: &str,
        f: impl FnOnce() + Send + 'scope,
    ) -> std::io::Result<()> {
        scope.spawn(f);
        Ok(())
    }

    /// A static made on first use, once per model execution (the model's threads, the reactor's
    /// among them, do not outlive one).
    pub(crate) struct Lazy<T: Sync + 'static>(shuttle::lazy_static::Lazy<T>);

    impl<T: Sync + 'static> Lazy<T> {
        pub(crate) const fn new(init: fn() -> T) -> Lazy<T> {
            Lazy(shuttle::lazy_static::Lazy::new(init))
        }

        pub(crate) fn get(&'static self) -> &'static T {
            self.0.get()
        }
    }

    /// parking_lot's `Mutex` shape over the model checker's.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T: ?Sized>(shuttle::sync::Mutex<T>);

    /// parking_lot's guard shape: a condition variable waits on `&mut` of it.
    pub(crate) struct MutexGuard<'a, T: ?Sized> {
        mutex: &'a shuttle::sync::Mutex<T>,
        guard: Option<shuttle::sync::MutexGuard<'a, T>>,
    }

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(value))
        }
    }

    impl<T: ?Sized> Mutex<T> {
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard {
                mutex: &self.0,
                guard: Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)),
            }
        }

        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard
                .as_deref()
                .expect("a guard holds its lock until dropped")
        }
    }

    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard
                .as_deref_mut()
                .expect("a guard holds its lock until dropped")
        }
    }

    /// parking_lot's `RwLock` shape over the model checker's.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> RwLock<T> {
            RwLock(shuttle::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// What a timed wait says.
    #[derive(Debug)]
    pub(crate) struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            self.0
        }
    }

    /// parking_lot's `Condvar` shape over the model checker's.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        pub(crate) const fn new() -> Condvar {
            Condvar(shuttle::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.guard.take().expect("a guard holds its lock until dropped");
            guard.guard = Some(self.0.wait(inner).unwrap_or_else(PoisonError::into_inner));
        }

        /// The model has no clock: a timed wait gives the lock up, lets any other thread run, and
        /// reports a timeout (which every caller already takes as possibly early).
        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> WaitTimeoutResult {
            drop(guard.guard.take());
            shuttle::thread::yield_now();
            guard.guard = Some(guard.mutex.lock().unwrap_or_else(PoisonError::into_inner));
            WaitTimeoutResult(true)
        }

        pub(crate) fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }
    }
}
