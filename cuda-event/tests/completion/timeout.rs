//! Bounded blocking waits: `synchronize_timeout` of events and streams.

use cuda_event_testkit as common;

use common::{gpu, gpu_sleep};
use cuda_event::{Event, Stream};
use std::time::{Duration, Instant};

/// `synchronize_timeout` of an event and of a stream: `Ok(false)` when the work is not done in
/// time, after waiting the whole timeout and not much more; `Ok(true)` once it is done, without
/// waiting out a longer timeout; `Ok(true)` at once for a never-recorded event.
#[test]
#[ignore = "needs a CUDA GPU"]
fn synchronize_timeout_says_false_when_time_runs_out_and_true_once_the_work_is_done() {
    let _gpu = gpu();
    assert_eq!(Event::new().synchronize_timeout(Duration::ZERO), Ok(true));
    let stream = Stream::new(0).unwrap();
    let (event, blocking) = (Event::new(), Event::builder().blocking(true).build().unwrap());
    for e in [&event, &blocking] {
        e.record(&stream).unwrap(); // created and warm
    }
    stream.synchronize().unwrap();
    let held = Instant::now();
    gpu_sleep(&stream, Duration::from_secs(1));
    for e in [&event, &blocking] {
        e.record(&stream).unwrap();
    }
    type Wait<'a> = Box<dyn Fn(Duration) -> cuda_event::Result<bool> + 'a>;
    let waits: [(&str, Wait); 3] = [
        ("Event", Box::new(|t| event.synchronize_timeout(t))),
        ("a blocking Event", Box::new(|t| blocking.synchronize_timeout(t))),
        ("Stream", Box::new(|t| stream.synchronize_timeout(t))),
    ];
    let timeout = Duration::from_millis(50);
    for (what, wait) in &waits {
        assert_eq!(
            wait(Duration::ZERO),
            Ok(false),
            "{what} with no time, on held work"
        );
        let start = Instant::now();
        assert_eq!(wait(timeout), Ok(false), "{what}, on held work");
        let took = start.elapsed();
        println!("{what}: Ok(false) after {took:?} of a {timeout:?} timeout");
        assert!(
            took >= timeout - Duration::from_millis(1),
            "{what}: Ok(false) after only {took:?}"
        );
        assert!(
            took < Duration::from_millis(250),
            "{what}: Ok(false) only after {took:?}"
        );
    }
    assert!(
        held.elapsed() < Duration::from_millis(900),
        "the checks above outlasted the hold"
    );
    for (what, wait) in &waits {
        assert_eq!(
            wait(Duration::from_secs(5)),
            Ok(true),
            "{what}, waiting for the work"
        );
        let took = held.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "{what}: Ok(true) {took:?} after 1 s of work began"
        );
        assert_eq!(
            wait(Duration::ZERO),
            Ok(true),
            "{what} with no time, on done work"
        );
    }
    assert!(
        held.elapsed() >= Duration::from_millis(990),
        "Ok(true) before the work was done"
    );
    assert_eq!(event.query(), Ok(true));
    assert_eq!(stream.query(), Ok(true));
}

/// `synchronize_timeout` honours the blocking flag: for a blocking event, a wait that times out
/// after 200 ms costs the waiting thread under 10% of a core, and no other thread spins for it
/// either (the whole process under 60%).
#[test]
#[ignore = "needs a CUDA GPU"]
fn synchronize_timeout_of_a_blocking_event_does_not_spin_a_core() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = Event::builder().blocking(true).build().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap(); // created and warm
    gpu_sleep(&stream, Duration::from_secs(1));
    event.record(&stream).unwrap();
    let (thread, process, wall) = (
        common::thread_cpu_time(),
        common::process_cpu_time(),
        Instant::now(),
    );
    assert_eq!(event.synchronize_timeout(Duration::from_millis(200)), Ok(false));
    let (thread, process, wall) = (
        common::thread_cpu_time() - thread,
        common::process_cpu_time() - process,
        wall.elapsed(),
    );
    println!(
        "a blocking event's 200 ms synchronize_timeout: {wall:?} wall, {thread:?} CPU on its thread, {process:?} in the process"
    );
    assert!(
        thread < wall / 10,
        "the waiting thread spun: {thread:?} of CPU in {wall:?}"
    );
    assert!(
        process < wall * 6 / 10,
        "a thread spun: the process used {process:?} of CPU in {wall:?}"
    );
    stream.synchronize().unwrap();
}

/// Each way of waiting (`synchronize_with`) on 200 ms of GPU work: `Ok(false)` at a 20 ms timeout,
/// then `Ok(true)` once the work is done; and its CPU cost as documented: the reactor's sleep
/// and a spin budget spend a small share of the wait on this thread, spinning spends nearly all.
#[test]
#[ignore = "needs a CUDA GPU"]
fn each_way_of_waiting_waits_for_the_work_and_costs_what_it_says() {
    use cuda_event::Wait;
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let budget = Duration::from_micros(50);
    for wait in common::every_wait(budget) {
        for on_stream in [false, true] {
            gpu_sleep(&stream, Duration::from_millis(200));
            let event = stream.record_event().unwrap();
            let sync = |timeout| match on_stream {
                true => stream.synchronize_with(wait, timeout),
                false => event.synchronize_with(wait, timeout),
            };
            assert_eq!(sync(Some(Duration::from_millis(20))), Ok(false), "{wait:?}");
            let (wall, cpu) = (Instant::now(), common::thread_cpu_time());
            assert_eq!(sync(None), Ok(true), "{wait:?}");
            let (wall, cpu) = (wall.elapsed(), common::thread_cpu_time() - cpu);
            let share = cpu.as_secs_f64() / wall.as_secs_f64();
            println!(
                "{wait:?}, on the stream {on_stream}: waited {wall:?}, {:.0}% of a core",
                100.0 * share
            );
            assert!(event.query().unwrap(), "{wait:?}");
            match wait {
                Wait::Spin => assert!(share > 0.5, "{wait:?}: {share}"),
                Wait::SpinThen { .. } | Wait::Reactor => assert!(share < 0.2, "{wait:?}: {share}"),
                _ => {}
            }
        }
    }
}
