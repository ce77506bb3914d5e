//! Graph capture on one GPU: the user's own captures (begun and ended raw, through the test kit)
//! beside the crate's events. Records into a capture and reads of the same event on other threads
//! race in [`races`]; what a record into a capture is, by the event's kind, is [`records`].
//!
//! Other capture tests stand with their subject: futures beside captures in tests/completion/
//! (capture.rs, capture_race.rs), captures that several threads meet (the crate's own among them)
//! in tests/capture_threads.rs, measurements and trace reads beside another thread's capture in
//! tests/timing.rs and tests/trace.rs, and the concurrency core against the driver model in
//! src/model/tests/ (captures.rs, capture_modes.rs), in the same words (the test kit's
//! `begin_capture`, `end_capture`, `beside_a_global_capture`).

mod races;
mod records;
