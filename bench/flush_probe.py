#!/usr/bin/env python3
"""Why does `measure` read a 1 MiB memset lower than do_bench? Times cudaMemsetAsync of 1 MiB with
do_bench's method (a torch.cuda.Event pair a repetition, 500 ms of repetitions, median) on a created
stream, with four flushes before each repetition: do_bench's (zero_ of 256 MB), a byte memset of
twice L2 (cudaMemsetAsync), measure's (cuMemsetD32Async of twice L2, value 0), and none; then the
quickstart's `measure` of the same call; three rounds, interleaved.

usage: flush_probe.py QUICKSTART_BINARY
"""
import ctypes
import json
import statistics
import subprocess
import sys

import torch

from timer_validation import NO_CLOCK, cudart

MIB = 1 << 20


def main():
    quickstart = sys.argv[1]
    rt = cudart()
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    target = torch.empty(4096 * MIB, dtype=torch.uint8, device="cuda")
    cache = torch.empty(256 * MIB, dtype=torch.int8, device="cuda")
    flush_buffer = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    s = stream.cuda_stream
    flushes = {
        "do_bench's zero_ of 256 MB": cache.zero_,
        "cudaMemsetAsync 2x L2": lambda: rt.cudaMemsetAsync(flush_buffer.data_ptr(), 0, 2 * l2, s),
        "cuMemsetD32Async 2x L2 (measure's)": lambda: cu.cuMemsetD32Async(
            flush_buffer.data_ptr(), 0, 2 * l2 // 4, s),
        "none": lambda: None,
    }

    def work():
        assert rt.cudaMemsetAsync(target.data_ptr(), 0x5A, MIB, s) == 0

    def loop(flush, reps=8000):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for _ in range(100):
            work()
        for a, b in zip(starts, ends):
            flush()
            a.record()
            work()
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends)) * 1e3

    results = {name: [] for name in flushes}
    results["measure (quickstart)"] = []
    with torch.cuda.stream(stream):
        for _ in range(3):
            for name, flush in flushes.items():
                results[name].append(loop(flush))
            out = subprocess.run([quickstart, "--json", NO_CLOCK], check=True, capture_output=True,
                                 text=True).stdout
            row = next(r for r in map(json.loads, out.splitlines()) if r["op"] == "memset 1 MiB")
            results["measure (quickstart)"].append(row["median_us"])
    for name, values in results.items():
        print(f"{name:40} " + " ".join(f"{v:.2f}" for v in values) + " us")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
