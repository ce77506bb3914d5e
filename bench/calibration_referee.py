#!/usr/bin/env python3
"""The calibration's validation table: `measure`'s raw and net medians beside CUPTI's times of the
very same launches, do_bench, do_bench_cudagraph and PyTorch's profiler; each row with a goal
(issue 42's, against CUPTI's net) beside the verdict its measurement gave itself; and the spread
of the 10 us kernel's median over ten runs.

usage: calibration_referee.py DIR
DIR holds `plain/calibration.jsonl` (the calibration benchmark alone), `referee/calibration.jsonl`
and `referee/cupti.csv` (the benchmark again with bench/cupti_referee/'s library loaded through
CUDA_INJECTION64_PATH), and `triton.json` (bench/calibration_triton.py). Writes
DIR/calibration_referee.md.

CUPTI's column is the median duration of the measurement's own work launches (the spinning kernel,
or memsets of the row's size), found by the measurement's CLOCK_MONOTONIC window; CUPTI's empty
kernel is the calibration's. CUPTI counts a kernel's own launch (what an empty kernel takes) inside
its duration, and a pair of timing events cannot separate it from the rest of the fixed cost, so
the net time is set beside both CUPTI's duration and CUPTI's duration less CUPTI's empty kernel
("CUPTI net"). CUPTI lengthens every timed interval a little (its own records), so the plain run's
net time is compared, and the referee run's own net time too.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupti_referee"))
from records import Records  # noqa: E402


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def in_window(records, row, what):
    return [r for r in records
            if row["from_ns"] <= r["start_mono"] <= row["to_ns"] and what(r)]


def cupti_times(cupti, row):
    """CUPTI's median work time, empty kernel time and step between two empty kernels (us)."""
    if row["op"].startswith("kernel"):
        work = in_window(cupti.kernels, row, lambda r: "spin_kernel" in r["what"])
    else:
        work = in_window(cupti.memsets, row, lambda r: int(r["what"]) == row["bytes"])
    empties = in_window(cupti.kernels, row, lambda r: r["what"] == "empty")
    med = lambda v: statistics.median(v) if v else None
    return med([r["duration_ns"] / 1e3 for r in work]), med([r["duration_ns"] / 1e3 for r in empties])


def pct(a, b):
    return "" if a is None or b in (None, 0) else f"{100 * (a / b - 1):+.2f}%"


def f(x, digits=3):
    return "" if x is None else f"{x:.{digits}f}"


# Issue 42's goals: the net time within this share of CUPTI's net, by kernel length in us.
GOALS = {1: 0.05, 2: 0.05, 10: 0.01, 100: 0.005}


def goal_rows(plain, nets):
    """Each row with a goal: its error against CUPTI's net, whether it met the goal, the verdict the
    measurement gave itself, and whether the two agree (a row that misses its goal must be flagged,
    and one that meets it must not be). `nets`: CUPTI's net of each table row, by (op, mode)."""
    out = ["\n## Goals and the verdict\n",
           "The goal: the net time within the share of CUPTI's net named; a row with no net time misses "
           "it. The verdict: `Measurement::trust`. Agrees: met and trusted, or missed and not trusted.\n",
           "| op | mode | goal | net vs CUPTI net | met | verdict | agrees |", "|---|---|---|---|---|---|---|"]
    for r in plain:
        goal = GOALS.get(r.get("length_us")) if r["phase"] == "table" else None
        if goal is None:
            continue
        c_net = nets.get((r["op"], r["mode"]))
        verdict = "not recorded"
        if "trusted" in r:
            verdict = r["trust"].replace("|", "/")
            verdict = verdict if len(verdict) <= 90 else verdict[:87] + "..."
        if c_net is None or c_net <= 0:
            # The referee's side is missing: nothing to judge the row or its verdict by.
            out.append(f"| {r['op']} | {r['mode']} | {100 * goal:g}% | no CUPTI net |  | {verdict} |  |")
            continue
        error = None if r["net_us"] is None else r["net_us"] / c_net - 1
        met = error is not None and abs(error) <= goal
        agrees = "" if "trusted" not in r else ("yes" if met == r["trusted"] else "**no**")
        shown = "no net time" if error is None else f"{100 * error:+.2f}%"
        out.append(f"| {r['op']} | {r['mode']} | {100 * goal:g}% | {shown} | {'yes' if met else 'no'} | "
                   f"{verdict} | {agrees} |")
    return out


def main(folder):
    plain = [r for r in rows(os.path.join(folder, "plain", "calibration.jsonl"))]
    referee = {(r["phase"], r["op"], r["mode"]): r for r in rows(os.path.join(folder, "referee", "calibration.jsonl"))}
    cupti = Records(os.path.join(folder, "referee", "cupti.csv"))
    triton_path = os.path.join(folder, "triton.json")
    triton = json.load(open(triton_path)) if os.path.exists(triton_path) else {}
    out = ["# The calibration against CUPTI\n",
           f"CUPTI records: {len(cupti.kernels)} kernels, {len(cupti.memsets)} memsets, {cupti.dropped} dropped; "
           f"clock pairs {len(cupti.pairs)} (median width {cupti.pair_width_ns()[0]:.0f} ns).\n",
           "Times in us. raw: measure's median; net: raw less the calibration's fixed cost (fixed cost +-: its "
           "uncertainty; empty: the calibration's empty-kernel interval, reported beside it); "
           "CUPTI: the same launches' median duration in the referee run; CUPTI net: that less CUPTI's "
           "median duration of the calibration's empty kernel in the same measurement; referee net: the "
           "referee run's own net time.\n",
           "| op | mode | raw | net | CUPTI | net vs CUPTI | CUPTI net | net vs CUPTI net | referee net | vs CUPTI net "
           "| CUPTI empty | fixed cost +- | empty | flush after/cold | do_bench | do_bench_cudagraph | profiler |",
           "|" + "---|" * 17]
    nets = {}
    for r in plain:
        if r["phase"] != "table":
            continue
        ref = referee.get((r["phase"], r["op"], r["mode"]))
        c_work, c_empty = cupti_times(cupti, ref) if ref else (None, None)
        c_net = c_work - c_empty if c_work is not None and c_empty is not None else None
        nets[(r["op"], r["mode"])] = c_net
        t = triton.get(r["op"], {})
        out.append(
            f"| {r['op']} | {r['mode']} | {f(r['median_us'])} | {f(r['net_us']) or r['no_net']} | {f(c_work)} | "
            f"{pct(r['net_us'], c_work)} | {f(c_net)} | {pct(r['net_us'], c_net)} | {f(ref and ref['net_us'])} | "
            f"{pct(ref and ref['net_us'], c_net)} | {f(c_empty)} | {f(r['fixed_cost_us'])} +- {f(r['uncertainty_us'])} | {f(r['empty_us'])} | "
            f"{r['flush_after_us'] / max(r['flush_cold_us'], 1e-9):.3f} ({r['flush_verdict']}) | "
            f"{f(t.get('do_bench'))} | {f(t.get('do_bench_cudagraph'))} | {f(t.get('profiler'))} |")
    out += goal_rows(plain, nets)
    out += ["\n## The 10 us kernel's median over ten runs (plain run)\n",
            "| mode | runs | raw: median of medians | raw: (max - min) / median | net: median of medians | "
            "net: (max - min) / median | net: stdev / mean | fixed cost: min - max |", "|---|---|---|---|---|---|---|---|"]
    for mode in ("gated", "graph"):
        spread = [r for r in plain if r["phase"] == "spread" and r["mode"] == mode]
        raw = [r["median_us"] for r in spread]
        net = [r["net_us"] for r in spread if r["net_us"] is not None]
        if not raw:
            continue
        empty = [r["fixed_cost_us"] for r in spread]
        line = (f"| {mode} | {len(raw)} | {statistics.median(raw):.3f} | "
                f"{100 * (max(raw) - min(raw)) / statistics.median(raw):.2f}% |")
        if len(net) > 1:
            line += (f" {statistics.median(net):.3f} | {100 * (max(net) - min(net)) / statistics.median(net):.2f}% | "
                     f"{100 * statistics.stdev(net) / statistics.mean(net):.2f}% | {min(empty):.3f} - {max(empty):.3f} |")
        out.append(line)
    text = "\n".join(out) + "\n"
    open(os.path.join(folder, "calibration_referee.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
