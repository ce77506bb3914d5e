//! Timing: `Timer`, `measure` and `compare`, with the gate and scratch memory that they use.

pub(crate) mod compare;
mod gate;
mod graph;
pub(crate) mod measure;
pub(crate) mod scratch_memory;
pub(crate) mod timer;
