//! What a test measures its own cost with: CPU time of a thread or of the process, and resident
//! memory; and `CLOCK_MONOTONIC`, the clock a benchmark shares with the CUPTI referee's records.

use std::time::Duration;

/// `CLOCK_MONOTONIC` in nanoseconds (what `Instant` reads on Linux): the clock on which
/// `bench/cupti_referee/` puts CUPTI's records.
pub fn monotonic_ns() -> u128 {
    clock(libc::CLOCK_MONOTONIC).as_nanos()
}

/// The clock `id`, as `clock_gettime` reads it.
fn clock(id: libc::clockid_t) -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes a timespec through a live local.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut t) }, 0);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// CPU time (user + system) of the calling thread, to the scheduler's nanosecond: `clock_gettime`
/// adds the running slice, which `getrusage` counts only at the next tick, so windows of a
/// millisecond read right too.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) of the whole process, every thread. Another thread's running slice
/// counts only from its next tick or switch: read over windows of many ticks.
pub fn process_cpu_time() -> Duration {
    cpu_time(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of `who`, as `getrusage` counts it.
fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: getrusage writes the struct through a pointer to a live, zeroed local.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(who, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Resident memory of this process, in KiB (VmRSS of /proc/self/status).
pub fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
