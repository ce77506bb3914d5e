//! The kernels the tests launch, as PTX: compiled by the driver for the GPU at hand (no nvcc
//! needed). Each is launched with one block of one thread.

use std::ffi::CStr;

/// A kernel's PTX, NUL-terminated for `cuModuleLoadData`, and the name of its entry.
#[derive(Debug, Clone, Copy)]
pub struct Ptx {
    pub text: &'static CStr,
    pub entry: &'static CStr,
}

/// A kernel of known length: it busy-spins on the GPU's nanosecond global timer (`%globaltimer`)
/// until its one parameter, a `u64` of nanoseconds, has passed since its first read. It reads the
/// timer in a tight loop, with no `nanosleep` between reads, so it ends within one pass of the loop
/// after the target: the kernel for checks of a length within 1%. It keeps its SM's warp busy all
/// along. For any GPU since sm_70. The `known_lengths` example times it, and prints it with `--ptx`
/// for bench/graph_validation.py.
pub const SPIN_KERNEL: Ptx = Ptx {
    text: c".version 7.0
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
",
    entry: c"spin_kernel",
};

/// A kernel that waits on the GPU's global timer, sleeping between reads, until its first parameter
/// (nanoseconds) has passed; then, unless its second (a device address) is 0, stores 1 there. It
/// holds a stream without a host function (CUDA runs every host function of a context on one
/// thread, so a host function that waits would hold back the others too). For any GPU since sm_70.
pub(crate) const SLEEP_KERNEL: Ptx = Ptx {
    text: c".version 7.0
.target sm_70
.address_size 64
.visible .entry sleep_kernel(.param .u64 ns, .param .u64 flag)
{
    .reg .u64 %d, %now, %end, %f;
    .reg .u32 %one;
    .reg .pred %p;
    ld.param.u64 %d, [ns];
    ld.param.u64 %f, [flag];
    mov.u64 %now, %globaltimer;
    add.u64 %end, %now, %d;
WAIT:
    nanosleep.u32 1000;
    mov.u64 %now, %globaltimer;
    setp.lt.u64 %p, %now, %end;
    @%p bra WAIT;
    setp.eq.u64 %p, %f, 0;
    @%p bra DONE;
    mov.u32 %one, 1;
    st.volatile.u32 [%f], %one;
    membar.sys;
DONE:
    ret;
}
",
    entry: c"sleep_kernel",
};

/// A kernel that executes `trap;`: it kills its context with a sticky error. For any GPU since
/// sm_50.
pub(crate) const TRAP_KERNEL: Ptx = Ptx {
    text: c".version 7.0
.target sm_50
.address_size 64
.visible .entry trap_kernel()
{
    trap;
}
",
    entry: c"trap_kernel",
};
