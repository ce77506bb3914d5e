//! What cuda-event's tests, its wake benchmark and the system tests share: serializing GPU tests,
//! holding a stream, real GPU work, child processes. A crate of its own (not published) instead of a
//! file each test crate includes by path; cuda-event's packaged tests are those that need none of it.

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
#[derive(Debug)]
pub struct GpuTest {
    _serial: MutexGuard<'static, ()>,
    _watchdog: Watchdog,
}

/// Ends the process unless dropped within the deadline.
#[derive(Debug)]
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

pub fn watchdog(what: &str) -> Watchdog {
    watchdog_for(what, DEADLINE)
}

/// A [`watchdog`] with a deadline of its own.
pub fn watchdog_for(what: &str, deadline: Duration) -> Watchdog {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let what = what.to_string();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(deadline) {
            eprintln!("{what}: still running after {deadline:?}, ending the process");
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
    gpu_for(DEADLINE)
}

/// [`gpu`] for a test that may run up to `deadline`.
pub fn gpu_for(deadline: Duration) -> GpuTest {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock();
    let name = std::thread::current().name().unwrap_or("a GPU test").to_string();
    let count = cuda_event::device_count().unwrap_or_else(|e| panic!("this GPU test needs a CUDA GPU: {e}"));
    assert!(count >= 1, "this GPU test needs a CUDA GPU, found none");
    GpuTest {
        _serial: serial,
        _watchdog: watchdog_for(&name, deadline),
    }
}

/// Like [`gpu`], for the tests that need two GPUs: `None` with fewer, after saying on stdout that
/// the test was skipped (it then passes: a machine with one GPU runs the rest of the suite green),
/// unless `CUDA_EVENT_TEST_GPUS=2` (a run on two GPUs) requires them: then it fails.
pub fn two_gpus() -> Option<GpuTest> {
    two_gpus_for(DEADLINE)
}

/// [`two_gpus`] for a test that may run up to `deadline`.
pub fn two_gpus_for(deadline: Duration) -> Option<GpuTest> {
    let test = gpu_for(deadline);
    let count = cuda_event::device_count().unwrap();
    if count < 2 {
        let name = std::thread::current().name().unwrap_or("this test").to_string();
        assert!(
            !required("CUDA_EVENT_TEST_GPUS", "2"),
            "{name} needs two GPUs, {count} visible, and CUDA_EVENT_TEST_GPUS=2 requires them"
        );
        println!("skipped: {name} needs two GPUs, {count} visible");
        return None;
    }
    Some(test)
}

/// Whether the environment variable `name` is set to `value`: a run that requires what a test would
/// otherwise skip without (`CUDA_EVENT_TEST_GPUS=2`, `CUDA_EVENT_TEST_TORCH=1`).
pub fn required(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

/// A new event built with `enable_timing`.
pub fn timed() -> cuda_event::Event {
    cuda_event::Event::builder().enable_timing(true).build().unwrap()
}

/// Holds a stream: work queued after [`hold`] waits until the gate opens (or the Gate drops).
#[derive(Debug)]
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
#[derive(Debug)]
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

    /// Queues a cudaMemsetAsync over the whole buffer.
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
        // SAFETY: the legacy default stream of the current device, which always exists.
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

/// The name of the test function it is written in, as libtest knows it (its path in the test
/// crate): what a test that runs itself again as a child passes to [`run_child`] and the like, so
/// that its name is written once.
#[macro_export]
macro_rules! this_test {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.split_once("::").map_or(path, |(_test_crate, test)| test)
    }};
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
    child_command(test, role, envs).spawn().unwrap()
}

/// The command of [`spawn_child`], for a caller that changes its stdio before spawning.
pub fn child_command(test: &str, role: &str, envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
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
        .stderr(std::process::Stdio::inherit());
    command
}

/// For a test whose body runs in a child process of its own (a device reset, a dead context):
/// in the parent, runs the child as `role` under [`gpu`] and returns `None`; in the child, returns
/// `Some(())` so that the body runs. The child's stdout is printed by the parent.
pub fn in_a_child(test: &str, role: &str) -> Option<()> {
    if self::role().as_deref() == Some(role) {
        return Some(());
    }
    let _gpu = gpu();
    print!("{}", String::from_utf8_lossy(&run_child(test, role, &[]).stdout));
    None
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
        text.contains("running 1 test"),
        "the child ran no test named {test} ({role}):\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "child {test} ({role}) did not run its test:\n{text}"
    );
    output
}

/// A driver function: `F` is its `PFN_*` type from cudaTypedefs.h, and `version` the one that type
/// names.
pub fn driver_fn<F>(symbol: &std::ffi::CStr, version: u32) -> F {
    let function = cuda_event::driver_entry_point(symbol, version).unwrap();
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: F is the PFN type of this symbol at this version (the caller's promise), a function
    // pointer (or an Option of one) of a pointer's size.
    unsafe { std::mem::transmute_copy(&function) }
}

/// A kernel that executes `trap;`: it kills its context with a sticky error (PTX for any GPU since
/// sm_50, compiled by the driver: no nvcc needed).
const TRAP_PTX: &std::ffi::CStr = c".version 7.0
.target sm_50
.address_size 64
.visible .entry trap_kernel()
{
    trap;
}
";

fn driver_ok(call: &str, code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{call} failed: {}", code.0);
}

/// A kernel that spins on the GPU's global timer until the given number of nanoseconds has passed:
/// it holds a stream without a host function (CUDA runs every host function of a context on one
/// thread, so a host function that waits would hold back the others too).
const SLEEP_PTX: &std::ffi::CStr = c".version 7.0
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
";

/// The kernel `name` of `ptx`, loaded once per device into its primary context.
fn kernel(device: i32, ptx: &'static std::ffi::CStr, name: &'static std::ffi::CStr) -> usize {
    static KERNELS: Mutex<Vec<(i32, &'static std::ffi::CStr, usize)>> = Mutex::new(Vec::new());
    let mut kernels = KERNELS.lock();
    if let Some(&(_, _, kernel)) = kernels.iter().find(|k| k.0 == device && k.1 == name) {
        return kernel;
    }
    let _device = DeviceGuard::new(device).unwrap();
    // SAFETY: freeing null only makes the device's primary context current on this thread.
    ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
    let load: sys::PFN_cuModuleLoadData_v2000 = driver_fn(c"cuModuleLoadData", 2000);
    let get: sys::PFN_cuModuleGetFunction_v2000 = driver_fn(c"cuModuleGetFunction", 2000);
    let (mut module, mut kernel) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the PTX is NUL-terminated text; out-pointers are live locals. The module stays
    // loaded for the process.
    unsafe {
        driver_ok(
            "cuModuleLoadData",
            load.unwrap()(&mut module, ptx.as_ptr().cast()),
        );
        driver_ok(
            "cuModuleGetFunction",
            get.unwrap()(&mut kernel, module, name.as_ptr()),
        );
    }
    kernels.push((device, name, kernel as usize));
    kernel as usize
}

/// Launches `kernel` (one thread) on `stream` with `params` (pointers to each parameter).
fn launch(kernel: usize, stream: &Stream, params: &mut [*mut c_void]) {
    let launch: sys::PFN_cuLaunchKernel_v4000 = driver_fn(c"cuLaunchKernel", 4000);
    // The kernel's context current on this thread, as cuLaunchKernel wants it. A thread capturing
    // the stream has it current already, and must not call cudaFree (a capture refuses it).
    let _device = DeviceGuard::new(stream.device()).unwrap();
    if !stream.is_capturing().unwrap() {
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
    }
    let params = if params.is_empty() {
        std::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: a kernel of the stream's device's primary context, launched on a live stream with
    // the parameters its PTX declares.
    let code = unsafe {
        launch.unwrap()(
            kernel as _,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream.as_raw(),
            params,
            std::ptr::null_mut(),
        )
    };
    driver_ok("cuLaunchKernel", code);
}

/// Holds `stream` for `duration` with a kernel that waits on the GPU (no host function).
pub fn gpu_sleep(stream: &Stream, duration: Duration) {
    sleep_then_set(stream, duration, 0);
}

/// The busy-spinning kernel of known length that the `known_lengths` example ships, one file for
/// both (the path is inside the package's examples, so the example builds from the package).
#[path = "../../cuda-event/examples/support/spin_kernel.rs"]
mod spin_kernel;

/// Holds `stream` for `duration` with a kernel that reads the GPU's global timer in a tight loop
/// (no `nanosleep`): it ends within one pass of its loop after `duration`, the kernel for tests
/// that check a length within 1%. It keeps its warp busy the whole time; [`gpu_sleep`], whose
/// kernel sleeps between reads and so ends later than asked, is for long holds, where it spares
/// the SM. What a timer reads around either kernel also holds the GPU's starting and ending it.
pub fn gpu_spin(stream: &Stream, duration: Duration) {
    let mut ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let kernel = kernel(stream.device(), spin_kernel::SPIN_PTX, spin_kernel::SPIN_KERNEL);
    launch(kernel, stream, &mut [(&raw mut ns).cast()]);
}

/// The sleep kernel; then, unless `flag` is 0, a store of 1 to that (device) address.
fn sleep_then_set(stream: &Stream, duration: Duration, flag: u64) {
    let (mut ns, mut flag) = (duration.as_nanos() as u64, flag);
    let kernel = kernel(stream.device(), SLEEP_PTX, c"sleep_kernel");
    launch(
        kernel,
        stream,
        &mut [(&mut ns as *mut u64).cast(), (&mut flag as *mut u64).cast()],
    );
}

/// Words of pinned host memory that kernels set ([`gpu_sleep_then_set`]) and the host reads
/// without a CUDA call; all zero at first.
#[derive(Debug)]
pub struct HostFlags {
    host: *mut u32,
    device: u64,
    len: usize,
}

// SAFETY: the memory is plain pinned host memory, read and written only through volatile accesses
// of whole words; it lives until the value is dropped.
unsafe impl Send for HostFlags {}
// SAFETY: as for Send.
unsafe impl Sync for HostFlags {}

impl HostFlags {
    /// `len` flags, allocated in device 0's primary context (portable and mapped: with unified
    /// addressing, kernels of any device can set them).
    pub fn new(len: usize) -> HostFlags {
        let alloc: sys::PFN_cuMemHostAlloc_v2020 = driver_fn(c"cuMemHostAlloc", 2020);
        let map: sys::PFN_cuMemHostGetDevicePointer_v3020 = driver_fn(c"cuMemHostGetDevicePointer", 3020);
        let _device = DeviceGuard::new(0).unwrap();
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        ok(unsafe { sys::cudaFree(std::ptr::null_mut()) });
        let (mut host, mut device) = (std::ptr::null_mut(), 0);
        const PORTABLE_AND_MAPPED: u32 = 0x01 | 0x02;
        // SAFETY: out-pointers are live locals; the allocation is zeroed before any use and freed
        // by Drop.
        unsafe {
            driver_ok(
                "cuMemHostAlloc",
                alloc.unwrap()(&mut host, len.max(1) * 4, PORTABLE_AND_MAPPED),
            );
            std::ptr::write_bytes(host.cast::<u32>(), 0, len.max(1));
            driver_ok("cuMemHostGetDevicePointer", map.unwrap()(&mut device, host, 0));
        }
        HostFlags {
            host: host.cast(),
            device,
            len,
        }
    }

    /// Whether flag `i` was set.
    pub fn is_set(&self, i: usize) -> bool {
        assert!(i < self.len);
        // SAFETY: in bounds of the live allocation; a volatile read of a word the GPU may write.
        unsafe { std::ptr::read_volatile(self.host.add(i)) != 0 }
    }
}

impl Drop for HostFlags {
    /// Frees the memory; the owner waits first for every kernel that sets a flag (CUDA's free of
    /// pinned memory is not documented to wait for them). Errors are ignored: a drop during a
    /// panic must not panic again.
    fn drop(&mut self) {
        let free: sys::PFN_cuMemFreeHost_v2000 = driver_fn(c"cuMemFreeHost", 2000);
        let Ok(_device) = DeviceGuard::new(0) else {
            return;
        };
        // SAFETY: freeing null only makes the device's primary context current on this thread.
        let _ = unsafe { sys::cudaFree(std::ptr::null_mut()) };
        // SAFETY: the allocation made in new, freed once, in the context it was made in.
        let _ = unsafe { free.unwrap()(self.host.cast()) };
    }
}

/// [`gpu_sleep`], whose kernel then sets `flags`' word `i`: the host sees the work end by reading
/// memory, without a CUDA call (a reference that does not compete with the CUDA calls it times).
pub fn gpu_sleep_then_set(stream: &Stream, duration: Duration, flags: &HostFlags, i: usize) {
    assert!(i < flags.len);
    sleep_then_set(stream, duration, flags.device + 4 * i as u64);
}

/// Launches, on `stream`, a kernel that traps (and returns at once).
pub fn launch_trap(stream: &Stream) {
    launch(kernel(stream.device(), TRAP_PTX, c"trap_kernel"), stream, &mut []);
}

/// Launches, on `stream`, a kernel that traps, and waits until the context is dead: from then on
/// every call in the context returns the sticky error. Returns that error's code.
pub fn poison_the_context(stream: &Stream) -> u32 {
    launch_trap(stream);
    match stream.synchronize() {
        Err(cuda_event::Error::Cuda(e)) => {
            println!("the trap kernel poisoned the context: {e}");
            e.code()
        }
        other => panic!("the trap kernel did not fault: {other:?}"),
    }
}

/// Captures `work` on `stream` (thread-local mode) into a graph and instantiates it.
pub fn capture_graph(stream: &Stream, work: impl FnOnce()) -> Graph {
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mode = sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal;
    // SAFETY: captures the stream's work into a graph owned by the returned Graph.
    ok(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), mode) });
    work();
    // SAFETY: ends the capture begun above; writes the graph and its instance through live locals.
    unsafe {
        ok(sys::cudaStreamEndCapture(stream.as_raw(), &mut graph));
        ok(sys::cudaGraphInstantiate(&mut exec, graph, 0));
    }
    Graph { graph, exec }
}

/// A captured, instantiated CUDA graph; destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    graph: sys::cudaGraph_t,
    exec: sys::cudaGraphExec_t,
}

impl Graph {
    /// How many nodes the captured graph has (`cuGraphGetNodes`).
    pub fn node_count(&self) -> usize {
        node_count(self.graph)
    }

    pub fn launch(&self, stream: &Stream) {
        // SAFETY: a live graph instance and stream.
        ok(unsafe { sys::cudaGraphLaunch(self.exec, stream.as_raw()) });
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: the graph and its instance are live and destroyed once; launches have completed
        // (cudaGraphExecDestroy waits for none, but the tests synchronize first).
        unsafe {
            ok(sys::cudaGraphExecDestroy(self.exec));
            ok(sys::cudaGraphDestroy(self.graph));
        }
    }
}

/// Resident memory of this process, in KiB (VmRSS of /proc/self/status).
pub fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the system's loader knows a CUDA driver library (`ldconfig -p` lists `libcuda.so.1`):
/// asked apart from the crate, which asks `dlopen`.
pub fn driver_library_present() -> bool {
    let listed = Command::new("ldconfig").arg("-p").output();
    listed.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so.1"))
}

/// Runs `future` to completion on this thread (a waker that unparks it): for tests that need no
/// runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// Polls `future` once with a waker that does nothing: whether it is ready now.
pub fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(future).poll(&mut cx)
}

impl DeviceBuffer {
    /// Queues a device-to-device copy of `other` (no longer than this buffer) into this buffer.
    pub fn copy_from(&self, other: &DeviceBuffer, stream: &Stream) {
        assert!(other.len <= self.len);
        // SAFETY: both are live allocations of at least other.len bytes, outliving the work.
        ok(unsafe {
            sys::cudaMemcpyAsync(
                self.ptr,
                other.ptr,
                other.len,
                sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                stream.as_raw(),
            )
        });
    }
}

/// How many nodes a live graph has (`cuGraphGetNodes`).
fn node_count(graph: sys::cudaGraph_t) -> usize {
    type GetNodes = unsafe extern "C" fn(sys::cudaGraph_t, *mut *mut c_void, *mut usize) -> sys::CUresult;
    let get_nodes: GetNodes = driver_fn(c"cuGraphGetNodes", 10000);
    let mut count = 0;
    // SAFETY: a live graph; a null node array asks for the count only, written to a live local.
    driver_ok("cuGraphGetNodes", unsafe {
        get_nodes(graph, std::ptr::null_mut(), &mut count)
    });
    count
}

/// Begins a capture of `stream` on this thread in `mode` (end it with [`end_capture`]).
pub fn begin_capture(stream: &Stream, mode: sys::cudaStreamCaptureMode) {
    // SAFETY: a live stream; the caller ends the capture on this thread.
    ok(unsafe { sys::cudaStreamBeginCapture(stream.as_raw(), mode) });
}

/// Ends the capture of `stream` begun on this thread: the code `cudaStreamEndCapture` returned
/// and the graph it made (none when it failed, e.g. 901 for a capture another call invalidated).
pub fn end_capture(stream: &Stream) -> (sys::cudaError_t, Option<RawGraph>) {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a live stream under a capture begun on this thread; writes through a live local.
    let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut graph) };
    (code, (!graph.is_null()).then_some(RawGraph(graph)))
}

/// A captured graph, not instantiated (so never launched); destroyed on drop.
#[derive(Debug)]
pub struct RawGraph(pub sys::cudaGraph_t);

impl RawGraph {
    pub fn node_count(&self) -> usize {
        node_count(self.0)
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: a live graph, destroyed once. (No assert: this may run while a test unwinds.)
        let _ = unsafe { sys::cudaGraphDestroy(self.0) };
    }
}

/// A waker that counts its wake-ups.
#[derive(Debug, Default)]
pub struct CountingWaker {
    pub wakes: std::sync::atomic::AtomicUsize,
}

impl CountingWaker {
    pub fn count(&self) -> usize {
        self.wakes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A [`CountingWaker`] and a `Waker` made from it.
pub fn counting_waker() -> (Arc<CountingWaker>, std::task::Waker) {
    let counter = Arc::new(CountingWaker::default());
    (counter.clone(), std::task::Waker::from(counter))
}

/// A waker that counts its wake-ups and then panics.
#[derive(Debug, Default)]
pub struct PanickingWaker {
    pub wakes: std::sync::atomic::AtomicUsize,
}

impl PanickingWaker {
    pub fn count(&self) -> usize {
        self.wakes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl std::task::Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let n = self.wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        panic!("a waker that panics (wake-up {n}), on purpose");
    }
}

/// A [`PanickingWaker`] and a `Waker` made from it.
pub fn panicking_waker() -> (Arc<PanickingWaker>, std::task::Waker) {
    let counter = Arc::new(PanickingWaker::default());
    (counter.clone(), std::task::Waker::from(counter))
}

/// Polls `future` once with `waker`.
pub fn poll_with<F: std::future::Future + Unpin>(
    future: &mut F,
    waker: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(waker);
    std::pin::Pin::new(future).poll(&mut cx)
}

/// [`block_on`] that gives up after `timeout`: `None` if `future` was still pending then.
pub fn block_on_timeout<F: std::future::Future>(future: F, timeout: Duration) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let deadline = std::time::Instant::now() + timeout;
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// CPU time (user + system) of the whole process, every thread.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct through a pointer to a live, zeroed local.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Queues on `stream` a host function that signals when it starts and then waits until the
/// returned sender sends (or drops): it blocks CUDA's host-function thread of the context, which
/// runs every host function of it. Returns once that host function is running.
pub fn block_the_host_fn_thread(stream: &Stream) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started, running) = std::sync::mpsc::channel::<()>();
    stream
        .launch_host_fn(move || {
            let _ = started.send(());
            let _ = released.recv();
        })
        .unwrap();
    running
        .recv_timeout(Duration::from_secs(5))
        .expect("the blocking host function did not start within 5 s");
    release
}
