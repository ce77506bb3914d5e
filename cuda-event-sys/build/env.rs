//! The one way this build script reads the environment: every read also tells cargo to rerun the
//! script when that variable changes, except `PATH`, which is tracked only when a program found on
//! it decided which CUDA was used (any other change of `PATH` must not rebuild everything).

use std::ffi::OsString;

/// The variable's value, or None when it is unset or empty.
pub(crate) fn var(name: &str) -> Option<OsString> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// `PATH`, untracked: call [`track_path`] if what was found on it is used.
pub(crate) fn path_untracked() -> Option<OsString> {
    std::env::var_os("PATH").filter(|value| !value.is_empty())
}

/// Reruns the script when `PATH` changes: a program on it found the CUDA in use.
pub(crate) fn track_path() {
    println!("cargo:rerun-if-env-changed=PATH");
}
