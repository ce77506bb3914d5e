#!/usr/bin/env python3
"""The referee for cuda-event's trace_clock benchmark: CUPTI's launch-to-start offset.

On the GPU machine (PyTorch with CUDA), under torch.profiler (CUPTI): every 50 ms a ~100 us
`torch.cuda._sleep` kernel on an idle stream, for 1 s and for SECONDS (default 60). CUPTI stamps the
host's cudaLaunchKernel call and the kernel's start on one clock; the offset (kernel start minus the
call's start, microseconds) is what cuda-event's trace places as a range's start minus the host's
time before its open, less the trace's placement error. Writes trace_clock_cupti.md to $OUT_DIR
(default: the current folder).

Usage: python3 bench/trace_clock_cupti.py [SECONDS]
"""
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile


def phase(seconds, cycles):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        nxt = start
        while time.perf_counter() - start < seconds:
            while time.perf_counter() < nxt:
                pass
            nxt += 0.05
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.unlink(path)
    launches, kernels = {}, {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if corr is None:
            continue
        if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", ""):
            launches[corr] = e["ts"]
        elif e.get("cat") == "kernel":
            kernels[corr] = (e["ts"], e.get("dur", 0))
    pairs = sorted((launches[c], kernels[c]) for c in launches if c in kernels)
    offsets = [k[0] - l for l, k in pairs]
    durations = [k[1] for _, k in pairs]
    return offsets, durations


def row(name, offsets, durations):
    v = sorted(offsets)
    at = lambda q: v[round((len(v) - 1) * q)]
    n = max(1, -(-len(offsets) // 10))
    tenths = " ".join(f"{statistics.median(offsets[i:i + n]):.1f}" for i in range(0, len(offsets), n))
    return (f"| {name} | {len(v)} | {at(0.5):.1f} | {at(0.01):.1f} | {at(0.99):.1f} | {v[0]:.1f} | {v[-1]:.1f} "
            f"| {statistics.median(durations):.1f} | {tenths} |")


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    torch.cuda.init()
    # Cycles for about 100 us, from a timed run of the sleep kernel.
    cycles = 200_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    cycles = int(cycles * 0.1 / start.elapsed_time(end))
    phase(1, cycles)  # warm: CUPTI's own first use
    lines = [
        "# CUPTI's launch-to-start offset (PyTorch's profiler)",
        "",
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"torch.cuda._sleep({cycles}) every 50 ms. Offset: the kernel's start minus the start of the "
        "host's cudaLaunchKernel call, microseconds, both CUPTI's.",
        "",
        "| phase | kernels | median | p1 | p99 | min | max | kernel us (median) | median per tenth |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in (("1 s", 1), (f"{seconds} s", seconds)):
        offsets, durations = phase(s, cycles)
        lines.append(row(name, offsets, durations))
        print(lines[-1], flush=True)
    out = os.path.join(os.environ.get("OUT_DIR", "."), "trace_clock_cupti.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
