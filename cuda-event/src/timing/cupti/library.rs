//! libcupti, loaded at run time (never linked): the activity API's entry points, the buffers it
//! fills, and the few fields of its records that a measurement reads.
//!
//! The records' layouts are versioned (`CUpti_ActivityKernel4` to `CUpti_ActivityKernel10` in
//! CUPTI 13.0's headers), but the fields read here sit at the same offsets in every version since
//! CUDA 10: start and end at 16 and 24, the correlation id at 92 in a kernel's record and at 44 in
//! a copy's or a memset's; an external correlation's external id at 8 and correlation id at 16.

// CUPTI's own thread delivers the records, outside anything the driver model runs: the store's
// lock is parking_lot's, not the model's.
use parking_lot::Mutex;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::OnceLock;

/// `CUptiResult`'s success.
const SUCCESS: u32 = 0;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: deliver the records of buffers not yet full.
const FLUSH_FORCED: u32 = 1;

/// The `CUpti_ActivityKind`s a measurement enables.
pub(crate) const MEMCPY: u32 = 1;
pub(crate) const MEMSET: u32 = 2;
/// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`: kernels' records without serializing them.
pub(crate) const CONCURRENT_KERNEL: u32 = 10;
/// The API records (driver and runtime calls): CUPTI writes a tag's external correlation record
/// only before an API record, so without them no work is tagged.
pub(crate) const DRIVER: u32 = 4;
pub(crate) const RUNTIME: u32 = 5;
pub(crate) const EXTERNAL_CORRELATION: u32 = 39;
/// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2`: the crate's tags. The program's own tags, if any,
/// are more likely CUSTOM0 or CUSTOM1.
const TAG_KIND: u32 = 5;

/// Bytes of each buffer handed to CUPTI.
const BUFFER_BYTES: usize = 4 << 20;
/// CUPTI asks for 8-byte aligned buffers.
const BUFFER_ALIGN: usize = 8;

type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type RegisterCallbacks = unsafe extern "C" fn(BufferRequested, BufferCompleted) -> u32;
type OfKind = unsafe extern "C" fn(u32) -> u32;
type NextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> u32;
type PushExternal = unsafe extern "C" fn(u32, u64) -> u32;
type PopExternal = unsafe extern "C" fn(u32, *mut u64) -> u32;
type Dropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32;
type ResultString = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;

/// The entry points, as `cupti_activity.h` and `cupti_result.h` declare them: `CUptiResult` and
/// the enums are 32-bit, `CUcontext` and buffers are pointers, sizes are `size_t`.
pub(crate) struct Cupti {
    register_callbacks: RegisterCallbacks,
    enable: OfKind,
    disable: OfKind,
    flush_all: OfKind,
    next_record: NextRecord,
    push_external: PushExternal,
    pop_external: PopExternal,
    dropped: Dropped,
    result_string: ResultString,
}

/// What the completed buffers held, since the last [`Cupti::take`].
#[derive(Default)]
pub(crate) struct Records {
    /// A kernel's, a copy's or a memset's correlation id, start and end (CUPTI's nanoseconds).
    pub(crate) spans: Vec<(u32, u64, u64)>,
    /// The crate's tag (external id) of each correlation id.
    pub(crate) tags: Vec<(u32, u64)>,
}

static RECORDS: Mutex<Records> = Mutex::new(Records {
    spans: Vec::new(),
    tags: Vec::new(),
});

static CUPTI: OnceLock<Result<Cupti, String>> = OnceLock::new();

/// The buffers [`buffer_requested`] gave CUPTI and CUPTI has not returned: only these are freed
/// here. A buffer of another client (a profiler that registered its callbacks before this crate
/// replaced them, as torch.profiler's does, with buffers of the same size) is read but left to its
/// owner, who frees it: freeing it here too would free it twice.
static GIVEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The library, loaded and its buffer callbacks registered on first use; why not, if it cannot be.
pub(crate) fn cupti() -> Result<&'static Cupti, String> {
    CUPTI.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Where libcupti is looked for: the file `CUDA_EVENT_CUPTI_LIBRARY` names, the loader's search
/// path, then the CUDA toolkit's usual places.
const CANDIDATES: [&str; 5] = [
    "libcupti.so",
    "libcupti.so.13",
    "libcupti.so.12",
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
    "/usr/local/cuda/lib64/libcupti.so",
];

fn load() -> Result<Cupti, String> {
    let named = std::env::var("CUDA_EVENT_CUPTI_LIBRARY").ok();
    let names: Vec<String> = match named {
        Some(name) => vec![name],
        None => CANDIDATES.iter().map(|s| s.to_string()).collect(),
    };
    let handle = names
        .iter()
        .filter_map(|name| CString::new(name.as_str()).ok())
        // SAFETY: a NUL-terminated file name; a handle found is never closed, so the functions
        // found in it stay valid for the process.
        .map(|name| unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
        .find(|handle| !handle.is_null())
        .ok_or_else(|| {
            format!(
                "libcupti was not found (tried {}; CUDA_EVENT_CUPTI_LIBRARY names another file)",
                names.join(", ")
            )
        })?;
    let symbol = |name: &CStr| {
        // SAFETY: a live handle and a NUL-terminated symbol name.
        let found = unsafe { libc::dlsym(handle, name.as_ptr()) };
        match found.is_null() {
            true => Err(format!("libcupti has no {}", name.to_string_lossy())),
            false => Ok(found),
        }
    };
    // SAFETY: each pointer is the address of the CUPTI function of that name, whose C declaration
    // its type repeats (see `Cupti`).
    let cupti = unsafe {
        Cupti {
            register_callbacks: std::mem::transmute::<*mut c_void, RegisterCallbacks>(symbol(
                c"cuptiActivityRegisterCallbacks",
            )?),
            enable: std::mem::transmute::<*mut c_void, OfKind>(symbol(c"cuptiActivityEnable")?),
            disable: std::mem::transmute::<*mut c_void, OfKind>(symbol(c"cuptiActivityDisable")?),
            flush_all: std::mem::transmute::<*mut c_void, OfKind>(symbol(c"cuptiActivityFlushAll")?),
            next_record: std::mem::transmute::<*mut c_void, NextRecord>(symbol(
                c"cuptiActivityGetNextRecord",
            )?),
            push_external: std::mem::transmute::<*mut c_void, PushExternal>(symbol(
                c"cuptiActivityPushExternalCorrelationId",
            )?),
            pop_external: std::mem::transmute::<*mut c_void, PopExternal>(symbol(
                c"cuptiActivityPopExternalCorrelationId",
            )?),
            dropped: std::mem::transmute::<*mut c_void, Dropped>(symbol(
                c"cuptiActivityGetNumDroppedRecords",
            )?),
            result_string: std::mem::transmute::<*mut c_void, ResultString>(symbol(c"cuptiGetResultString")?),
        }
    };
    // SAFETY: two functions of the types CUPTI declares for its buffer callbacks, valid for the
    // process (they are this crate's).
    let code = unsafe { (cupti.register_callbacks)(buffer_requested, buffer_completed) };
    cupti.check("cuptiActivityRegisterCallbacks", code)?;
    Ok(cupti)
}

impl Cupti {
    /// CUPTI's answer `code` to `call`, as an error that names both unless it is a success.
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == SUCCESS {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: writes a pointer to a static string through a live local.
        let known = unsafe { (self.result_string)(code, &mut text) } == SUCCESS && !text.is_null();
        let text = match known {
            // SAFETY: CUPTI's result strings are static and NUL-terminated.
            true => unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned(),
            false => "unknown result".into(),
        };
        Err(format!("{call} returned {code} ({text})"))
    }

    /// Enables records of `kind`.
    pub(crate) fn enable(&self, kind: u32) -> Result<(), String> {
        // SAFETY: a kind of CUpti_ActivityKind.
        self.check("cuptiActivityEnable", unsafe { (self.enable)(kind) })
    }

    /// Disables records of `kind`.
    pub(crate) fn disable(&self, kind: u32) {
        // SAFETY: a kind of CUpti_ActivityKind. Its failure leaves the kind enabled, which costs
        // CUPTI's records and nothing else.
        unsafe { (self.disable)(kind) };
    }

    /// Tags the GPU work that this thread launches until [`untag`](Self::untag) with `tag`.
    pub(crate) fn tag(&self, tag: u64) -> Result<(), String> {
        // SAFETY: a kind of CUpti_ExternalCorrelationKind and any 64-bit id.
        self.check("cuptiActivityPushExternalCorrelationId", unsafe {
            (self.push_external)(TAG_KIND, tag)
        })
    }

    /// Ends this thread's tag of [`tag`](Self::tag).
    pub(crate) fn untag(&self) -> Result<(), String> {
        let mut last = 0;
        // SAFETY: the kind pushed by `tag`; writes the popped id through a live local.
        self.check("cuptiActivityPopExternalCorrelationId", unsafe {
            (self.pop_external)(TAG_KIND, &mut last)
        })
    }

    /// Delivers every record CUPTI holds to the buffer callback.
    pub(crate) fn flush(&self) -> Result<(), String> {
        // SAFETY: a flag of CUpti_ActivityFlag.
        self.check("cuptiActivityFlushAll", unsafe { (self.flush_all)(FLUSH_FORCED) })
    }

    /// [`flush`](Self::flush)es, and returns the records delivered since the last take, with the
    /// number of records CUPTI dropped (for want of buffer space).
    pub(crate) fn take(&self) -> Result<(Records, usize), String> {
        self.flush()?;
        let mut dropped = 0;
        // SAFETY: no context and stream 0 ask for the global buffers' count; writes through a
        // live local.
        let code = unsafe { (self.dropped)(std::ptr::null_mut(), 0, &mut dropped) };
        self.check("cuptiActivityGetNumDroppedRecords", code)?;
        Ok((std::mem::take(&mut *RECORDS.lock()), dropped))
    }

    /// Forgets the records delivered so far.
    pub(crate) fn clear(&self) {
        *RECORDS.lock() = Records::default();
    }
}

/// CUPTI's request for a buffer to fill.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // SAFETY: a non-zero size and a power-of-two alignment.
    let layout = unsafe { std::alloc::Layout::from_size_align_unchecked(BUFFER_BYTES, BUFFER_ALIGN) };
    // SAFETY: a layout of non-zero size; the buffer is freed by `buffer_completed` with the same
    // layout. A null buffer tells CUPTI none was given (it drops records then, and counts them).
    let given = unsafe { std::alloc::alloc(layout) };
    if !given.is_null() {
        GIVEN.lock().push(given as usize);
    }
    // SAFETY: CUPTI's three pointers are live for the call.
    unsafe {
        *buffer = given;
        *size = if given.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

/// CUPTI's return of a buffer: its records are read into [`RECORDS`], and the buffer is freed.
unsafe extern "C" fn buffer_completed(_: *mut c_void, _: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    // Not `cupti()`: a callback during the registration would wait on its own initialization.
    if let Some(Ok(cupti)) = CUPTI.get() {
        let mut read = Records::default();
        let mut record: *mut u8 = std::ptr::null_mut();
        // SAFETY: `buffer` holds `valid` bytes of records (CUPTI's call); each record it returns
        // lies within them, at least as long as its kind's layout, and is read unaligned.
        unsafe {
            // Until CUPTI_ERROR_MAX_LIMIT_REACHED (no more records), or any other error.
            while (cupti.next_record)(buffer, valid, &mut record) == SUCCESS {
                read_record(record, &mut read);
            }
        }
        let mut records = RECORDS.lock();
        records.spans.append(&mut read.spans);
        records.tags.append(&mut read.tags);
    }
    let ours = {
        let mut given = GIVEN.lock();
        let at = given.iter().position(|&b| b == buffer as usize);
        at.map(|at| given.swap_remove(at)).is_some()
    };
    if ours {
        // SAFETY: a buffer of `buffer_requested` (it was listed there and is unlisted once), freed
        // once, with the layout it was made with.
        unsafe {
            std::alloc::dealloc(
                buffer,
                std::alloc::Layout::from_size_align_unchecked(BUFFER_BYTES, BUFFER_ALIGN),
            )
        };
    }
}

/// Reads the fields of `record` (a record that CUPTI returned) that a measurement uses.
///
/// # Safety
/// `record` points to a whole record of the kind its first four bytes name.
unsafe fn read_record(record: *const u8, into: &mut Records) {
    // SAFETY: the caller's: a record of at least the offsets read for its kind.
    unsafe {
        let at_u32 = |offset: usize| record.add(offset).cast::<u32>().read_unaligned();
        let at_u64 = |offset: usize| record.add(offset).cast::<u64>().read_unaligned();
        let span = |correlation_at: usize| (at_u32(correlation_at), at_u64(16), at_u64(24));
        match at_u32(0) {
            CONCURRENT_KERNEL => into.spans.push(span(92)),
            MEMCPY | MEMSET => into.spans.push(span(44)),
            EXTERNAL_CORRELATION if at_u32(4) == TAG_KIND => into.tags.push((at_u32(16), at_u64(8))),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of a record of `kind` with the fields read set.
    fn record(kind: u32, len: usize, fields: &[(usize, u64, bool)]) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        bytes[..4].copy_from_slice(&kind.to_le_bytes());
        for &(offset, value, wide) in fields {
            match wide {
                true => bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes()),
                false => bytes[offset..offset + 4].copy_from_slice(&(value as u32).to_le_bytes()),
            }
        }
        bytes
    }

    #[test]
    fn the_fields_are_read_at_cuptis_offsets() {
        let mut read = Records::default();
        let kernel = record(
            CONCURRENT_KERNEL,
            216,
            &[(16, 1000, true), (24, 1500, true), (92, 7, false)],
        );
        let memset = record(MEMSET, 88, &[(16, 2000, true), (24, 2100, true), (44, 8, false)]);
        let tag = record(
            EXTERNAL_CORRELATION,
            24,
            &[(4, 5, false), (8, 42, true), (16, 7, false)],
        );
        let users_tag = record(
            EXTERNAL_CORRELATION,
            24,
            &[(4, 3, false), (8, 43, true), (16, 8, false)],
        );
        for r in [&kernel, &memset, &tag, &users_tag] {
            // SAFETY: whole records of their kinds' layouts.
            unsafe { read_record(r.as_ptr(), &mut read) };
        }
        assert_eq!(read.spans, [(7, 1000, 1500), (8, 2000, 2100)]);
        assert_eq!(read.tags, [(7, 42)]);
    }
}
