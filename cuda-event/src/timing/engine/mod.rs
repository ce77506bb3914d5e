//! The engine: what runs on the GPU, and the sampler that drives it. `Sampler` times arms of work
//! in repetitions for `measure` and `compare`, with its collaborators (the arms, their order and
//! what each runs; the calibration's arm; the flush check's reads; CUPTI's tags; the samples it
//! keeps) and what it queues and holds: the gate and its watchdog, graph batches, the timing
//! kernels and the SM clock's stamps, the L2 flush, the scratch memory they use, the batch sizes
//! and the throttle rule.

mod arms;
mod batches;
mod calibration_arm;
mod cupti_tags;
mod flush_probe;
mod gate;
mod graph;
mod kept_samples;
mod kernels;
mod l2_flush;
pub(crate) mod sampler;
pub(crate) mod scratch_memory;
mod sm_clock;
mod throttle;
