//! The ways of waiting (`cuda_event::Wait`), each once, for the tests that walk them all.

use cuda_event::Wait;
use std::time::Duration;

/// Every `Wait`, with `budget` for `Wait::SpinThen`.
pub fn every_wait(budget: Duration) -> [Wait; 5] {
    [
        Wait::Spin,
        Wait::Yield,
        Wait::SpinThen { budget },
        Wait::Reactor,
        Wait::Driver,
    ]
}
