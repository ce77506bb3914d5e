//! Finding a CUDA runtime (headers and libcudart), in the documented order. Each step that does not
//! give one leaves a line saying why, so that the final error shows everything that was searched.

use crate::env;
use crate::link::Mode;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A CUDA runtime: where its headers and libraries are, and which version the headers declare.
pub struct Cuda {
    pub root: PathBuf,
    pub include: PathBuf,
    /// Every folder a C compiler needs: `include`, then the one holding `crt/` when that is apart
    /// (a pip env keeps 12.x's crt/ headers in the nvcc wheel, `nvidia/cuda_nvcc/include`).
    pub include_path: Vec<PathBuf>,
    pub lib_dir: PathBuf,
    /// The headers' `CUDART_VERSION`, e.g. 13000 for 13.0.
    pub version: u32,
    /// The search step that found it, for the build log.
    pub found_by: String,
}

/// The variables that may name a CUDA toolkit, in the order they are tried.
const TOOLKIT_VARS: [&str; 4] = ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR"];
/// Where toolkits are commonly installed.
const TOOLKIT_DIRS: [&str; 2] = ["/usr/local/cuda", "/opt/cuda"];
/// Where PyPI's CUDA runtime wheels put their files under site-packages, newest major first:
/// `nvidia-cuda-runtime` (13.x) and `nvidia-cuda-runtime-cu12`.
const WHEEL_DIRS: [&str; 2] = ["nvidia/cu13", "nvidia/cuda_runtime"];
/// The folder, at the workspace root, that `ci/provision` unpacks the pinned wheels into.
const PROVISIONED_DIR: &str = "../.cuda";

/// Searches every step in order and returns the first CUDA that has headers and the library `mode`
/// links; the error lists every step with what it found.
pub fn find(manifest_dir: &Path, target_arch: &str, mode: Mode) -> Result<Cuda, String> {
    let mut tried = String::new();
    let mut step = |name: String, root: Option<PathBuf>| -> Option<Cuda> {
        match root {
            None => {
                let _ = writeln!(tried, "  - {name}: not set or not found");
                None
            }
            Some(root) => match probe(&root, target_arch, mode, &name) {
                Ok(cuda) => Some(cuda),
                Err(why) => {
                    let _ = writeln!(tried, "  - {name}: {} ({why})", root.display());
                    None
                }
            },
        }
    };

    // An explicit request is not second-guessed: if it is wrong, say so instead of looking elsewhere.
    if let Some(dir) = env::var("CUDA_EVENT_SYS_CUDA_DIR") {
        let dir = PathBuf::from(dir);
        return probe_any_layout(&dir, target_arch, mode, "CUDA_EVENT_SYS_CUDA_DIR").map_err(|why| {
            format!(
                "cuda-event-sys: CUDA_EVENT_SYS_CUDA_DIR={} is not a usable CUDA runtime: {why}",
                dir.display()
            )
        });
    }
    for var in TOOLKIT_VARS {
        if let Some(cuda) = step(format!("${var}"), env::var(var).map(PathBuf::from)) {
            return Ok(cuda);
        }
    }
    if let Some(cuda) = step("the toolkit around nvcc on PATH".into(), toolkit_of_nvcc()) {
        return Ok(cuda);
    }
    for dir in TOOLKIT_DIRS {
        let dir = Path::new(dir);
        if let Some(cuda) = step("a usual toolkit folder".into(), Some(dir.into())) {
            return Ok(cuda);
        }
    }
    for (origin, site) in site_packages_dirs() {
        for wheel in WHEEL_DIRS {
            let root = site.join(wheel);
            let name = format!("CUDA runtime wheel in {origin}");
            if let Some(cuda) = step(name, Some(root)) {
                return Ok(cuda);
            }
        }
    }
    let provisioned = manifest_dir.join(PROVISIONED_DIR);
    for wheel in WHEEL_DIRS {
        let root = provisioned.join(wheel);
        let name = "the project's provisioned folder (.cuda/, made by ci/provision)".to_string();
        if let Some(cuda) = step(name, Some(root)) {
            return Ok(cuda);
        }
    }

    Err(format!(
        "cuda-event-sys: no CUDA runtime found ({what} and cuda_runtime_api.h).\n\
         Searched, in order:\n\
         {tried}\
         Fix it in one of two ways:\n\
         \x20 1. install a CUDA toolkit and point CUDA_PATH (or CUDA_EVENT_SYS_CUDA_DIR) at it, e.g.\n\
         \x20    CUDA_PATH=/usr/local/cuda-13.0 cargo build\n\
         \x20 2. from the project's root, run `ci/provision`: it unpacks the pinned CUDA runtime wheels\n\
         \x20    from PyPI (nvidia-cuda-runtime 13.0.96, nvidia-cuda-runtime-cu12 12.9.79) into .cuda/",
        what = mode.library_file(),
    ))
}

/// `dir` as a toolkit or wheel root, or as a site-packages folder holding one of the wheels.
fn probe_any_layout(dir: &Path, target_arch: &str, mode: Mode, name: &str) -> Result<Cuda, String> {
    probe(dir, target_arch, mode, name).or_else(|why| {
        WHEEL_DIRS
            .iter()
            .find_map(|wheel| probe(&dir.join(wheel), target_arch, mode, name).ok())
            .ok_or(why)
    })
}

/// `root` holds a CUDA runtime when it has the header and the library that `mode` links.
fn probe(root: &Path, target_arch: &str, mode: Mode, name: &str) -> Result<Cuda, String> {
    if !root.is_dir() {
        return Err("does not exist".into());
    }
    let target_dir = root.join("targets").join(format!("{target_arch}-linux"));
    let include = [root.join("include"), target_dir.join("include")]
        .into_iter()
        .find(|dir| dir.join("cuda_runtime_api.h").is_file())
        .ok_or("no include/cuda_runtime_api.h")?;
    // cuda_runtime_api.h includes crt/host_defines.h, which a wheel layout may keep elsewhere.
    let crt_include = [include.clone(), root.join("../cuda_nvcc/include")]
        .into_iter()
        .find(|dir| dir.join("crt/host_defines.h").is_file())
        .ok_or(
            "no crt/host_defines.h beside cuda_runtime_api.h \
             (for wheels: nvidia-cuda-crt for 13.x, nvidia-cuda-nvcc-cu12 for 12.x)",
        )?;
    let mut include_path = vec![include.clone()];
    if crt_include != include {
        include_path.push(crt_include);
    }
    let lib_dir = [root.join("lib64"), root.join("lib"), target_dir.join("lib")]
        .into_iter()
        .find(|dir| mode.library_in(dir).is_some())
        .ok_or_else(|| format!("no {} in lib64/ or lib/", mode.library_file()))?;
    let version = header_version(&include.join("cuda_runtime_api.h"))?;
    Ok(Cuda {
        root: root.to_path_buf(),
        include,
        include_path,
        lib_dir,
        version,
        found_by: name.to_string(),
    })
}

/// The `CUDART_VERSION` that the header defines.
fn header_version(header: &Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(header).map_err(|e| format!("cannot read {header:?}: {e}"))?;
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some("CUDART_VERSION"))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
        .ok_or_else(|| "no CUDART_VERSION in cuda_runtime_api.h".to_string())
}

/// The toolkit around the first `nvcc` on PATH (`<root>/bin/nvcc`, links resolved).
fn toolkit_of_nvcc() -> Option<PathBuf> {
    let path = env::var("PATH")?;
    let nvcc = std::env::split_paths(&path)
        .map(|dir| dir.join("nvcc"))
        .find(|nvcc| nvcc.is_file())?;
    let nvcc = nvcc.canonicalize().unwrap_or(nvcc);
    Some(nvcc.parent()?.parent()?.to_path_buf())
}

/// The site-packages folders to look for CUDA wheels in, each with where it came from: the active
/// virtualenv, the active conda env, then those of `python3` on PATH (system and user).
fn site_packages_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = env::var(var) {
            let lib = PathBuf::from(prefix).join("lib");
            let pythons = std::fs::read_dir(&lib).into_iter().flatten().flatten();
            for entry in pythons.filter(|e| e.file_name().to_string_lossy().starts_with("python")) {
                dirs.push((format!("${var}"), entry.path().join("site-packages")));
            }
        }
    }
    let python_sites =
        "import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    // PATH is read through env::var by toolkit_of_nvcc; python3 is looked up there by the OS.
    if let Ok(output) = Command::new("python3").args(["-c", python_sites]).output() {
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            dirs.push(("python3's site-packages".to_string(), PathBuf::from(line.trim())));
        }
    }
    dirs
}
