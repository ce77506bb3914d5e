//! Holding a stream with host functions: work queued behind them waits until the host says so, or
//! for a while.

use crate::calls::ok;
use cuda_event::{Stream, sys};
use parking_lot::{Condvar, Mutex};
use std::ffi::c_void;
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// Holds a stream: work queued after [`hold`] waits until [`open`](Self::open) (or the drop).
#[derive(Debug)]
pub struct HostHold(Arc<(Mutex<bool>, Condvar)>);

impl HostHold {
    pub fn open(&self) {
        *self.0.0.lock() = true;
        self.0.1.notify_all();
    }
}

impl Drop for HostHold {
    fn drop(&mut self) {
        self.open();
    }
}

unsafe extern "C" fn wait_until_open(data: *mut c_void) {
    // SAFETY: `data` is the Arc that `hold` leaked for this one call.
    let hold = unsafe { Arc::from_raw(data as *const (Mutex<bool>, Condvar)) };
    let mut open = hold.0.lock();
    while !*open {
        hold.1.wait(&mut open);
    }
}

/// Queues on `stream` a host function that waits for the returned hold to open.
pub fn hold(stream: &Stream) -> HostHold {
    let hold = Arc::new((Mutex::new(false), Condvar::new()));
    let data = Arc::into_raw(hold.clone()) as *mut c_void;
    // SAFETY: the host function takes back the Arc it is given; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(wait_until_open), data) });
    HostHold(hold)
}

unsafe extern "C" fn sleep_for(data: *mut c_void) {
    std::thread::sleep(Duration::from_micros(data as u64));
}

/// Queues on `stream` a host function that sleeps for `duration`.
pub fn sleep_on(stream: &Stream, duration: Duration) {
    let micros = duration.as_micros() as usize as *mut c_void;
    // SAFETY: the host function reads its argument as a number; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(sleep_for), micros) });
}

unsafe extern "C" fn push_to(data: *mut c_void) {
    // SAFETY: `data` is the boxed (log, value) pair `log_on` leaked for this one call.
    let (log, value) = *unsafe { Box::from_raw(data as *mut (Arc<Mutex<Vec<u32>>>, u32)) };
    log.lock().push(value);
}

/// Queues on `stream` a host function that appends `value` to `log` when the stream reaches it.
pub fn log_on(stream: &Stream, log: &Arc<Mutex<Vec<u32>>>, value: u32) {
    let data = Box::into_raw(Box::new((log.clone(), value))) as *mut c_void;
    // SAFETY: the host function takes back the box it is given; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(push_to), data) });
}

/// Queues on `stream` a host function that signals when it starts and then waits until the
/// returned sender sends (or drops): it blocks CUDA's host-function thread of the context, which
/// runs every host function of it. Returns once that host function is running.
pub fn block_the_host_fn_thread(stream: &Stream) -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (started, running) = mpsc::channel::<()>();
    stream
        .launch_host_fn(move || {
            let _ = started.send(());
            let _ = released.recv();
        })
        .unwrap();
    running
        .recv_timeout(Duration::from_secs(5))
        .expect("the blocking host function did not start within 5 s");
    release
}
