"""PyTorch's torch.cuda.Event, timed the way systest/benches/events.rs times the Rust and C side:
median ns/call over 15 rounds after a warm-up, each round a fixed count of calls.

    python3 bench/torch_events.py OUT_DIR     (writes torch_events.json)
"""
import json
import statistics
import sys
import time

import torch

ROUNDS = 15


def per_call(fn, calls):
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    torch.cuda.init()
    stream, other = torch.cuda.Stream(), torch.cuda.Stream()
    plain = torch.cuda.Event()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    shared = torch.cuda.Event(interprocess=True)
    for event in (plain, start, end, shared):
        event.record(stream)
    stream.synchronize()

    def lazy():
        torch.cuda.Event().record(stream)

    ops = [
        ("new event + first record + drop", 2000, lazy),
        ("record, timing off", 2000, lambda: plain.record(stream)),
        ("record, timing on", 2000, lambda: start.record(stream)),
        ("query (complete)", 5000, plain.query),
        ("stream wait event", 2000, lambda: plain.wait(other)),
        ("synchronize (complete)", 5000, plain.synchronize),
        ("elapsed_time", 5000, lambda: start.elapsed_time(end)),
        ("ipc_handle", 5000, shared.ipc_handle),
    ]
    samples = {name: [] for name, _, _ in ops}
    for round_ in range(ROUNDS + 1):
        for name, calls, fn in ops:
            ns = per_call(fn, calls)
            if round_ > 0:
                samples[name].append(ns)
        torch.cuda.synchronize()
    result = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "rounds": ROUNDS,
        "ops": [{"op": name, "calls": calls, "ns": statistics.median(samples[name])} for name, calls, _ in ops],
    }
    with open(f"{out_dir}/torch_events.json", "w") as f:
        json.dump(result, f, indent=1)
    for op in result["ops"]:
        print(f"{op['op']:<34} {op['ns']:8.0f} ns")


if __name__ == "__main__":
    main()
