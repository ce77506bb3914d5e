//! IPC event handles: the 64 bytes that let another process open an interprocess event, as bytes
//! or as hex text (for a pipe, a file, an environment variable or another language).

use crate::error::IpcHandleParseError;
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
    /// [`IpcHandleParseError::Length`] unless `bytes` is exactly [`Self::LEN`] long (it converts
    /// into [`Error::IpcHandleParse`](crate::Error::IpcHandleParse) with `?`).
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcEventHandle, IpcHandleParseError> {
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
    type Err = IpcHandleParseError;

    /// Reads 128 hex digits (either case), as `Display` writes them, with any ASCII whitespace
    /// before and after them ignored.
    ///
    /// # Errors
    /// [`IpcHandleParseError::Length`] when the text between the whitespace is not 128 characters
    /// long, or [`IpcHandleParseError::Text`] with the byte offset (in the text as given) of the
    /// first character that is not a hex digit. Either converts into
    /// [`Error::IpcHandleParse`](crate::Error::IpcHandleParse) with `?`.
    fn from_str(text: &str) -> Result<IpcEventHandle, IpcHandleParseError> {
        let leading = text.len() - text.trim_ascii_start().len();
        let digits = text.trim_ascii().as_bytes();
        if digits.len() != 2 * LEN {
            return Err(IpcHandleParseError::Length {
                expected: 2 * LEN,
                found: digits.len(),
            });
        }
        let digit = |i: usize| match digits[i] {
            c @ b'0'..=b'9' => Ok(c - b'0'),
            c @ b'a'..=b'f' => Ok(c - b'a' + 10),
            c @ b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(IpcHandleParseError::Text {
                position: leading + i,
            }),
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
    /// Its start time; `None` for one that had already ended when it was first looked at.
    start_time: Option<u64>,
}

/// The process id CUDA wrote into `handle` (see [`Exporter`]).
fn pid_of(handle: &IpcEventHandle) -> i32 {
    i32::from_le_bytes([handle.0[0], handle.0[1], handle.0[2], handle.0[3]])
}

impl Exporter {
    /// The exporter of `handle`, if the process its id names is here: alive now, or ended and not
    /// yet reaped (a zombie: an exporter that was the importer's child and died before the
    /// import), which is then gone already. Looked at before the open, so that an exporter that
    /// dies during it is seen alive first, and gone after.
    pub(crate) fn of(handle: &IpcEventHandle) -> Option<Exporter> {
        let pid = pid_of(handle);
        if pid <= 0 || u32::try_from(pid).ok() == Some(std::process::id()) {
            return None;
        }
        let start_time = match process_state(pid)? {
            Process::Live { start_time } => Some(start_time),
            Process::Ended => None,
        };
        Some(Exporter { pid, start_time })
    }

    /// Whether the exporting process has ended (or is a zombie, which runs no more CUDA work).
    pub(crate) fn is_gone(&self) -> bool {
        let now = match process_state(self.pid) {
            Some(Process::Live { start_time }) => Some(start_time),
            _ => None,
        };
        self.start_time.is_none() || now != self.start_time
    }
}

/// A process as `/proc/PID/stat` tells it.
enum Process {
    Live {
        start_time: u64,
    },
    /// A zombie, or one being torn down: it runs no more work.
    Ended,
}

/// The process `pid`, if `/proc` has it; a live one's start time is field 22 of its `stat`. A
/// process whose main thread has exited shows that thread as a zombie while its other threads
/// (and their CUDA work) run on: it is ended only once none of its threads is live.
fn process_state(pid: i32) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (state, start_time) = state_and_start(&stat)?;
    if !ended(state) {
        return Some(Process::Live { start_time });
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok();
    let live_task = tasks.into_iter().flatten().flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .is_ok_and(|stat| state_and_start(&stat).is_some_and(|(state, _)| !ended(state)))
    });
    Some(match live_task {
        true => Process::Live { start_time },
        false => Process::Ended,
    })
}

/// A `stat` line's state (field 3) and start time (field 22).
fn state_and_start(stat: &str) -> Option<(&str, u64)> {
    // The command (field 2) is in parentheses and may hold spaces: count fields after its end.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_ascii_whitespace();
    let state = fields.next()?;
    Some((state, fields.nth(18)?.parse().ok()?))
}

/// A zombie, or a task being torn down: it runs no more work.
fn ended(state: &str) -> bool {
    state == "Z" || state == "X"
}

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::{Exporter, IpcEventHandle};

    fn naming(pid: u32) -> IpcEventHandle {
        let mut bytes = [0u8; 64];
        bytes[..4].copy_from_slice(&pid.to_le_bytes());
        IpcEventHandle::from_bytes(&bytes).unwrap()
    }

    /// An exporter that had ended before its handle was imported (a zombie its parent, the
    /// importer, has not reaped yet) is watched as gone, not taken for "no exporter known", which
    /// would leave the imported event's `synchronize` to CUDA's wait, which never returns for a
    /// dead exporter's pending work. (It failed so before.)
    #[test]
    fn an_exporter_ended_before_the_import_is_watched_as_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
                .unwrap_or(false)
        };
        while !zombie() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let exporter = Exporter::of(&naming(pid));
        child.wait().unwrap();
        assert!(exporter.is_some_and(|e| e.is_gone()), "{exporter:?}");
    }

    #[test]
    fn a_live_exporter_is_watched_until_it_ends() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let exporter = Exporter::of(&naming(child.id())).expect("a live process");
        assert!(!exporter.is_gone());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(exporter.is_gone());
    }

    #[test]
    fn a_handle_naming_this_process_or_none_has_no_exporter() {
        assert_eq!(Exporter::of(&naming(std::process::id())), None);
        assert_eq!(Exporter::of(&naming(0)), None);
    }

    /// An exporter whose main thread ended (`pthread_exit`) while its other threads, and their CUDA
    /// work, go on shows state Z in `/proc/PID/stat` (a zombie thread-group leader): it is alive,
    /// not gone, or every wait on its pending work would answer `ExporterGone`.
    #[test]
    fn an_exporter_whose_main_thread_exited_is_not_gone_while_its_threads_run() {
        // SAFETY: the child spawns one thread and ends its main thread; it calls nothing else of
        // the parent's state, and its thread `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            std::thread::spawn(|| {
                std::thread::sleep(std::time::Duration::from_secs(3));
                // SAFETY: ends the child.
                unsafe { libc::_exit(0) };
            });
            // SAFETY: the raw `exit` system call ends only the calling thread (no unwinding, as
            // `pthread_exit` would do through the test harness); the process lives on.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
        }
        let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = || {
            stat()
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next()
        };
        let start = std::time::Instant::now();
        while state() != Some('Z') && start.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let leader = state();
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count())
            .unwrap_or(0);
        let exporter = Exporter::of(&naming(pid as u32));
        let gone_while_running = exporter.map(|e| e.is_gone());
        let mut status = 0;
        // SAFETY: waits for the child forked above, writing through a live local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(status, 0, "the child ended by its other thread's _exit(0)");
        assert_eq!(leader, Some('Z'), "the leader is a zombie");
        assert!(
            threads >= 2,
            "the child's other thread is alive ({threads} tasks)"
        );
        assert!(exporter.is_some_and(|e| e.is_gone()), "gone once it ended");
        assert!(
            gone_while_running == Some(false),
            "a live exporter (main thread exited, {threads} thread(s) running) is watched as gone: {exporter:?}"
        );
    }
}
