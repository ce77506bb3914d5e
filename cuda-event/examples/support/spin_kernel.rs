//! A kernel of known length: it busy-spins on the GPU's nanosecond global timer (`%globaltimer`)
//! until the given number of nanoseconds has passed since its first read. It reads the timer in a
//! tight loop, with no `nanosleep` between reads, so it ends within one pass of the loop after the
//! target: the kernel for checks of a length within 1%. It keeps its SM's warp busy all along.
//! PTX for any GPU since sm_70, compiled by the driver (no nvcc needed). Launch it with one block
//! of one thread.
//!
//! One file for the `known_lengths` example (which prints this PTX with `--ptx`, for
//! bench/graph_validation.py) and the workspace's test kit (`gpu_spin`), which includes it by path.

use std::ffi::CStr;

/// The kernel's PTX, NUL-terminated for `cuModuleLoadData`.
pub(crate) const SPIN_PTX: &CStr = c".version 7.0
.target sm_70
.address_size 64
.visible .entry spin_kernel(.param .u64 ns)
{
    .reg .u64 %d, %now, %end;
    .reg .pred %p;
    ld.param.u64 %d, [ns];
    mov.u64 %now, %globaltimer;
    add.u64 %end, %now, %d;
SPIN:
    mov.u64 %now, %globaltimer;
    setp.lt.u64 %p, %now, %end;
    @%p bra SPIN;
    ret;
}
";

/// The kernel's name in [`SPIN_PTX`]. Its one parameter is the length in nanoseconds, a `u64`.
pub(crate) const SPIN_KERNEL: &CStr = c"spin_kernel";
