//! A dependent of cuda-event-sys (as a downstream -sys crate would be) receives `DEP_CUDART_*`, and
//! what it says is true of the CUDA the bindings were built from. (The build script checks the
//! paths, which hold only on the build machine.)

#[test]
fn dependent_receives_every_dep_cudart_key() {
    for (key, value) in [
        ("ROOT", env!("DEP_CUDART_ROOT")),
        ("INCLUDE", env!("DEP_CUDART_INCLUDE")),
        ("INCLUDE_PATH", env!("DEP_CUDART_INCLUDE_PATH")),
        ("LIB_DIR", env!("DEP_CUDART_LIB_DIR")),
        ("VERSION", env!("DEP_CUDART_VERSION")),
        ("STATIC", env!("DEP_CUDART_STATIC")),
        ("BINDINGS", env!("DEP_CUDART_BINDINGS")),
        ("BINDINGS_VERSION", env!("DEP_CUDART_BINDINGS_VERSION")),
    ] {
        assert!(!value.is_empty(), "DEP_CUDART_{key} is empty");
        assert!(
            !value.contains('\n'),
            "DEP_CUDART_{key} is not one value: {value:?}"
        );
    }
}

#[test]
fn dep_cudart_version_is_the_headers_version() {
    let version: u32 = env!("DEP_CUDART_VERSION").parse().unwrap();
    assert_eq!(version, cuda_event_sys::CUDART_VERSION);
    assert!(version >= 12000, "built against CUDA {version}, older than 12.0");
}

/// The bindings come from headers of the CUDA found, or of an earlier minor release of its major
/// (a committed set serving a later one).
#[test]
fn dep_cudart_bindings_version_is_of_the_headers_major_and_not_later() {
    let version: u32 = env!("DEP_CUDART_VERSION").parse().unwrap();
    let bindings: u32 = env!("DEP_CUDART_BINDINGS_VERSION").parse().unwrap();
    assert_eq!(bindings / 1000, version / 1000, "{bindings} for CUDA {version}");
    assert!(bindings <= version, "{bindings} for CUDA {version}");
    match env!("DEP_CUDART_BINDINGS") {
        "bindgen" => assert_eq!(bindings, version),
        "committed" => {}
        other => panic!("DEP_CUDART_BINDINGS is {other:?}"),
    }
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
