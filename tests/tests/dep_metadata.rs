//! A dependent of cuda-event-sys (as a downstream -sys crate would be) receives `DEP_CUDART_*`, and
//! what it says is true of the CUDA the bindings were built from.

use std::path::Path;

#[test]
fn dependent_receives_every_dep_cudart_key() {
    for (key, value) in [
        ("ROOT", env!("DEP_CUDART_ROOT")),
        ("INCLUDE", env!("DEP_CUDART_INCLUDE")),
        ("INCLUDE_PATH", env!("DEP_CUDART_INCLUDE_PATH")),
        ("LIB_DIR", env!("DEP_CUDART_LIB_DIR")),
        ("VERSION", env!("DEP_CUDART_VERSION")),
        ("STATIC", env!("DEP_CUDART_STATIC")),
    ] {
        assert!(!value.is_empty(), "DEP_CUDART_{key} is empty");
    }
}

#[test]
fn dep_cudart_paths_hold_the_headers_and_library() {
    assert!(Path::new(env!("DEP_CUDART_ROOT")).is_dir());
    assert!(
        Path::new(env!("DEP_CUDART_INCLUDE"))
            .join("cuda_runtime_api.h")
            .is_file()
    );
    let crt = std::env::split_paths(env!("DEP_CUDART_INCLUDE_PATH"))
        .any(|dir| dir.join("crt/host_defines.h").is_file());
    assert!(
        crt,
        "no folder of DEP_CUDART_INCLUDE_PATH has crt/host_defines.h"
    );
    let lib_dir = Path::new(env!("DEP_CUDART_LIB_DIR"));
    let has = |prefix: &str| {
        std::fs::read_dir(lib_dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
    };
    match env!("DEP_CUDART_STATIC") {
        "1" => assert!(has("libcudart_static.a")),
        "0" => assert!(has("libcudart.so")),
        other => panic!("DEP_CUDART_STATIC is {other:?}, expected 1 or 0"),
    }
}

#[test]
fn dep_cudart_version_is_the_headers_version() {
    let version: u32 = env!("DEP_CUDART_VERSION").parse().unwrap();
    assert_eq!(version, cuda_event_sys::CUDART_VERSION);
}

#[test]
fn link_mode_matches_dep_cudart_static() {
    let mut runtime = 0;
    // SAFETY: writes one int through a pointer to a live local; needs no driver.
    let code = unsafe { cuda_event_sys::cudaRuntimeGetVersion(&mut runtime) };
    assert_eq!(code, cuda_event_sys::cudaError::cudaSuccess);
    assert_eq!(runtime as u32 / 1000, cuda_event_sys::CUDART_VERSION / 1000);
    // A dynamically linked runtime is a mapped libcudart.so; a static one is part of this binary.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mapped = maps.contains("libcudart.so");
    assert_eq!(
        mapped,
        env!("DEP_CUDART_STATIC") == "0",
        "libcudart.so mapped: {mapped}"
    );
}
