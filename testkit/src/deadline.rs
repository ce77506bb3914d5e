//! A deadline for a test or a child process: a hang ends the process, so it fails the run instead
//! of stalling it.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

/// How long one GPU test (or a child process of one) may take by default.
pub(crate) const TEST_TIME_LIMIT: Duration = Duration::from_secs(30);

/// Ends the process unless dropped within its time limit.
#[derive(Debug)]
pub struct Deadline(Option<mpsc::Sender<()>>);

/// A [`Deadline`] of the default limit for `what` (named in the message when it ends the process).
pub fn deadline(what: &str) -> Deadline {
    deadline_for(what, TEST_TIME_LIMIT)
}

/// A [`deadline`] with a limit of its own.
pub fn deadline_for(what: &str, limit: Duration) -> Deadline {
    let (done, wait) = mpsc::channel::<()>();
    let what = what.to_string();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
            // Straight to the process's stderr: `eprintln!` here would go to the test's captured
            // output (a thread inherits its spawner's capture), which the exit below discards.
            let _ = writeln!(
                std::io::stderr(),
                "{what}: still running after {limit:?}, ending the process"
            );
            std::process::exit(124);
        }
    });
    Deadline(Some(done))
}

impl Drop for Deadline {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}
