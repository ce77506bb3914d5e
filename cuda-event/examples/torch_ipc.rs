//! Interprocess CUDA events shared with PyTorch both ways: torch exports an event and this process's
//! stream waits on it; this process exports an event and torch's stream waits on it. The Python side
//! is `torch_ipc.py` beside this file, run as a child over pipes. Each side checks that the other's
//! event really held its stream.
//!
//! cargo run -p cuda-event --example torch_ipc     (python3 with torch, and a GPU)
//!
//! Without a GPU, or without torch, it exits with status 1 and one line naming what is missing.

use cuda_event::{Event, IpcEventHandle, Stream, sys};
use std::error::Error;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

const SCRIPT: &str = include_str!("torch_ipc.py");

fn main() {
    if let Err(e) = run() {
        eprintln!("torch_ipc: {e}");
        std::process::exit(1);
    }
}

/// Runs both directions against a `python3` child; the lines it prints are the example's output.
fn run() -> Result<(), Box<dyn Error>> {
    cuda_event::device_count()?;
    let mut torch = Torch::start()?;
    let stream = Stream::new(0)?;

    // 1. torch exports, Rust waits.
    let handle: IpcEventHandle = torch.expect("torch-exported")?.parse()?;
    let theirs = Event::from_ipc_handle(0, handle)?;
    stream.wait_event(&theirs)?;
    let after = stream.record_event()?;
    let held = !after.query()?;
    let start = Instant::now();
    after.synchronize()?;
    let waited = start.elapsed();
    torch.send(&format!("rust-waited {}", waited.as_secs_f64() * 1e3))?;
    println!(
        "torch exports, Rust waits: Rust's stream held by torch's event: {held}, for {:.1} ms more",
        waited.as_secs_f64() * 1e3
    );
    if !held {
        return Err("Rust's stream was not held by torch's event".into());
    }

    // 2. Rust exports, torch waits: Rust's stream is held until torch has queued its wait.
    let release = hold(&stream)?;
    let ours = Event::builder().interprocess(true).build()?;
    ours.record(&stream)?;
    torch.send(&format!("rust-exported {}", ours.ipc_handle()?))?;
    let state = torch.expect("torch-waiting")?;
    let _ = release.send(());
    torch.send("rust-released")?;
    let ms = torch.expect("torch-done")?;
    println!("Rust exports, torch waits: torch's stream {state} by Rust's event, released after {ms} ms");
    torch.finish()?;
    if state != "held" {
        return Err("torch's stream was not held by Rust's event".into());
    }
    Ok(())
}

/// The Python side: a `python3` child reading and writing one message a line.
struct Torch {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Torch {
    fn start() -> Result<Torch, Box<dyn Error>> {
        let mut child = Command::new("python3")
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        let to = child.stdin.take().expect("piped");
        let from = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Torch { child, to, from })
    }

    fn send(&mut self, line: &str) -> Result<(), Box<dyn Error>> {
        writeln!(self.to, "{line}")?;
        Ok(())
    }

    /// The rest of the next line, which must start with `word`.
    fn expect(&mut self, word: &str) -> Result<String, Box<dyn Error>> {
        let mut line = String::new();
        self.from.read_line(&mut line)?;
        match line.trim().split_once(' ') {
            Some((first, rest)) if first == word => Ok(rest.to_string()),
            _ => {
                Err(format!("expected {word:?} from torch_ipc.py, got {line:?} (is torch installed?)").into())
            }
        }
    }

    fn finish(mut self) -> Result<(), Box<dyn Error>> {
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("torch_ipc.py ended with {status}").into());
        }
        Ok(())
    }
}

/// Holds `stream` with a host function until the returned sender sends (or is dropped). The host
/// function only waits on a channel: it calls no CUDA, as CUDA requires.
fn hold(stream: &Stream) -> Result<mpsc::Sender<()>, Box<dyn Error>> {
    unsafe extern "C" fn wait(data: *mut c_void) {
        // SAFETY: `data` is the receiver `hold` leaked for this one call.
        let released = unsafe { Box::from_raw(data.cast::<mpsc::Receiver<()>>()) };
        let _ = released.recv();
    }
    let (release, released) = mpsc::channel();
    let data = Box::into_raw(Box::new(released)).cast::<c_void>();
    // SAFETY: the stream is live; CUDA calls `wait` exactly once with `data`, which it takes back.
    let code = unsafe { sys::cudaLaunchHostFunc(stream.as_raw(), Some(wait), data) };
    if let Err(e) = cuda_event::check_runtime("cudaLaunchHostFunc", code) {
        // SAFETY: CUDA refused the call, so `wait` never runs and the receiver is still ours.
        drop(unsafe { Box::from_raw(data.cast::<mpsc::Receiver<()>>()) });
        return Err(e.into());
    }
    Ok(release)
}
