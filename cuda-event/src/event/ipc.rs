//! IPC event handles: the 64 bytes that let another process open an interprocess event, as bytes
//! or as hex text (for a pipe, a file, an environment variable or another language).

use crate::error::{Error, IpcHandleParseError, Result};
use crate::sync::Mutex;
use cuda_event_sys as sys;
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

/// The size of a handle, from the bindings (checked against C by the `tests` crate).
const LEN: usize = std::mem::size_of::<sys::cudaIpcEventHandle_t>();
const _: () = assert!(LEN == sys::CUDA_IPC_HANDLE_SIZE as usize);
const _: () = assert!(LEN == std::mem::size_of::<sys::CUipcEventHandle>());

/// An interprocess event's handle (`cudaIpcEventHandle_t`), from [`Event::ipc_handle`] for
/// [`Event::from_ipc_handle`] in another process.
///
/// `Display` writes it as 128 lowercase hex digits and `FromStr` reads them back, ignoring ASCII
/// whitespace around them (a line read from a pipe or a file ends in a newline).
///
/// [`Event::ipc_handle`]: crate::Event::ipc_handle
/// [`Event::from_ipc_handle`]: crate::Event::from_ipc_handle
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[doc(alias = "cudaIpcEventHandle_t")]
pub struct IpcEventHandle([u8; LEN]);

impl IpcEventHandle {
    /// The size of a handle in bytes (64).
    pub const LEN: usize = LEN;

    /// A handle from its bytes.
    ///
    /// # Errors
    /// [`Error::IpcHandleParse`] with [`IpcHandleParseError::Length`] unless `bytes` is exactly
    /// [`Self::LEN`] long.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcEventHandle> {
        let bytes = bytes.try_into().map_err(|_| IpcHandleParseError::Length {
            expected: LEN,
            found: bytes.len(),
        })?;
        Ok(IpcEventHandle(bytes))
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8; LEN] {
        &self.0
    }

    /// The runtime's form, `cudaIpcEventHandle_t`, for code that calls the runtime directly.
    pub fn to_raw(self) -> sys::cudaIpcEventHandle_t {
        sys::cudaIpcEventHandle_t {
            reserved: self.0.map(|b| b as libc::c_char),
        }
    }

    /// A handle from the runtime's form, `cudaIpcEventHandle_t` (from `cudaIpcGetEventHandle`).
    pub fn from_raw(raw: &sys::cudaIpcEventHandle_t) -> IpcEventHandle {
        IpcEventHandle(raw.reserved.map(|b| b as u8))
    }

    pub(crate) fn from_driver(raw: &sys::CUipcEventHandle) -> IpcEventHandle {
        IpcEventHandle(raw.reserved.map(|b| b as u8))
    }

    pub(crate) fn to_driver(self) -> sys::CUipcEventHandle {
        sys::CUipcEventHandle {
            reserved: self.0.map(|b| b as libc::c_char),
        }
    }
}

impl fmt::Display for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcEventHandle({self})")
    }
}

impl FromStr for IpcEventHandle {
    type Err = Error;

    /// Reads 128 hex digits (either case), as `Display` writes them, with any ASCII whitespace
    /// before and after them ignored.
    ///
    /// # Errors
    /// [`Error::IpcHandleParse`] with [`IpcHandleParseError::Length`] when the text between the
    /// whitespace is not 128 characters long, or with [`IpcHandleParseError::Text`] and the byte
    /// offset (in the text as given) of the first character that is not a hex digit.
    fn from_str(text: &str) -> Result<IpcEventHandle> {
        let leading = text.len() - text.trim_ascii_start().len();
        let digits = text.trim_ascii().as_bytes();
        if digits.len() != 2 * LEN {
            return Err(IpcHandleParseError::Length {
                expected: 2 * LEN,
                found: digits.len(),
            }
            .into());
        }
        let digit = |i: usize| match digits[i] {
            c @ b'0'..=b'9' => Ok(c - b'0'),
            c @ b'a'..=b'f' => Ok(c - b'a' + 10),
            c @ b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(Error::from(IpcHandleParseError::Text {
                position: leading + i,
            })),
        };
        let mut bytes = [0; LEN];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = digit(2 * i)? << 4 | digit(2 * i + 1)?;
        }
        Ok(IpcEventHandle(bytes))
    }
}

/// Handles this process exported, so that importing one here is refused clearly.
static EXPORTED: Mutex<Option<HashSet<IpcEventHandle>>> = Mutex::new(None);

pub(crate) fn remember_exported(handle: IpcEventHandle) {
    EXPORTED.lock().get_or_insert_with(HashSet::new).insert(handle);
}

/// Forgets an exported handle when its event is destroyed (CUDA may hand the same bytes out again).
pub(crate) fn forget_exported(handle: &IpcEventHandle) {
    if let Some(set) = EXPORTED.lock().as_mut() {
        set.remove(handle);
    }
}

/// How many exported handles this process remembers (it shrinks as events drop).
#[cfg(all(test, not(cuda_event_model)))]
pub(crate) fn exported_handles_remembered() -> usize {
    EXPORTED.lock().as_ref().map_or(0, HashSet::len)
}

pub(crate) fn exported_here(handle: &IpcEventHandle) -> bool {
    EXPORTED.lock().as_ref().is_some_and(|set| set.contains(handle))
}

/// The process that exported an imported event, to tell when it is gone: CUDA never completes an
/// imported event whose exporter died with its work pending, and `cuEventSynchronize` on it never
/// returns.
///
/// CUDA writes the exporter's process id into the first four bytes of the handle (little-endian;
/// not documented, and checked by the project's GPU tests). The process is recognized by that id and
/// its start time (`/proc/PID/stat`), so that a later process given the same id is not taken for
/// it. Where the id names no process here (an exporter in another pid namespace), nothing is known
/// and nothing is checked. Where it names an unrelated process here (an exporter in another pid
/// namespace whose id a local process also has), that process's exit is taken for the exporter's:
/// a pending event then answers `ExporterGone` although its exporter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exporter {
    pub(crate) pid: i32,
    start_time: u64,
}

impl Exporter {
    /// The exporter of `handle`, if the process its id names is alive here now.
    pub(crate) fn of(handle: &IpcEventHandle) -> Option<Exporter> {
        let pid = i32::from_le_bytes([handle.0[0], handle.0[1], handle.0[2], handle.0[3]]);
        if pid <= 0 || u32::try_from(pid).ok() == Some(std::process::id()) {
            return None;
        }
        Some(Exporter {
            pid,
            start_time: process_start_time(pid)?,
        })
    }

    /// Whether the exporting process has ended (or is a zombie, which runs no more CUDA work).
    pub(crate) fn is_gone(&self) -> bool {
        process_start_time(self.pid) != Some(self.start_time)
    }
}

/// A live (not zombie) process's start time, field 22 of `/proc/PID/stat`.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces: count fields after its end.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_ascii_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}
