//! The L2 flush of [`MeasureOptions::flush_l2`](crate::timing::MeasureOptions::flush_l2): a memset of a
//! buffer twice the device's L2 before each timed interval, and the reset of persisting lines of
//! [`MeasureOptions::reset_persisting_l2`](crate::timing::MeasureOptions::reset_persisting_l2).

use crate::context::ContextInstance;
use crate::driver::{CUresult, Driver};
use crate::error::Result;
use crate::stream::Stream;
use crate::timing::engine::scratch_memory::DeviceBuffer;
use cuda_event_sys as sys;

/// A buffer twice the size of the device's L2, overwritten to evict what the work left there.
pub(crate) struct L2Flush<'b> {
    pub(crate) buffer: &'b DeviceBuffer,
}

impl L2Flush<'_> {
    /// The L2 size of the device of `instance`, in bytes (the buffer is twice that).
    pub(crate) fn l2_bytes(d: &Driver, instance: ContextInstance) -> Result<usize> {
        let mut l2 = 0;
        let attribute = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE;
        let device = instance.context()?.cu_device();
        d.device_get_attribute.call(|f| {
            // SAFETY: a device the driver handed out; writes through a live local.
            unsafe { f(&mut l2, attribute, device) }
        })?;
        Ok(usize::try_from(l2).unwrap_or(0).max(1 << 20))
    }

    pub(crate) fn queue(&self, d: &Driver, stream: &Stream) -> Result<()> {
        let (ptr, words, raw) = (self.buffer.ptr, self.buffer.bytes / 4, stream.as_raw());
        // 32-bit words, the widest cuMemset writes (the buffer's size is a multiple of 4).
        // SAFETY: writes `words` 32-bit words of a live allocation of that size on a live stream of
        // its device, whose context is current (`Sampler::run` entered it).
        d.memset_d32_async.call(|f| unsafe { f(ptr, 0, words, raw) })
    }
}

/// Resets the current context's persisting L2 lines to normal, so that none stays in L2 across the
/// flushes ([`MeasureOptions::reset_persisting_l2`](crate::timing::MeasureOptions::reset_persisting_l2));
/// only where lines can persist (the context's persisting-L2 limit is above zero).
pub(crate) fn reset_persisting_l2(d: &Driver) -> Result<()> {
    let mut limit = 0usize;
    let limit_code = d.ctx_get_limit.code(|f| {
        // SAFETY: writes the limit through a live local; the measurement's context is current.
        unsafe { f(&mut limit, sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE) }
    });
    match limit_code {
        // A device without persisting lines: nothing to reset.
        CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT | CUresult::CUDA_ERROR_NOT_SUPPORTED => return Ok(()),
        code => d.ctx_get_limit.check(code)?,
    }
    if limit == 0 {
        return Ok(());
    }
    // SAFETY: takes nothing; the measurement's context is current.
    let code = d.ctx_reset_persisting_l2.code(|f| unsafe { f() });
    match code {
        CUresult::CUDA_ERROR_NOT_SUPPORTED => Ok(()),
        code => d.ctx_reset_persisting_l2.check(code),
    }
}
