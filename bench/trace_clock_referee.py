#!/usr/bin/env python3
"""Sets each range of the trace_clock benchmark beside the kernel it timed, as CUPTI saw it in the
same process, on the same clock: `trace_clock_referee.py DIR` reads DIR/trace_clock_ranges.csv (the
benchmark's) and DIR/cupti.csv (bench/cupti_referee/'s library, loaded with CUDA_INJECTION64_PATH
into the benchmark) and writes DIR/trace_clock_referee.md.

A range opens with an event record just before the kernel's launch and closes with one just after
it, so a correct placement puts the range's start a little before CUPTI's kernel start (by the
GPU's time from the record to the kernel's start) and its end a little after the kernel's end. The
start's difference also holds the host's launch time when the stream was idle (the start record
runs at once, the kernel once the host's launch reaches the GPU; CUPTI's own work lengthens
launches), so the end's difference is the placement's error, plus the GPU's step from the kernel's
end to the end record. Per phase: both differences (median, p1, p99, min, max) and the end
difference's median per tenth of the phase (a drift the anchors miss shows as a trend)."""
import bisect
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupti_referee"))
from records import Records  # noqa: E402


def row(values):
    v = sorted(values)
    at = lambda q: v[round((len(v) - 1) * q)]
    return f"{at(0.5):.2f} | {at(0.01):.2f} | {at(0.99):.2f} | {v[0]:.2f} | {v[-1]:.2f}"


def main(folder):
    cupti = Records(os.path.join(folder, "cupti.csv"))
    kernels = [k for k in cupti.kernels if "spin" in k["what"]]
    phases = {}
    with open(os.path.join(folder, "trace_clock_ranges.csv"), newline="") as f:
        for r in csv.DictReader(f):
            phase = r.pop("phase")
            phases.setdefault(phase, []).append({k: int(v) for k, v in r.items()})
    starts = [k["start_mono"] for k in kernels]
    out = ["# Trace placement against CUPTI, in one process\n",
           f"CUPTI kernel records: {len(kernels)} of the spin kernel; dropped records: {cupti.dropped}. "
           f"Clock pairs: {len(cupti.pairs)}, median width {cupti.pair_width_ns()[0]:.0f} ns, widest "
           f"{cupti.pair_width_ns()[1]:.0f} ns.\n",
           "Start: range's placed start minus CUPTI's kernel start; end: range's placed end minus CUPTI's "
           "kernel end; length: range minus kernel; us.\n",
           "| phase | ranges matched | start: median, p1, p99, min, max | end: median, p1, p99, min, max | "
           "length: median | end: median per tenth |", "|---|---|---|---|---|---|"]
    for name, ranges in phases.items():
        matched = []
        for r in ranges:
            i = bisect.bisect_left(starts, r["start_ns"])
            near = [k for k in kernels[max(i - 2, 0):i + 2]
                    if r["start_ns"] - 1_000_000 <= k["start_mono"] <= r["end_ns"]]
            if near:
                k = min(near, key=lambda k: abs(k["start_mono"] - r["start_ns"]))
                matched.append(((r["start_ns"] - k["start_mono"]) / 1e3, (r["end_ns"] - k["end_mono"]) / 1e3,
                                ((r["end_ns"] - r["start_ns"]) - k["duration_ns"]) / 1e3))
        if not matched:
            out.append(f"| {name} | 0 of {len(ranges)} | | | | |")
            continue
        s, e, length = zip(*matched)
        step = max(len(e) // 10, 1)
        tenths = [statistics.median(e[i:i + step]) for i in range(0, len(e), step)]
        out.append(f"| {name} | {len(matched)} of {len(ranges)} | {row(s)} | {row(e)} | "
                   f"{statistics.median(length):.2f} | {' '.join(f'{t:.2f}' for t in tenths[:10])} |")
    text = "\n".join(out) + "\n"
    open(os.path.join(folder, "trace_clock_referee.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
