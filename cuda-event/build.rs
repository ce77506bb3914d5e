//! For this package's own examples, tests and benches only (cargo applies link args to no other
//! crate): when libcudart is linked dynamically, they carry an rpath to the folder cuda-event-sys
//! found it in, so `target/debug/examples/quickstart` runs outside cargo. These are the lines a
//! binary crate using cuda-event copies into its own build.rs (see README.md).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |key| std::env::var(format!("DEP_CUDART_{key}"));
    if let (Ok("0"), Ok(lib_dir)) = (var("STATIC").as_deref(), var("LIB_DIR")) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
}
