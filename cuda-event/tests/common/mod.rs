//! Helpers for the GPU tests: serializing them, holding a stream, real GPU work, child processes.
#![allow(dead_code)] // each test binary uses a different part

use cuda_event::{DeviceGuard, Stream, sys};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::ffi::c_void;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

/// How long one GPU test (or a child process of one) may take before its process is ended, so a
/// hang fails the run instead of stalling it.
const DEADLINE: Duration = Duration::from_secs(30);

/// Held by a running GPU test: it serializes the GPU tests of one binary (CUDA runs a context's host
/// functions on one thread, so a held stream of one test would delay another's timing) and ends the
/// process if the test outlives [`DEADLINE`].
pub struct GpuTest {
    _serial: MutexGuard<'static, ()>,
    _watchdog: Watchdog,
}

/// Ends the process unless dropped within the deadline.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

pub fn watchdog(what: &str) -> Watchdog {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let what = what.to_string();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(DEADLINE) {
            eprintln!("{what}: still running after {DEADLINE:?}, ending the process");
            std::process::exit(124);
        }
    });
    Watchdog(Some(done))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

/// Starts a GPU test: checks that a GPU is there and serializes it with the binary's others.
pub fn gpu() -> GpuTest {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock();
    let name = std::thread::current().name().unwrap_or("a GPU test").to_string();
    let count = cuda_event::device_count().unwrap_or_else(|e| panic!("this GPU test needs a CUDA GPU: {e}"));
    assert!(count >= 1, "this GPU test needs a CUDA GPU, found none");
    GpuTest {
        _serial: serial,
        _watchdog: watchdog(&name),
    }
}

/// Like [`gpu`], for the tests that need two GPUs: fails clearly with fewer.
pub fn two_gpus() -> GpuTest {
    let test = gpu();
    let count = cuda_event::device_count().unwrap();
    assert!(
        count >= 2,
        "this multi_gpu test needs two GPUs, {count} visible (skip it with --skip multi_gpu)"
    );
    test
}

/// A new event built with `enable_timing`.
pub fn timed() -> cuda_event::Event {
    cuda_event::Event::builder().enable_timing(true).build().unwrap()
}

/// Holds a stream: work queued after [`hold`] waits until the gate opens (or the Gate drops).
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub fn open(&self) {
        *self.0.0.lock() = true;
        self.0.1.notify_all();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

unsafe extern "C" fn wait_for_gate(data: *mut c_void) {
    // SAFETY: `data` is the Arc that `hold` leaked for this one call.
    let gate = unsafe { Arc::from_raw(data as *const (Mutex<bool>, Condvar)) };
    let mut open = gate.0.lock();
    while !*open {
        gate.1.wait(&mut open);
    }
}

/// Queues on `stream` a host function that waits for the returned gate to open.
pub fn hold(stream: &Stream) -> Gate {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let data = Arc::into_raw(gate.clone()) as *mut c_void;
    // SAFETY: the host function takes back the Arc it is given; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(wait_for_gate), data) });
    Gate(gate)
}

unsafe extern "C" fn sleep_for(data: *mut c_void) {
    std::thread::sleep(Duration::from_micros(data as u64));
}

/// Queues on `stream` a host function that sleeps for `duration`.
pub fn sleep_on(stream: &Stream, duration: Duration) {
    let micros = duration.as_micros() as usize as *mut c_void;
    // SAFETY: the host function reads its argument as a number; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(sleep_for), micros) });
}

unsafe extern "C" fn push_to(data: *mut c_void) {
    // SAFETY: `data` is the boxed (log, value) pair `log_on` leaked for this one call.
    let (log, value) = *unsafe { Box::from_raw(data as *mut (Arc<Mutex<Vec<u32>>>, u32)) };
    log.lock().push(value);
}

/// Queues on `stream` a host function that appends `value` to `log` when the stream reaches it.
pub fn log_on(stream: &Stream, log: &Arc<Mutex<Vec<u32>>>, value: u32) {
    let data = Box::into_raw(Box::new((log.clone(), value))) as *mut c_void;
    // SAFETY: the host function takes back the box it is given; the stream is live.
    ok(unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(push_to), data) });
}

/// Device memory for real GPU work; freed on drop.
pub struct DeviceBuffer {
    ptr: *mut c_void,
    len: usize,
    device: i32,
}

impl DeviceBuffer {
    pub fn new(device: i32, len: usize) -> DeviceBuffer {
        let _guard = DeviceGuard::new(device).unwrap();
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes the allocation through a live local.
        ok(unsafe { sys::cudaMalloc(&mut ptr, len) });
        DeviceBuffer { ptr, len, device }
    }

    /// Queues a cudaMemsetAsync over the whole buffer (an H200 fills about 3 TB/s).
    pub fn memset(&self, stream: &Stream, value: u8) {
        // SAFETY: the buffer is len bytes of device memory that outlives the queued work (drop syncs).
        ok(unsafe { sys::cudaMemsetAsync(self.ptr, value.into(), self.len, stream.as_raw()) });
    }

    /// Copies the first `n` bytes back to the host (synchronously).
    pub fn read(&self, n: usize) -> Vec<u8> {
        let mut host = vec![0u8; n];
        let _guard = DeviceGuard::new(self.device).unwrap();
        // SAFETY: both regions are at least n bytes; the legacy stream orders after prior work.
        ok(unsafe {
            sys::cudaMemcpyAsync(
                host.as_mut_ptr().cast(),
                self.ptr,
                n,
                sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                sys::cudaStreamLegacy,
            )
        });
        ok(unsafe { sys::cudaStreamSynchronize(sys::cudaStreamLegacy) });
        host
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _guard = DeviceGuard::new(self.device).unwrap();
        // SAFETY: frees the allocation made in new, after all work on the device is done. Errors
        // (a context poisoned on purpose by a fault test) leave nothing to free.
        unsafe {
            let _ = sys::cudaDeviceSynchronize();
            let _ = sys::cudaFree(self.ptr);
        }
    }
}

pub fn ok(code: sys::cudaError_t) {
    assert_eq!(
        code,
        sys::cudaError::cudaSuccess,
        "CUDA runtime call failed: {}",
        code.0
    );
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct through a pointer to a live, zeroed local.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU time of this thread and wall time over a synchronize of an event recorded behind 200 ms of
/// stream work (a sleeping host function), with a blocking or a spinning event.
pub fn cpu_and_wall_of_a_200ms_synchronize(blocking: bool) -> (Duration, Duration) {
    let stream = Stream::new(0).unwrap();
    let event = cuda_event::Event::builder().blocking(blocking).build().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap(); // created and warm
    sleep_on(&stream, Duration::from_millis(200));
    event.record(&stream).unwrap();
    let (cpu, wall) = (thread_cpu_time(), std::time::Instant::now());
    event.synchronize().unwrap();
    (thread_cpu_time() - cpu, wall.elapsed())
}

/// Checks that `event.wait(b)` orders work on `b` after the held work of `a` that the event
/// recorded: host functions on each stream log 1 (on `a`) and 2 (on `b`) in that order.
pub fn check_wait_orders_b_after_a(a: &Stream, b: &Stream) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = hold(a);
    log_on(a, &log, 1);
    let event = a.record_event().unwrap();
    event.wait(b).unwrap();
    log_on(b, &log, 2);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(b.query(), Ok(false), "b must wait for a's held work");
    assert!(log.lock().is_empty());
    gate.open();
    b.synchronize().unwrap();
    assert_eq!(*log.lock(), vec![1, 2]);
}

/// The environment variable that tells a test binary re-run as a child which part to play.
pub const ROLE: &str = "CUDA_EVENT_TEST_ROLE";

/// The role this process plays, if it is a child; a child also gets a watchdog.
pub fn role() -> Option<String> {
    let role = std::env::var(ROLE).ok()?;
    std::mem::forget(watchdog(&format!("child ({role})")));
    Some(role)
}

/// Re-runs this test binary as a child that runs only `test`, with `role` and extra environment.
/// Its stdout is piped to the parent; its stderr goes to the parent's.
pub fn spawn_child(test: &str, role: &str, envs: &[(&str, &str)]) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Runs a child (see [`spawn_child`]) to completion and checks that it passed.
pub fn run_child(test: &str, role: &str, envs: &[(&str, &str)]) -> Output {
    let output = spawn_child(test, role, envs).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child {test} ({role}) failed ({}):\n{text}",
        output.status
    );
    assert!(
        text.contains("1 passed"),
        "child {test} ({role}) did not run its test:\n{text}"
    );
    output
}
