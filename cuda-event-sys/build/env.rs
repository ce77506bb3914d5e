//! The one way this build script reads the environment: the first read of each variable tells
//! cargo to rerun the script when it changes, and says what it was (`NAME = value` or `NAME unset`,
//! in the build's output, as openssl-sys does), except `PATH`, which is tracked only when a program
//! found on it decided which CUDA was used (any other change of `PATH` must not rebuild
//! everything).

use std::cell::RefCell;
use std::ffi::OsString;

thread_local! {
    /// The variables read so far: each is announced once.
    static ANNOUNCED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The variable's value, or None when it is unset or empty.
pub(crate) fn var(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name).filter(|value| !value.is_empty());
    let first = ANNOUNCED.with(|seen| {
        let mut seen = seen.borrow_mut();
        let first = !seen.iter().any(|n| n == name);
        if first {
            seen.push(name.to_string());
        }
        first
    });
    if first {
        println!("cargo:rerun-if-env-changed={name}");
        match &value {
            Some(value) => println!("{name} = {}", value.to_string_lossy()),
            None => println!("{name} unset"),
        }
    }
    value
}

/// `PATH`, untracked: call [`track_path`] if what was found on it is used.
pub(crate) fn path_untracked() -> Option<OsString> {
    std::env::var_os("PATH").filter(|value| !value.is_empty())
}

/// Reruns the script when `PATH` changes: a program on it found the CUDA in use.
pub(crate) fn track_path() {
    let _ = var("PATH");
}
