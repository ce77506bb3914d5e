//! Events shared between processes: the test binary re-runs itself as the importing child
//! (`current_exe()`, its role in an environment variable) and passes the handle as hex.

use cuda_event_testkit as common;

use common::{gpu, hold, role, sleep_on, spawn_child};
use cuda_event::{Error, Event, IpcEventHandle, Stream};
use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

const HANDLE: &str = "CUDA_EVENT_TEST_HANDLE";

fn interprocess() -> Event {
    Event::builder().interprocess(true).build().unwrap()
}

fn handle_from_parent() -> IpcEventHandle {
    std::env::var(HANDLE).unwrap().parse().unwrap()
}

/// The exporter a test kills: in the child (role "doomed-exporter"), an interprocess event recorded
/// behind 20 s of GPU sleep (it never completes: the process is killed first), its handle printed,
/// then a wait to be killed (`None`); in the parent, the GPU test's guard, the child, and the
/// handle it printed.
fn doomed_exporter(test: &str) -> Option<(common::GpuTest, Child, IpcEventHandle)> {
    if role().as_deref() == Some("doomed-exporter") {
        let stream = Stream::new(0).unwrap();
        let event = interprocess();
        sleep_on(&stream, Duration::from_secs(20));
        event.record(&stream).unwrap();
        println!("handle {}", event.ipc_handle().unwrap());
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line); // until killed
        return None;
    }
    let gpu = gpu();
    let mut child = spawn_child(test, "doomed-exporter", &[]);
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let handle = loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the exporter ended early"
        );
        if let Some(hex) = line.trim_end().split("handle ").nth(1) {
            break hex.parse::<IpcEventHandle>().unwrap();
        }
    };
    Some((gpu, child, handle))
}

/// Reads the child's stdout until a line equals `marker`; panics with the output if it ends first.
fn wait_for_line(child: &mut Child, marker: &str) -> BufReader<std::process::ChildStdout> {
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            panic!("child ended ({status}) before {marker:?}:\n{seen}");
        }
        seen.push_str(&line);
        // libtest prints "test NAME ... " before the test runs, so the marker may end that line.
        if line.trim_end().ends_with(marker) {
            return reader;
        }
    }
}

fn finish(mut child: Child, mut rest: BufReader<std::process::ChildStdout>) {
    let mut out = String::new();
    std::io::Read::read_to_string(&mut rest, &mut out).unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success() && out.contains("1 passed"),
        "child failed ({status}):\n{out}"
    );
}

/// The importer synchronizes on the exporter's record while the exporter's stream is held by a
/// host function that waits for the importer: the gate opens only after the importer has queried
/// (and 100 ms more). The Rust twin of systest/tests/ipc_hold.rs's C case.
#[test]
#[ignore = "needs a CUDA GPU"]
fn importer_synchronizes_on_the_exporters_record() {
    let test = common::this_test!();
    if role().as_deref() == Some("importer") {
        eprintln!("importer: opening");
        let event = Event::from_ipc_handle(0, handle_from_parent()).unwrap();
        eprintln!("importer: opened {event:?}");
        assert_eq!(event.query(), Ok(false), "the exporter's stream is held");
        println!("queried");
        let started = Instant::now();
        event.synchronize().unwrap();
        eprintln!("importer: waited {:?}", started.elapsed());
        assert!(
            started.elapsed() >= Duration::from_millis(90),
            "the wait was too short"
        );
        assert_eq!(event.query(), Ok(true));
        // An imported event never times; its handle is the one it was opened with.
        assert_eq!(event.elapsed_time(&event), Err(Error::NotTimingEvent));
        assert_eq!(event.ipc_handle(), Ok(handle_from_parent()));
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = interprocess();
    let gate = hold(&stream);
    event.record(&stream).unwrap();
    let handle = event.ipc_handle().unwrap().to_string();
    eprintln!("exporter: {event:?} exported {handle}");
    let mut child = spawn_child(test, "importer", &[(HANDLE, &handle)]);
    let rest = wait_for_line(&mut child, "queried");
    std::thread::sleep(Duration::from_millis(100));
    gate.open();
    finish(child, rest);
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn importer_records_and_exporter_waits() {
    let test = common::this_test!();
    if role().as_deref() == Some("recorder") {
        eprintln!("recorder: opening");
        let event = Event::from_ipc_handle(0, handle_from_parent()).unwrap();
        eprintln!("recorder: opened {event:?}");
        let stream = Stream::new(0).unwrap();
        sleep_on(&stream, Duration::from_millis(500));
        event.record(&stream).unwrap();
        println!("recorded");
        stream.synchronize().unwrap();
        return;
    }
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = interprocess();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    let handle = event.ipc_handle().unwrap().to_string();
    let mut child = spawn_child(test, "recorder", &[(HANDLE, &handle)]);
    let rest = wait_for_line(&mut child, "recorded");
    let started = Instant::now();
    assert_eq!(event.query(), Ok(false), "the importer's record is pending");
    // Work on this process's stream waits for the importer's record too.
    let waiter = Stream::new(0).unwrap();
    event.wait(&waiter).unwrap();
    event.synchronize().unwrap();
    waiter.synchronize().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "synchronize returned after {:?}",
        started.elapsed()
    );
    assert_eq!(event.query(), Ok(true));
    finish(child, rest);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn importing_a_handle_this_process_exported_is_refused() {
    let _gpu = gpu();
    let event = interprocess();
    let handle = event.ipc_handle().unwrap();
    assert_eq!(
        event.device(),
        Some(cuda_event::current_device().unwrap()),
        "ipc_handle creates on the current device"
    );
    assert_eq!(
        Event::from_ipc_handle(0, handle).err(),
        Some(Error::IpcHandleFromThisProcess)
    );
    // The text form is the same handle.
    let parsed: IpcEventHandle = handle.to_string().parse().unwrap();
    assert_eq!(
        Event::from_ipc_handle(0, parsed).err(),
        Some(Error::IpcHandleFromThisProcess)
    );
}

/// The exporter is killed (SIGKILL) while an importer synchronizes on its event, another thread
/// of the importer polls it with query, and a third awaits its completion. CUDA alone never completes the event and never returns from
/// cuEventSynchronize (measured: still waiting 10 s later); the imported event watches its exporter
/// and all three return `ExporterGone` soon after the kill (the figures are printed). Dropping the
/// imported event afterwards does not crash.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_an_importer_survives_the_exporter_being_killed() {
    if common::skip_under_sanitizer(
        "kills the exporting process, on purpose: CUDA reports the importer's calls on its event",
    ) {
        return;
    }
    let test = common::this_test!();
    let Some((_gpu, mut child, handle)) = doomed_exporter(test) else {
        return;
    };
    let pid_in_handle = u32::from_le_bytes(handle.as_bytes()[..4].try_into().unwrap());
    println!(
        "exporter pid {}, the handle's first four bytes {pid_in_handle}",
        child.id()
    );
    let event = std::sync::Arc::new(Event::from_ipc_handle(0, handle).unwrap());
    assert_eq!(event.query(), Ok(false), "the exporter's stream is held");
    let (done, outcomes) = std::sync::mpsc::channel();
    for what in ["synchronize", "query", "await"] {
        let (event, done) = (event.clone(), done.clone());
        std::thread::spawn(move || {
            let mut queries = 0u64;
            let result = match what {
                "synchronize" => event.synchronize().map(|()| true),
                "await" => common::block_on(event.completion()).map(|()| true),
                _ => loop {
                    queries += 1;
                    match event.query() {
                        Ok(false) => std::thread::sleep(Duration::from_millis(1)),
                        other => break other,
                    }
                },
            };
            let _ = done.send((what, result, Instant::now(), queries));
        });
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    child.wait().unwrap();
    for _ in 0..3 {
        let Ok((what, result, at, queries)) = outcomes.recv_timeout(Duration::from_secs(10)) else {
            panic!("an importer call still waits 10 s after its exporter was killed");
        };
        let after = at.duration_since(killed);
        println!("importer {what} returned {result:?} {after:?} after the kill ({queries} queries)");
        assert_eq!(
            result,
            Err(Error::ExporterGone {
                pid: child.id() as i32
            }),
            "{what}"
        );
        assert!(after < Duration::from_secs(1), "{what} took {after:?}");
    }
    drop(event);
    println!("drop errors: {:?}", cuda_event::drop_errors::take_drop_errors());
}

/// The exporter is killed after handing out its handle and before the import, and not yet reaped
/// (a zombie: the importer is its parent). The imported event watches it as gone, so its
/// `synchronize` returns (`ExporterGone`, or done) instead of CUDA's wait, which never returns for
/// a dead exporter's pending work. Passes if the open itself fails.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fault_an_exporter_killed_before_the_import_is_noticed() {
    if common::skip_under_sanitizer("kills the exporting process, on purpose") {
        return;
    }
    let test = common::this_test!();
    let Some((_gpu, mut child, handle)) = doomed_exporter(test) else {
        return;
    };
    child.kill().unwrap(); // SIGKILL, not reaped: a zombie until child.wait()
    std::thread::sleep(Duration::from_millis(500)); // torn down
    let event = match Event::from_ipc_handle(0, handle) {
        Ok(event) => event,
        Err(e) => {
            println!("the open failed, nothing to wait on: {e}");
            child.wait().unwrap();
            return;
        }
    };
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(event.synchronize());
    });
    let outcome = result.recv_timeout(Duration::from_secs(10));
    child.wait().unwrap();
    assert!(
        outcome.is_ok(),
        "synchronize of an event whose exporter died before the import still waits after 10 s"
    );
}
