//! Times kernels of known length with `measure`, gated and in graph mode: a kernel that
//! busy-spins on the GPU's nanosecond timer (`%globaltimer`, no `nanosleep`) for 10 us, 100 us and
//! 1 ms, and for 0 us (it ends at its second read of the timer), loaded once from PTX and launched
//! through the driver (`driver_entry_point`). Prints one JSON object per kernel and mode, with the
//! keys of the quickstart's `--json` rows (`target_us`, the kernel's length, instead of `bytes`
//! and `peak_gb_per_s`), the SM clock read as the quickstart reads it (`--no-sm-clock` leaves its
//! stamps out). A median holds the kernel's length and what lies between the timing
//! events and the kernel's first and last reads of the timer (the GPU starting and ending the
//! kernel): the 0 us kernel's median is that part alone, a larger share of a shorter kernel.
//! Measured with `calibrate`: `net_us` is the median net of an empty kernel's interval.
//! `--ptx` prints the kernel's PTX instead, so that bench/graph_validation.py times the very same
//! kernel with triton. Without a GPU it exits with status 1 and one line naming the CUDA error.
//! The kernel is the test kit's (`gpu_spin` launches it in the tests), so this example is the
//! repository's alone: the published package leaves it out.
//!
//! cargo run --release -p cuda-event --example known_lengths

/// The examples' shared files, in `support/`.
mod support {
    pub(crate) mod json_row;
}

use cuda_event::timing::{MeasureOptions, measure};
use cuda_event::{DeviceGuard, Stream, check_runtime, driver_entry_point, sys};
use cuda_event_testkit::SPIN_KERNEL;
use std::ffi::c_void;
use std::io::Write;
use std::ptr::{NonNull, null_mut};
use std::time::Duration;
use support::json_row;

/// The kernels: each row's name and the kernel's length.
const KERNELS: [(&str, Duration); 4] = [
    ("kernel 0 us", Duration::ZERO),
    ("kernel 10 us", Duration::from_micros(10)),
    ("kernel 100 us", Duration::from_micros(100)),
    ("kernel 1 ms", Duration::from_millis(1)),
];

fn main() {
    let flag = |name: &str| std::env::args().any(|a| a == name);
    if let Err(e) = run(flag("--ptx"), !flag("--no-sm-clock")) {
        eprintln!("known_lengths: {e}");
        std::process::exit(1);
    }
}

/// `ptx`: print the kernel's PTX instead of timing it. `sm_clock`: read the SM clock.
fn run(ptx: bool, sm_clock: bool) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::stdout().lock();
    if ptx {
        out.write_all(SPIN_KERNEL.text.to_bytes())?;
        return Ok(());
    }
    let stream = Stream::new(0)?;
    let kernel = SpinKernel::load(stream.device())?;
    let options = MeasureOptions::default()
        .timeout(Duration::from_secs(5))
        .sm_clock(sm_clock)
        .calibrate(true);
    for (op, length) in KERNELS {
        for (mode, options) in [("gated", options.clone()), ("graph", options.clone().graph(true))] {
            // `measure` runs the work with the stream's device's primary context current, as
            // cuLaunchKernel needs it; in graph mode the launch is captured once and replayed.
            let m = measure(&stream, &options, |s| kernel.launch(s, length))?;
            // The quickstart's keys, with the kernel's length as `target_us`.
            let leading = [
                ("op", format!("\"{op}\"")),
                ("mode", format!("\"{mode}\"")),
                ("target_us", json_row::us(length)),
            ];
            writeln!(out, "{}", json_row::row(&leading, &m, &[]))?;
        }
    }
    Ok(())
}

/// The function type inside a `PFN_*` type of `sys` (an `Option` of an `extern "C" fn`).
trait DriverFunction {
    type Function;
}

impl<F> DriverFunction for Option<F> {
    type Function = F;
}

type LaunchKernel = <sys::PFN_cuLaunchKernel_v4000 as DriverFunction>::Function;

/// The spin kernel, loaded into a device's primary context (for the rest of the process).
struct SpinKernel {
    function: sys::CUfunction,
    launch: LaunchKernel,
}

impl SpinKernel {
    fn load(device: i32) -> cuda_event::Result<SpinKernel> {
        type LoadData = <sys::PFN_cuModuleLoadData_v2000 as DriverFunction>::Function;
        type GetFunction = <sys::PFN_cuModuleGetFunction_v2000 as DriverFunction>::Function;
        let (load, get, launch) = (
            driver_entry_point(c"cuModuleLoadData", 2000)?,
            driver_entry_point(c"cuModuleGetFunction", 2000)?,
            driver_entry_point(c"cuLaunchKernel", 4000)?,
        );
        // SAFETY: each pointer is the driver's function of that symbol at the ABI version that
        // its PFN type names, non-null, so the function itself (the PFN's `Some`).
        let (load, get, launch) = unsafe {
            (
                std::mem::transmute::<NonNull<c_void>, LoadData>(load),
                std::mem::transmute::<NonNull<c_void>, GetFunction>(get),
                std::mem::transmute::<NonNull<c_void>, LaunchKernel>(launch),
            )
        };
        // A module is loaded into the current context: the device's primary context, made
        // current by a runtime call with the device current.
        let _device = DeviceGuard::new(device)?;
        // SAFETY: freeing null frees nothing; it makes the device's primary context current.
        check_runtime("cudaFree", unsafe { sys::cudaFree(null_mut()) })?;
        let (mut module, mut function) = (null_mut(), null_mut());
        // SAFETY: the PTX is NUL-terminated text; the out-pointer is a live local. The module
        // stays loaded for the rest of the process, as long as the kernel may be launched.
        driver("cuModuleLoadData", unsafe {
            load(&mut module, SPIN_KERNEL.text.as_ptr().cast())
        })?;
        // SAFETY: a module loaded above; the name is NUL-terminated; writes a live local.
        driver("cuModuleGetFunction", unsafe {
            get(&mut function, module, SPIN_KERNEL.entry.as_ptr())
        })?;
        Ok(SpinKernel { function, launch })
    }

    /// Queues the kernel, one block of one thread, on `stream` (of the device it was loaded on),
    /// with the stream's device's primary context current (as `measure`'s work runs).
    fn launch(&self, stream: &Stream, length: Duration) -> cuda_event::Result<()> {
        let mut ns = u64::try_from(length.as_nanos()).unwrap_or(u64::MAX);
        let mut params = [(&raw mut ns).cast::<c_void>()];
        // SAFETY: a kernel of the current context, launched on a live stream of its device with
        // the one u64 parameter its PTX declares, which the driver copies before returning.
        driver("cuLaunchKernel", unsafe {
            (self.launch)(
                self.function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.as_raw(),
                params.as_mut_ptr(),
                null_mut(),
            )
        })
    }
}

/// A driver call's code as a `Result`, named by the runtime's table: the runtime numbers the
/// errors these calls return as the driver does.
fn driver(call: &'static str, code: sys::CUresult) -> cuda_event::Result<()> {
    check_runtime(call, sys::cudaError(code.0))
}
