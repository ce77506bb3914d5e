//! Compiles c/abi.c against the headers that cuda-event-sys found, read from the `DEP_CUDART_*`
//! metadata a dependent of a `links = "cudart"` crate receives, and passes that metadata on to the
//! tests (`env!("DEP_CUDART_*")`) so they can check it.

const KEYS: [&str; 6] = [
    "ROOT",
    "INCLUDE",
    "INCLUDE_PATH",
    "LIB_DIR",
    "VERSION",
    "STATIC",
];

fn main() {
    for key in KEYS {
        let name = format!("DEP_CUDART_{key}");
        let value = std::env::var(&name).unwrap_or_else(|_| {
            panic!("{name} not set: cuda-event-sys must export it (links = \"cudart\")")
        });
        println!("cargo:rustc-env={name}={value}");
    }
    let include_path = std::env::var_os("DEP_CUDART_INCLUDE_PATH").expect("checked above");
    println!("cargo:rerun-if-changed=c/abi.c");
    cc::Build::new()
        .file("c/abi.c")
        .includes(std::env::split_paths(&include_path))
        .std("c11")
        .warnings(true)
        .warnings_into_errors(true)
        .compile("cuda_event_abi");
}
