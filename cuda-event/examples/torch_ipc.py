"""The PyTorch side of the torch_ipc example (cuda-event/examples/torch_ipc.rs), which runs this
file as `python3 -c <its text>` and talks to it over stdin/stdout, one message a line.

1. torch exports, Rust waits: torch's stream sleeps (a spinning kernel), then records an
   interprocess event; Rust imports it and makes its own stream wait on it.
2. Rust exports, torch waits: Rust's stream is held by a host function until torch says it is
   waiting; torch imports Rust's event, makes its stream wait on it, and reports that its stream is
   held until Rust releases its own.
"""
import sys
import time

import torch


def send(*words):
    print(*words, flush=True)


def receive(expected):
    words = sys.stdin.readline().split()
    if not words or words[0] != expected:
        sys.exit(f"torch_ipc.py: expected {expected!r}, got {words!r}")
    return words[1:]


device = torch.device("cuda", 0)
torch.cuda.set_device(device)
stream = torch.cuda.Stream(device)

# 1. torch exports, Rust waits.
exported = torch.cuda.Event(interprocess=True)
with torch.cuda.stream(stream):
    torch.cuda._sleep(500_000_000)  # GPU clock cycles: about a quarter of a second on an H200
    exported.record(stream)
send("torch-exported", exported.ipc_handle().hex())
receive("rust-waited")
exported.synchronize()

# 2. Rust exports, torch waits.
(handle,) = receive("rust-exported")
imported = torch.cuda.Event.from_ipc_handle(device, bytes.fromhex(handle))
after = torch.cuda.Event()
stream.wait_event(imported)
after.record(stream)
time.sleep(0.05)  # time enough for a stream that was not held to finish
send("torch-waiting", "held" if not after.query() else "not-held")
receive("rust-released")
start = time.monotonic()
after.synchronize()
send("torch-done", f"{(time.monotonic() - start) * 1e3:.3f}")
