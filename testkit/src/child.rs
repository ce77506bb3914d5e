//! A test's work in a child process: this test binary run again for one test in a role (a device
//! reset, a dead context, an importer of an interprocess event), or one of the build's examples.

use crate::deadline::deadline;
use crate::serial::gpu;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// The name of the test function it is written in, as libtest knows it (its path in the test
/// crate): what a test that runs itself again as a child passes to [`run_child`] and the like, so
/// that its name is written once.
#[macro_export]
macro_rules! this_test {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.split_once("::").map_or(path, |(_test_crate, test)| test)
    }};
}

/// The environment variable that tells a test binary re-run as a child which part to play.
pub const ROLE: &str = "CUDA_EVENT_TEST_ROLE";

/// The environment variable naming the emulator that test binaries run under (qemu-aarch64 for a
/// cross-built test run), which their child processes then run under too.
pub const RUNNER: &str = "CUDA_EVENT_TEST_RUNNER";

/// The role this process plays, if it is a child; a child also gets a deadline.
pub fn role() -> Option<String> {
    let role = std::env::var(ROLE).ok()?;
    std::mem::forget(deadline(&format!("child ({role})")));
    Some(role)
}

/// Re-runs this test binary as a child that runs only `test`, with `role` and extra environment.
/// Its stdout is piped to the parent; its stderr goes to the parent's.
pub fn spawn_child(test: &str, role: &str, envs: &[(&str, &str)]) -> Child {
    child_command(test, role, envs).spawn().unwrap()
}

/// The command of [`spawn_child`], for a caller that changes its stdio before spawning.
pub fn child_command(test: &str, role: &str, envs: &[(&str, &str)]) -> Command {
    let exe = std::env::current_exe().unwrap();
    // A binary of another architecture runs through the emulator that runs this one (ci/test's
    // aarch64 step sets both): the kernel cannot start it by itself.
    let mut command = match std::env::var_os(RUNNER) {
        Some(runner) => {
            let mut command = Command::new(runner);
            command.arg(exe);
            command
        }
        None => Command::new(exe),
    };
    command
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// For a test whose body runs in a child process of its own (a device reset, a dead context):
/// in the parent, runs the child as `role` under [`gpu`] and returns `None`; in the child, returns
/// `Some(())` so that the body runs. The child's stdout is printed by the parent.
pub fn in_a_child(test: &str, role: &str) -> Option<()> {
    if self::role().as_deref() == Some(role) {
        return Some(());
    }
    let _gpu = gpu();
    print!("{}", String::from_utf8_lossy(&run_child(test, role, &[]).stdout));
    None
}

/// Runs a child (see [`spawn_child`]) to completion and checks that it passed.
pub fn run_child(test: &str, role: &str, envs: &[(&str, &str)]) -> Output {
    let output = spawn_child(test, role, envs).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child {test} ({role}) failed ({}):\n{text}",
        output.status
    );
    assert!(
        text.contains("running 1 test"),
        "the child ran no test named {test} ({role}):\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "child {test} ({role}) did not run its test:\n{text}"
    );
    output
}

/// The example `name` of this build, for a test that runs it as a user would: beside the test
/// binary in `examples/` (as `ci/stage-gpu` lays them out) or in cargo's target folder, one level
/// up from the test binary's `deps/`. `cargo test` builds the examples with the tests.
pub fn example_binary(name: &str) -> PathBuf {
    let test_binary = std::env::current_exe().unwrap();
    let here = test_binary.parent().unwrap();
    let found = [here.join("examples"), here.join("../examples")]
        .into_iter()
        .map(|folder| folder.join(name))
        .find(|path| path.is_file());
    found.unwrap_or_else(|| panic!("no example {name} beside {} (build the examples)", here.display()))
}

/// Runs the example `name` ([`example_binary`]) as a user would, prints its stdout, checks that it
/// exited with success and returns its stdout.
pub fn run_example(name: &str) -> String {
    let example = example_binary(name);
    let out = std::process::Command::new(&example).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{} failed ({}): {}",
        example.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
