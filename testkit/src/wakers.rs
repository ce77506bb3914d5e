//! Driving futures without a runtime, and wakers that say what was done with them.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Runs `future` to completion on this thread (a waker that unparks it): for tests that need no
/// runtime. Parked between polls, it also checks that the future is woken. The driver model's
/// tests (cuda-event/src/model/tests/) cannot park, so theirs is another word, `poll_until_ready`,
/// which yields instead and checks only that the future becomes ready.
pub fn block_on<F: Future>(future: F) -> F::Output {
    block_until(future, None).expect("no deadline")
}

/// [`block_on`] that gives up after `timeout`: `None` if `future` was still pending then.
pub fn block_on_timeout<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    block_until(future, Some(Instant::now() + timeout))
}

/// Polls `future` on this thread, parked between polls, until it is ready or `deadline` passes.
fn block_until<F: Future>(future: F, deadline: Option<Instant>) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        match deadline {
            None => std::thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

/// Polls `future` once with a waker that does nothing: whether it is ready now. The driver
/// model's tests use this one too.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    poll_with(future, Waker::noop())
}

/// Polls `future` once with `waker`.
pub fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    let mut cx = Context::from_waker(waker);
    Pin::new(future).poll(&mut cx)
}

/// A waker that counts its wake-ups, and, made by [`panicking_waker`], then panics.
#[derive(Debug, Default)]
pub struct CountingWaker {
    wakes: AtomicUsize,
    panics: bool,
}

impl CountingWaker {
    /// How many times it was woken.
    pub fn count(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let n = self.wakes.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(!self.panics, "a waker that panics (wake-up {n}), on purpose");
    }
}

/// A [`CountingWaker`] and a `Waker` made from it.
pub fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker::default());
    (counter.clone(), Waker::from(counter))
}

/// A [`CountingWaker`] that panics at every wake-up (after counting it), and a `Waker` made from
/// it.
pub fn panicking_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker {
        panics: true,
        ..CountingWaker::default()
    });
    (counter.clone(), Waker::from(counter))
}
