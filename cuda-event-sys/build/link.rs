//! Linking libcudart: statically by default (as nvcc does), dynamically on request.
//!
//! `CUDA_EVENT_SYS_LINK=static|dynamic` wins over the `dynamic` feature, either way: a feature is
//! unified across the whole build graph, so the environment is the only switch a final binary's
//! builder fully controls.

use crate::env;
use crate::find_cuda::Cuda;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Static,
    Dynamic,
}

impl Mode {
    pub(crate) fn from_env() -> Mode {
        let feature = env::var("CARGO_FEATURE_DYNAMIC").is_some();
        match env::var("CUDA_EVENT_SYS_LINK")
            .as_ref()
            .map(|v| v.to_string_lossy())
            .as_deref()
        {
            Some("static") => {
                if feature {
                    println!(
                        "cargo:warning=cuda-event-sys: CUDA_EVENT_SYS_LINK=static overrides the \
                         `dynamic` feature: libcudart is linked statically"
                    );
                }
                Mode::Static
            }
            Some("dynamic") => Mode::Dynamic,
            Some(other) => crate::fail(format!(
                "{}: CUDA_EVENT_SYS_LINK={other:?}: expected `static` or `dynamic`",
                crate::whoami()
            )),
            None if feature => Mode::Dynamic,
            None => Mode::Static,
        }
    }

    /// The file this mode links, for messages.
    pub(crate) fn library_file(self) -> &'static str {
        match self {
            Mode::Static => "libcudart_static.a",
            Mode::Dynamic => "libcudart.so",
        }
    }

    /// The library this mode links, if `dir` has it. A wheel ships only `libcudart.so.<major>`, with
    /// no unversioned link, so any `libcudart.so*` counts.
    pub(crate) fn library_in(self, dir: &Path) -> Option<PathBuf> {
        let wanted = |name: &str| match self {
            Mode::Static => name == "libcudart_static.a",
            Mode::Dynamic => name == "libcudart.so" || name.starts_with("libcudart.so."),
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter(|e| wanted(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect();
        // The shortest name is the least specific link: libcudart.so before libcudart.so.13.0.96.
        found.sort_by_key(|p| p.as_os_str().len());
        found.into_iter().next()
    }
}

pub(crate) fn emit(cuda: &Cuda, mode: Mode, out_dir: &Path) {
    match mode {
        Mode::Static => {
            println!("cargo:rustc-link-search=native={}", cuda.lib_dir.display());
            println!("cargo:rustc-link-lib=static=cudart_static");
            // What libcudart_static.a needs from the system, as nvcc links it.
            for lib in ["dl", "rt", "pthread"] {
                println!("cargo:rustc-link-lib=dylib={lib}");
            }
        }
        Mode::Dynamic => {
            let lib_dir = runtime_link_dir(cuda, out_dir);
            println!("cargo:rustc-link-search=native={}", lib_dir.display());
            println!("cargo:rustc-link-lib=dylib=cudart");
            // This package's own binaries (the `versions` example) find libcudart where it was
            // found, also outside cargo. Cargo applies link args to the package's own targets only:
            // a dependent binary adds the same rpath from DEP_CUDART_LIB_DIR (see the README).
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", cuda.lib_dir.display());
            warn_without_run_path(cuda);
        }
    }
}

/// A dynamically linked binary whose libcudart the loader cannot find exits with status 127 before
/// `main`, outside cargo (which puts the folder on the library path itself). This script cannot see
/// whether the final binary gets a run path (cargo applies link args to one package only), so it
/// warns unless the loader finds the library anyway: `LD_LIBRARY_PATH` names its folder, or
/// `ldconfig` knows a libcudart of this major. `CUDA_EVENT_SYS_RPATH_WARNING=0` silences it for a
/// build whose binaries have a run path.
fn warn_without_run_path(cuda: &Cuda) {
    if env::var("CUDA_EVENT_SYS_RPATH_WARNING").is_some_and(|v| v == "0") {
        return;
    }
    let lib_dir = cuda.lib_dir.canonicalize().unwrap_or(cuda.lib_dir.clone());
    let on_library_path = env::var("LD_LIBRARY_PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.canonicalize().is_ok_and(|dir| dir == lib_dir))
    });
    let soname = format!("libcudart.so.{}", cuda.version / 1000);
    let known_to_ldconfig = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|ldconfig| std::process::Command::new(ldconfig).arg("-p").output().ok())
        .is_some_and(|out| String::from_utf8_lossy(&out.stdout).contains(&soname));
    if on_library_path || known_to_ldconfig {
        return;
    }
    println!(
        "cargo:warning=cuda-event-sys: libcudart is linked dynamically from {}, which the loader does \
         not search: outside cargo a binary exits with status 127 unless it has a run path (in its \
         build.rs: println!(\"cargo:rustc-link-arg=-Wl,-rpath,{{}}\", DEP_CUDART_LIB_DIR), see the \
         README) or LD_LIBRARY_PATH names that folder; CUDA_EVENT_SYS_RPATH_WARNING=0 silences this",
        cuda.lib_dir.display()
    );
}

/// A folder in OUT_DIR with `libcudart.so` (for the linker) and the library's versioned name (for the
/// loader), both linked to the real file. Cargo puts link-search folders inside the target dir on
/// the library path of `cargo run` and `cargo test`, so no LD_LIBRARY_PATH is needed there.
fn runtime_link_dir(cuda: &Cuda, out_dir: &Path) -> PathBuf {
    let real = Mode::Dynamic
        .library_in(&cuda.lib_dir)
        .expect("find_cuda only accepts a lib dir that has libcudart.so*");
    let real = real.canonicalize().unwrap_or(real);
    let dir = out_dir.join("cudart-lib");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/cudart-lib");
    let soname = format!("libcudart.so.{}", cuda.version / 1000);
    for name in ["libcudart.so", soname.as_str()] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link)
            .unwrap_or_else(|e| panic!("link {} -> {}: {e}", link.display(), real.display()));
    }
    dir
}
