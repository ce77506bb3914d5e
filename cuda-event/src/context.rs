//! Device primary contexts: the CUDA runtime's context of each device, which this crate shares.
//!
//! Creating an event or stream, opening an IPC handle, and using a device's default stream need the
//! device's context current on the thread. Instead of switching the runtime's current device (and
//! switching back, which creates a context on a device the caller never used), the context is
//! pushed on the thread's context stack for the call and popped after: the caller's state is exactly
//! restored, and no other device is touched.

use crate::driver::{CUcontext, CUdevice, CUresult, driver};
use crate::error::{Result, check_driver};
use parking_lot::Mutex;
use std::marker::PhantomData;

/// A device's primary context. Retained once per process, never released: events and streams made
/// in it must not outlive it, and the runtime keeps it too.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Context(CUcontext);

// SAFETY: a CUcontext is an opaque handle that the driver lets any thread push or use.
unsafe impl Send for Context {}
// SAFETY: as for Send; the handle is never dereferenced here.
unsafe impl Sync for Context {}

/// Retained primary contexts, by device ordinal.
static PRIMARY: Mutex<Vec<Option<Context>>> = Mutex::new(Vec::new());

impl Context {
    /// The primary context of `device`, created by the driver if the device had none: only ever
    /// asked for a device the program uses.
    pub(crate) fn primary(device: i32) -> Result<Context> {
        if let Some(Some(context)) = PRIMARY.lock().get(device as usize) {
            return Ok(*context);
        }
        Context::retain(device)
    }

    /// Retains `device`'s primary context (activating it again after a device reset) and keeps it
    /// in the table.
    fn retain(device: i32) -> Result<Context> {
        let d = driver()?;
        let (mut dev, mut ctx): (CUdevice, CUcontext) = (0, std::ptr::null_mut());
        // SAFETY: out-pointers are live locals; an invalid ordinal is an error, not UB.
        check_driver("cuDeviceGet", unsafe { (d.device_get)(&mut dev, device) })?;
        // SAFETY: as above; `dev` is a device the driver just handed out.
        check_driver("cuDevicePrimaryCtxRetain", unsafe {
            (d.primary_ctx_retain)(&mut ctx, dev)
        })?;
        let mut table = PRIMARY.lock();
        let index = device as usize;
        if table.len() <= index {
            table.resize(index + 1, None);
        }
        table[index] = Some(Context(ctx));
        Ok(Context(ctx))
    }

    /// Makes this context current on the calling thread until the returned guard drops. Free when
    /// it already is current.
    pub(crate) fn enter(self) -> Result<Entered> {
        let d = driver()?;
        let mut current = std::ptr::null_mut();
        // SAFETY: writes the current context (or null) through a live local.
        check_driver("cuCtxGetCurrent", unsafe { (d.ctx_get_current)(&mut current) })?;
        if current == self.0 {
            return Ok(Entered {
                pushed: false,
                _thread: PhantomData,
            });
        }
        // SAFETY: self.0 is a retained primary context; the guard pops exactly this push.
        check_driver("cuCtxPushCurrent", unsafe { (d.ctx_push_current)(self.0) })?;
        Ok(Entered {
            pushed: true,
            _thread: PhantomData,
        })
    }

    /// The context's unique id: a device reset destroys the primary context, and its re-creation
    /// has a new id (or none until re-created).
    fn id(self) -> Result<u64> {
        let d = driver()?;
        let mut id = 0;
        // SAFETY: a retained context handle (possibly reset, which the driver reports as an error);
        // writes through a live local.
        check_driver("cuCtxGetId", unsafe { (d.ctx_get_id)(self.0, &mut id) })?;
        Ok(id)
    }
}

/// `CUDA_ERROR_INVALID_CONTEXT`: the call wanted a context current on the thread.
const INVALID_CONTEXT: CUresult = 201;

/// Runs a driver call that needs a context current on the thread (measured: `cuIpcGetEventHandle`
/// does, `cuEventRecord` and `cuEventQuery` do not): first as is, which costs nothing when a context
/// is current, then again with `device`'s primary context entered.
pub(crate) fn in_context_if_needed(device: i32, call: impl Fn() -> CUresult) -> Result<CUresult> {
    let code = call();
    if code != INVALID_CONTEXT {
        return Ok(code);
    }
    let _current = Context::primary(device)?.enter()?;
    Ok(call())
}

/// The instance of a device's primary context that a CUDA object was made in, to tell in `Drop`
/// whether a device reset has already destroyed the object (destroying it again would be a
/// use-after-free inside the driver).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Made {
    context: Context,
    id: u64,
}

impl Made {
    /// The instance current now of `device`'s primary context, re-activated if a device reset
    /// destroyed it.
    pub(crate) fn in_primary(device: i32) -> Result<Made> {
        let context = Context::primary(device)?;
        if let Ok(id) = context.id() {
            return Ok(Made { context, id });
        }
        let context = Context::retain(device)?;
        Ok(Made {
            context,
            id: context.id()?,
        })
    }

    pub(crate) fn context(self) -> Context {
        self.context
    }

    /// Whether objects made in this instance still exist: false after a reset of the device.
    pub(crate) fn still_alive(self) -> bool {
        self.context.id() == Ok(self.id)
    }
}

/// Pops the context that [`Context::enter`] pushed. Not `Send`: it pops the stack of the thread
/// that pushed.
pub(crate) struct Entered {
    pushed: bool,
    _thread: PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let Ok(d) = driver() else { return };
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context this guard pushed, on the thread that pushed it (the guard is
        // not Send).
        let code = unsafe { (d.ctx_pop_current)(&mut popped) };
        crate::drop_errors::report(check_driver("cuCtxPopCurrent", code));
    }
}
