//! Compiles c/abi.c against the headers that cuda-event-sys found, read from the `DEP_CUDART_*`
//! metadata a dependent of a `links = "cudart"` crate receives, and passes that metadata on to the
//! tests (`env!("DEP_CUDART_*")`) so they can check it. The paths are checked here, where they are
//! meaningful: the test binaries may run on another machine (the GPU one).

use std::path::Path;

const KEYS: [&str; 8] = [
    "ROOT",
    "INCLUDE",
    "INCLUDE_PATH",
    "LIB_DIR",
    "VERSION",
    "STATIC",
    "BINDINGS",
    "BINDINGS_VERSION",
];

fn main() {
    for key in KEYS {
        let name = format!("DEP_CUDART_{key}");
        let value = std::env::var(&name)
            .unwrap_or_else(|_| panic!("{name} not set: cuda-event-sys must export it (links = \"cudart\")"));
        println!("cargo:rustc-env={name}={value}");
    }
    let include_path = std::env::var_os("DEP_CUDART_INCLUDE_PATH").expect("checked above");
    check_paths(&include_path);
    println!("cargo:rerun-if-changed=c");
    cc::Build::new()
        .file("c/abi.c")
        .file("c/bench.c")
        .file("c/ipc_hold.c")
        .opt_level(2)
        .includes(std::env::split_paths(&include_path))
        .std("c11")
        .warnings(true)
        .warnings_into_errors(true)
        .compile("cuda_event_abi");
}

/// What the paths in `DEP_CUDART_*` promise: the header, the crt/ headers and the linked library.
fn check_paths(include_path: &std::ffi::OsStr) {
    let var = |key: &str| std::env::var(format!("DEP_CUDART_{key}")).expect("checked in main");
    assert!(
        Path::new(&var("ROOT")).is_dir(),
        "DEP_CUDART_ROOT is not a folder"
    );
    let header = Path::new(&var("INCLUDE")).join("cuda_runtime_api.h");
    assert!(header.is_file(), "DEP_CUDART_INCLUDE has no cuda_runtime_api.h");
    let crt = std::env::split_paths(include_path).any(|dir| dir.join("crt/host_defines.h").is_file());
    assert!(crt, "no folder of DEP_CUDART_INCLUDE_PATH has crt/host_defines.h");
    let library = match var("STATIC").as_str() {
        "1" => "libcudart_static.a",
        "0" => "libcudart.so",
        other => panic!("DEP_CUDART_STATIC is {other:?}, expected 1 or 0"),
    };
    let found = std::fs::read_dir(var("LIB_DIR"))
        .expect("DEP_CUDART_LIB_DIR is a folder")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(library));
    assert!(found, "DEP_CUDART_LIB_DIR has no {library}");
}
