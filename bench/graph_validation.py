#!/usr/bin/env python3
"""`measure`'s graph mode beside its gated mode, triton's do_bench and do_bench_cudagraph, in one run.

Rounds, interleaved: the quickstart example gated (`quickstart --json`) and in graph mode
(`quickstart --json --graph`), both without the SM clock's stamps (`--no-sm-clock`), the
known_lengths example (also without them) (both modes: kernels that spin on the
GPU's `%globaltimer` for 0 us, 10 us, 100 us and 1 ms), then the same CUDA calls (cudaMemsetAsync of
4 KiB, 1 MiB, 64 MiB, 4 GiB and a 1 GiB device-to-device cudaMemcpyAsync; the example's kernel,
from its `--ptx`, loaded and launched through libcuda) timed by triton's do_bench (L2 flushed
before each call, launched one by one from the host) and do_bench_cudagraph (calls captured into a
graph and replayed, no L2 flush inside the graph, the graph's time divided by its calls). Each
method's median per round, and for the CUDA calls its ratio to do_bench within the round, for the
kernels its deviation from the kernel's length (median / length - 1), also net of the example's
0 us kernel (the same kernel, ending at once) timed by the same method in the same round: what a
method adds to any kernel (a timing-event pair around one launch holds the GPU's starting and
ending it; do_bench_cudagraph's calls follow each other in a graph) against what it gets wrong in
the length. The verdict is the median over rounds. Prints and writes two side-by-side tables.

usage: graph_validation.py QUICKSTART_BINARY OUT_DIR [ROUNDS]
(the known_lengths example is the binary `known_lengths` in QUICKSTART_BINARY's folder, as
`ci/stage-gpu` stages them: .gpu-static-13/bin/examples/)
"""
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from timer_validation import MIB, NO_CLOCK, memset_and_copy, write_results

OPS = [("memset 4 KiB", 4096), ("memset 1 MiB", MIB), ("memset 64 MiB", 64 * MIB),
       ("memset 4 GiB", 4096 * MIB), ("copy 1 GiB d2d", 1024 * MIB)]
METHODS = ["measure gated", "measure graph", "do_bench", "do_bench_cudagraph"]


def quickstart(binary, *flags):
    out = subprocess.run([binary, "--json", NO_CLOCK, *flags], check=True, capture_output=True,
                         text=True).stdout
    return {row["op"]: row["median_us"] for row in map(json.loads, out.splitlines())}


def known_lengths(binary):
    """The example's rows: each kernel's length (us) and its gated and graph medians (us)."""
    out = subprocess.run([binary, NO_CLOCK], check=True, capture_output=True, text=True).stdout
    rows = {}
    for row in map(json.loads, out.splitlines()):
        rows.setdefault(row["op"], {"length_us": row["target_us"]})[f"measure {row['mode']}"] = row["median_us"]
    return rows


def memset_and_copy_calls():
    """(name, fn) for each of OPS: fn queues the call on torch's current stream."""
    rt, big, src, dst = memset_and_copy()

    def memset(n):
        def fn():
            stream = torch.cuda.current_stream().cuda_stream
            assert rt.cudaMemsetAsync(big.data_ptr(), 0x5A, n, stream) == 0
        return fn

    def copy():
        stream = torch.cuda.current_stream().cuda_stream
        assert rt.cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), 1024 * MIB, 3, stream) == 0

    fns = [memset(n) for _, n in OPS[:4]] + [copy]
    return [(name, fn) for (name, _), fn in zip(OPS, fns)]


def spin_kernel_calls(binary, lengths_us):
    """(name, fn) for each kernel of `lengths_us` (name: length in us): the known_lengths example's
    kernel (its `--ptx`) loaded through libcuda into torch's context, fn launching it for that
    length, one block of one thread, on torch's current stream."""
    ptx = subprocess.run([binary, "--ptx"], check=True, capture_output=True).stdout
    entry = re.search(rb"\.entry\s+(\w+)", ptx).group(1)
    cu = ctypes.CDLL("libcuda.so.1")
    void_p = ctypes.c_void_p
    cu.cuModuleLoadData.argtypes = [ctypes.POINTER(void_p), ctypes.c_char_p]
    cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(void_p), void_p, ctypes.c_char_p]
    cu.cuLaunchKernel.argtypes = ([void_p] + [ctypes.c_uint] * 7
                                  + [void_p, ctypes.POINTER(void_p), ctypes.POINTER(void_p)])
    torch.zeros(1, device="cuda")  # torch's context, the device's primary one, current on this thread
    module, function = void_p(), void_p()
    code = cu.cuModuleLoadData(ctypes.byref(module), ptx)
    assert code == 0, f"cuModuleLoadData: CUDA error {code}"
    code = cu.cuModuleGetFunction(ctypes.byref(function), module, entry)
    assert code == 0, f"cuModuleGetFunction: CUDA error {code}"

    def kernel(ns):
        length = ctypes.c_uint64(ns)
        params = (void_p * 1)(ctypes.addressof(length))

        def fn():
            stream = torch.cuda.current_stream().cuda_stream
            assert cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, None) == 0
        fn.length = length  # params hold its address
        return fn

    return [(name, kernel(round(us * 1e3))) for name, us in lengths_us.items()]


def triton_medians(calls):
    """Each (name, fn)'s do_bench (on a created stream) and do_bench_cudagraph median (us)."""
    created = torch.cuda.Stream()
    out = {}
    for name, fn in calls:
        with torch.cuda.stream(created):
            plain = do_bench(fn, warmup=25, rep=500, return_mode="median")
        graphed = do_bench_cudagraph(fn, rep=500, return_mode="median")
        out[name] = {"do_bench": plain * 1e3, "do_bench_cudagraph": graphed * 1e3}
    return out


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    known_binary = os.path.join(os.path.dirname(binary), "known_lengths")
    os.makedirs(out_dir, exist_ok=True)
    calls, kernel_calls, lengths = memset_and_copy_calls(), None, None
    per_round, per_round_kernels = [], []
    for _ in range(rounds):
        gated, graph = quickstart(binary), quickstart(binary, "--graph")
        known = known_lengths(known_binary)
        if kernel_calls is None:
            lengths = {name: row["length_us"] for name, row in known.items()}
            kernel_calls = spin_kernel_calls(known_binary, lengths)
        theirs, theirs_kernels = triton_medians(calls), triton_medians(kernel_calls)
        per_round.append({name: {"measure gated": gated[name], "measure graph": graph[name],
                                 **theirs[name]} for name, _ in OPS})
        per_round_kernels.append({name: {"measure gated": known[name]["measure gated"],
                                         "measure graph": known[name]["measure graph"],
                                         **theirs_kernels[name]} for name in lengths})
    median = statistics.median
    header = (f"triton {triton.__version__} do_bench(warmup=25, rep=500) and do_bench_cudagraph(rep=500), "
              f"median; torch {torch.__version__}, {torch.cuda.get_device_name(0)}; {rounds} rounds")
    lines = [header, "", "| operation | " + " | ".join(f"{m} us (median of rounds)" for m in METHODS)
             + " | " + " | ".join(f"{m} / do_bench" for m in METHODS if m != "do_bench") + " |",
             "|---|" + "---|" * (2 * len(METHODS) - 1)]
    rows = []
    for name, _ in OPS:
        med = {m: median(r[name][m] for r in per_round) for m in METHODS}
        ratios = {m: median(r[name][m] / r[name]["do_bench"] for r in per_round)
                  for m in METHODS if m != "do_bench"}
        lines.append(f"| {name} | " + " | ".join(f"{med[m]:.2f}" for m in METHODS) + " | "
                     + " | ".join(f"{ratios[m]:.3f}" for m in ratios) + " |")
        rows.append({"op": name, "medians_us": med, "ratios_to_do_bench": ratios,
                     "rounds": [r[name] for r in per_round]})
    lines += ["", "Kernels of known length (the known_lengths example's, spinning on `%globaltimer`): each "
              "method's median of rounds, us, then its deviation from the length (median / length - 1) and "
              "that deviation net of the 0 us kernel's median of the same method and round "
              "((median - median at 0 us) / length - 1); each the median over rounds", "",
              "| kernel | length us | " + " | ".join(METHODS) + " | within 1% | within 1%, net of 0 us |",
              "|---|---|" + "---|" * len(METHODS) + "---|---|"]
    kernel_rows = []
    empty = next(name for name, length in lengths.items() if length == 0)
    for name, length in lengths.items():
        med = {m: median(r[name][m] for r in per_round_kernels) for m in METHODS}
        row = {"op": name, "length_us": length, "medians_us": med, "rounds": [r[name] for r in per_round_kernels]}
        kernel_rows.append(row)
        if length == 0:
            lines.append(f"| {name} | 0 | " + " | ".join(f"{med[m]:.2f}" for m in METHODS) + " | | |")
            continue
        deviation = {m: 100 * median(r[name][m] / length - 1 for r in per_round_kernels) for m in METHODS}
        net = {m: 100 * median((r[name][m] - r[empty][m]) / length - 1 for r in per_round_kernels)
               for m in METHODS}
        within = [m for m in METHODS if abs(deviation[m]) <= 1]
        net_within = [m for m in METHODS if abs(net[m]) <= 1]
        lines.append(f"| {name} | {length:.0f} | "
                     + " | ".join(f"{med[m]:.2f} ({deviation[m]:+.2f}%; net {net[m]:+.2f}%)" for m in METHODS)
                     + f" | {', '.join(within) or 'none'} | {', '.join(net_within) or 'none'} |")
        row.update({"deviations_percent": deviation, "net_of_0_us_deviations_percent": net,
                    "within_1_percent": within, "net_within_1_percent": net_within})
    write_results(out_dir, "graph_validation", lines,
                  {"triton": triton.__version__, "torch": torch.__version__, "rounds": rounds, "rows": rows,
                   "kernels": kernel_rows})


if __name__ == "__main__":
    main()
