//! The bindings committed in `bindings/`: bindgen's output for each pinned CUDA's headers
//! (`ci/committed-bindings` writes them, and the project's test command regenerates and compares
//! them), which set serves the headers found, and its copy into `OUT_DIR`.
//!
//! A CUDA without a set of its own uses the newest set of its major that is older than it, with a
//! warning: within a major, the declarations of the event domain have stayed the same (an added
//! enum value aside, which the newtype enums take anyway), and `ci/committed-bindings --check`
//! compares the functions generated from the newest pinned runtime with those of its major's
//! previous set, so a change fails the project's CI before the claim is relied on. A CUDA older
//! than every set of its major, or of a major without one, has no set: newer declarations could
//! name functions its libcudart lacks.

use crate::find_cuda::{Cuda, version_text};
use std::path::Path;

/// The committed bindings, by the `CUDART_VERSION` of the headers they were generated from, oldest
/// first.
const COMMITTED: [(u32, &str); 4] = [
    (12080, "bindings/cuda-12.8.rs"),
    (12090, "bindings/cuda-12.9.rs"),
    (13000, "bindings/cuda-13.0.rs"),
    (13050, "bindings/cuda-13.5.rs"),
];

/// One committed set: the `CUDART_VERSION` it was generated for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Set(u32);

impl Set {
    /// The set generated for exactly `version`, if there is one.
    pub(crate) fn exact(version: u32) -> Option<Set> {
        COMMITTED
            .iter()
            .any(|(v, _)| *v == version)
            .then_some(Set(version))
    }

    /// The set that serves `version`: its own, else the newest of its major older than it.
    pub(crate) fn serving(version: u32) -> Option<Set> {
        Set::exact(version).or_else(|| {
            COMMITTED
                .iter()
                .map(|(v, _)| *v)
                .filter(|v| v / 1000 == version / 1000 && *v < version)
                .max()
                .map(Set)
        })
    }

    /// The `CUDART_VERSION` the set was generated for.
    pub(crate) fn version(self) -> u32 {
        self.0
    }

    /// `"13.0"`.
    pub(crate) fn version_text(self) -> String {
        version_text(self.0)
    }

    fn file(self) -> &'static str {
        COMMITTED
            .iter()
            .find(|(v, _)| *v == self.0)
            .map(|(_, file)| *file)
            .expect("a Set is one of COMMITTED")
    }

    /// Writes the set to `OUT_DIR/bindings.rs` for headers of `cuda_version`: when the set is
    /// another version's, with `CUDART_VERSION` set to the headers' (the constant says which CUDA
    /// the crate was built against, as `DEP_CUDART_VERSION` does) and a warning saying so.
    pub(crate) fn write(self, manifest_dir: &Path, cuda_version: u32, out_dir: &Path) {
        let file = manifest_dir.join(self.file());
        println!("cargo:rerun-if-changed={}", file.display());
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            crate::fail(format!(
                "{}: cannot read {}: {e}",
                crate::whoami(),
                file.display()
            ))
        });
        let text = if cuda_version == self.0 {
            text
        } else {
            println!(
                "cargo:warning=cuda-event-sys: no bindings are committed for CUDA {found}; using CUDA {set}'s, \
                 the newest committed for CUDA {major}.x before it (its minor releases have kept the event \
                 domain's declarations so far; the `bindgen` feature generates bindings from the headers \
                 found instead)",
                found = version_text(cuda_version),
                set = self.version_text(),
                major = cuda_version / 1000,
            );
            let committed = format!("pub const CUDART_VERSION: u32 = {};", self.0);
            if !text.contains(&committed) {
                crate::fail(format!(
                    "{}: no `{committed}` in {}",
                    crate::whoami(),
                    file.display()
                ));
            }
            format!(
                "// The bindings committed for CUDA {}, serving CUDA {}'s headers.\n{}",
                self.version_text(),
                version_text(cuda_version),
                text.replace(
                    &committed,
                    &format!("pub const CUDART_VERSION: u32 = {cuda_version};")
                )
            )
        };
        std::fs::write(out_dir.join("bindings.rs"), text).unwrap_or_else(|e| {
            crate::fail(format!(
                "{}: cannot write OUT_DIR/bindings.rs: {e}",
                crate::whoami()
            ))
        });
    }
}

/// Reruns the build script when the header that chose the set changes (a runtime upgraded in
/// place): bindgen, which reads every header, is not there to say so.
pub(crate) fn track_header(cuda: &Cuda) {
    println!(
        "cargo:rerun-if-changed={}",
        cuda.include.join("cuda_runtime_api.h").display()
    );
}

/// "12.8, 12.9, 13.0 and 13.5".
pub(crate) fn versions() -> String {
    let names: Vec<String> = COMMITTED.iter().map(|(v, _)| version_text(*v)).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}
