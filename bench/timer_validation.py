#!/usr/bin/env python3
"""Validates cuda-event's `measure` against triton.testing.do_bench on the same GPU, in one run.

Runs the quickstart example (`quickstart --json`: cudaMemsetAsync of 1 MiB, 64 MiB, 4 GiB and a
1 GiB device-to-device cudaMemcpyAsync, timed by `measure` on a stream it creates), once more with
`--no-gate`, then times the same four CUDA calls with do_bench (or, without triton, a
torch.cuda.Event loop doing what do_bench does: a 256 MB zero_ to flush L2 before each repetition,
one event pair per repetition, counts from a 5-call estimate) on a created stream and on torch's
default (the legacy default stream, whose implicit synchronization with other streams is work of
its own), then the quickstart again. Prints and writes a side-by-side table of medians.

usage: timer_validation.py QUICKSTART_BINARY OUT_DIR
"""
import ctypes
import json
import os
import subprocess
import sys

import torch

MIB = 1 << 20
REFERENCE_RUNS = 3
OPS = [("memset 1 MiB", MIB), ("memset 64 MiB", 64 * MIB), ("memset 4 GiB", 4096 * MIB),
       ("copy 1 GiB d2d", 1024 * MIB)]


def cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    for entry in sys.path:
        for sub in ("nvidia/cu13/lib/libcudart.so.13", "nvidia/cuda_runtime/lib/libcudart.so.12"):
            path = os.path.join(entry, sub)
            if os.path.exists(path):
                return ctypes.CDLL(path)
    raise OSError("no libcudart found")


def torch_event_bench(fn, warmup=25, rep=100, flush=None):
    """do_bench's method with torch.cuda.Event: median in ms. `flush` replaces do_bench's L2 flush
    (zero_ of a 256 MB buffer)."""
    cache = torch.empty(256 * MIB, dtype=torch.int8, device="cuda")
    flush = flush or cache.zero_
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    n_warmup, n_repeat = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def reference_medians():
    """do_bench's medians (us) on torch's current stream, the legacy default stream, and on a created
    stream as the quickstart uses; then do_bench's method in a torch.cuda.Event loop with both
    flushes, on the legacy default stream."""
    rt = cudart()
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_void_p]
    big = torch.empty(4096 * MIB, dtype=torch.uint8, device="cuda")
    src = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
    dst = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")

    def fns():
        """The four calls on the stream current when called."""
        stream = torch.cuda.current_stream().cuda_stream

        def memset(n):
            def fn():
                assert rt.cudaMemsetAsync(big.data_ptr(), 0x5A, n, stream) == 0
            return fn

        def copy():
            assert rt.cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), 1024 * MIB, 3, stream) == 0

        return [memset(MIB), memset(64 * MIB), memset(4096 * MIB), copy]

    try:
        from triton.testing import do_bench
        import triton
        method = f"triton {triton.__version__} do_bench(rep=500, return_mode='median')"

        def bench(fn):
            return do_bench(fn, warmup=25, rep=500, return_mode="median")
    except ImportError:
        method = "no triton: torch.cuda.Event loop with do_bench's method (rep=500 ms)"

        def bench(fn):
            return torch_event_bench(fn, rep=500)

    def medians(bench_fn):
        return {name: bench_fn(fn) * 1e3 for (name, _), fn in zip(OPS, fns())}

    # Three do_bench runs a stream, interleaved, to show do_bench's own run-to-run spread.
    runs = {"default": [], "created": []}
    created = torch.cuda.Stream()
    for _ in range(REFERENCE_RUNS):
        runs["default"].append(medians(bench))
        with torch.cuda.stream(created):
            runs["created"].append(medians(bench))
    default_stream, created_stream = ({name: sorted(run[name] for run in runs[kind]) for name, _ in OPS}
                                      for kind in ("default", "created"))

    # The same method with measure's flush instead (cudaMemsetAsync of twice L2, as nvbench's
    # l2flush does with L2's size), to tell the flush's part from the timer's.
    flush_bytes = 2 * torch.cuda.get_device_properties(0).L2_cache_size
    flush_buffer = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")

    def memset_flush():
        stream = torch.cuda.current_stream().cuda_stream
        assert rt.cudaMemsetAsync(flush_buffer.data_ptr(), 0, flush_bytes, stream) == 0

    zero_flush = medians(lambda fn: torch_event_bench(fn, rep=500))
    memset_flushed = medians(lambda fn: torch_event_bench(fn, rep=500, flush=memset_flush))
    return method, default_stream, created_stream, zero_flush, memset_flushed


def run_quickstart(binary, *flags):
    out = subprocess.run([binary, "--json", *flags], check=True, capture_output=True, text=True).stdout
    return {row["op"]: row for row in map(json.loads, out.splitlines())}


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    first = run_quickstart(binary)
    ungated = run_quickstart(binary, "--no-gate")
    method, on_default, on_created, zero_flush, memset_flushed = reference_medians()
    second = run_quickstart(binary)
    rows = []
    lines = [f"reference: {method}; torch {torch.__version__}, {torch.cuda.get_device_name(0)}",
             "measure runs on a created stream (the quickstart's); do_bench on a created stream and on "
             "torch's default, the legacy default stream", "",
             f"| operation | measure median us (run 1 / run 2) | noise | do_bench median us, created "
             f"stream (median of {REFERENCE_RUNS} runs, min-max) | **measure / do_bench, created stream "
             "(run 1 / run 2)** | measure without the gate, us (/ do_bench, created stream) | do_bench "
             f"median us, legacy default stream ({REFERENCE_RUNS} runs, min-max) | measure / do_bench, legacy "
             "default stream (run 1) | GB/s (measure, run 1) | do_bench's method in a torch.cuda.Event "
             "loop, legacy default stream, its zero_ flush / measure's memset flush, us |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, _ in OPS:
        a, b = first[name], second[name]
        created_runs, legacy_runs = on_created[name], on_default[name]
        ref, legacy = created_runs[len(created_runs) // 2], legacy_runs[len(legacy_runs) // 2]
        moved = a["bytes"]
        spread = lambda runs: f"{runs[0]:.2f}-{runs[-1]:.2f}"
        lines.append(
            f"| {name} | {a['median_us']:.2f} / {b['median_us']:.2f} | {100 * a['noise']:.2f}% | "
            f"{ref:.2f} ({spread(created_runs)}) | **{a['median_us'] / ref:.4f} / {b['median_us'] / ref:.4f}** | "
            f"{ungated[name]['median_us']:.2f} ({ungated[name]['median_us'] / ref:.4f}) | "
            f"{legacy:.2f} ({spread(legacy_runs)}) | {a['median_us'] / legacy:.4f} | "
            f"{moved / a['median_us'] / 1e3:.0f} | {zero_flush[name]:.2f} / {memset_flushed[name]:.2f} |")
        rows.append({"op": name, "measure_run1": a, "measure_run2": b, "measure_ungated": ungated[name],
                     "do_bench_created_stream_us": ref, "do_bench_created_stream_runs_us": created_runs,
                     "do_bench_legacy_default_stream_us": legacy,
                     "do_bench_legacy_default_stream_runs_us": legacy_runs,
                     "ratio_run1": a["median_us"] / ref, "ratio_run2": b["median_us"] / ref,
                     "ratio_ungated": ungated[name]["median_us"] / ref,
                     "ratio_legacy_default_run1": a["median_us"] / legacy,
                     "torch_loop_zero_flush_us": zero_flush[name],
                     "torch_loop_memset_flush_us": memset_flushed[name]})
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out_dir, "timer_validation.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out_dir, "timer_validation.json"), "w") as f:
        json.dump({"method": method, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
