//! The kernels the tests launch, as PTX: compiled by the driver for the GPU at hand (no nvcc
//! needed). Each is launched with one block of one thread.

use std::ffi::CStr;

/// A kernel's PTX, NUL-terminated for `cuModuleLoadData`, and the name of its entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ptx {
    pub(crate) text: &'static CStr,
    pub(crate) entry: &'static CStr,
}

/// The busy-spinning kernel of known length that the `known_lengths` example ships, one file for
/// both (the path is inside the package's examples, so the example builds from the package).
#[path = "../../cuda-event/examples/support/spin_kernel.rs"]
mod spin_kernel;

/// The spin kernel (see its file): its one parameter is the length in nanoseconds, a `u64`.
pub(crate) const SPIN_KERNEL: Ptx = Ptx {
    text: spin_kernel::SPIN_PTX,
    entry: spin_kernel::SPIN_KERNEL,
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
