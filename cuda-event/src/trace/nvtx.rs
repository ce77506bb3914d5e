//! With the `nvtx` feature, each range of a trace is also an NVTX range (`nvtxRangeStartA` at its
//! open, `nvtxRangeEnd` at its close: the NVTX form that may end on another thread), so that
//! Nsight Systems shows the same names beside its own timeline.
//!
//! NVTX is header-only C, so nothing is linked: the two entry points are loaded once, at the first
//! range, from `libnvtx3interop.so.1` (the NVTX library made for languages that cannot use the
//! headers; PyPI's `nvidia-nvtx` wheel and the CUDA toolkit ship it), or from the file that
//! `CUDA_EVENT_NVTX_LIBRARY` names. Without it, or without the feature, these calls do nothing.

#[cfg(feature = "nvtx")]
mod loaded {
    use crate::sync::OnceLock;
    use std::ffi::{CString, c_char, c_void};

    type RangeStartA = unsafe extern "C" fn(*const c_char) -> u64;
    type RangeEnd = unsafe extern "C" fn(u64);

    struct Nvtx {
        start: RangeStartA,
        end: RangeEnd,
    }

    static NVTX: OnceLock<Option<Nvtx>> = OnceLock::new();

    fn nvtx() -> Option<&'static Nvtx> {
        NVTX.get_or_init(load).as_ref()
    }

    fn load() -> Option<Nvtx> {
        let name = std::env::var("CUDA_EVENT_NVTX_LIBRARY").unwrap_or_else(|_| "libnvtx3interop.so.1".into());
        let name = CString::new(name).ok()?;
        // SAFETY: a NUL-terminated file name; the handle is never closed, so the functions found in
        // it stay valid for the process.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return None;
        }
        // SAFETY: a live handle and NUL-terminated symbol names.
        let (start, end) = unsafe {
            (
                libc::dlsym(handle, c"nvtxRangeStartA".as_ptr()),
                libc::dlsym(handle, c"nvtxRangeEnd".as_ptr()),
            )
        };
        if start.is_null() || end.is_null() {
            return None;
        }
        // SAFETY: NVTX declares `nvtxRangeId_t nvtxRangeStartA(const char*)` and `void
        // nvtxRangeEnd(nvtxRangeId_t)` (nvToolsExt.h), nvtxRangeId_t being uint64_t; the pointers
        // are those functions' addresses.
        unsafe {
            Some(Nvtx {
                start: std::mem::transmute::<*mut c_void, RangeStartA>(start),
                end: std::mem::transmute::<*mut c_void, RangeEnd>(end),
            })
        }
    }

    /// Whether the NVTX library was found (loading it on the first call).
    pub(crate) fn active() -> bool {
        nvtx().is_some()
    }

    /// Starts an NVTX range named `name` (up to a NUL in it); its id, or 0 with no NVTX.
    pub(crate) fn start(name: &str) -> u64 {
        let Some(nvtx) = nvtx() else { return 0 };
        let name = name.split('\0').next().unwrap_or_default();
        let Ok(name) = CString::new(name) else { return 0 };
        // SAFETY: a NUL-terminated string that outlives the call (NVTX copies what it keeps).
        unsafe { (nvtx.start)(name.as_ptr()) }
    }

    /// Ends the NVTX range `id` (from [`start`]; 0: none).
    pub(crate) fn end(id: u64) {
        if let (Some(nvtx), true) = (nvtx(), id != 0) {
            // SAFETY: an id that nvtxRangeStartA returned, ended once.
            unsafe { (nvtx.end)(id) }
        }
    }
}

#[cfg(not(feature = "nvtx"))]
mod loaded {
    pub(crate) fn active() -> bool {
        false
    }

    pub(crate) fn start(_name: &str) -> u64 {
        0
    }

    pub(crate) fn end(_id: u64) {}
}

pub(crate) use loaded::{active, end, start};

#[cfg(all(test, feature = "nvtx", not(cuda_event_model)))]
mod tests {
    use super::*;

    /// ci/test names the provisioned wheel's library in CUDA_EVENT_NVTX_LIBRARY: it loads, and
    /// ranges start and end through it (no tool is attached, so NVTX itself does nothing with
    /// them). Without the variable, the loader's own search decides, and ranges work either way.
    #[test]
    fn ranges_start_and_end_through_the_library_named() {
        match std::env::var("CUDA_EVENT_NVTX_LIBRARY") {
            Ok(path) => assert!(active(), "{path} did not load"),
            Err(_) => println!("CUDA_EVENT_NVTX_LIBRARY unset: NVTX active = {}", active()),
        }
        let id = start("a name\0 cut at its NUL");
        end(id);
        end(0);
    }
}
