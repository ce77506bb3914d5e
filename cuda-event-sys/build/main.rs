//! Build script of cuda-event-sys: find CUDA, generate the bindings, link libcudart, and tell
//! dependents what was found (`links = "cudart"` turns `cargo:KEY=VALUE` into `DEP_CUDART_KEY`).
//! On docs.rs (`DOCS_RS` set), which has no CUDA, it uses the bindings committed in `bindings/` and
//! links nothing.

mod env;
mod find_cuda;
mod link;
mod run_bindgen;

use std::path::{Path, PathBuf};

/// The bindings docs.rs documents: generated from the pinned CUDA 13.0 headers by
/// `ci/docs-rs-bindings`, which the test command reruns to check that they are current.
const DOCS_RS_BINDINGS: &str = "bindings/docs-rs-cuda-13.0.rs";

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    if env::var("DOCS_RS").is_some() {
        use_committed_bindings(&manifest_dir, &out_dir);
        return;
    }
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        fail(format!("{}: only Linux targets are supported", whoami()));
    }

    let mode = link::Mode::from_env();
    let cuda = find_cuda::find(&target_arch, mode).unwrap_or_else(|message| fail(message));
    run_bindgen::generate(&manifest_dir.join("wrapper.h"), &cuda.include_path, &out_dir);
    link::emit(&cuda, mode, &out_dir);
    export_metadata(&cuda, mode);
}

/// The crate, its version, the target and the host, to start every error message with.
fn whoami() -> String {
    let var = |name| std::env::var(name).unwrap_or_else(|_| "?".into());
    format!(
        "cuda-event-sys {} (building for {} on {})",
        var("CARGO_PKG_VERSION"),
        var("TARGET"),
        var("HOST")
    )
}

/// Ends the build with `message` and no backtrace: the build script's errors are its user interface.
fn fail(message: String) -> ! {
    eprintln!("{message}");
    std::process::exit(1);
}

fn use_committed_bindings(manifest_dir: &Path, out_dir: &Path) {
    let committed = manifest_dir.join(DOCS_RS_BINDINGS);
    println!("cargo:rerun-if-changed={}", committed.display());
    std::fs::copy(&committed, out_dir.join("bindings.rs"))
        .unwrap_or_else(|e| fail(format!("{}: cannot copy {}: {e}", whoami(), committed.display())));
    println!("cargo:rustc-env=CUDA_EVENT_SYS_FOUND_BY=docs.rs: bindings committed from CUDA 13.0's headers");
}

/// Metadata for direct dependents, as `DEP_CUDART_ROOT`, `_INCLUDE`, `_INCLUDE_PATH` (every folder a
/// C compiler needs, joined like PATH), `_LIB_DIR`, `_VERSION` (`CUDART_VERSION`), `_STATIC` (1 or 0).
fn export_metadata(cuda: &find_cuda::Cuda, mode: link::Mode) {
    println!("cargo:root={}", cuda.root.display());
    println!("cargo:include={}", cuda.include.display());
    // find_cuda rejects a CUDA whose path has a ':', so the folders always join.
    let include_path = std::env::join_paths(&cuda.include_path).expect("include folders join");
    println!("cargo:include_path={}", include_path.to_string_lossy());
    println!("cargo:lib_dir={}", cuda.lib_dir.display());
    println!("cargo:version={}", cuda.version);
    println!("cargo:static={}", u8::from(mode == link::Mode::Static));
    // Also visible to the crate itself, for its version constants and docs.
    println!("cargo:rustc-env=CUDA_EVENT_SYS_FOUND_BY={}", cuda.found_by);
}
