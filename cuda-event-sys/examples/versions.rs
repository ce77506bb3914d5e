//! Prints the CUDA runtime and driver versions and the device count, through the raw bindings.
//! Without a driver it exits with status 1 and one line saying so; without a GPU, one line naming
//! the CUDA error.

use cuda_event_sys as sys;
use std::ffi::CStr;

fn main() {
    if let Err(message) = run() {
        eprintln!("versions: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let (mut runtime, mut driver, mut devices) = (0, 0, 0);
    // SAFETY: each call writes one int through a pointer to a live local.
    unsafe {
        check("cudaRuntimeGetVersion", sys::cudaRuntimeGetVersion(&mut runtime))?;
        check("cudaDriverGetVersion", sys::cudaDriverGetVersion(&mut driver))?;
    }
    println!(
        "CUDA runtime {} (headers {}), found by: {}",
        version(runtime),
        version(sys::CUDART_VERSION as i32),
        sys::CUDA_FOUND_BY
    );
    // cudaDriverGetVersion succeeds with 0 when no driver is installed; every later call would fail
    // with "driver version is insufficient", which is not the reason.
    if driver == 0 {
        return Err(
            "no CUDA driver found (cudaDriverGetVersion reports none): this machine has no NVIDIA driver installed"
                .into(),
        );
    }
    println!("CUDA driver supports up to {}", version(driver));
    // SAFETY: writes one int through a pointer to a live local.
    check("cudaGetDeviceCount", unsafe {
        sys::cudaGetDeviceCount(&mut devices)
    })?;
    println!("{devices} CUDA device(s)");
    Ok(())
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

fn check(call: &str, code: sys::cudaError_t) -> Result<(), String> {
    if code == sys::cudaError::cudaSuccess {
        return Ok(());
    }
    // SAFETY: cudaGetErrorName/String return pointers to static NUL-terminated strings for any code.
    let (name, text) = unsafe {
        (
            CStr::from_ptr(sys::cudaGetErrorName(code)),
            CStr::from_ptr(sys::cudaGetErrorString(code)),
        )
    };
    Err(format!(
        "{call} failed: {} ({}): {}",
        name.to_string_lossy(),
        code.0,
        text.to_string_lossy()
    ))
}
