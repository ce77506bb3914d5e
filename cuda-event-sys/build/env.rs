//! The one way this build script reads the environment: every read also tells cargo to rerun the
//! script when that variable changes.

use std::ffi::OsString;

/// The variable's value, or None when it is unset or empty.
pub fn var(name: &str) -> Option<OsString> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var_os(name).filter(|value| !value.is_empty())
}
