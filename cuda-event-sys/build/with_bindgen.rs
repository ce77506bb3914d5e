//! The build with the `bindgen` feature: bindgen on the found headers where libclang loads, the
//! committed bindings where it does not.

use crate::committed::Set;
use crate::{fail, find_cuda, run_bindgen};
use std::path::Path;

/// What unsetting `CUDA_EVENT_SYS_BINDINGS` does, for its error messages.
pub(crate) const UNSET_ADVICE: &str = " to run bindgen";

/// bindgen on the headers, as `CUDA_EVENT_SYS_BINDINGS=bindgen` asks: libclang must load.
pub(crate) fn forced(manifest_dir: &Path, cuda: &find_cuda::Cuda, out_dir: &Path) -> &'static str {
    run_bindgen::load_libclang().unwrap_or_else(|message| fail(message));
    run(manifest_dir, cuda, out_dir)
}

/// bindgen where libclang loads, the committed bindings where it does not.
pub(crate) fn by_default(
    manifest_dir: &Path,
    cuda: &find_cuda::Cuda,
    out_dir: &Path,
    from_commit: impl FnOnce(Set) -> &'static str,
) -> &'static str {
    let version = find_cuda::version_text(cuda.version);
    match (run_bindgen::load_libclang(), Set::serving(cuda.version)) {
        (Ok(()), _) => run(manifest_dir, cuda, out_dir),
        (Err(_), Some(set)) => {
            println!(
                "cargo:warning=cuda-event-sys: no libclang: using the bindings committed for CUDA {} \
                 (CUDA_EVENT_SYS_BINDINGS=bindgen asks for libclang)",
                set.version_text()
            );
            from_commit(set)
        }
        (Err(message), None) => fail(format!(
            "{message}\n  Without libclang the build uses the bindings committed for CUDA {}, each also \
             serving the later minor releases of its major; the headers found are CUDA {version} \
             (CUDART_VERSION {}): install libclang as above, or build against one of those versions' \
             runtime (e.g. `pip install 'nvidia-cuda-runtime==13.5.*' 'nvidia-cuda-crt==13.5.*'`).",
            crate::committed::versions(),
            cuda.version
        )),
    }
}

/// bindgen on the headers found; libclang was loaded.
fn run(manifest_dir: &Path, cuda: &find_cuda::Cuda, out_dir: &Path) -> &'static str {
    run_bindgen::generate(&manifest_dir.join("wrapper.h"), &cuda.include_path, out_dir);
    println!(
        "cuda-event-sys: bindings: bindgen on CUDA {}'s headers",
        find_cuda::version_text(cuda.version)
    );
    "bindgen"
}
