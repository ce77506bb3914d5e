#!/usr/bin/env python3
"""`measure`'s graph mode beside its gated mode, triton's do_bench and do_bench_cudagraph, in one run.

Rounds, interleaved: the quickstart example gated (`quickstart --json`) and in graph mode
(`quickstart --json --graph`), then the same CUDA calls (cudaMemsetAsync of 4 KiB, 1 MiB, 64 MiB,
4 GiB and a 1 GiB device-to-device cudaMemcpyAsync) timed by triton's do_bench (L2 flushed before
each call, launched one by one from the host) and do_bench_cudagraph (calls captured into a graph
and replayed, no L2 flush inside the graph, the graph's time divided by its calls). Each method's
median per round, and its ratio to do_bench within the round; the verdict is the median over
rounds. Prints and writes a side-by-side table.

usage: graph_validation.py QUICKSTART_BINARY OUT_DIR [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from timer_validation import MIB, memset_and_copy, write_results

OPS = [("memset 4 KiB", 4096), ("memset 1 MiB", MIB), ("memset 64 MiB", 64 * MIB),
       ("memset 4 GiB", 4096 * MIB), ("copy 1 GiB d2d", 1024 * MIB)]
METHODS = ["measure gated", "measure graph", "do_bench", "do_bench_cudagraph"]


def quickstart(binary, *flags):
    out = subprocess.run([binary, "--json", *flags], check=True, capture_output=True, text=True).stdout
    return {row["op"]: row["median_us"] for row in map(json.loads, out.splitlines())}


def triton_medians():
    """Each op's do_bench and do_bench_cudagraph median (us), on torch's current stream."""
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
    created = torch.cuda.Stream()
    out = {}
    for (name, _), fn in zip(OPS, fns):
        with torch.cuda.stream(created):
            plain = do_bench(fn, warmup=25, rep=500, return_mode="median")
        graphed = do_bench_cudagraph(fn, rep=500, return_mode="median")
        out[name] = {"do_bench": plain * 1e3, "do_bench_cudagraph": graphed * 1e3}
    return out


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    os.makedirs(out_dir, exist_ok=True)
    per_round = []
    for _ in range(rounds):
        gated, graph = quickstart(binary), quickstart(binary, "--graph")
        theirs = triton_medians()
        per_round.append({name: {"measure gated": gated[name], "measure graph": graph[name],
                                 **theirs[name]} for name, _ in OPS})
    median = statistics.median
    lines = [f"triton {triton.__version__} do_bench(warmup=25, rep=500) and do_bench_cudagraph(rep=500), "
             f"median; torch {torch.__version__}, {torch.cuda.get_device_name(0)}; {rounds} rounds",
             "", "| operation | " + " | ".join(f"{m} us (median of rounds)" for m in METHODS)
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
    write_results(out_dir, "graph_validation", lines,
                  {"triton": triton.__version__, "torch": torch.__version__, "rounds": rounds, "rows": rows})


if __name__ == "__main__":
    main()
