//! Generating the bindings: bindgen on wrapper.h, allowlisted to the event domain and what the safe
//! crate, its tests and examples need.

use crate::{env, find_cuda};
use bindgen::EnumVariation;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    // timing's cold-cache check: persisting L2 lines reset (where the context's limit lets lines
    // persist), and timed device-to-device reads that show whether the flush evicted a buffer
    "PFN_cuCtxResetPersistingL2Cache_v[0-9]+",
    "PFN_cuCtxGetLimit_v[0-9]+",
    "CUlimit_enum",
    "PFN_cuMemcpyDtoDAsync_v[0-9]+",
    // timing in graph mode: repetitions captured into a graph once and replayed
    "PFN_cuStream(BeginCapture|EndCapture)_v[0-9]+",
    "PFN_cuGraph(InstantiateWithFlags|Launch|Destroy|ExecDestroy)_v[0-9]+",
    "PFN_cuDeviceGetAttribute_v[0-9]+",
    // captured records: the capture a record goes into (its id), and a user object moved into
    // that capture's graph, whose destructor says the graph, and so the capture, is gone
    "PFN_cuStreamGetCaptureInfo_v[0-9]+",
    "PFN_cu(UserObjectCreate|UserObjectRelease|GraphRetainUserObject)_v[0-9]+",
    "CU(userObject_flags|userObjectRetain_flags)_enum",
    // timing's host words: host memory the crate owns, registered (a device reset unmaps memory
    // that cuMemHostAlloc made, not registered memory)
    "PFN_cuMemHost(Register|Unregister)_v[0-9]+",
    "CUstreamWaitValue_flags",
    // the flag lane: a stream writes a ticket into registered host memory behind a record, for a
    // thread that spins on it to see the record complete
    "PFN_cuStreamWriteValue64_v[0-9]+",
    "CUstreamWriteValue_flags",
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
    "CU_MEMHOSTREGISTER_DEVICEMAP",
    "CUDART_VERSION",
];

/// What bindgen's `CargoCallbacks` tells cargo (rerun when a header bindgen read or a variable it
/// looked at changes), each line once: a header included from several others is read once per
/// include, and the wrapper is announced by [`generate`] itself.
#[derive(Debug, Default)]
struct RerunOnce {
    headers: std::sync::Mutex<Vec<String>>,
}

impl bindgen::callbacks::ParseCallbacks for RerunOnce {
    fn include_file(&self, filename: &str) {
        let mut headers = self
            .headers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !headers.iter().any(|seen| seen == filename) {
            println!("cargo:rerun-if-changed={filename}");
            headers.push(filename.to_string());
        }
    }

    fn read_env_var(&self, key: &str) {
        let _ = env::var(key);
    }
}

/// Runs bindgen on `wrapper` into `out_dir/bindings.rs`; libclang was loaded ([`load_libclang`]).
pub(crate) fn generate(wrapper: &Path, include_path: &[PathBuf], out_dir: &Path) {
    println!("cargo:rerun-if-changed={}", wrapper.display());
    let resource_headers = resource_header_args();
    let mut builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(include_path.iter().map(|dir| format!("-I{}", dir.display())))
        .clang_args(&resource_headers)
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
        .parse_callbacks(Box::new(RerunOnce::default()));
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

/// Loads libclang for bindgen, or says in one message why not and how to get it. bindgen panics
/// when it finds none (`Unable to find libclang`), so its first use is made here with the panic
/// caught and its default report (a backtrace hint) silenced. When `LIBCLANG_PATH` is unset and
/// bindgen's own search finds nothing, PyPI's `libclang` wheel is looked for where the CUDA wheels
/// are (virtualenv, conda env, `python3`'s site-packages) and in this workspace's provisioned
/// folder: it is the way to libclang that needs no root.
pub(crate) fn load_libclang() -> Result<(), String> {
    let explicit = env::var("LIBCLANG_PATH");
    let Err(why) = try_load_libclang() else {
        return Ok(());
    };
    let wheel = explicit.is_none().then(libclang_wheel).flatten();
    if let Some((origin, dir)) = &wheel {
        // SAFETY: the build script is single-threaded here (no thread has been started), so nothing
        // reads the environment while it changes; bindgen reads LIBCLANG_PATH on its next load.
        unsafe { std::env::set_var("LIBCLANG_PATH", dir) };
        if try_load_libclang().is_ok() {
            println!(
                "cuda-event-sys: libclang from PyPI's libclang wheel in {origin}: {}",
                dir.display()
            );
            return Ok(());
        }
    }
    let searched = match (&explicit, &wheel) {
        (Some(dir), _) => format!("LIBCLANG_PATH={}", PathBuf::from(dir).display()),
        (None, Some((_, dir))) => format!("the usual folders, then {}", dir.display()),
        (None, None) => "the usual folders; no pip `libclang` wheel in any site-packages".into(),
    };
    Err(format!(
        "{}: bindgen cannot load libclang, which it needs to read the CUDA headers (searched: {searched}).\n\
         \x20 Install it (Debian/Ubuntu: `apt-get install libclang-dev`; Fedora: `dnf install clang-devel`),\n\
         \x20 or without root: `pip install libclang` into the active virtualenv (found there by itself),\n\
         \x20 or set LIBCLANG_PATH to the folder holding libclang.so.\n\
         \x20 (bindgen said: {why})",
        crate::whoami()
    ))
}

/// bindgen's first use, its panic caught and returned as text.
fn try_load_libclang() -> Result<(), String> {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // bindgen keeps a loaded libclang once; a failed load leaves nothing behind, so a retry with
    // another LIBCLANG_PATH searches again.
    let loaded = std::panic::catch_unwind(bindgen::clang_version);
    std::panic::set_hook(report);
    loaded.map(drop).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no reason given")
            .to_string()
    })
}

/// Where PyPI's `libclang` wheel keeps `libclang.so` (`clang/native/` under site-packages), in the
/// site-packages the CUDA search uses, then in this workspace's provisioned folder (`ci/provision`
/// unpacks the wheel into `libclang/` there).
fn libclang_wheel() -> Option<(String, PathBuf)> {
    let sites = find_cuda::site_packages_dirs()
        .into_iter()
        .map(|(origin, site)| (origin.to_string(), site));
    let provisioned = env::var(find_cuda::PROVISIONED_VAR).map(|dir| {
        (
            "this workspace's provisioned folder".to_string(),
            PathBuf::from(dir).join("libclang"),
        )
    });
    sites
        .chain(provisioned)
        .map(|(origin, site)| (origin, site.join("clang/native")))
        .find(|(_, dir)| dir.join("libclang.so").is_file())
}

/// A header that includes clang's own resource headers, the ones any C library header needs.
const RESOURCE_PROBE: &str =
    "#include <stddef.h>\n#include <stdarg.h>\n#include <limits.h>\n#include <stdint.h>\n";

/// `-isystem` arguments for clang's resource headers (stddef.h, limits.h...) when the loaded libclang
/// cannot find its own: PyPI's `libclang` wheel ships none, and CUDA's headers then fail with
/// `'limits.h' file not found`. None when a probe parses as it is (a libclang-dev install, or the
/// user's BINDGEN_EXTRA_CLANG_ARGS). Otherwise the first folder that makes the probe parse: one
/// beside the libclang loaded (a wheel that does carry them), then the C compiler's own (`$CC`, `cc`,
/// `gcc`, `clang`: `-print-file-name=include`), whose headers clang reads as GCC's.
fn resource_header_args() -> Vec<String> {
    let Err(why) = parse_probe(&[]) else {
        return Vec::new();
    };
    eprintln!("cuda-event-sys: (the error above is a probe's: looking for clang's resource headers)");
    let candidates = libclang_data_dirs().into_iter().chain(compiler_include_dirs());
    let mut tried = Vec::new();
    for dir in candidates {
        if !dir.join("stddef.h").is_file() || tried.contains(&dir) {
            continue;
        }
        let args = vec!["-isystem".to_string(), dir.display().to_string()];
        if parse_probe(&args).is_ok() {
            println!(
                "cuda-event-sys: libclang has no resource headers of its own; using {} (-isystem)",
                dir.display()
            );
            return args;
        }
        tried.push(dir);
    }
    let tried = match tried.is_empty() {
        true => "no folder with stddef.h beside libclang, and no C compiler (cc, gcc, clang) on PATH".into(),
        false => format!(
            "{} did not do",
            tried
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    crate::fail(format!(
        "{}: libclang cannot find clang's resource headers (stddef.h, limits.h), which PyPI's libclang\n\
         \x20 wheel does not ship ({why}; {tried}).\n\
         \x20 Install a C compiler (Debian/Ubuntu: `apt-get install gcc`), whose headers serve,\n\
         \x20 or name the folder: BINDGEN_EXTRA_CLANG_ARGS='-isystem /usr/lib/llvm-<N>/lib/clang/<N>/include'\n\
         \x20 (clang's resource dir, `clang -print-resource-dir`, + /include), or install libclang-dev.",
        crate::whoami()
    ))
}

/// Parses [`RESOURCE_PROBE`] with `args` added.
fn parse_probe(args: &[String]) -> Result<(), String> {
    bindgen::Builder::default()
        .header_contents("cuda-event-sys-resource-probe.h", RESOURCE_PROBE)
        .clang_args(args)
        .generate()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Resource header folders a libclang install may carry beside the library (`LIBCLANG_PATH`'s
/// folder): `include/`, `clang/<version>/include`, `../lib/clang/<version>/include`.
fn libclang_data_dirs() -> Vec<PathBuf> {
    let Some(path) = std::env::var_os("LIBCLANG_PATH").map(PathBuf::from) else {
        return Vec::new();
    };
    let dir = if path.is_file() {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        path
    };
    let versioned = |clang: PathBuf| {
        std::fs::read_dir(clang)
            .into_iter()
            .flatten()
            .flatten()
            .map(|version| version.path().join("include"))
            .collect::<Vec<_>>()
    };
    let mut dirs = vec![dir.join("include")];
    dirs.extend(versioned(dir.join("clang")));
    dirs.extend(versioned(dir.join("../lib/clang")));
    dirs
}

/// The include folder of each C compiler found (`$CC`, then `cc`, `gcc`, `clang`), as the compiler
/// reports it.
fn compiler_include_dirs() -> Vec<PathBuf> {
    let compilers = env::var("CC")
        .into_iter()
        .chain(["cc", "gcc", "clang"].map(Into::into));
    compilers
        .filter_map(|cc| Command::new(cc).arg("-print-file-name=include").output().ok())
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .filter(|dir| dir.is_absolute())
        .collect()
}
