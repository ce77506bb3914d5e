//! Timing: `Timer` and `measure`, with the gate and scratch memory that `measure` uses.

mod gate;
pub(crate) mod measure;
pub(crate) mod scratch_memory;
pub(crate) mod timer;
