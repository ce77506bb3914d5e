//! Finding a CUDA runtime (headers and libcudart), in the documented order. Each step that does not
//! give one leaves a line saying why, so that the final error shows everything that was searched; a
//! variable the user set that names no usable CUDA also gets a warning, since the build then goes on
//! with another CUDA.

use crate::env;
use crate::link::Mode;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest CUDA whose headers declare everything the crates use: `cudaGetDriverEntryPointByVersion`
/// (12.5) and `PFN_cuEventElapsedTime_v12080` (12.8), as `CUDART_VERSION`.
pub(crate) const MIN_CUDART_VERSION: u32 = 12080;

/// A CUDA runtime: where its headers and libraries are, and which version the headers declare.
pub(crate) struct Cuda {
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
/// Set only inside this project's workspace (its `.cargo/config.toml`): the folder `ci/provision`
/// unpacks the pinned wheels into. A published build has no such folder and never names it.
pub(crate) const PROVISIONED_VAR: &str = "CUDA_EVENT_SYS_PROVISIONED_DIR";

/// Searches every step in order and returns the first CUDA that has headers of at least
/// [`MIN_CUDART_VERSION`] and the library `mode` links; the error lists every step with what it found.
pub(crate) fn find(target_arch: &str, mode: Mode) -> Result<Cuda, String> {
    // An explicit request is not second-guessed: if it is wrong, say so instead of looking elsewhere.
    if let Some(dir) = env::var("CUDA_EVENT_SYS_CUDA_DIR") {
        let dir = PathBuf::from(dir);
        return probe_any_layout(&dir, target_arch, mode, "CUDA_EVENT_SYS_CUDA_DIR").map_err(|why| {
            format!(
                "{}: CUDA_EVENT_SYS_CUDA_DIR={} is not a usable CUDA runtime: {why}",
                crate::whoami(),
                dir.display()
            )
        });
    }
    let mut search = Search {
        tried: String::new(),
        target_arch,
        mode,
    };
    let unset: Vec<&str> = TOOLKIT_VARS
        .into_iter()
        .filter(|var| env::var(var).is_none())
        .collect();
    if !unset.is_empty() {
        search.note(format_args!("${}: not set", unset.join(", $")));
    }
    for var in TOOLKIT_VARS {
        let Some(dir) = env::var(var).map(PathBuf::from) else {
            continue;
        };
        match probe_any_layout(&dir, target_arch, mode, &format!("${var}")) {
            Ok(cuda) => return Ok(cuda),
            Err(why) => {
                // The user named this folder: going on with another CUDA must not be silent.
                println!(
                    "cargo:warning=cuda-event-sys: ignoring {var}={}: {why}; searching on",
                    dir.display()
                );
                search.note(format_args!("${var}: {} ({why})", dir.display()));
            }
        }
    }
    match toolkit_of_nvcc() {
        Some(toolkit) => {
            if let Some(cuda) = search.root("the toolkit around nvcc on PATH", &toolkit) {
                env::track_path();
                return Ok(cuda);
            }
        }
        None => search.note(format_args!("the toolkit around nvcc on PATH: no nvcc on PATH")),
    }
    for dir in TOOLKIT_DIRS {
        if let Some(cuda) = search.root("a usual toolkit folder", Path::new(dir)) {
            return Ok(cuda);
        }
    }
    let sites = site_packages_dirs();
    let wheels_in = |site: &Path| {
        WHEEL_DIRS
            .map(|wheel| site.join(wheel))
            .into_iter()
            .filter(|root| root.is_dir())
    };
    for (origin, site) in &sites {
        for root in wheels_in(site) {
            if let Some(cuda) = search.root(&format!("CUDA runtime wheel in {origin}"), &root) {
                if origin.on_path {
                    env::track_path();
                }
                return Ok(cuda);
            }
        }
    }
    if sites.iter().all(|(_, site)| wheels_in(site).next().is_none()) {
        let searched: Vec<String> = sites
            .iter()
            .map(|(o, s)| format!("{} ({o})", s.display()))
            .collect();
        search.note(format_args!(
            "CUDA runtime wheels ({}): none in {}",
            WHEEL_DIRS.join(", "),
            if searched.is_empty() {
                "any site-packages (no virtualenv, no python3)".into()
            } else {
                searched.join(", ")
            }
        ));
    }
    let provisioned = env::var(PROVISIONED_VAR).map(PathBuf::from);
    if let Some(provisioned) = &provisioned {
        for wheel in WHEEL_DIRS {
            let name = "this workspace's provisioned folder (made by ci/provision)";
            if let Some(cuda) = search.root(name, &provisioned.join(wheel)) {
                return Ok(cuda);
            }
        }
    }

    let workspace_fix = if provisioned.is_some() {
        "\x20 4. in this workspace: run `ci/provision` from its root; it unpacks the pinned CUDA runtime\n\
         \x20    wheels from PyPI (nvidia-cuda-runtime 13.0.96, nvidia-cuda-runtime-cu12 12.9.79) into .cuda/\n"
    } else {
        ""
    };
    Err(format!(
        "{who}: no CUDA runtime found ({library} and cuda_runtime_api.h of CUDA {min} or newer).\n\
         Searched, in order:\n\
         {tried}\
         Fix it in one of these ways:\n\
         \x20 1. install a CUDA toolkit ({min} or newer) and point CUDA_PATH at it:\n\
         \x20      CUDA_PATH=/usr/local/cuda-13.0 cargo build\n\
         \x20 2. pip install the CUDA runtime and its crt headers into a virtualenv, and build with it\n\
         \x20    active (VIRTUAL_ENV set):\n\
         \x20      pip install 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*'     # CUDA 13\n\
         \x20      pip install 'nvidia-cuda-runtime-cu12==12.9.*' 'nvidia-cuda-nvcc-cu12==12.9.*'  # CUDA 12\n\
         \x20 3. name the folder: CUDA_EVENT_SYS_CUDA_DIR=<a toolkit, a wheel's root or a site-packages>\n\
         {workspace_fix}",
        who = crate::whoami(),
        tried = search.tried,
        library = mode.library_file(),
        min = version_text(MIN_CUDART_VERSION),
    ))
}

/// The search so far: one line per place looked at and why it did not do.
struct Search<'a> {
    tried: String,
    target_arch: &'a str,
    mode: Mode,
}

impl Search<'_> {
    fn note(&mut self, line: std::fmt::Arguments) {
        let _ = writeln!(self.tried, "  - {line}");
    }

    /// `root` probed as a CUDA root, noted when it does not do.
    fn root(&mut self, name: &str, root: &Path) -> Option<Cuda> {
        probe(root, self.target_arch, self.mode, name)
            .inspect_err(|why| self.note(format_args!("{name}: {} ({why})", root.display())))
            .ok()
    }
}

/// `dir` as a toolkit or wheel root, or as a site-packages folder holding one of the wheels. When a
/// wheel is there but unusable, its reason is the one reported (it is the more specific).
fn probe_any_layout(dir: &Path, target_arch: &str, mode: Mode, name: &str) -> Result<Cuda, String> {
    let as_root = probe(dir, target_arch, mode, name);
    let Err(mut why) = as_root else {
        return as_root;
    };
    for wheel in WHEEL_DIRS.iter().map(|wheel| dir.join(wheel)) {
        if wheel.is_dir() {
            match probe(&wheel, target_arch, mode, name) {
                Ok(cuda) => return Ok(cuda),
                Err(wheel_why) => why = format!("{}: {wheel_why}", wheel.display()),
            }
        }
    }
    Err(why)
}

/// `root` holds a CUDA runtime when it has the header, of a version this crate supports, its crt/
/// headers and the library that `mode` links.
fn probe(root: &Path, target_arch: &str, mode: Mode, name: &str) -> Result<Cuda, String> {
    if !root.is_dir() {
        return Err("does not exist".into());
    }
    // Folders are passed on joined like PATH (DEP_CUDART_INCLUDE_PATH) and in an rpath.
    if root.to_string_lossy().contains(':') {
        return Err(
            "its path contains ':', which cannot be passed on in DEP_CUDART_INCLUDE_PATH \
             or an rpath; use a path without ':' (a symlink will do)"
                .into(),
        );
    }
    // A toolkit keeps each target's files under targets/: x86_64-linux, and sbsa-linux (servers)
    // or aarch64-linux (Jetson) for aarch64.
    let target_dirs: Vec<PathBuf> = match target_arch {
        "aarch64" => vec!["sbsa-linux".into(), "aarch64-linux".into()],
        arch => vec![format!("{arch}-linux")],
    }
    .into_iter()
    .map(|name| root.join("targets").join(name))
    .collect();
    let include = std::iter::once(root.join("include"))
        .chain(target_dirs.iter().map(|dir| dir.join("include")))
        .find(|dir| dir.join("cuda_runtime_api.h").is_file())
        .ok_or("no include/cuda_runtime_api.h")?;
    let version = header_version(&include.join("cuda_runtime_api.h"))?;
    if version < MIN_CUDART_VERSION {
        return Err(format!(
            "its headers are CUDA {} (CUDART_VERSION {version}); cuda-event-sys needs CUDA {} or newer",
            version_text(version),
            version_text(MIN_CUDART_VERSION)
        ));
    }
    // cuda_runtime_api.h includes crt/host_defines.h, which a wheel layout may keep elsewhere.
    let crt_include = [include.clone(), root.join("../cuda_nvcc/include")]
        .into_iter()
        .find(|dir| dir.join("crt/host_defines.h").is_file())
        .ok_or_else(|| {
            let wheel = match version / 1000 {
                12 => "nvidia-cuda-nvcc-cu12",
                _ => "nvidia-cuda-crt",
            };
            format!(
                "no crt/host_defines.h beside cuda_runtime_api.h (from a wheel: \
                 pip install {wheel}=={}.*)",
                version_text(version)
            )
        })?;
    let mut include_path = vec![include.clone()];
    if crt_include != include {
        include_path.push(crt_include);
    }
    // A toolkit's lib64/ and lib/ are its host's: cross-building, the target's folder comes first,
    // so that the host's library is not linked into another architecture's binary.
    let host_libs = [root.join("lib64"), root.join("lib")];
    let target_libs = target_dirs.iter().map(|dir| dir.join("lib"));
    let host_arch = std::env::var("HOST").ok();
    let cross = host_arch.is_some_and(|host| !host.starts_with(&format!("{target_arch}-")));
    let lib_dirs: Vec<PathBuf> = match cross {
        true => target_libs.chain(host_libs).collect(),
        false => host_libs.into_iter().chain(target_libs).collect(),
    };
    let lib_dir = lib_dirs
        .into_iter()
        .find(|dir| mode.library_in(dir).is_some())
        .ok_or_else(|| format!("no {} in lib64/, lib/ or targets/*/lib/", mode.library_file()))?;
    Ok(Cuda {
        root: root.to_path_buf(),
        include,
        include_path,
        lib_dir,
        version,
        found_by: name.to_string(),
    })
}

/// `13000` as `"13.0"`.
pub(crate) fn version_text(version: u32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
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
    let path = env::path_untracked()?;
    let nvcc = std::env::split_paths(&path)
        .map(|dir| dir.join("nvcc"))
        .find(|nvcc| nvcc.is_file())?;
    let nvcc = nvcc.canonicalize().unwrap_or(nvcc);
    Some(nvcc.parent()?.parent()?.to_path_buf())
}

/// Where a site-packages folder came from, for messages, and whether `PATH` chose it.
pub(crate) struct Origin {
    name: &'static str,
    on_path: bool,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The site-packages folders to look for CUDA wheels in, each with where it came from: the active
/// virtualenv, the active conda env, then those of `python3` on PATH (system and user).
pub(crate) fn site_packages_dirs() -> Vec<(Origin, PathBuf)> {
    let mut dirs = Vec::new();
    for (var, name) in [("VIRTUAL_ENV", "$VIRTUAL_ENV"), ("CONDA_PREFIX", "$CONDA_PREFIX")] {
        if let Some(prefix) = env::var(var) {
            let lib = PathBuf::from(prefix).join("lib");
            let pythons = std::fs::read_dir(&lib).into_iter().flatten().flatten();
            for entry in pythons.filter(|e| e.file_name().to_string_lossy().starts_with("python")) {
                let origin = Origin { name, on_path: false };
                dirs.push((origin, entry.path().join("site-packages")));
            }
        }
    }
    let python_sites =
        "import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    // python3 is looked up on PATH by the OS; PATH is tracked only if its wheel is used.
    if let Ok(output) = Command::new("python3").args(["-c", python_sites]).output() {
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let origin = Origin {
                name: "python3's site-packages",
                on_path: true,
            };
            dirs.push((origin, PathBuf::from(line.trim())));
        }
    }
    dirs
}
