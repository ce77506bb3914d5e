//! A model of the CUDA driver, for the model's test build only (the library's unit tests under
//! `RUSTFLAGS="--cfg cuda_event_model"`, `ci/test model`; not in the published package): the crate's driver table and the runtime calls it makes point here, and the
//! model checker (shuttle, behind `crate::sync`) runs the crate's threads, the reactor's included,
//! in many interleavings against it.
//!
//! The model fails a run (a panic that names the rule and where it was measured, and shuttle
//! prints the schedule that replays it) when the crate makes a call pattern this project measured
//! to crash CUDA, or one CUDA documents as undefined; a query that CUDA answers by invalidating a
//! capture invalidates the model's capture too, which the tests see when they end it:
//!
//! - a query, synchronize, stream wait, elapsed time or IPC export of an event beside a record of
//!   it into a capture, or beside the end of a capture holding its record: crash;
//! - a query of an event whose record an open capture holds: 907, and the capture is invalidated;
//!   a record of the event on a stream before the end releases it from the capture;
//! - a record of the event on a stream, or its destroy, beside the end of a capture holding its
//!   record: crash (beside the captured record itself, or while the capture is open: neither);
//! - two records of one event into captures at once: crash;
//! - a query or synchronize not in relaxed mode while a global capture (or this thread's own) is
//!   open: refused, the capture invalidated (CUDA's documentation of capture modes);
//! - a call with a destroyed event, stream or graph (a reset destroys its context's), a destroy
//!   beside another call on the same event, a call in a forked child (CUDA's documentation).
//!
//! Each rule's source, the results folder that measured it, is in `world::source`, and every
//! failure names it. Not modeled: an external node's record (reads beside its capture did not
//! crash) and interprocess events in a capture (CUDA refuses their record; the crate refuses it
//! first), both measured in the same folders.
//!
//! It does not stand in for the GPU: only the GPU says what CUDA does. It lets every commit walk
//! interleavings that a GPU run meets only by luck.
//!
//! Work: a stream runs its work at once unless [`hold`](tests::scenario::hold) holds it; a record
//! on a [`fill`](tests::scenario::fill)ed stream blocks until
//! [`release`](tests::scenario::release).
//!
//! Here the seam: [`driver`] answers the crate's driver table ([`driver::entry_point`]) and its
//! runtime calls ([`runtime`]) on the model's state ([`world`]); [`tests`] holds the harness, the
//! scenario helpers and the tests by subject.

pub(crate) mod driver;
mod tests;
mod world;

pub(crate) use driver::runtime;

use world::with;

/// A fresh world for one execution of the model checker.
pub(crate) fn begin_execution() {
    with(|w| w.begin_execution());
    crate::fork::model_set_forked(false);
}
