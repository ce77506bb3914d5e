//! An event's records: the path from [`Event::record`] to `cuEventRecord`, the first record that
//! creates the CUDA event, and the records into graph captures (on a captured CUDA event, or as an
//! external node; `last_record` says why a captured one).
//!
//! # The first record
//! An `Event` has no CUDA event until its first record (or its `ipc_handle`, which creates one
//! without a record). The first record, under the event's `creating` lock:
//! 1. takes a CUDA event from this thread's pool, or creates one (always a new one on a stream
//!    being captured);
//! 2. records it (or, into a capture, this thread's captured CUDA event, or an external node);
//! 3. publishes it only once that record succeeded, and otherwise gives it back, leaving the event
//!    uncreated.
//!
//! Another thread's first record waits for the lock, then records the published CUDA event as any
//! later record does. So a read never sees the CUDA event before the first record is made, nor a
//! pooled one's old record, and no first record can lose a race to publish. Later records outside
//! captures take no lock.

use crate::context::{ContextInstance, MadeIn};
use crate::device::current_device;
use crate::driver::{Driver, driver};
use crate::error::{Error, Result};
use crate::event::capture_checks;
use crate::event::captured;
use crate::event::handle::EventHandle;
use crate::event::last_record;
use crate::event::pool;
use crate::event::watchers::Watchers;
use crate::event::{Escape, Event};
use crate::stream::Stream;
use crate::sync::atomic::Ordering;
use cuda_event_sys as sys;
use std::sync::Arc;

impl Event {
    /// Records the work submitted to `stream` so far: the event completes when that work has.
    /// Creates the CUDA event on the stream's device if needed. Recording again replaces what was
    /// captured; a [`wait`](Self::wait) already issued keeps what it saw.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] (no CUDA call) when the event lives on another device than the
    /// stream; CUDA's errors otherwise.
    #[doc(alias = "cudaEventRecord")]
    #[doc(alias = "cuEventRecord")]
    #[doc(alias = "cudaEventRecordWithFlags")]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.record_as(stream, false).map(drop)
    }

    /// [`record`](Self::record), telling how the record was made; with `refuse_capture`, a stream
    /// being captured gets [`Error::StreamCapturing`] and no record.
    #[inline]
    pub(crate) fn record_as(&self, stream: &Stream, refuse_capture: bool) -> Result<Recorded> {
        let d = driver("Event::record")?;
        let ask = Ask {
            refuse_capture,
            ..Ask::default()
        };
        // From the capture check to the record: no begin or end of a capture the crate makes of
        // this stream falls between them (`capture_gate`).
        let gate = capture_checks::on().then(|| stream.gate().shared());
        let ask = match gate.as_ref().and_then(|gate| gate.capture()) {
            // A capture the crate is making: known without asking CUDA.
            Some(capture) => Ask {
                capturing: Some(true),
                capture: Some(capture),
                ..ask
            },
            None => ask,
        };
        let stamp = Watchers::stamp();
        let recorded = match self.created.get() {
            Some(handle) => self.record_handle(d, handle, stream, ask)?,
            None => self.record_first(d, stream, ask)?,
        };
        if !self.recorded.load(Ordering::Relaxed) {
            self.recorded.store(true, Ordering::Relaxed);
        }
        if let Recorded::Now = recorded {
            // Before the second look: a capture begun around the record that swallowed the
            // ticket's write with it is refused as one that swallowed the record is. No ticket
            // behind a timing event's record: its write would fall inside the intervals it
            // starts.
            let lane = match self.options.enable_timing {
                false => stream.mark_lane(d),
                true => None,
            };
            if refuse_capture {
                self.refuse_a_capture_begun_around(d, stream)?;
            }
            self.watchers.note_record(stream, stamp);
            self.watchers.note_lane(lane);
        }
        Ok(recorded)
    }

    /// For the crate's own records, which must not go into a capture (trace ranges, completions):
    /// a capture that another thread began by raw CUDA between the check and the record may have
    /// swallowed the record. Asked again after it; if so, the CUDA event is never reused nor read
    /// (it may be in a graph) and the record is refused as if the check had seen the capture.
    #[cold]
    #[inline(never)]
    fn refuse_a_capture_begun_around(&self, d: &Driver, stream: &Stream) -> Result<()> {
        if capture_checks::on() && stream.in_context(d, || stream.is_capturing_with(d))? {
            self.may_be_in_a_graph();
            return Err(Error::StreamCapturing);
        }
        Ok(())
    }

    /// The first record, under the `creating` lock (see the module's docs).
    ///
    /// Not `#[cold]`: a new event's first record is a hot path (the pool makes it cost about a
    /// record), and a cold function gets little inlined into it.
    #[inline(never)]
    fn record_first(&self, d: &Driver, stream: &Stream, ask: Ask<'_>) -> Result<Recorded> {
        let _creating = self.creating.lock();
        if let Some(handle) = self.created.get() {
            // Another thread's first record came first.
            return self.record_handle(d, handle, stream, ask);
        }
        let flags = self.options.cuda_flags();
        // The stream's check first: a pooled event made in the instance the stream is alive in
        // needs no check of its own (one driver call in all, as for any record).
        let known_alive = stream.made_in().ensure_alive(d, None)?;
        let capturing = match ask.capturing {
            Some(capturing) => capturing,
            None => capture_checks::on() && stream.in_context(d, || stream.is_capturing_with(d))?,
        };
        if capturing && ask.refuse_capture {
            return Err(Error::StreamCapturing); // before any CUDA event is taken
        }
        if capturing && self.options.interprocess && !self.options.external {
            return Err(Error::CapturedInterprocessEvent);
        }
        // On a stream being captured the published event gets no record now (a captured record
        // goes to this thread's captured event, an external one is a graph node): a new one, so
        // that it never carries a pooled event's old record (which `as_raw` would hand out).
        let pooled = match capturing {
            true => None,
            false => pool::take(d, stream.device(), flags, known_alive),
        };
        let handle = match pooled {
            Some(pooled) => pooled,
            None => EventHandle::create(d, stream.device(), flags)?,
        };
        let ask = Ask {
            known_alive: handle.instance(),
            capturing: Some(capturing),
            ..ask
        };
        match self.record_handle(d, &handle, stream, ask) {
            Ok(recorded) => {
                self.publish(handle);
                Ok(recorded)
            }
            Err(e) => {
                give_back_after_a_failed_record(capturing, self.options.external, stream, flags, handle);
                Err(e)
            }
        }
    }

    /// Records on `stream`: `handle` (the published CUDA event, or the one a first record is about
    /// to publish) outside a capture or as an external node, this thread's captured CUDA event
    /// into a capture.
    fn record_handle(
        &self,
        d: &Driver,
        handle: &EventHandle,
        stream: &Stream,
        ask: Ask<'_>,
    ) -> Result<Recorded> {
        if handle.device() != stream.device() {
            return Err(Error::DeviceMismatch {
                event: handle.device(),
                stream: stream.device(),
            });
        }
        MadeIn::ensure_both_alive(d, handle.made_in(), stream.made_in(), ask.known_alive)?;
        stream.in_context(d, || {
            let capturing = match ask.capturing {
                Some(capturing) => capturing,
                None => capture_checks::on() && stream.is_capturing_with(d)?,
            };
            if !capturing {
                return self.record_on_the_stream(d, handle, stream);
            }
            self.record_into_capture(d, handle, stream, ask)
        })
    }

    /// A record on a stream being captured: refused, an external node of the graph for an external
    /// event, or else a plain record of this thread's captured CUDA event.
    #[cold]
    #[inline(never)]
    fn record_into_capture(
        &self,
        d: &Driver,
        handle: &EventHandle,
        stream: &Stream,
        ask: Ask<'_>,
    ) -> Result<Recorded> {
        if ask.refuse_capture {
            return Err(Error::StreamCapturing);
        }
        if !self.options.external {
            return self.record_captured(d, handle, stream, ask.capture);
        }
        // Into a capture the crate makes, the crate's end of it waits until the record returns
        // (`Capture::end`), as for a plain record.
        let _entry = match ask.capture {
            Some(capture) => match capture.enter() {
                Some(entry) => Some(entry),
                // The crate ended it since the check: the stream is in no capture of it any more.
                None => return self.record_handle(d, handle, stream, Ask::default()),
            },
            None => None,
        };
        d.event_record_with_flags.call(|f| {
            // SAFETY: a live event and stream of one device (checked by the caller); the flag is a
            // record flag.
            unsafe { f(handle.raw, stream.as_raw(), sys::cudaEventRecordExternal) }
        })?;
        // The graph records this handle at every launch.
        self.escape(Escape::ToGraph);
        Ok(Recorded::IntoGraph)
    }

    /// A plain record into a capture of `stream`, made on this thread's captured CUDA event for
    /// the stream's device and that capture (see `last_record` and `captured`): the one it used
    /// for its last record into the same capture, or one whose capture is over, or a new one.
    #[cold]
    fn record_captured(
        &self,
        d: &Driver,
        published: &EventHandle,
        stream: &Stream,
        known: Option<&Arc<captured::Capture>>,
    ) -> Result<Recorded> {
        if self.options.interprocess {
            return Err(Error::CapturedInterprocessEvent);
        }
        let found = match known {
            Some(capture) => captured::Capturing::Into(capture.clone()),
            None => captured::capture_of(d, stream)?,
        };
        let capture = match found {
            captured::Capturing::Into(capture) => capture,
            // Another thread ended the capture since the check: a record on the stream now.
            captured::Capturing::Nothing => return self.record_on_the_stream(d, published, stream),
        };
        let (device, flags) = (stream.device(), self.options.cuda_flags());
        let thread = last_record::thread_token().unwrap_or(last_record::NO_THREAD);
        // This event's list first, then the capture's entry, as a fork takes them.
        let mut entries = self.captured.lock();
        // Another thread's entry whose capture is over serves no fork and no record: its CUDA
        // event goes back, so that one event recorded into captures by many threads keeps one per
        // capture alive, not one per thread that ever did.
        for Captured { capture, handle, .. } in
            entries.extract_if(.., |c| c.thread != thread && c.capture.is_over())
        {
            captured::give(capture, flags, handle);
        }
        // Until the record returns, the crate's own end of that capture waits (`Capture::end`).
        let entered = capture.clone();
        let Some(_entry) = entered.enter() else {
            // The crate ended it since the check: the stream is in no capture of it any more.
            drop(entries);
            return self.record_handle(d, published, stream, Ask::default());
        };
        let at = entries
            .iter()
            .position(|c| c.thread == thread && c.handle.device() == device);
        let at = match at {
            Some(at) if entries[at].capture.id == capture.id => at,
            found => {
                // A capture this event's CUDA event never went into: another CUDA event, the old
                // one kept for its own capture until that is over.
                let handle = match captured::take(d, device, flags) {
                    Some(handle) => handle,
                    None => EventHandle::create(d, device, flags)?,
                };
                let entry = Captured {
                    thread,
                    capture,
                    handle,
                };
                match found {
                    Some(at) => {
                        let old = std::mem::replace(&mut entries[at], entry);
                        captured::give(old.capture, flags, old.handle);
                        at
                    }
                    None => {
                        entries.push(entry);
                        entries.len() - 1
                    }
                }
            }
        };
        let handle = &entries[at].handle;
        handle.made_in().ensure_alive(d, None)?;
        d.event_record.call(|f| {
            // SAFETY: a live event and stream of one device; the event is in this `Event`'s list
            // alone, under its lock, and bound to the capture it is recorded into.
            unsafe { f(handle.raw, stream.as_raw()) }
        })?;
        self.last.swallowed_by(thread);
        Ok(Recorded::Swallowed)
    }

    /// A record of `handle` on `stream` outside a capture: every record on a stream not being
    /// captured, and one whose capture ended between the check and the captured record.
    #[inline]
    fn record_on_the_stream(&self, d: &Driver, handle: &EventHandle, stream: &Stream) -> Result<Recorded> {
        d.event_record.call(|f| {
            // SAFETY: a live event and stream of one device (checked by the callers).
            unsafe { f(handle.raw, stream.as_raw()) }
        })?;
        self.last.made_on_a_stream();
        Ok(Recorded::Now)
    }

    /// Records on the legacy default stream of the current device (torch's `record()` with no
    /// stream).
    pub fn record_on_current_device(&self) -> Result<()> {
        self.record(&Stream::legacy(current_device()?)?)
    }
}

/// How a record is asked for.
#[derive(Clone, Copy, Default)]
struct Ask<'a> {
    /// A context instance the caller just found alive.
    known_alive: Option<ContextInstance>,
    /// Whether the stream is being captured, if the caller asked already.
    capturing: Option<bool>,
    /// The capture the crate is making of the stream, if it is making one (`capture_gate`).
    capture: Option<&'a Arc<captured::Capture>>,
    /// A stream being captured gets `Error::StreamCapturing`, and nothing is recorded.
    refuse_capture: bool,
}

/// A captured CUDA event, the thread ([`last_record::thread_token`], or `NO_THREAD`) that records
/// it, and the capture it is bound to.
pub(super) struct Captured {
    pub(super) thread: u64,
    pub(super) capture: std::sync::Arc<captured::Capture>,
    pub(super) handle: EventHandle,
}

/// How a record was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// On the stream, now.
    Now,
    /// As a plain record into a stream being captured: swallowed by the capture (made on the
    /// captured CUDA event).
    Swallowed,
    /// As an external record node of a graph being captured.
    IntoGraph,
}

/// A CUDA event whose first record for an `Event` failed goes back to the pool, unless the record
/// may have reached a capture of `stream` (an external node; or, where the stream was not being
/// captured, a capture another thread began meanwhile): then it is kept, never handed to another
/// `Event` nor destroyed beside that capture's end. A plain record into a capture was made on a
/// captured event, never on this one, which then goes back.
#[cold]
fn give_back_after_a_failed_record(
    capturing: bool,
    external: bool,
    stream: &Stream,
    flags: u32,
    handle: EventHandle,
) {
    let in_graph = match capturing {
        true => external,
        false => stream.is_capturing() == Ok(true),
    };
    match in_graph {
        false => pool::give_or_destroy(flags, handle),
        true => handle.retire(),
    }
}
