//! Timing GPU work on a stream. Its doors:
//! - [`measure`] times a closure's GPU work the way `triton.testing.do_bench` does and returns a
//!   [`Measurement`]: the samples, their statistics and whether to trust them ([`Trust`]);
//!   [`MeasureOptions`] say how.
//! - [`Timer`] times one section of a stream's work between two pooled timing events.
//! - [`compare`] times two closures in alternation and gives B's time as a ratio of A's, with a
//!   verdict ([`Comparison`]).
//! - `GpuTime`, with the `criterion` feature, is criterion's measurement of GPU time on a stream.
//! - [`Calibration`] ([`MeasureOptions::calibrate`]) is the launch's fixed cost, timed beside the
//!   work, that [`Measurement::net`] takes away.
//!
//! Its submodules are private: every name is `cuda_event::timing::NAME`.

// The doors are the files here; the folders are the wings below them, each importing only from
// those under it (cuda-event/ARCHITECTURE.md gives their floors, and ci/module-graph checks them).
pub(crate) mod calibration;
pub(crate) mod compare;
#[cfg(feature = "criterion")]
pub(crate) mod criterion;
mod cupti;
mod engine;
pub(crate) mod measure;
pub(crate) mod measurement;
pub(crate) mod options;
pub(crate) mod statistics;
pub(crate) mod timer;

pub use self::calibration::{Calibration, NoNet};
pub use self::compare::{CONFIDENCE, CompareOptions, Comparison, RatioClusters, Verdict, compare};
#[cfg(feature = "criterion")]
pub use self::criterion::GpuTime;
pub use self::cupti::times::CuptiTimes;
pub use self::engine::scratch_memory::release_measure_memory;
pub use self::measure::measure;
pub use self::measurement::flush_check::{FlushCheck, FlushVerdict};
pub use self::measurement::trust::{Doubt, Trust};
pub use self::measurement::{Measurement, StopReason};
pub use self::options::MeasureOptions;
pub use self::statistics::clusters::{Clusters, Drift};
pub use self::timer::{Timer, Timing};
pub use crate::error::MeasureError;
