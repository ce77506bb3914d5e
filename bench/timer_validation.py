#!/usr/bin/env python3
"""Validates cuda-event's `measure` against triton.testing.do_bench on the same GPU, in one run.

Rounds, interleaved: the quickstart example (`quickstart --json --no-sm-clock`: cudaMemsetAsync of
1 MiB, 64 MiB, 4 GiB and a 1 GiB device-to-device cudaMemcpyAsync, timed by `measure` on a stream it
creates), then
the same four CUDA calls timed by do_bench on a created stream (or, without triton, by a
torch.cuda.Event loop doing what do_bench does: a 256 MB zero_ to flush L2 before each repetition,
one event pair per repetition, counts from a 5-call estimate). Each round gives a ratio
measure / do_bench per operation; the verdict is the median of the rounds' ratios, since both
sides drift from one minute to the next (do_bench's own 1 MiB median moved 4.9-5.9 us over one
day). Prints and writes a side-by-side table.

usage: timer_validation.py QUICKSTART_BINARY OUT_DIR [ROUNDS]
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys

import torch

MIB = 1 << 20
REFERENCE_RUNS = 3
OPS = [("memset 1 MiB", MIB), ("memset 64 MiB", 64 * MIB), ("memset 4 GiB", 4096 * MIB),
       ("copy 1 GiB d2d", 1024 * MIB)]


# The examples read the SM clock by default; its stamps stay out of every comparison with triton (a
# kernel queued before each repetition, which triton's methods do not have).
NO_CLOCK = "--no-sm-clock"


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


def memset_and_copy():
    """libcudart with cudaMemsetAsync's and cudaMemcpyAsync's signatures, and the quickstart's
    buffers: 4 GiB to set, 1 GiB to copy from and 1 GiB to copy to."""
    rt = cudart()
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_void_p]
    big = torch.empty(4096 * MIB, dtype=torch.uint8, device="cuda")
    src = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
    dst = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
    return rt, big, src, dst


def torch_event_bench(fn, warmup=25, rep=100):
    """do_bench's method with torch.cuda.Event, its L2 flush a zero_ of a 256 MB buffer: median in ms."""
    flush = torch.empty(256 * MIB, dtype=torch.int8, device="cuda").zero_
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


def reference(rounds, quickstart):
    """Per round, the quickstart's rows and do_bench's medians (us) on a created stream."""
    rt, big, src, dst = memset_and_copy()
    created = torch.cuda.Stream()
    stream = created.cuda_stream

    def memset(n):
        def fn():
            assert rt.cudaMemsetAsync(big.data_ptr(), 0x5A, n, stream) == 0
        return fn

    def copy():
        assert rt.cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), 1024 * MIB, 3, stream) == 0

    fns = [memset(MIB), memset(64 * MIB), memset(4096 * MIB), copy]
    try:
        from triton.testing import do_bench
        import triton
        method = f"triton {triton.__version__} do_bench(warmup=25, rep=500, return_mode='median')"

        def bench(fn):
            return do_bench(fn, warmup=25, rep=500, return_mode="median")
    except ImportError:
        method = "no triton: torch.cuda.Event loop with do_bench's method (rep=500 ms)"

        def bench(fn):
            return torch_event_bench(fn, rep=500)

    measured, referenced = [], []
    for _ in range(rounds):
        measured.append(run_quickstart(quickstart))
        with torch.cuda.stream(created):
            referenced.append({name: bench(fn) * 1e3 for (name, _), fn in zip(OPS, fns)})
    return method, measured, referenced


def run_quickstart(binary):
    out = subprocess.run([binary, "--json", NO_CLOCK], check=True, capture_output=True, text=True).stdout
    return {row["op"]: row for row in map(json.loads, out.splitlines())}


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    os.makedirs(out_dir, exist_ok=True)
    method, measured, referenced = reference(rounds, binary)
    median = statistics.median
    lines = [f"reference: {method}; torch {torch.__version__}, {torch.cuda.get_device_name(0)}",
             f"{rounds} rounds, each the quickstart's `measure` then do_bench, both on a created stream; "
             "ratio = measure / do_bench within a round", "",
             "| operation | measure median us, per round | do_bench median us, per round | ratio per round "
             "| **median ratio** | within 3% | measure noise (round 1) | GB/s (measure, median) |",
             "|---|---|---|---|---|---|---|---|"]
    rows = []
    for name, _ in OPS:
        ours = [m[name]["median_us"] for m in measured]
        theirs = [r[name] for r in referenced]
        ratios = [a / b for a, b in zip(ours, theirs)]
        verdict = abs(median(ratios) - 1) <= 0.03
        moved = measured[0][name]["bytes"]
        lines.append(
            f"| {name} | {' / '.join(f'{v:.2f}' for v in ours)} | {' / '.join(f'{v:.2f}' for v in theirs)} | "
            f"{' / '.join(f'{v:.3f}' for v in ratios)} | **{median(ratios):.3f}** | {'yes' if verdict else 'NO'} | "
            f"{100 * measured[0][name]['noise']:.2f}% | {moved / median(ours) / 1e3:.0f} |")
        rows.append({"op": name, "measure_us": ours, "do_bench_us": theirs, "ratios": ratios,
                     "median_ratio": median(ratios), "within_3_percent": verdict,
                     "measure_rows": [m[name] for m in measured]})
    write_results(out_dir, "timer_validation", lines,
                  {"method": method, "torch": torch.__version__, "rounds": rounds, "rows": rows})


def write_results(out_dir, name, lines, data):
    """Prints the table's `lines` and writes them to NAME.md, and `data` to NAME.json, in `out_dir`."""
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
