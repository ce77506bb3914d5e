//! The IPC hold case reproduced in C (c/ipc_hold.c): does an importer's query or synchronize wait
//! for a host function that holds the exporter's stream? Each side runs in its own process (this
//! binary again, with a role), all CUDA calls in C; this harness only relays lines between them and
//! times out.
//!
//! What it pins (measured on 2x H200, driver 580, CUDA 13.0 and 12.9; the figures are printed):
//! the importer's open, query and synchronize do not depend on the exporter's host-function thread.
//! With the host function blocked until the importer has queried, the query answered NotReady at
//! once and the synchronize returned 0.3-0.5 ms after the importer's "queried" released it: no hang
//! in CUDA.

use cuda_event_testkit as common;

use common::{gpu, role};
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc;
use std::time::Duration;

const TEST: &str = "ipc_hold_in_c";
const HANDLE: &str = "CUDA_EVENT_TEST_HANDLE";
const HOLD: &str = "CUDA_EVENT_TEST_HOLD";

fn spawn(role: &str, envs: &[(&str, &str)]) -> std::process::Child {
    common::spawn_child(TEST, role, envs)
}

/// Sends each line of `child`'s stdout to `lines`, tagged with `who`.
fn relay(who: &'static str, child: &mut std::process::Child, lines: mpsc::Sender<(&'static str, String)>) {
    let out = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if lines.send((who, line)).is_err() {
                break;
            }
        }
    });
}

/// One run with the exporter's host function blocking (`hold` 0) or sleeping (1). Returns what the
/// importer printed, or panics naming the step that did not return within 10 s.
fn run(hold: i32) -> Vec<String> {
    let mut exporter = spawn("c-exporter", &[(HOLD, &hold.to_string())]);
    let (send, lines) = mpsc::channel();
    relay("exporter", &mut exporter, send.clone());
    let recv = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("hold {hold}: nothing within 10 s while waiting for {what}"))
    };
    let handle = loop {
        let (_, line) = recv("the handle");
        if let Some(hex) = line.split("handle ").nth(1) {
            break hex.trim().to_string();
        }
    };
    let mut importer = spawn("c-importer", &[(HANDLE, &handle)]);
    relay("importer", &mut importer, send);
    let mut said = Vec::new();
    let mut importer_done = false;
    while !importer_done {
        let (who, line) = recv(
            said.last()
                .map_or("the importer's open", |_| "the importer's next step"),
        );
        println!("hold {hold}: {who}: {line}");
        if who == "importer" {
            if line == "queried" {
                // The host function of hold 0 returns once it reads this line.
                let _ = writeln!(exporter.stdin.as_mut().unwrap(), "go");
            }
            importer_done = line.contains("synchronized after") || line.contains("failed");
            said.push(line);
        }
    }
    assert!(importer.wait().unwrap().success());
    let _ = writeln!(exporter.stdin.as_mut().unwrap(), "go");
    assert!(exporter.wait().unwrap().success());
    said
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ipc_hold_in_c() {
    match role().as_deref() {
        Some("c-exporter") => {
            let hold = std::env::var(HOLD).unwrap().parse().unwrap();
            // SAFETY: a C function taking an int; it makes and tears down its own CUDA objects.
            assert_eq!(unsafe { cuda_event_systest::ipc_hold_exporter(hold) }, 0);
            return;
        }
        Some("c-importer") => {
            let hex = std::ffi::CString::new(std::env::var(HANDLE).unwrap()).unwrap();
            // SAFETY: a NUL-terminated string that outlives the call.
            assert_eq!(unsafe { cuda_event_systest::ipc_hold_importer(hex.as_ptr()) }, 0);
            return;
        }
        _ => {}
    }
    let _gpu = gpu();
    // The sleeping hold is the control: how the importer sees it depends on how fast it started.
    run(1);
    // The blocking hold lasts until the importer has queried: its query must see the held work,
    // and neither call may wait for the exporter's host function (run panics after 10 s).
    let said = run(0);
    assert!(
        said.iter()
            .any(|l| l.starts_with("importer: query returned cudaErrorNotReady")),
        "the importer's query did not see the held work: {said:?}"
    );
}
