//! Errors: a CUDA call's failure (its code, name and message), or a misuse the crate rejects itself
//! before calling CUDA. Every CUDA return code in the crate goes through [`check`].

use cuda_event_sys as sys;
use std::ffi::{CStr, c_char};
use std::fmt;

/// The result of every fallible call in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong. New kinds may be added, so a `match` needs a wildcard arm.
///
/// Two areas have errors of their own, each wrapped by one variant (and `From` it):
/// [`MeasureError`] (`cuda_event::timing::MeasureError`) in [`Error::Measure`], and
/// [`IpcHandleParseError`] in [`Error::IpcHandleParse`]. Those variants and [`Error::Cuda`] show
/// the wrapped error's message as their own, and so do not also give it as their
/// [`source`](std::error::Error::source).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA call failed; this holds its code, name and message.
    Cuda(CudaError),
    /// `elapsed_time` on an event built without `enable_timing` (imported events never time).
    NotTimingEvent,
    /// `elapsed_time` before both events were recorded.
    NotRecorded,
    /// `elapsed_time` before the work both events captured has completed.
    NotComplete,
    /// `record` on a stream of another device than the one the event lives on.
    DeviceMismatch {
        /// The device the event lives on.
        event: i32,
        /// The device of the stream it was recorded on.
        stream: i32,
    },
    /// `elapsed_time` between events of two devices.
    ElapsedAcrossDevices {
        /// The device of the start event.
        start: i32,
        /// The device of the end event.
        end: i32,
    },
    /// An event cannot be both interprocess and timing (CUDA requires `cudaEventDisableTiming`).
    InterprocessWithTiming,
    /// Bytes or text that are not an IPC event handle
    /// ([`IpcEventHandle::from_bytes`](crate::IpcEventHandle::from_bytes), or `FromStr`): which way,
    /// in the [`IpcHandleParseError`].
    IpcHandleParse(IpcHandleParseError),
    /// `from_ipc_handle` with a handle this same process exported (CUDA refuses it, obscurely).
    IpcHandleFromThisProcess,
    /// `ipc_handle` on an event built without `interprocess`.
    NotInterprocess,
    /// A per-thread default stream ([`Stream::per_thread`](crate::Stream::per_thread)) used on
    /// another thread than the one that made it: there the handle names that thread's stream.
    PerThreadStreamOfAnotherThread,
    /// The event or stream was made before a reset of its device (`cudaDeviceReset`), which
    /// destroyed it: only dropping it is left.
    DeviceWasReset {
        /// The device that was reset.
        device: i32,
    },
    /// An imported event's work is not complete and the process that exported it has ended: CUDA
    /// will never complete it.
    ExporterGone {
        /// The exporting process's id.
        pid: i32,
    },
    /// A plain record of an [`interprocess`](crate::EventBuilder::interprocess) event on a stream
    /// being captured into a CUDA graph: the crate makes such records on a second CUDA event that
    /// no other thread reads (see `Event`'s "Recorded into a graph capture"), which the event's
    /// importers could never see. Nothing was recorded. Record it outside the capture, or build it
    /// [`external`](crate::EventBuilder::external) to make the record a node of the graph.
    CapturedInterprocessEvent,
    /// A host function, a stream's completion future or a measurement on a stream that is being
    /// captured into a CUDA graph: it would become a graph node run at every launch instead of once
    /// now.
    StreamCapturing,
    /// [`measure`](crate::timing::measure) or [`compare`](crate::timing::compare) could not
    /// measure: which way, in the [`MeasureError`].
    Measure(MeasureError),
    /// A future could not wait: the thread that watches pending GPU work could not be started
    /// (the process's thread limit, say), or it ended, or an earlier poll of the future panicked
    /// while it handed its wait over (a waker's `clone` panicked). Nothing was queued; a new
    /// future tries again. Also a blocking wait by the reactor (`synchronize_timeout`,
    /// `synchronize_with`) made on one of the crate's threads that run wakers (the reactor's, the
    /// flag lane's scanner's): a waker that ran its task there.
    ReactorUnavailable {
        /// Why: the operating system's word on a thread that did not start, the thread's end,
        /// or the panic that interrupted an earlier poll.
        reason: String,
    },
    /// This process is a child forked from one that had used CUDA through this crate. CUDA does
    /// not support a child using its parent's CUDA state, so the crate makes no CUDA call in it:
    /// every call returns this, futures resolve to it, and dropping an event or stream releases
    /// nothing (the parent still owns them). Start helpers with `std::process::Command` (which
    /// execs), or fork before the first CUDA call. Also a GPU range of a
    /// [`Trace`](crate::trace::Trace) made before the process forked, in the child (see there).
    ForkedChild,
}

/// Bytes or text that are not an IPC event handle: [`Error::IpcHandleParse`], from
/// [`IpcEventHandle::from_bytes`](crate::IpcEventHandle::from_bytes) and
/// [`IpcEventHandle`](crate::IpcEventHandle)'s `FromStr`. New kinds may be added, so a `match`
/// needs a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IpcHandleParseError {
    /// An IPC handle of the wrong length, in bytes (or hex characters, for text: ASCII whitespace
    /// around them is ignored and not counted).
    Length {
        /// The length a handle has.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// IPC handle text that is not hexadecimal.
    Text {
        /// The byte offset of the first character that is not a hex digit.
        position: usize,
    },
}

/// Why [`measure`](crate::timing::measure) or [`compare`](crate::timing::compare) could not
/// measure: [`Error::Measure`]. New kinds may be added, so a `match` needs a wildcard arm.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MeasureError {
    /// [`measure`](crate::timing::measure) (or [`compare`](crate::timing::compare)) with options
    /// it cannot honour.
    InvalidOptions {
        /// Which option, and what it must be.
        reason: &'static str,
    },
    /// [`measure`](crate::timing::measure) in graph mode
    /// ([`MeasureOptions::graph`](crate::timing::MeasureOptions::graph)) could not capture the work
    /// into a CUDA graph.
    NotCapturable {
        /// Why: the capture step that failed and CUDA's answer, with what usually causes it.
        reason: String,
    },
    /// [`measure`](crate::timing::measure) (or [`compare`](crate::timing::compare)) reached its
    /// timeout with fewer than two samples because it discarded (nearly) every repetition: the SM clock was below
    /// [`MeasureOptions::throttle_threshold`](crate::timing::MeasureOptions::throttle_threshold) of its
    /// maximum during them. The GPU throttles (power, heat), or its clocks are locked low.
    ClockThrottled {
        /// The median clock of the discarded repetitions (each one's lowest, over its arms), in
        /// MHz.
        sm_clock_mhz: f64,
        /// The device's maximum SM clock, in MHz.
        max_sm_clock_mhz: f64,
        /// The threshold, a fraction of the maximum.
        threshold: f64,
        /// Repetitions discarded.
        discarded: usize,
    },
    /// [`MeasureOptions::cupti`](crate::timing::MeasureOptions::cupti) was asked for and CUPTI cannot be
    /// used: libcupti was not found, or CUPTI refused (another tool, such as a profiler, holds
    /// it), or a CUPTI call failed during the measurement. `reason` says which, with CUPTI's
    /// answer.
    CuptiUnavailable {
        /// What was tried, and CUPTI's answer.
        reason: String,
    },
}

/// A failed CUDA call: which call, the code it returned, and CUDA's name and message for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError {
    call: &'static str,
    code: u32,
    name: &'static str,
    message: &'static str,
    /// The CUDA driver could not be loaded at all; `call` is then the crate's function the user called.
    loading_driver: bool,
}

impl CudaError {
    /// The CUDA function that failed, e.g. `"cuEventRecord"` or `"cudaGetDeviceCount"`; when the
    /// CUDA driver could not be loaded at all (no driver, or one older than the runtime), the
    /// crate's function that was called, e.g. `"Event::record"`.
    pub fn call(&self) -> &'static str {
        self.call
    }
    /// The numeric code. Runtime (`cudaError_t`) and driver (`CUresult`) codes share their numbers
    /// for every error this crate names (100 is "no device" in both).
    pub fn code(&self) -> u32 {
        self.code
    }
    /// CUDA's name for the code, e.g. `"cudaErrorInsufficientDriver"` or `"CUDA_ERROR_NOT_READY"`.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// CUDA's description of the code.
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// The error `code` of `call`, named by `strings`.
    #[cold]
    pub(crate) fn new(
        call: &'static str,
        code: u32,
        strings: fn(u32) -> (&'static str, &'static str),
    ) -> CudaError {
        let (name, mut message) = strings(code);
        // CUDA says "driver version is insufficient" also when there is no driver at all, which
        // sends the user off to upgrade a driver they do not have.
        if name == "cudaErrorInsufficientDriver" && !driver_library_loads() {
            message = NO_DRIVER;
        }
        CudaError {
            call,
            code,
            name,
            message,
            loading_driver: false,
        }
    }

    /// The error of loading the driver, reported as a failure of the user's `operation`.
    pub(crate) fn during(self, operation: &'static str) -> CudaError {
        CudaError {
            call: operation,
            loading_driver: true,
            ..self
        }
    }
}

/// The message of `cudaErrorInsufficientDriver` when the driver library is not there at all.
const NO_DRIVER: &str = "no CUDA driver found (libcuda.so.1 cannot be loaded): \
                         this machine has no NVIDIA driver installed";

/// Whether the CUDA driver library, `libcuda.so.1`, is loaded or can be; asked once.
fn driver_library_loads() -> bool {
    static LOADS: crate::sync::OnceLock<bool> = crate::sync::OnceLock::new();
    *LOADS.get_or_init(|| {
        let name = c"libcuda.so.1";
        // SAFETY: dlopen takes a NUL-terminated name; a handle it returns is closed once, here.
        // The runtime has already tried to load this library, so loading it runs nothing new.
        unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if handle.is_null() {
                return false;
            }
            libc::dlclose(handle);
        }
        true
    })
}

/// The one error-checking path: `Ok` for success (0 in both APIs), else the code as a
/// [`CudaError`] with the name and message that `strings` (the runtime's or the driver's) give it.
#[inline]
pub(crate) fn check(
    call: &'static str,
    code: u32,
    strings: fn(u32) -> (&'static str, &'static str),
) -> Result<(), CudaError> {
    if code == 0 {
        return Ok(());
    }
    Err(CudaError::new(call, code, strings))
}

/// A CUDA runtime return code as a `Result`, with the code's name and message: for code that mixes
/// raw `cuda_event::sys` calls with this crate.
///
/// ```
/// use cuda_event::{check_runtime, sys};
/// let mut version = 0;
/// // SAFETY: writes one int through a pointer to a live local.
/// check_runtime("cudaRuntimeGetVersion", unsafe { sys::cudaRuntimeGetVersion(&mut version) })?;
/// assert!(version >= 12000);
/// # Ok::<(), cuda_event::Error>(())
/// ```
pub fn check_runtime(call: &'static str, code: sys::cudaError_t) -> Result<()> {
    Ok(check(call, code.0, runtime_strings)?)
}

/// The runtime's name and message for a code; needs no driver.
pub(crate) fn runtime_strings(code: u32) -> (&'static str, &'static str) {
    let code = sys::cudaError(code);
    // SAFETY: both functions return pointers to static NUL-terminated strings for any code, known or
    // not, and need no driver.
    unsafe {
        (
            static_str(sys::cudaGetErrorName(code)),
            static_str(sys::cudaGetErrorString(code)),
        )
    }
}

/// # Safety
/// `ptr` is null or points to a NUL-terminated string that lives for the whole program.
pub(crate) unsafe fn static_str(ptr: *const c_char) -> &'static str {
    if ptr.is_null() {
        return "unknown";
    }
    // SAFETY: the caller promises a static NUL-terminated string.
    unsafe { CStr::from_ptr(ptr) }.to_str().unwrap_or("unknown")
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The no-driver message already says that the driver cannot be loaded.
        let loading = if self.loading_driver && self.message != NO_DRIVER {
            "the CUDA driver could not be loaded: "
        } else {
            ""
        };
        write!(
            f,
            "{} failed: {loading}{} ({}): {}",
            self.call, self.name, self.code, self.message
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cuda(e) => e.fmt(f),
            Error::NotTimingEvent => f.write_str("elapsed_time needs two events built with enable_timing"),
            Error::NotRecorded => f.write_str("elapsed_time needs both events recorded first"),
            Error::NotComplete => f.write_str(
                "elapsed_time needs the work of both events complete (synchronize the end event first)",
            ),
            Error::DeviceMismatch { event, stream } => write!(
                f,
                "the event lives on device {event} but the stream is on device {stream}: \
                 an event is recorded on streams of its own device only"
            ),
            Error::ElapsedAcrossDevices { start, end } => {
                write!(
                    f,
                    "elapsed_time between events of device {start} and device {end}: both must be on one device"
                )
            }
            Error::InterprocessWithTiming => {
                f.write_str("an interprocess event cannot have enable_timing (CUDA requires timing off)")
            }
            Error::IpcHandleParse(e) => e.fmt(f),
            Error::IpcHandleFromThisProcess => f.write_str(
                "this IPC event handle was exported by this same process: use the event itself, \
                 CUDA opens handles of other processes only",
            ),
            Error::NotInterprocess => f.write_str("ipc_handle needs an event built with interprocess"),
            Error::DeviceWasReset { device } => write!(
                f,
                "device {device} was reset after this event or stream was made, which destroyed it: \
                 make a new one"
            ),
            Error::ExporterGone { pid } => write!(
                f,
                "the process that exported this IPC event (pid {pid}) has ended with the event's \
                 work pending: it will never complete"
            ),
            Error::CapturedInterprocessEvent => f.write_str(
                "an interprocess event was recorded on a stream being captured into a CUDA graph: \
                 its importers could never see that record (record it outside the capture, or \
                 build it external)",
            ),
            Error::StreamCapturing => f.write_str(
                "the stream is being captured into a CUDA graph: a host function, a completion \
                 future or a measurement on it would be captured too, not run now",
            ),
            Error::Measure(e) => e.fmt(f),
            Error::ReactorUnavailable { reason } => write!(
                f,
                "a future could not wait for its GPU work by cuda-event's reactor thread: {reason}"
            ),
            Error::ForkedChild => f.write_str(
                "this process was forked from one that used CUDA, or the trace was made before the \
                 fork: neither can be used in the forked child (exec a new program, or fork before \
                 the first CUDA call and make traces after it)",
            ),
            Error::PerThreadStreamOfAnotherThread => f.write_str(
                "a per-thread default stream was used on another thread than the one that made it \
                 (on each thread, cudaStreamPerThread names that thread's own stream)",
            ),
        }
    }
}

impl fmt::Display for IpcHandleParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpcHandleParseError::Length { expected, found } => {
                write!(
                    f,
                    "an IPC event handle has length {expected} (bytes, or hex digits as text, \
                     whitespace around them ignored), got {found}"
                )
            }
            IpcHandleParseError::Text { position } => {
                write!(
                    f,
                    "an IPC event handle's text is hexadecimal; character {position} is not"
                )
            }
        }
    }
}

impl fmt::Display for MeasureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeasureError::InvalidOptions { reason } => write!(f, "invalid measure options: {reason}"),
            MeasureError::NotCapturable { reason } => {
                write!(
                    f,
                    "the measured work could not be captured into a CUDA graph: {reason}"
                )
            }
            MeasureError::ClockThrottled {
                sm_clock_mhz,
                max_sm_clock_mhz,
                threshold,
                discarded,
            } => write!(
                f,
                "fewer than two samples by the timeout: (nearly) every repetition ran with the SM \
                 clock below {:.0}% of its maximum ({sm_clock_mhz:.0} of {max_sm_clock_mhz:.0} MHz, \
                 median of {discarded} discarded): the GPU throttles (power, heat) or its clocks \
                 are locked low; MeasureOptions::throttle_threshold(0.0) keeps such repetitions",
                100.0 * threshold
            ),
            MeasureError::CuptiUnavailable { reason } => write!(
                f,
                "CUPTI cannot time the measurement (MeasureOptions::cupti): {reason}"
            ),
        }
    }
}

impl std::error::Error for CudaError {}
impl std::error::Error for IpcHandleParseError {}
impl std::error::Error for MeasureError {}
/// The wrapping variants are transparent, as thiserror's `#[error(transparent)]`: they show the
/// wrapped error's message and pass on its source, not the wrapped error itself, so that a report
/// walking the chain (anyhow's `{:#}`) prints each message once. The wrapped error is the
/// variant's field.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Cuda(e) => e.source(),
            Error::IpcHandleParse(e) => e.source(),
            Error::Measure(e) => e.source(),
            _ => None,
        }
    }
}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Error {
        Error::Cuda(e)
    }
}

impl From<IpcHandleParseError> for Error {
    fn from(e: IpcHandleParseError) -> Error {
        Error::IpcHandleParse(e)
    }
}

impl From<MeasureError> for Error {
    fn from(e: MeasureError) -> Error {
        Error::Measure(e)
    }
}
