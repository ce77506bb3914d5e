#!/usr/bin/env python3
"""The calibration table's Python columns: the calibration benchmark's kernels and memsets timed by
triton's do_bench and do_bench_cudagraph, and by PyTorch's profiler (CUPTI) around plain launches
of the same calls, in one run.

usage: calibration_triton.py KNOWN_LENGTHS_BINARY OUT_DIR
(KNOWN_LENGTHS_BINARY's `--ptx` is the test kit's spinning kernel, the one the benchmark launches;
writes OUT_DIR/triton.json: per row name, do_bench's and do_bench_cudagraph's medians and the
profiler's median kernel or memset time, in us)
"""
import json
import os
import statistics
import sys

import torch

from graph_validation import spin_kernel_calls, triton_medians
from timer_validation import memset_and_copy

LENGTHS_US = [0, 1, 2, 5, 10, 100]
MEMSETS = [("memset 4 KiB", 4 << 10), ("memset 1 MiB", 1 << 20), ("memset 64 MiB", 64 << 20)]


def memset_calls():
    rt, big, _, _ = memset_and_copy()

    def memset(n):
        def fn():
            assert rt.cudaMemsetAsync(big.data_ptr(), 0x5A, n, torch.cuda.current_stream().cuda_stream) == 0
        fn.keep = big
        return fn

    return [(name, memset(n)) for name, n in MEMSETS]


def profiled_us(fn, launches=300):
    """The median GPU time (us) of the kernel or memset `fn` launches, by torch.profiler (CUPTI),
    over `launches` launches, each after the last completed (a cold, idle launch as measure's)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(launches):
            fn()
            torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    times = [t for t in times if t is not None]
    return statistics.median(times) if times else None


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    calls = spin_kernel_calls(binary, {f"kernel {us} us": us for us in LENGTHS_US}) + memset_calls()
    out = triton_medians(calls)
    for name, fn in calls:
        out[name]["profiler"] = profiled_us(fn)
        print(name, out[name], flush=True)
    with open(os.path.join(out_dir, "triton.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
