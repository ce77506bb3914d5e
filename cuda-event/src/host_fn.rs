//! A safe host callback: a Rust closure that CUDA runs on its own thread when a stream reaches it.

use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::stream::Stream;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The closure's box, as CUDA's `void *userData`.
type Callback = Box<dyn FnOnce() + Send + 'static>;

impl Stream {
    /// Runs `callback` once, on a thread of CUDA's, when the stream reaches this point: after all
    /// work submitted before it has completed (`cuLaunchHostFunc`).
    ///
    /// Rules CUDA sets, which the closure must keep:
    /// - **it must not call CUDA** (no event, stream or memory call, of this crate or any other):
    ///   that may deadlock or fail. Hand work to another thread (a channel, a waker) instead.
    /// - it **blocks later work on this stream** until it returns: keep it short.
    /// - CUDA never runs it after the stream's context has failed (a kernel fault): what it owns is
    ///   then leaked, not dropped.
    ///
    /// A panic inside it is contained: it is reported by the panic hook and goes no further; the
    /// stream goes on.
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
            if self.is_capturing_with(d)? {
                return Err(Error::StreamCapturing);
            }
            self.queue_host_fn(d, callback)
        })
    }

    /// `cuLaunchHostFunc` of `callback` on a stream the caller has checked: alive, not capturing,
    /// and run inside [`Stream::in_context`].
    pub(crate) fn queue_host_fn<F: FnOnce() + Send + 'static>(&self, d: &Driver, callback: F) -> Result<()> {
        let data = Box::into_raw(Box::new(Box::new(callback) as Callback)).cast::<c_void>();
        // SAFETY: a live stream; CUDA calls `run_callback` exactly once with `data` (a leaked
        // Box<Callback>), or never if the call fails, in which case it is reclaimed below.
        let code = d
            .launch_host_func
            .code(|f| unsafe { f(self.as_raw(), Some(run_callback), data) });
        if let Err(e) = d.launch_host_func.check(code) {
            // SAFETY: CUDA refused it, so it will never call run_callback with `data`.
            drop(unsafe { Box::from_raw(data.cast::<Callback>()) });
            return Err(e);
        }
        Ok(())
    }
}

/// What CUDA calls: takes the closure back and runs it, containing a panic (unwinding into C
/// would abort the process).
unsafe extern "C" fn run_callback(data: *mut c_void) {
    // SAFETY: `data` is the Box<Callback> that launch_host_fn leaked for this one call.
    let callback = unsafe { Box::from_raw(data.cast::<Callback>()) };
    let _ = catch_unwind(AssertUnwindSafe(callback));
}
