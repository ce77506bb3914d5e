//! Generating the bindings: bindgen on wrapper.h, allowlisted to the event domain and what the safe
//! crate, its tests and examples need.

use bindgen::EnumVariation;
use std::path::{Path, PathBuf};

/// Functions bound, by area. Names absent from older headers (`_v2`, `ByVersion`) simply match nothing.
const FUNCTIONS: &[&str] = &[
    // events
    "cudaEvent(Create|CreateWithFlags|Record|RecordWithFlags|Query|Synchronize|ElapsedTime|ElapsedTime_v2|Destroy)",
    // streams
    "cudaStream(Create|CreateWithFlags|CreateWithPriority|Destroy|WaitEvent|Synchronize|Query)",
    "cudaStream(GetDevice|GetFlags|GetPriority|IsCapturing|BeginCapture|EndCapture|AddCallback)",
    "cudaLaunchHostFunc",
    "cudaDeviceGetStreamPriorityRange",
    // graphs, as far as capture needs
    "cudaGraph(Instantiate|Launch|Destroy|ExecDestroy)",
    // IPC
    "cudaIpc(GetEventHandle|OpenEventHandle)",
    // devices
    "cuda(GetDevice|SetDevice|GetDeviceCount)",
    "cudaDevice(GetAttribute|Reset|Synchronize)",
    "cudaGetDriverEntryPoint(ByVersion)?",
    // memory, for real GPU work in tests and examples
    "cuda(Malloc|Free|MemsetAsync|MemcpyAsync)",
    // errors and versions
    "cuda(GetLastError|PeekAtLastError|GetErrorName|GetErrorString|RuntimeGetVersion|DriverGetVersion)",
];

/// Types that the functions above take only through `int` or `unsigned` parameters, and the driver
/// functions' types from cudaTypedefs.h that the safe crate resolves with
/// `cudaGetDriverEntryPointByVersion` (each names the ABI version it is for, so a wrong signature in
/// a caller does not compile).
const TYPES: &[&str] = &[
    "PFN_cu(Init|GetErrorName|GetErrorString|DeviceGet|DeviceGetCount)_v[0-9]+",
    "PFN_cu(DevicePrimaryCtxRetain|DevicePrimaryCtxGetState|CtxGetCurrent|CtxGetId|CtxPushCurrent|CtxPopCurrent)_v[0-9]+",
    "PFN_cuEvent(Create|Record|RecordWithFlags|Query|Synchronize|ElapsedTime|Destroy)_v[0-9]+",
    "PFN_cuStream(CreateWithPriority|WaitEvent|Synchronize|Query|IsCapturing|GetPriority|Destroy)_v[0-9]+",
    "PFN_cuIpc(GetEventHandle|OpenEventHandle)_v[0-9]+",
    // modules and launches: tests load PTX that faults, to poison a context on purpose
    "PFN_cu(ModuleLoadData|ModuleGetFunction|ModuleUnload|LaunchKernel)_v[0-9]+",
    // host functions: the safe host callback and the futures' wake-ups
    "PFN_cuLaunchHostFunc_v[0-9]+",
    // the futures' own calls run in relaxed capture mode, so that they never invalidate another
    // thread's global-mode capture
    "PFN_cuThreadExchangeStreamCaptureMode_v[0-9]+",
    // timing: the gate that holds a stream while repetitions are queued (a wait on a flag in
    // mapped host memory), and the L2 flush (a memset of a buffer the size of L2)
    "PFN_cuStreamWaitValue32_v[0-9]+",
    "PFN_cuMem(Alloc|Free|HostAlloc|FreeHost|HostGetDevicePointer)_v[0-9]+",
    "PFN_cuMemsetD32Async_v[0-9]+",
    "PFN_cuDeviceGetAttribute_v[0-9]+",
    "CUstreamWaitValue_flags",
    // the driver's error codes (CUresult), for the safe crate's one table of codes, and the
    // driver's names of the types those functions take
    "cudaError_enum",
    "CU(result|device|deviceptr|context|event|stream|ipcEventHandle|streamCaptureStatus|streamCaptureMode)",
    "cudaError",
    "cudaDeviceAttr",
    "cudaIpcEventHandle_t",
    "cudaStreamCaptureStatus",
    "cudaStreamCaptureMode",
    "cudaMemcpyKind",
    "cudaGetDriverEntryPointFlags",
    "cudaDriverEntryPointQueryResult",
];

/// `#define` constants: the event, record, wait and stream flags, the IPC handle size, the version.
const VARS: &[&str] = &[
    "cudaEvent(Default|BlockingSync|DisableTiming|Interprocess)",
    "cudaEventRecord(Default|External)",
    "cudaEventWait(Default|External)",
    "cudaStream(Default|NonBlocking)",
    "CUDA_IPC_HANDLE_SIZE",
    "CU_MEMHOSTALLOC_DEVICEMAP",
    "CUDART_VERSION",
];

pub fn generate(wrapper: &Path, include_path: &[PathBuf], out_dir: &Path) {
    println!("cargo:rerun-if-changed={}", wrapper.display());
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    ensure_libclang();
    let mut builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(include_path.iter().map(|dir| format!("-I{}", dir.display())))
        // A C enum that a newer runtime can extend (cudaError_t above all) must not become a Rust
        // enum: an unlisted value would be undefined behaviour. Newtypes keep every value legal.
        .default_enum_style(EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        // no_std: core for everything, libc for the C types, like other -sys crates.
        .use_core()
        .ctypes_prefix("::libc")
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(true)
        .generate_comments(true)
        .merge_extern_blocks(true)
        // An ignored return code is a bug: both APIs' codes are #[must_use].
        .must_use_type("cudaError")
        .must_use_type("cudaError_enum")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for function in FUNCTIONS {
        builder = builder.allowlist_function(function);
    }
    for ty in TYPES {
        builder = builder.allowlist_type(ty);
    }
    for var in VARS {
        builder = builder.allowlist_var(var);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        crate::fail(format!(
            "{}: bindgen failed on {}: {e}",
            crate::whoami(),
            wrapper.display()
        ))
    });
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write OUT_DIR/bindings.rs");
}

/// Ends the build with one message naming the fix when bindgen cannot load libclang. bindgen panics
/// then (`Unable to find libclang`), so its first use is made here with the panic caught and its
/// default report (a backtrace hint) silenced.
fn ensure_libclang() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let loaded = std::panic::catch_unwind(bindgen::clang_version);
    std::panic::set_hook(report);
    if let Err(panic) = loaded {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no reason given");
        crate::fail(format!(
            "{}: bindgen cannot load libclang, which it needs to read the CUDA headers.\n\
             \x20 Install it (Debian/Ubuntu: `apt-get install libclang-dev`; Fedora: `dnf install clang-devel`),\n\
             \x20 or set LIBCLANG_PATH to the folder holding libclang.so.\n\
             \x20 (bindgen said: {why})",
            crate::whoami()
        ));
    }
}
