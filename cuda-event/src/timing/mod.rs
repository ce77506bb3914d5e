//! Timing: `Timer`, `measure` (its options and its results) and `compare`, the sampler that both
//! run on, and the gate, the SM clock probe, the throttle rule and the scratch memory that the
//! sampler uses.

mod batches;
pub(crate) mod calibration;
pub(crate) mod clusters;
pub(crate) mod compare;
#[cfg(feature = "criterion")]
pub(crate) mod criterion;
mod cupti;
pub(crate) mod cupti_times;
mod fixed_cost;
pub(crate) mod flush_check;
mod gate;
mod graph;
mod kernels;
mod l2_flush;
pub(crate) mod measure;
pub(crate) mod measurement;
pub(crate) mod options;
mod sampler;
pub(crate) mod scratch_memory;
mod sm_clock;
pub(crate) mod statistics;
mod throttle;
pub(crate) mod timer;
pub(crate) mod trust;
