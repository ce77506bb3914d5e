//! The CUDA event behind an [`Event`](crate::Event): made, kept in a pool, and destroyed here.

use crate::context::{ContextInstance, MadeIn};
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::event::ipc::Exporter;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use cuda_event_sys as sys;

/// A CUDA event this crate owns, the device it lives on, and the context instance it was made in
/// (`None` only for an event taken over with `from_raw` when its device's context could not be
/// read). Two words, so that it moves in registers (see [`ContextInstance`]).
pub(crate) struct EventHandle {
    pub(crate) raw: sys::cudaEvent_t,
    made_in: MadeIn,
}

// The reason for the handle's layout: keep it at two words.
const _: () = assert!(std::mem::size_of::<EventHandle>() == 16);

// SAFETY: a CUevent is an opaque handle that CUDA lets any thread use; the rest is plain data.
unsafe impl Send for EventHandle {}
// SAFETY: as for Send; the handle is never dereferenced here.
unsafe impl Sync for EventHandle {}

/// Counts CUDA events created by this crate, for diagnostics and tests.
static CREATED: AtomicU64 = AtomicU64::new(0);
/// CUDA events kept alive for the graphs that hold them (see [`EventHandle::retire`]).
static RETIRED: Mutex<Vec<EventHandle>> = Mutex::new(Vec::new());

/// Counts CUDA events this crate owns now.
static ALIVE: AtomicU64 = AtomicU64::new(0);

/// How many CUDA events this process has created through this crate: not counting imported ones,
/// nor events reused from the pool, nor the one each new `Stream` records and destroys at once
/// (see [`Stream`](crate::Stream)).
pub fn cuda_events_created() -> u64 {
    CREATED.load(Ordering::Relaxed)
}

/// How many CUDA events this crate owns now: created (or imported, or taken over with `from_raw`)
/// and not yet destroyed, pooled ones included (not the one a new `Stream` records and destroys).
/// Bounded for a program that does not leak `Event`s.
pub fn cuda_events_alive() -> u64 {
    ALIVE.load(Ordering::Relaxed)
}

impl EventHandle {
    /// A new CUDA event with `flags` on `device`, made in its primary context.
    pub(crate) fn create(d: &Driver, device: i32, flags: u32) -> Result<EventHandle> {
        let (instance, _current) = ContextInstance::enter_primary(d, device)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes the new event through a live local, in the device's context made current.
        d.event_create.call(|f| unsafe { f(&mut raw, flags) })?;
        CREATED.fetch_add(1, Ordering::Relaxed);
        Ok(EventHandle::adopt(raw, device, Some(instance)))
    }

    /// Where it was made, for the check that no device reset has destroyed it.
    #[inline]
    pub(crate) fn made_in(&self) -> MadeIn {
        self.made_in
    }

    #[inline]
    pub(crate) fn device(&self) -> i32 {
        self.made_in.device
    }

    #[inline]
    pub(crate) fn instance(&self) -> Option<ContextInstance> {
        self.made_in.instance()
    }

    /// Takes ownership of a live CUDA event (imported or handed in).
    pub(crate) fn adopt(
        raw: sys::cudaEvent_t,
        device: i32,
        instance: Option<ContextInstance>,
    ) -> EventHandle {
        ALIVE.fetch_add(1, Ordering::Relaxed);
        EventHandle {
            raw,
            made_in: MadeIn::new(device, instance),
        }
    }

    /// Destroys the CUDA event, unless a device reset already did; an error is kept for
    /// `take_drop_errors`. Needs no current context.
    pub(crate) fn destroy(self) {
        ALIVE.fetch_sub(1, Ordering::Relaxed);
        crate::drop_errors::report(ContextInstance::destroy_unless_reset(self.instance(), |d| {
            // SAFETY: this crate owns the event and gives it up; a pending event may be destroyed
            // (CUDA releases it when its work completes), and no current context is needed.
            d.event_destroy.call(|f| unsafe { f(self.raw) })
        }));
    }

    /// Keeps the CUDA event alive for as long as its context lives, because a CUDA graph may use
    /// it at any launch, or a capture may still hold it (see `Event`'s docs). Retired events of a
    /// context that a device reset ended are forgotten (CUDA destroyed them) when the list has
    /// doubled since it was last pruned.
    pub(crate) fn retire(self) {
        if crate::fork::in_forked_child() {
            // The parent owns it, and the child takes none of the crate's locks (see `fork`): the
            // handle is only forgotten.
            return;
        }
        let mut retired = RETIRED.lock();
        // Pruned when the list doubles, so that retiring stays cheap however many are kept.
        if retired.len() >= 16
            && retired.len().is_power_of_two()
            && let Some(d) = crate::driver::loaded_driver()
        {
            // One liveness check per context instance, not per retired event.
            let mut checked: Vec<(ContextInstance, bool)> = Vec::new();
            retired.retain(|handle| {
                let Some(instance) = handle.instance() else {
                    return true;
                };
                let alive = match checked.iter().find(|(i, _)| *i == instance) {
                    Some(&(_, alive)) => alive,
                    None => {
                        let alive = instance.still_alive(d);
                        checked.push((instance, alive));
                        alive
                    }
                };
                if !alive {
                    ALIVE.fetch_sub(1, Ordering::Relaxed);
                }
                alive
            });
        }
        retired.push(self);
    }

    /// Gives up ownership without destroying (`Event::into_raw`).
    pub(crate) fn release(self) -> sys::cudaEvent_t {
        ALIVE.fetch_sub(1, Ordering::Relaxed);
        self.raw
    }
}

/// [`Event::query`](crate::Event::query) of a created event: its context checked, then CUDA asked, then (pending and
/// imported) its exporter watched.
pub(crate) fn query_handle(
    d: &Driver,
    raw: sys::cudaEvent_t,
    made_in: MadeIn,
    exporter: Option<Exporter>,
) -> Result<bool> {
    made_in.ensure_alive(d, None)?;
    query_checked(d, raw, exporter)
}

/// What a future's wait queries: a CUDA event, where it was made, and, for an imported one, its
/// exporter.
#[derive(Clone, Copy)]
pub(crate) struct QueryTarget {
    pub(crate) raw: sys::cudaEvent_t,
    pub(crate) made_in: MadeIn,
    pub(crate) exporter: Option<Exporter>,
}

// SAFETY: the raw event handle is an opaque CUDA handle any thread may use; it is only queried
// under its wait cell's lock while the cell is not abandoned, and the owner of the event abandons
// every cell on it before the event goes away.
unsafe impl Send for QueryTarget {}
// SAFETY: as for Send; it is only read.
unsafe impl Sync for QueryTarget {}

impl QueryTarget {
    /// `cuEventQuery` as `Event::query` reads it.
    pub(crate) fn query(&self, d: &Driver) -> Result<bool> {
        query_handle(d, self.raw, self.made_in, self.exporter)
    }
}

/// [`query_handle`] after its context check.
pub(crate) fn query_checked(d: &Driver, raw: sys::cudaEvent_t, exporter: Option<Exporter>) -> Result<bool> {
    let done = query_raw(d, raw)?;
    match exporter {
        Some(exporter) if !done && exporter.is_gone() => Err(Error::ExporterGone { pid: exporter.pid }),
        _ => Ok(done),
    }
}

/// `cuEventQuery` as torch reads it: complete, not ready, or an error.
pub(crate) fn query_raw(d: &Driver, raw: sys::cudaEvent_t) -> Result<bool> {
    // SAFETY: a live event.
    d.event_query.ready(d.event_query.code(|f| unsafe { f(raw) }))
}
