//! The gates that keep the crate's own begin and end of a capture of a stream
//! ([`Stream::capture`](crate::Stream::capture)) apart from the crate's records and host functions
//! on that stream.
//!
//! A record asks whether its stream is being captured, then records: a capture that another thread
//! begins between the two swallows a record the crate believes was made on the stream, and the
//! crate's later reads of that CUDA event beside the capture's end crash (review 3's begin-capture
//! race). Each record and host-function launch holds its stream's gate shared from its check to
//! its call; the crate's begin and end of a capture hold it exclusive. So no record through the
//! crate straddles a begin or an end the crate makes. A capture begun or ended by raw CUDA calls
//! takes no gate: that race stays the caller's (the capture-safety table in the crate's docs).
//!
//! The gates are a fixed set, picked by the stream's raw handle (two `Stream`s borrowing one CUDA
//! stream share a gate), each on a cache line of its own so that threads on different streams
//! rarely meet.

use crate::sync::{Lazy, RwLock};
use cuda_event_sys as sys;

const GATES: usize = 64;

#[repr(align(128))]
struct Gate(RwLock<()>);

static ALL: Lazy<Vec<Gate>> = Lazy::new(|| (0..GATES).map(|_| Gate(RwLock::new(()))).collect());

fn gate(stream: sys::cudaStream_t) -> &'static RwLock<()> {
    // Stream handles are pointers to allocations of at least 64 bytes: the low bits carry nothing.
    let at = ((stream as usize) >> 6) % GATES;
    &ALL.get()[at].0
}

/// Held by a record or host-function launch on `stream` from its capture check to its CUDA call.
pub(crate) fn shared(stream: sys::cudaStream_t) -> impl Sized {
    gate(stream).read()
}

/// Held by the crate's begin and end of a capture of `stream`.
pub(crate) fn exclusive(stream: sys::cudaStream_t) -> impl Sized {
    gate(stream).write()
}
