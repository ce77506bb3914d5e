//! Faults: after a device reset, a kernel fault's sticky error and a fork, the crate answers
//! with the error and makes no call CUDA forbids.

use super::scenario::{fault, fork_here, hold, release, reset, stream};
use super::{check, poll_once, poll_until_ready};
use crate::sync::thread;
use crate::{Error, Event, Stream};
use std::sync::Arc;

/// After another thread's device reset, old events and streams answer `DeviceWasReset` and their
/// drops destroy nothing; nothing reaches the driver with a destroyed handle.
#[test]
fn after_a_reset_nothing_uses_a_destroyed_handle() {
    check(200, || {
        let (event, plain) = (Arc::new(Event::new()), stream());
        event.record(&plain).unwrap();
        thread::spawn(|| reset(0)).join().unwrap();
        let user = {
            let (event, plain) = (event.clone(), plain.clone());
            thread::spawn(move || {
                assert!(matches!(event.query(), Err(Error::DeviceWasReset { .. })));
                assert!(matches!(event.record(&plain), Err(Error::DeviceWasReset { .. })));
            })
        };
        assert!(matches!(event.synchronize(), Err(Error::DeviceWasReset { .. })));
        user.join().unwrap();
        drop(event);
        drop(plain);
        let fresh = Stream::new(0).unwrap();
        Event::new().record(&fresh).unwrap();
    });
}

/// A kernel fault's sticky error: reads answer it, and a waiting future resolves to it.
#[test]
fn a_sticky_error_ends_waiting_futures_with_it() {
    check(200, || {
        let (event, held) = (Arc::new(Event::new()), stream());
        hold(&held);
        event.record(&held).unwrap();
        let (pending, is_pending) = shuttle::sync::mpsc::channel();
        let waiting = {
            let event = event.clone();
            thread::spawn(move || {
                let mut future = event.completion();
                assert!(poll_once(&mut future).is_pending());
                pending.send(()).unwrap();
                poll_until_ready(future)
            })
        };
        is_pending.recv().unwrap();
        fault(0);
        let illegal = |r: &crate::Result<()>| matches!(r, Err(Error::Cuda(e)) if e.code() == 700);
        let answer = waiting.join().unwrap();
        assert!(illegal(&answer), "{answer:?}");
        assert!(matches!(event.query(), Err(Error::Cuda(e)) if e.code() == 700));
    });
}

/// A forked child makes no driver call: its calls answer `ForkedChild`, its futures resolve to
/// it, and its drops release nothing (the model fails any driver call the child makes).
#[test]
fn a_forked_child_makes_no_driver_call() {
    check(100, || {
        let (event, held) = (Event::new(), Stream::new(0).unwrap());
        hold(&held);
        event.record(&held).unwrap();
        let mut waiting = event.completion();
        assert!(poll_once(&mut waiting).is_pending());
        let fresh = event.completion();
        fork_here();
        assert_eq!(event.query(), Err(Error::ForkedChild));
        assert_eq!(event.record(&held), Err(Error::ForkedChild));
        assert_eq!(poll_until_ready(waiting), Err(Error::ForkedChild));
        assert_eq!(poll_until_ready(fresh), Err(Error::ForkedChild));
        release(&held); // the parent's reactor then finds its wait complete and goes idle
        drop(event);
        drop(held);
    });
}
