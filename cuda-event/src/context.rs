//! Device primary contexts: the CUDA runtime's context of each device, which this crate shares.
//!
//! Creating an event or stream, getting or opening an IPC handle and using a device's default
//! stream need a context current on the thread (recording, querying, synchronizing, waiting and
//! timing do not: measured). Instead of switching the runtime's current device (and switching back,
//! which creates a context on a device the caller never used), [`Context::enter`] pushes the
//! device's primary context on the thread's context stack for the call and pops it after: the
//! caller's state is exactly restored, and no other device is touched. It is
//! the only way this crate makes a context current.

use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use cuda_event_sys as sys;
use std::marker::PhantomData;
use std::num::NonZeroU32;

/// Whether calls check that no device reset destroyed their event or stream (see
/// [`set_device_reset_checks`]).
static RESET_CHECKS: AtomicBool = AtomicBool::new(true);

/// Turns on or off, for the whole process, the check that each call on an event or stream makes
/// first: that no device reset (`cudaDeviceReset`) destroyed it, which would make the call a
/// use-after-free inside the driver. On by default.
///
/// The check is one `cuCtxGetId`. A program that never resets a device can turn it off and save
/// that call on every record, wait and query (the project's benchmark results measure it beside
/// raw calls).
///
/// # Safety
/// While the checks are off, no device may be reset (`cudaDeviceReset`, `cuDevicePrimaryCtxReset`,
/// or a library that calls them) and then have an `Event` or `Stream` made before the reset used:
/// with the checks off, such a call passes a destroyed handle to CUDA. (Drops keep their check.)
pub unsafe fn set_device_reset_checks(on: bool) {
    RESET_CHECKS.store(on, Ordering::Relaxed);
}

/// A device's primary context. Retained once per process, never released: events and streams made
/// in it must not outlive it, and the runtime keeps it too.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Context {
    raw: sys::CUcontext,
    device: sys::CUdevice,
}

// SAFETY: a CUcontext is an opaque handle that the driver lets any thread push or use; a CUdevice is
// an integer.
unsafe impl Send for Context {}
// SAFETY: as for Send; the handle is never dereferenced here.
unsafe impl Sync for Context {}

/// Device ordinals this crate addresses. The table of primary contexts is read without a lock by
/// every call's reset check, so it is a fixed array; an ordinal beyond it is refused as CUDA refuses
/// one beyond the device count.
const MAX_DEVICES: usize = 256;

/// A device's retained primary context, written once it is retained (again after a reset).
struct PrimarySlot {
    /// Null until retained.
    raw: AtomicPtr<sys::CUctx_st>,
    device: AtomicI32,
}

/// Retained primary contexts, by device ordinal.
static PRIMARY: [PrimarySlot; MAX_DEVICES] = [const {
    PrimarySlot {
        raw: AtomicPtr::new(std::ptr::null_mut()),
        device: AtomicI32::new(0),
    }
}; MAX_DEVICES];

impl Context {
    /// The primary context of `device`, created by the driver if the device had none: only ever
    /// asked for a device the program uses. An ordinal out of range is CUDA's invalid-device error.
    pub(crate) fn primary(d: &Driver, device: i32) -> Result<Context> {
        match Context::retained(device) {
            Some(context) => Ok(context),
            None => Context::retain(d, device),
        }
    }

    /// `device`'s primary context if this crate retained it: no lock, no driver call.
    #[inline]
    fn retained(device: i32) -> Option<Context> {
        let slot = PRIMARY.get(usize::try_from(device).ok()?)?;
        let raw = slot.raw.load(Ordering::Acquire);
        (!raw.is_null()).then(|| Context {
            raw,
            device: slot.device.load(Ordering::Relaxed),
        })
    }

    /// Retains `device`'s primary context (activating it again after a device reset) and keeps it
    /// in the table.
    fn retain(d: &Driver, device: i32) -> Result<Context> {
        let (mut dev, mut raw) = (0, std::ptr::null_mut());
        // SAFETY: out-pointers are live locals; an invalid ordinal is an error, not UB.
        d.device_get.call(|f| unsafe { f(&mut dev, device) })?;
        let Some(slot) = usize::try_from(device).ok().and_then(|i| PRIMARY.get(i)) else {
            return Err(d.device_get.error(sys::CUresult::CUDA_ERROR_INVALID_DEVICE));
        };
        // SAFETY: as above; `dev` is a device the driver just handed out.
        d.primary_ctx_retain.call(|f| unsafe { f(&mut raw, dev) })?;
        // Two threads may both retain: the context is the same, and it is never released.
        slot.device.store(dev, Ordering::Relaxed);
        slot.raw.store(raw, Ordering::Release);
        Ok(Context { raw, device: dev })
    }

    /// Whether `device`'s primary context is active: something in the process (this crate, the
    /// runtime's `cudaSetDevice`, another library) uses the device. Asks without creating it;
    /// `false` where the driver cannot say.
    pub(crate) fn primary_active(d: &Driver, device: i32) -> bool {
        let (mut dev, mut flags, mut active) = (0, 0, 0);
        // SAFETY: out-pointers are live locals; an invalid ordinal is an error, not UB.
        let found = d.device_get.call(|f| unsafe { f(&mut dev, device) });
        found.is_ok()
            && d.primary_ctx_get_state
                // SAFETY: a device the driver just handed out; writes through live locals.
                .call(|f| unsafe { f(dev, &mut flags, &mut active) })
                .is_ok()
            && active != 0
    }

    /// The driver's handle of the context's device.
    pub(crate) fn cu_device(self) -> sys::CUdevice {
        self.device
    }

    /// Makes this context current on the calling thread until the returned guard drops. Costs one
    /// `cuCtxGetCurrent` when it already is current.
    pub(crate) fn enter(self, d: &Driver) -> Result<CurrentContextGuard> {
        let mut current = std::ptr::null_mut();
        // SAFETY: writes the current context (or null) through a live local.
        d.ctx_get_current.call(|f| unsafe { f(&mut current) })?;
        if current == self.raw {
            return Ok(CurrentContextGuard {
                pushed: false,
                _thread: PhantomData,
            });
        }
        // SAFETY: self.raw is a retained primary context; the guard pops exactly this push.
        d.ctx_push_current.call(|f| unsafe { f(self.raw) })?;
        Ok(CurrentContextGuard {
            pushed: true,
            _thread: PhantomData,
        })
    }

    /// The id of the context's current instance, or `None` while it is inactive (after a device
    /// reset, until something retains or uses it again). Asks whether it is active first, so that
    /// no driver call fails (a failed call is what compute-sanitizer reports).
    fn instance_id(self, d: &Driver) -> Option<u64> {
        let (mut flags, mut active) = (0, 0);
        d.primary_ctx_get_state
            .call(|f| {
                // SAFETY: `device` came from cuDeviceGet; writes through live locals.
                unsafe { f(self.device, &mut flags, &mut active) }
            })
            .ok()?;
        if active == 0 {
            return None;
        }
        let mut id = 0;
        // SAFETY: an active context, retained by this crate; writes through a live local.
        d.ctx_get_id.call(|f| unsafe { f(self.raw, &mut id) }).ok()?;
        Some(id)
    }
}

/// The instance of a device's primary context that a CUDA object was made in, to tell whether a
/// device reset has already destroyed the object (destroying it again would be a use-after-free
/// inside the driver).
///
/// Eight bytes (the device ordinal and the context's id, folded), so that an event's handle is two
/// words and moves in registers: a new event's first record moves it several times, and a larger
/// handle stalled there on store forwarding. The context is looked up by ordinal in the lock-free
/// table of retained primary contexts.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct ContextInstance {
    device: i32,
    id: NonZeroU32,
}

/// `cuCtxGetId`'s id folded into 32 bits, never 0 (an xor of its halves: every call's reset check
/// folds, and a division would cost more than the rest of the check). The driver's ids are unique
/// per process and increase by one per context, so two instances of one device's primary context
/// compare equal only after about 2^32 contexts were made between them.
#[inline]
fn fold(id: u64) -> NonZeroU32 {
    NonZeroU32::new(id as u32 ^ (id >> 32) as u32).unwrap_or(NonZeroU32::MAX)
}

impl ContextInstance {
    /// The instance current now of `device`'s primary context, activated again if a device reset
    /// left it inactive.
    pub(crate) fn of_primary(d: &Driver, device: i32) -> Result<ContextInstance> {
        let context = Context::primary(d, device)?;
        if let Some(id) = context.instance_id(d) {
            return Ok(ContextInstance { device, id: fold(id) });
        }
        let context = Context::retain(d, device)?;
        let id = match context.instance_id(d) {
            Some(id) => id,
            // Retained but not active is not a state the driver documents; ask it for the error.
            None => {
                let mut id = 0;
                // SAFETY: a retained context; writes through a live local.
                d.ctx_get_id.call(|f| unsafe { f(context.raw, &mut id) })?;
                id
            }
        };
        Ok(ContextInstance { device, id: fold(id) })
    }

    /// The instance of `device`'s primary context, made current on this thread until the guard
    /// drops: what creating anything in it (an event, a stream, an import) needs.
    pub(crate) fn enter_primary(d: &Driver, device: i32) -> Result<(ContextInstance, CurrentContextGuard)> {
        let instance = ContextInstance::of_primary(d, device)?;
        let current = instance.context()?.enter(d)?;
        Ok((instance, current))
    }

    /// Destroys an object made in `made_in` (`None`: not known, destroyed) with `destroy`, unless
    /// a device reset already did: CUDA freed it with that context, and destroying it again
    /// would be a use-after-free inside the driver. Nothing without a loaded driver.
    pub(crate) fn destroy_unless_reset(
        made_in: Option<ContextInstance>,
        destroy: impl FnOnce(&Driver) -> Result<()>,
    ) -> Result<()> {
        let Some(d) = crate::driver::loaded_driver() else {
            return Ok(());
        };
        if made_in.is_some_and(|instance| !instance.still_alive(d)) {
            return Ok(());
        }
        destroy(d)
    }

    /// The device's primary context. An instance exists only once its context was retained, so
    /// the table has it; a missing entry is reported as a reset.
    pub(crate) fn context(self) -> Result<Context> {
        Context::retained(self.device).ok_or(Error::DeviceWasReset { device: self.device })
    }

    /// Whether objects made in this instance still exist: false after a reset of the device.
    pub(crate) fn still_alive(self, d: &Driver) -> bool {
        let id = self.context().ok().and_then(|context| context.instance_id(d));
        id.map(fold) == Some(self.id)
    }

    /// `Ok` while objects made in this instance exist; [`Error::DeviceWasReset`] after a reset of
    /// the device destroyed them (using their handles would be a use-after-free inside the driver).
    ///
    /// The check of every call on an event or stream, so one driver call, `cuCtxGetId` (asking
    /// whether the context is active first would be a second). Its one failing case
    /// is a context that a reset left inactive, and only a program that uses objects the reset
    /// destroyed asks then: compute-sanitizer reports that call, the program gets the typed error.
    #[inline]
    fn ensure_alive(self, d: &Driver) -> Result<()> {
        if !RESET_CHECKS.load(Ordering::Relaxed) {
            return Ok(()); // the caller of set_device_reset_checks promised no reset
        }
        let context = self.context()?;
        let mut id = 0;
        // SAFETY: a context retained by this crate (a reset leaves the handle valid, the context
        // inactive); writes through a live local.
        let code = d.ctx_get_id.code(|f| unsafe { f(context.raw, &mut id) });
        if code == sys::CUresult::CUDA_SUCCESS && fold(id) == self.id {
            Ok(())
        } else {
            Err(Error::DeviceWasReset { device: self.device })
        }
    }
}

/// Where a CUDA object was made, for the check that no device reset has destroyed it: the device
/// and the context instance (`None` where there is nothing to check: default and borrowed streams,
/// an event whose context could not be read). Eight bytes, like [`ContextInstance`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct MadeIn {
    pub(crate) device: i32,
    id: Option<NonZeroU32>,
}

impl MadeIn {
    pub(crate) fn new(device: i32, instance: Option<ContextInstance>) -> MadeIn {
        MadeIn {
            device,
            id: instance.map(|instance| instance.id),
        }
    }

    #[inline]
    pub(crate) fn instance(self) -> Option<ContextInstance> {
        let device = self.device;
        self.id.map(|id| ContextInstance { device, id })
    }

    /// `Ok` unless a device reset destroyed either object of one call (an event and its stream, or
    /// two events), checking each instance once and none that `known_alive` already is.
    #[inline]
    pub(crate) fn ensure_both_alive(
        d: &Driver,
        first: MadeIn,
        second: MadeIn,
        known_alive: Option<ContextInstance>,
    ) -> Result<()> {
        let known_alive = first.ensure_alive(d, known_alive)?;
        second.ensure_alive(d, known_alive).map(drop)
    }

    /// `Ok` unless a device reset destroyed the object ([`ContextInstance::ensure_alive`]); no
    /// driver call when `known_alive` is the instance it was made in. Returns the instance now
    /// known to be alive, for the next object of the same call (an event and its stream).
    #[inline]
    pub(crate) fn ensure_alive(
        self,
        d: &Driver,
        known_alive: Option<ContextInstance>,
    ) -> Result<Option<ContextInstance>> {
        match self.instance() {
            Some(instance) if known_alive != Some(instance) => {
                instance.ensure_alive(d)?;
                Ok(Some(instance))
            }
            _ => Ok(known_alive),
        }
    }
}

/// Pops the context that [`Context::enter`] pushed. Not `Send`: it pops the stack of the thread
/// that pushed.
pub(crate) struct CurrentContextGuard {
    pushed: bool,
    _thread: PhantomData<*const ()>,
}

impl Drop for CurrentContextGuard {
    fn drop(&mut self) {
        let (true, Some(d)) = (self.pushed, crate::driver::loaded_driver()) else {
            return;
        };
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context this guard pushed, on the thread that pushed it (the guard is
        // not Send).
        crate::drop_errors::report(d.ctx_pop_current.call(|f| unsafe { f(&mut popped) }));
    }
}
