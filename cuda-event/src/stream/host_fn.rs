//! A safe host callback: a Rust closure that CUDA runs on its own thread when a stream reaches it.
//!
//! CUDA is handed a key, not a pointer to the closure. A host function that a capture begun by
//! another thread swallowed becomes a node of that graph and is called once per launch of the
//! graph: with a pointer, the first call would free the closure and the second would run freed
//! memory. With a key, the first call takes the closure out of the table and every later call finds
//! nothing to run.

use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicUsize, Ordering};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

type Callback = Box<dyn FnOnce() + Send + 'static>;

/// Closures queued and not yet run, by key, in shards so that threads queueing and CUDA's thread
/// running rarely meet on one lock.
static QUEUED: [Mutex<BTreeMap<usize, Callback>>; SHARDS] = [const { Mutex::new(BTreeMap::new()) }; SHARDS];
const SHARDS: usize = 16;
/// Keys start at 1, so that no key is the null pointer.
static NEXT_KEY: AtomicUsize = AtomicUsize::new(1);

fn shard(key: usize) -> &'static Mutex<BTreeMap<usize, Callback>> {
    &QUEUED[key % SHARDS]
}

impl Stream {
    /// Runs `callback` once, on a thread of CUDA's, when the stream reaches this point: after all
    /// work submitted before it has completed (`cuLaunchHostFunc`).
    ///
    /// Rules CUDA sets, which the closure must keep:
    /// - **it must not call CUDA** (no event, stream or memory call, of this crate or any other):
    ///   that may deadlock or fail. Hand work to another thread (a channel, a waker) instead. This
    ///   includes dropping what it captured: the closure's captures are dropped on CUDA's thread
    ///   too, so a closure must not own an [`Event`](crate::Event), a `Stream` or device memory
    ///   whose drop would call CUDA.
    /// - it **blocks later work on this stream** until it returns, and CUDA runs the host functions
    ///   of a context one at a time on one thread: a closure that waits delays every other host
    ///   function of the context. Keep it short.
    /// - CUDA never runs it after the stream's context has failed (a kernel fault): what it owns is
    ///   then leaked, not dropped.
    ///
    /// A panic inside it is contained: it is reported by the panic hook and goes no further; the
    /// stream goes on.
    ///
    /// Capture: while the stream is being captured into a graph this returns
    /// [`Error::StreamCapturing`]. A capture that another thread begins on the stream between that
    /// check and the launch is outside the crate's guarantees: CUDA may crash when
    /// `cudaLaunchHostFunc` races a capture of its stream, and if it does not, the closure becomes a
    /// node of that graph (run at the graph's launches, not now). Begin captures of a stream on the
    /// thread that submits work to it, or after that work is submitted.
    ///
    /// ```no_run
    /// let stream = cuda_event::Stream::new(0)?;
    /// let (done, finished) = std::sync::mpsc::channel();
    /// stream.launch_host_fn(move || { let _ = done.send(()); })?;
    /// finished.recv().unwrap();
    /// # Ok::<(), cuda_event::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] while the stream is being captured into a graph (the closure
    /// would become a node run at every launch, and it runs once); CUDA's errors otherwise.
    #[doc(alias = "cuLaunchHostFunc")]
    #[doc(alias = "cudaLaunchHostFunc")]
    #[doc(alias = "add_callback")]
    pub fn launch_host_fn<F: FnOnce() + Send + 'static>(&self, callback: F) -> Result<()> {
        let d = driver("Stream::launch_host_fn")?;
        self.in_context_alive(d, || {
            // No begin of a capture the crate makes of this stream between the check and the
            // launch (`capture_gate`).
            let gate = self.gate().shared();
            if gate.capture().is_some() || self.is_capturing_with(d)? {
                return Err(Error::StreamCapturing);
            }
            self.queue_host_fn(d, callback)
        })
    }

    /// `cuLaunchHostFunc` of `callback` on a stream the caller has checked: alive, not capturing,
    /// and run inside [`Stream::in_context`].
    pub(crate) fn queue_host_fn<F: FnOnce() + Send + 'static>(&self, d: &Driver, callback: F) -> Result<()> {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        shard(key).lock().insert(key, Box::new(callback));
        // SAFETY: a live stream; `run_callback` takes a key, which stays meaningful however many
        // times CUDA calls it (see the module docs).
        let code = d
            .launch_host_func
            .code(|f| unsafe { f(self.as_raw(), Some(run_callback), key as *mut c_void) });
        if let Err(e) = d.launch_host_func.check(code) {
            // CUDA refused it, so it will never call run_callback with this key.
            let callback = shard(key).lock().remove(&key);
            drop(callback);
            return Err(e);
        }
        Ok(())
    }
}

/// What CUDA calls: takes the closure of `key` out of the table and runs it, containing a panic
/// (unwinding into C would abort the process). A key whose closure already ran finds nothing, so
/// any value of `key` is sound.
extern "C" fn run_callback(key: *mut c_void) {
    let key = key as usize;
    let callback = shard(key).lock().remove(&key);
    if let Some(callback) = callback {
        let _ = catch_unwind(AssertUnwindSafe(callback));
    }
}
