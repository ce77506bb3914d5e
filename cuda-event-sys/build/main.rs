//! Build script of cuda-event-sys: find CUDA, generate the bindings, link libcudart, and tell
//! dependents what was found (`links = "cudart"` turns `cargo:KEY=VALUE` into `DEP_CUDART_KEY`).

mod env;
mod find_cuda;
mod link;
mod run_bindgen;

use std::path::PathBuf;

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();

    let mode = link::Mode::from_env();
    let cuda = match find_cuda::find(&manifest_dir, &target_arch, mode) {
        Ok(cuda) => cuda,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(1);
        }
    };

    run_bindgen::generate(&manifest_dir.join("wrapper.h"), &cuda.include_path, &out_dir);
    link::emit(&cuda, mode, &target_os, &out_dir);
    export_metadata(&cuda, mode);
}

/// Metadata for direct dependents, as `DEP_CUDART_ROOT`, `_INCLUDE`, `_INCLUDE_PATH` (every folder a
/// C compiler needs, joined like PATH), `_LIB_DIR`, `_VERSION` (`CUDART_VERSION`), `_STATIC` (1 or 0).
fn export_metadata(cuda: &find_cuda::Cuda, mode: link::Mode) {
    println!("cargo:root={}", cuda.root.display());
    println!("cargo:include={}", cuda.include.display());
    let include_path = std::env::join_paths(&cuda.include_path).expect("include folders join");
    println!("cargo:include_path={}", include_path.to_string_lossy());
    println!("cargo:lib_dir={}", cuda.lib_dir.display());
    println!("cargo:version={}", cuda.version);
    println!("cargo:static={}", u8::from(mode == link::Mode::Static));
    // Also visible to the crate itself, for its version constants and docs.
    println!("cargo:rustc-env=CUDA_EVENT_SYS_FOUND_BY={}", cuda.found_by);
}
