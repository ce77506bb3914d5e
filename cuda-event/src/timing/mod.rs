//! Timing: `Timer`, `measure` and `compare`, with the gate, the SM clock probe and the scratch
//! memory that they use.

pub(crate) mod compare;
#[cfg(feature = "criterion")]
pub(crate) mod criterion;
mod gate;
mod graph;
pub(crate) mod measure;
pub(crate) mod measurement;
pub(crate) mod options;
mod sampler;
pub(crate) mod scratch_memory;
mod sm_clock;
pub(crate) mod timer;
