//! The build without the `bindgen` feature (the default): no bindgen is compiled in, so the
//! committed bindings that serve the headers found, or a message naming the feature.

use crate::committed::Set;
use crate::{fail, find_cuda, whoami};
use std::path::Path;

/// What unsetting `CUDA_EVENT_SYS_BINDINGS` does, for its error messages.
pub(crate) const UNSET_ADVICE: &str = ", and enable cuda-event-sys's `bindgen` feature to run bindgen";

/// `CUDA_EVENT_SYS_BINDINGS=bindgen` without the feature: bindgen is not compiled in.
pub(crate) fn forced(_: &Path, _: &find_cuda::Cuda, _: &Path) -> &'static str {
    fail(format!(
        "{}: CUDA_EVENT_SYS_BINDINGS=bindgen, but cuda-event-sys was built without its `bindgen` \
         feature, which compiles bindgen in: enable it (`cuda-event-sys = {{ version = \"{}\", \
         features = [\"bindgen\"] }}`, or the `bindgen` feature of cuda-event, which forwards it), or \
         unset CUDA_EVENT_SYS_BINDINGS to use the committed bindings",
        whoami(),
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    ))
}

/// The committed bindings that serve the headers, or a message naming the feature.
pub(crate) fn by_default(
    _: &Path,
    cuda: &find_cuda::Cuda,
    _: &Path,
    from_commit: impl FnOnce(Set) -> &'static str,
) -> &'static str {
    match Set::serving(cuda.version) {
        Some(set) => from_commit(set),
        None => fail(format!(
            "{}: no committed bindings serve the CUDA found, CUDA {} (CUDART_VERSION {}): they are for \
             CUDA {}, each also serving the later minor releases of its major.\n\
             \x20 Enable cuda-event-sys's `bindgen` feature (or cuda-event's, which forwards it) to \
             generate bindings from these headers with bindgen (it needs libclang),\n\
             \x20 or build against a CUDA that has them (e.g. `pip install 'nvidia-cuda-runtime==13.5.*' \
             'nvidia-cuda-crt==13.5.*'`).",
            whoami(),
            find_cuda::version_text(cuda.version),
            cuda.version,
            crate::committed::versions()
        )),
    }
}
