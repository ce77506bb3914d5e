//! The build script's messages and warnings, each from a real `cargo build` of cuda-event-sys as a
//! dependency of a crate in a temporary folder outside this workspace, the way a crates.io user
//! builds it (no `.cargo/config.toml` of this workspace, so no provisioned folder and no
//! `ci/provision` advice). The CUDA used is the one this workspace was built with
//! (`DEP_CUDART_*`); the broken CUDAs are folders made from it.
//!
//! These need cargo, so they run only when cargo runs them (not among the staged binaries on the
//! GPU machine, which has no toolchain); they share one target dir and run one at a time, so only the
//! build script reruns between them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One build at a time: each test's builds see only their own environment in the fingerprints.
static ONE_BUILD_AT_A_TIME: Mutex<()> = Mutex::new(());

const SYS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cuda-event-sys");
const LOCKFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A crate in a fresh temporary folder that depends on cuda-event-sys (with `features`).
struct Consumer {
    dir: Scratch,
    target_dir: PathBuf,
}

impl Consumer {
    fn new(name: &str, features: &[&str]) -> Consumer {
        let dir = scratch(&format!("consumer-{name}"));
        let features: Vec<String> = features.iter().map(|f| format!("{f:?}")).collect();
        let manifest = format!(
            "[package]\nname = \"consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ncuda-event-sys = {{ path = {SYS_DIR:?}, features = [{}] }}\n",
            features.join(", ")
        );
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "pub use cuda_event_sys as sys;\n").unwrap();
        // The workspace's versions, all already downloaded: the builds run offline.
        std::fs::copy(LOCKFILE, dir.join("Cargo.lock")).unwrap();
        Consumer {
            dir,
            target_dir: shared_target_dir(),
        }
    }

    /// Builds in `target_dir` instead of the shared one.
    fn in_target_dir(self, target_dir: PathBuf) -> Consumer {
        Consumer { target_dir, ..self }
    }

    /// `cargo build -v` with only `envs` (and what cargo itself needs) in the environment.
    fn build(&self, envs: &[(&str, OsString)]) -> Build {
        let cargo = std::env::var_os("CARGO").expect("run by cargo");
        let toolchain = Path::new(&cargo).parent().unwrap();
        let mut command = Command::new(&cargo);
        command
            .args(["build", "-v", "--offline"])
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", search_path(&[toolchain]))
            .env("CARGO_TARGET_DIR", &self.target_dir);
        for var in ["HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"] {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        command.envs(envs.iter().map(|(k, v)| (k, v)));
        let out = command.output().unwrap();
        Build {
            ok: out.status.success(),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

struct Build {
    ok: bool,
    log: String,
}

impl Build {
    fn failed_saying(&self, words: &[&str]) {
        assert!(!self.ok, "the build succeeded:\n{}", self.log);
        self.says(words);
        for never in ["panicked", "RUST_BACKTRACE"] {
            assert!(!self.log.contains(never), "{never} in:\n{}", self.log);
        }
    }

    fn succeeded_saying(&self, words: &[&str]) {
        assert!(self.ok, "the build failed:\n{}", self.log);
        self.says(words);
    }

    fn says(&self, words: &[&str]) {
        for word in words {
            assert!(self.log.contains(word), "{word:?} not in:\n{}", self.log);
        }
    }

    /// Whether cuda-event-sys's build script ran (or was fresh) in this build.
    fn ran_build_script(&self) -> bool {
        self.log
            .lines()
            .any(|l| l.contains("Running") && l.contains("cuda-event-sys") && l.contains("/build-script-"))
    }
}

/// A new empty folder outside this workspace (so its `.cargo/config.toml` does not apply),
/// removed with everything in it when the test is done with it: the suite leaves nothing in the
/// system's temporary folder (`cpu_tests_leave_nothing_in_the_temporary_folder` checks).
fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("cuda-event-build-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A [`scratch`] folder, removed on drop.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn shared_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("build-messages")
}

/// An empty folder for LIBCLANG_PATH, where no libclang loads: the same path in every build and
/// every run, since bindgen's build script reruns, and bindgen and cuda-event-sys's build script
/// then compile again, whenever LIBCLANG_PATH changes. Beside the shared target dir (not in the
/// system's temporary folder, where it would be left behind).
fn no_libclang_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("build-messages-no-libclang");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dirs`, then the system's own program folders.
fn search_path(dirs: &[&Path]) -> OsString {
    let system = [Path::new("/usr/bin"), Path::new("/bin")];
    std::env::join_paths(dirs.iter().chain(system.iter())).unwrap()
}

/// The root of the CUDA this workspace was built with.
fn real_cuda() -> OsString {
    env!("DEP_CUDART_ROOT").into()
}

fn real_version() -> u32 {
    env!("DEP_CUDART_VERSION").parse().unwrap()
}

/// A folder with a copy of the real CUDA's include/ (and its crt/ when `with_crt`) and its lib/,
/// the real `CUDART_VERSION` replaced by `version`.
fn cuda_copy(at: &Path, version: u32, with_crt: bool) {
    let include = at.join("include");
    std::fs::create_dir_all(&include).unwrap();
    for dir in std::env::split_paths(env!("DEP_CUDART_INCLUDE_PATH")) {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = entry.file_name();
            if (name == "crt" && !with_crt) || include.join(&name).exists() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), include.join(&name)).unwrap();
        }
    }
    let header = include.join("cuda_runtime_api.h");
    let text = std::fs::read_to_string(&header).unwrap();
    let real = format!("#define CUDART_VERSION  {}", real_version());
    assert!(text.contains(&real), "no `{real}` in {}", header.display());
    std::fs::remove_file(&header).unwrap();
    std::fs::write(
        &header,
        text.replace(&real, &format!("#define CUDART_VERSION  {version}")),
    )
    .unwrap();
    std::os::unix::fs::symlink(env!("DEP_CUDART_LIB_DIR"), at.join("lib")).unwrap();
}

/// Whether a usual toolkit folder exists: the search finds it before the steps some tests need.
fn toolkit_folder_exists() -> bool {
    ["/usr/local/cuda", "/opt/cuda"]
        .iter()
        .any(|d| Path::new(d).exists())
}

/// Where a pip install puts the runtime wheel of the real CUDA's major under site-packages.
fn wheel_dir() -> &'static str {
    match real_version() / 1000 {
        12 => "nvidia/cuda_runtime",
        _ => "nvidia/cu13",
    }
}

/// Tests that need cargo skip (saying so) when it did not run them: the GPU machine runs the
/// staged binaries without a toolchain.
fn under_cargo() -> Option<std::sync::MutexGuard<'static, ()>> {
    if std::env::var_os("CARGO").is_none() {
        println!("skipped: not run by cargo, and these tests build with it");
        return None;
    }
    Some(ONE_BUILD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}

#[test]
fn no_cuda_outside_the_workspace_names_fixes_a_user_can_act_on() {
    let Some(_one) = under_cargo() else { return };
    if toolkit_folder_exists() {
        println!("skipped: this machine has a CUDA toolkit where the search finds it");
        return;
    }
    let build = Consumer::new("no-cuda", &[]).build(&[]);
    build.failed_saying(&[
        &format!(
            "cuda-event-sys {VERSION} (building for x86_64-unknown-linux-gnu on x86_64-unknown-linux-gnu)"
        ),
        "no CUDA runtime found",
        "$CUDA_PATH, $CUDA_HOME, $CUDA_ROOT, $CUDA_TOOLKIT_ROOT_DIR: not set",
        "no nvcc on PATH",
        "CUDA_PATH=/usr/local/cuda-13.0 cargo build",
        "pip install 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*'",
        "CUDA_EVENT_SYS_CUDA_DIR=",
    ]);
    assert!(
        !build.log.contains("ci/provision"),
        "repository advice outside it:\n{}",
        build.log
    );
}

#[test]
fn the_default_build_uses_the_committed_bindings_and_compiles_no_bindgen() {
    let Some(_one) = under_cargo() else { return };
    let nowhere = no_libclang_dir();
    let build = Consumer::new("default", &[]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("LIBCLANG_PATH", nowhere.as_os_str().into()),
    ]);
    build.succeeded_saying(&[]);
    // `cargo build -v` names every crate it compiles or finds fresh; bindgen's own crates are not
    // among them, even though the shared target dir holds them from the feature's builds.
    for crate_name in [" bindgen v", " clang-sys v"] {
        assert!(
            !build.log.lines().any(|line| line.contains(crate_name)),
            "{crate_name} in the default build:\n{}",
            build.log
        );
    }
    assert!(
        !build.log.contains("no libclang"),
        "the default build looked for libclang:\n{}",
        build.log
    );
}

#[test]
fn no_libclang_with_the_bindgen_feature_builds_with_the_bindings_committed_for_the_cuda_found() {
    let Some(_one) = under_cargo() else { return };
    let nowhere = no_libclang_dir();
    let version = format!("{}.{}", real_version() / 1000, real_version() % 1000 / 10);
    let build = Consumer::new("no-libclang", &["bindgen"]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("LIBCLANG_PATH", nowhere.as_os_str().into()),
    ]);
    build.succeeded_saying(&[&format!(
        "cuda-event-sys: no libclang: using the bindings committed for CUDA {version}"
    )]);
}

#[test]
fn no_libclang_and_a_cuda_without_committed_bindings_is_one_message_naming_the_fix() {
    let Some(_one) = under_cargo() else { return };
    let nowhere = no_libclang_dir();
    let newer = scratch("cuda-99.1");
    cuda_copy(&newer, 99010, true);
    let build = Consumer::new("no-libclang-newer", &["bindgen"]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", newer.as_os_str().into()),
        ("LIBCLANG_PATH", nowhere.as_os_str().into()),
    ]);
    build.failed_saying(&[
        "bindgen cannot load libclang",
        "apt-get install libclang-dev",
        "LIBCLANG_PATH",
        "bindings committed for CUDA 12.8, 12.9, 13.0 and 13.5",
        "the headers found are CUDA 99.1 (CUDART_VERSION 99010)",
    ]);
}

#[test]
fn a_cuda_of_a_major_without_committed_bindings_names_the_bindgen_feature() {
    let Some(_one) = under_cargo() else { return };
    let newer = scratch("cuda-99.1-default");
    cuda_copy(&newer, 99010, true);
    let build =
        Consumer::new("newer-major", &[]).build(&[("CUDA_EVENT_SYS_CUDA_DIR", newer.as_os_str().into())]);
    build.failed_saying(&[
        "no committed bindings serve the CUDA found, CUDA 99.1 (CUDART_VERSION 99010)",
        "they are for CUDA 12.8, 12.9, 13.0 and 13.5",
        "Enable cuda-event-sys's `bindgen` feature",
    ]);
}

#[test]
fn a_later_minor_release_uses_the_newest_committed_bindings_of_its_major_with_a_warning() {
    let Some(_one) = under_cargo() else { return };
    let nowhere = no_libclang_dir();
    // After a major's newest set, and between two sets of a major. Without bindgen only the
    // headers' version matters, so the real CUDA's headers serve for either major.
    for (version, text, set) in [(13990, "13.99", "13.5"), (13020, "13.2", "13.0")] {
        let later = scratch(&format!("cuda-{text}"));
        cuda_copy(&later, version, true);
        let consumer = Consumer::new(&format!("later-{text}"), &[]);
        // The crate says the headers' version, not the set's, as DEP_CUDART_VERSION does.
        std::fs::write(
            consumer.dir.join("src/lib.rs"),
            format!("const _: () = assert!(cuda_event_sys::CUDART_VERSION == {version});\n"),
        )
        .unwrap();
        let build = consumer.build(&[
            ("CUDA_EVENT_SYS_CUDA_DIR", later.as_os_str().into()),
            ("LIBCLANG_PATH", nowhere.as_os_str().into()),
        ]);
        build.succeeded_saying(&[&format!(
            "cuda-event-sys: no bindings are committed for CUDA {text}; using CUDA {set}'s"
        )]);
    }
}

#[test]
fn bindgen_asked_for_without_the_feature_names_the_feature() {
    let Some(_one) = under_cargo() else { return };
    let build = Consumer::new("bindgen-no-feature", &[]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("CUDA_EVENT_SYS_BINDINGS", "bindgen".into()),
    ]);
    build.failed_saying(&[
        "CUDA_EVENT_SYS_BINDINGS=bindgen, but cuda-event-sys was built without its `bindgen` feature",
        "features = [\"bindgen\"]",
    ]);
}

#[test]
fn bindgen_asked_for_without_libclang_is_one_message_naming_the_fix() {
    let Some(_one) = under_cargo() else { return };
    let nowhere = no_libclang_dir();
    let build = Consumer::new("bindgen-no-libclang", &["bindgen"]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("CUDA_EVENT_SYS_BINDINGS", "bindgen".into()),
        ("LIBCLANG_PATH", nowhere.as_os_str().into()),
    ]);
    build.failed_saying(&[
        "bindgen cannot load libclang",
        "apt-get install libclang-dev",
        "LIBCLANG_PATH",
    ]);
}

#[test]
fn headers_older_than_cuda_12_8_name_the_version_found_and_the_minimum() {
    let Some(_one) = under_cargo() else { return };
    let old = scratch("cuda-12.6");
    cuda_copy(&old, 12060, true);
    let build = Consumer::new("old-cuda", &[]).build(&[("CUDA_EVENT_SYS_CUDA_DIR", old.as_os_str().into())]);
    build.failed_saying(&[
        "its headers are CUDA 12.6 (CUDART_VERSION 12060)",
        "needs CUDA 12.8 or newer",
    ]);
}

#[test]
fn a_cuda_path_without_cuda_warns_and_the_search_goes_on() {
    let Some(_one) = under_cargo() else { return };
    let empty = scratch("empty-cuda-path");
    let build = Consumer::new("bad-cuda-path", &[]).build(&[
        ("CUDA_PATH", empty.as_os_str().into()),
        ("CUDA_HOME", real_cuda()),
    ]);
    build.succeeded_saying(&[&format!(
        "warning: cuda-event-sys@{VERSION}: cuda-event-sys: ignoring CUDA_PATH={}: no include/cuda_runtime_api.h; searching on",
        empty.display()
    )]);
}

#[test]
fn the_dynamic_feature_overridden_by_cuda_event_sys_link_warns() {
    let Some(_one) = under_cargo() else { return };
    let build = Consumer::new("overridden", &["dynamic"]).build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("CUDA_EVENT_SYS_LINK", "static".into()),
    ]);
    build.succeeded_saying(&["CUDA_EVENT_SYS_LINK=static overrides the `dynamic` feature"]);
}

#[test]
fn a_wheel_without_its_crt_headers_names_the_wheel_to_install_wherever_it_is_found() {
    let Some(_one) = under_cargo() else { return };
    let (major, minor) = (real_version() / 1000, real_version() % 1000 / 10);
    let install = match major {
        12 => format!("pip install nvidia-cuda-nvcc-cu12=={major}.{minor}.*"),
        _ => format!("pip install nvidia-cuda-crt=={major}.{minor}.*"),
    };
    let venv = scratch("venv-without-crt");
    let site = venv.join("lib/python3.11/site-packages");
    cuda_copy(&site.join(wheel_dir()), real_version(), false);

    // named as a site-packages folder
    let consumer = Consumer::new("no-crt", &[]);
    let named = consumer.build(&[("CUDA_EVENT_SYS_CUDA_DIR", site.clone().into())]);
    named.failed_saying(&["no crt/host_defines.h beside cuda_runtime_api.h", &install]);
    // found in the active virtualenv
    if !toolkit_folder_exists() {
        let found = consumer.build(&[("VIRTUAL_ENV", venv.as_os_str().into())]);
        found.failed_saying(&["CUDA runtime wheel in $VIRTUAL_ENV", &install]);
    }
}

#[test]
fn a_colon_in_the_cuda_path_is_a_clear_error() {
    let Some(_one) = under_cargo() else { return };
    let colon_dir = scratch("colon");
    let colon = colon_dir.join("cuda:13");
    std::os::unix::fs::symlink(env!("DEP_CUDART_ROOT"), &colon).unwrap();
    let build = Consumer::new("colon", &[]).build(&[("CUDA_EVENT_SYS_CUDA_DIR", colon.into())]);
    build.failed_saying(&["its path contains ':'", "a symlink will do"]);
}

#[test]
fn a_change_of_path_reruns_the_build_script_only_when_nvcc_found_cuda() {
    let Some(_one) = under_cargo() else { return };
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap());
    let toolchain = cargo.parent().unwrap();
    let elsewhere = scratch("elsewhere-on-path");
    let consumer = Consumer::new("path", &[]);

    // CUDA found after the nvcc step was tried: in the active virtualenv.
    let venv = scratch("venv-with-cuda");
    cuda_copy(
        &venv.join("lib/python3.11/site-packages").join(wheel_dir()),
        real_version(),
        true,
    );
    let named = [("VIRTUAL_ENV", venv.as_os_str().to_os_string())];
    let with_path = |dirs: &[&Path], envs: &[(&str, OsString)]| {
        let mut envs = envs.to_vec();
        envs.push(("PATH", search_path(dirs)));
        consumer.build(&envs)
    };
    with_path(&[toolchain], &named).succeeded_saying(&[]);
    let again = with_path(&[toolchain, &*elsewhere], &named);
    again.succeeded_saying(&[]);
    assert!(
        !again.ran_build_script(),
        "PATH changed, CUDA found in a virtualenv: the build script reran:\n{}",
        again.log
    );

    if toolkit_folder_exists() {
        println!("nvcc half skipped: a toolkit folder would be found before nvcc's is checked");
        return;
    }
    // A toolkit found through nvcc on PATH (the folder layout nvcc implies, with the real CUDA in it).
    let toolkit = scratch("nvcc-toolkit");
    cuda_copy(&toolkit, real_version(), true);
    std::fs::create_dir_all(toolkit.join("bin")).unwrap();
    std::fs::write(toolkit.join("bin/nvcc"), "#!/bin/sh\nexit 1\n").unwrap();
    let bin = toolkit.join("bin");
    let first = with_path(&[toolchain, &bin], &[]);
    first.succeeded_saying(&[]);
    let moved = with_path(&[toolchain, &bin, &*elsewhere], &[]);
    moved.succeeded_saying(&[]);
    assert!(
        moved.ran_build_script(),
        "PATH changed, nvcc found CUDA: no rerun:\n{}",
        moved.log
    );
}

#[test]
fn a_pip_libclang_wheel_without_resource_headers_builds_with_the_c_compilers() {
    let Some(_one) = under_cargo() else { return };
    // Where ci/provision unpacks PyPI's libclang wheel (which ships no stddef.h or limits.h).
    let wheel = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda/libclang/clang/native");
    if !wheel.join("libclang.so").is_file() {
        println!("skipped: no libclang wheel in .cuda/libclang (ci/provision unpacks it)");
        return;
    }
    // A target dir of its own: the other builds' LIBCLANG_PATH (`no_libclang_dir`) stays the
    // shared dir's, so that neither recompiles bindgen for the other.
    let target_dir = shared_target_dir().with_extension("pip-libclang");
    let consumer = Consumer::new("pip-libclang", &["bindgen"]).in_target_dir(target_dir.clone());
    let build = consumer.build(&[
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("LIBCLANG_PATH", wheel.into()),
    ]);
    build.succeeded_saying(&[]);
    // The build script's output of this build: the newest of its runs in its target dir.
    let output = std::fs::read_dir(target_dir.join("debug/build"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("cuda-event-sys-"))
        .map(|e| e.path().join("output"))
        .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
        .max()
        .expect("a build script output");
    let out = std::fs::read_to_string(output.1).unwrap();
    assert!(
        out.contains("libclang has no resource headers of its own; using"),
        "the C compiler's headers were not used:\n{out}"
    );
}

#[test]
fn dynamic_linking_from_a_folder_the_loader_does_not_search_warns_about_the_run_path() {
    let Some(_one) = under_cargo() else { return };
    let consumer = Consumer::new("dynamic-no-rpath", &[]);
    let envs = [
        ("CUDA_EVENT_SYS_CUDA_DIR", real_cuda()),
        ("CUDA_EVENT_SYS_LINK", "dynamic".into()),
    ];
    let warned = consumer.build(&envs);
    warned.succeeded_saying(&[
        "which the loader does not search",
        "-Wl,-rpath",
        "LD_LIBRARY_PATH",
    ]);
    let mut envs = envs.to_vec();
    envs.push(("CUDA_EVENT_SYS_RPATH_WARNING", "0".into()));
    let silenced = consumer.build(&envs);
    assert!(
        silenced.ok && !silenced.log.contains("does not search"),
        "CUDA_EVENT_SYS_RPATH_WARNING=0 did not silence it:\n{}",
        silenced.log
    );
}

/// The build tests' folders in the system's temporary folder go when the tests are done with
/// them (`ci/test`'s test step also checks that the whole suite leaves nothing there).
#[test]
fn cpu_tests_leave_nothing_in_the_temporary_folder() {
    let dir = scratch("cleaned-up");
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    std::fs::write(dir.join("a/b/file"), "x").unwrap();
    let path = dir.to_path_buf();
    drop(dir);
    assert!(!path.exists(), "{} is left behind", path.display());
}
