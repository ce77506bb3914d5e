//! Opening and closing ranges: the guards, and the records they make on the opening thread's lane.

use super::lanes::{Lane, Slot, State, What};
use super::{Trace, nvtx};
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::sync::atomic::Ordering;
use crate::sys;
use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

/// An open GPU range, closed when dropped or by [`end`](Self::end) /
/// [`end_on`](Self::end_on), which also say whether its end was recorded.
#[must_use = "a range closes when its guard drops: bind it to a name"]
pub struct GpuRange<'t, 's> {
    _trace: PhantomData<&'t Trace>,
    stream: &'s Stream,
    /// `None` when the range was dropped (the trace was full) or is closed.
    open: Option<(Arc<Lane>, usize)>,
}

/// An open host span, closed when dropped or by [`end`](Self::end).
#[must_use = "a span closes when its guard drops: bind it to a name"]
pub struct HostRange<'t> {
    _trace: PhantomData<&'t Trace>,
    open: Option<(Arc<Lane>, usize)>,
}

impl Trace {
    /// Opens a GPU range named `name` on `stream`: from the work submitted to it before this call
    /// to the work submitted before the guard's close.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] on a stream being captured; CUDA's error of the record. Nothing
    /// is held then. A full trace is not an error: see [`dropped`](Self::dropped).
    pub fn range<'t, 's>(
        &'t self,
        stream: &'s Stream,
        name: impl Into<Cow<'static, str>>,
    ) -> Result<GpuRange<'t, 's>> {
        // Before any lock: in a forked child, one may be held by a thread that did not fork (the
        // trace's own, if made before the fork; the crate's, if CUDA was used before it).
        if self.made_before_a_fork() || crate::fork::in_forked_child() {
            return Err(Error::ForkedChild);
        }
        if !self.take_room() {
            return Ok(GpuRange {
                _trace: PhantomData,
                stream,
                open: None,
            });
        }
        let lane = self.lane();
        let device = stream.device();
        let name = name.into();
        let nvtx = nvtx::start(&name);
        // Before the record: every anchor of this epoch is complete before it (see `clock`).
        let epoch = self.epoch.load(Ordering::Acquire);
        let start = match record_in(&lane, stream) {
            Ok(start) => start,
            Err(e) => {
                nvtx::end(nvtx);
                self.held.fetch_sub(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let mut inner = lane.inner.lock();
        let depth = inner.depth;
        let slot = inner.open(Slot {
            name,
            depth,
            epoch,
            nvtx,
            what: What::Gpu {
                device,
                stream: stream.as_raw() as usize as u64,
                id: track_id(stream, lane.thread),
                start,
                end: None,
            },
            state: State::Open,
        });
        drop(inner);
        Ok(GpuRange {
            _trace: PhantomData,
            stream,
            open: Some((lane, slot)),
        })
    }

    /// Runs `work` inside a GPU range named `name` on `stream` (the work that `work` submits to it).
    ///
    /// # Errors
    /// Those of [`range`](Self::range), before `work` runs; those of [`GpuRange::end`], after.
    pub fn in_range<R>(
        &self,
        stream: &Stream,
        name: impl Into<Cow<'static, str>>,
        work: impl FnOnce() -> R,
    ) -> Result<R> {
        let range = self.range(stream, name)?;
        let out = work();
        range.end()?;
        Ok(out)
    }

    /// Opens a host span named `name` on the calling thread's track. Never fails; a full trace
    /// drops it (see [`dropped`](Self::dropped)).
    pub fn host_range(&self, name: impl Into<Cow<'static, str>>) -> HostRange<'_> {
        HostRange {
            _trace: PhantomData,
            open: self.open_host(name.into()),
        }
    }

    /// Opens a host span on the calling thread's lane: its lane and slot, or `None` when the trace
    /// is full.
    pub(super) fn open_host(&self, name: Cow<'static, str>) -> Option<(Arc<Lane>, usize)> {
        // None in a child forked since the trace was made, whose locks a thread that did not fork
        // may hold: counted as dropped.
        if self.made_before_a_fork() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !self.take_room() {
            return None;
        }
        let lane = self.lane();
        let nvtx = nvtx::start(&name);
        let mut inner = lane.inner.lock();
        let depth = inner.depth;
        let slot = inner.open(Slot {
            name,
            depth,
            epoch: 0,
            nvtx,
            what: What::Host {
                start: Instant::now(),
                end: None,
            },
            state: State::Open,
        });
        drop(inner);
        Some((lane, slot))
    }

    /// Runs `work` inside a host span named `name`.
    pub fn in_host_range<R>(&self, name: impl Into<Cow<'static, str>>, work: impl FnOnce() -> R) -> R {
        let _span = self.host_range(name);
        work()
    }
}

/// The `id` of a stream's track (see [`Track::Gpu`](crate::trace::Track::Gpu)).
fn track_id(stream: &Stream, thread: u64) -> u64 {
    match stream.id() {
        Some(id) => crate::stream::StreamId::to_word(Some(id)),
        None if stream.as_raw() == sys::cudaStreamPerThread => (1 << 63) | thread,
        None => 0,
    }
}

/// Records a timing event of the lane's on `stream` (refusing a capturing stream) and returns it.
/// A kept event that fails with [`Error::DeviceWasReset`] died with its context: the lane's kept
/// events of that device are dropped and a new one is tried.
fn record_in(lane: &Lane, stream: &Stream) -> Result<crate::event::Event> {
    let device = stream.device();
    // The lane's lock is not held across the record: a record may block (a full queue), and the
    // trace's reader takes every lane's lock.
    let event = lane.inner.lock().timing_event(device);
    match event.record_as(stream, true) {
        Ok(_) => return Ok(event),
        Err(Error::DeviceWasReset { .. }) if event.device().is_some() => {
            lane.inner.lock().forget_spares(device)
        }
        Err(e) => {
            lane.inner.lock().give_back(event);
            return Err(e);
        }
    }
    let event = crate::timing::timer::timing_event();
    event.record_as(stream, true).map(|_| event)
}

impl GpuRange<'_, '_> {
    /// Whether the range was dropped because the trace was full (its guard then does nothing).
    pub fn is_dropped(&self) -> bool {
        self.open.is_none()
    }

    /// Closes the range on the stream it opened on.
    ///
    /// # Errors
    /// [`Error::StreamCapturing`] if that stream is being captured now, or CUDA's error of the
    /// record: the range is then read as lost.
    pub fn end(mut self) -> Result<()> {
        self.close(None)
    }

    /// Closes the range on `stream`, another stream of its device whose work is ordered after the
    /// opening stream's (see [`Trace`]).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device (the range is closed on its own
    /// stream instead); otherwise those of [`end`](Self::end).
    pub fn end_on(mut self, stream: &Stream) -> Result<()> {
        self.close(Some(stream))
    }

    fn close(&mut self, on: Option<&Stream>) -> Result<()> {
        let Some((lane, slot)) = self.open.take() else {
            return Ok(());
        };
        // A range the parent opened, closed in a forked child: left to the parent's copy (the
        // lane's lock may be held by a thread that did not fork).
        if lane.made_before_a_fork() {
            return Err(Error::ForkedChild);
        }
        let mismatch = on.filter(|s| s.device() != self.stream.device());
        let stream = match on {
            Some(s) if mismatch.is_none() => s,
            _ => self.stream,
        };
        let recorded = record_in(&lane, stream);
        let mut inner = lane.inner.lock();
        let (nvtx, recorded) = match recorded {
            Ok(end) => (inner.close(slot, Ok(Some(end))), Ok(())),
            Err(e) => (inner.close(slot, Err(())), Err(e)),
        };
        drop(inner);
        nvtx::end(nvtx);
        recorded?;
        match mismatch {
            Some(other) => Err(Error::DeviceMismatch {
                event: self.stream.device(),
                stream: other.device(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for GpuRange<'_, '_> {
    fn drop(&mut self) {
        let _ = self.close(None);
    }
}

impl std::fmt::Debug for GpuRange<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuRange")
            .field("device", &self.stream.device())
            .field("dropped", &self.is_dropped())
            .finish_non_exhaustive()
    }
}

impl HostRange<'_> {
    /// Whether the span was dropped because the trace was full.
    pub fn is_dropped(&self) -> bool {
        self.open.is_none()
    }

    /// Closes the span now.
    pub fn end(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if let Some(open) = self.open.take() {
            close_host(open);
        }
    }
}

/// Closes a host span that [`Trace::open_host`] opened.
pub(super) fn close_host((lane, slot): (Arc<Lane>, usize)) {
    if lane.made_before_a_fork() {
        return; // as for a GPU range's close
    }
    let nvtx = lane.inner.lock().close(slot, Ok(None));
    nvtx::end(nvtx);
}

impl Drop for HostRange<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for HostRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRange")
            .field("dropped", &self.is_dropped())
            .finish_non_exhaustive()
    }
}
