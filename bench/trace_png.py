#!/usr/bin/env python3
"""Draws a Chrome trace written by cuda-event's Trace (the `timeline` example's trace.json) as a
PNG: one row per track (host threads, then each GPU's streams), each range a bar, nested ranges
stacked thinner inside their parents, names on the bars wide enough to hold them.

Usage: python3 bench/trace_png.py trace.json out.png [--from US --to US]   (needs matplotlib)
"""
import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("png")
    p.add_argument("--from", dest="lo", type=float, default=None, help="start, microseconds")
    p.add_argument("--to", dest="hi", type=float, default=None, help="end, microseconds")
    a = p.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    names, tracks = {}, defaultdict(list)
    procs = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "X":
            if a.lo is not None and e["ts"] + e["dur"] < a.lo:
                continue
            if a.hi is not None and e["ts"] > a.hi:
                continue
            tracks[(e["pid"], e["tid"])].append(e)
    order = sorted(tracks, key=lambda k: (k[0], k[1]))
    fig, ax = plt.subplots(figsize=(16, 1.0 + 0.9 * len(order)))
    palette = plt.get_cmap("tab20")
    colours = {}
    lo = min(e["ts"] for v in tracks.values() for e in v) if a.lo is None else a.lo
    hi = max(e["ts"] + e["dur"] for v in tracks.values() for e in v) if a.hi is None else a.hi
    for row, key in enumerate(order):
        y = len(order) - 1 - row
        for e in tracks[key]:
            depth = e.get("args", {}).get("depth", 0)
            base = min(tracks[key], key=lambda x: x.get("args", {}).get("depth", 0)).get("args", {}).get("depth", 0)
            level = max(0, depth - base)
            height = 0.8 * (0.75 ** level)
            colour = colours.setdefault(e["name"], palette(len(colours) % 20))
            ax.broken_barh([(e["ts"] - lo, max(e["dur"], (hi - lo) * 1e-4))], (y - height / 2, height),
                           facecolors=colour, edgecolors="black", linewidths=0.2)
            if e["dur"] > (hi - lo) * 0.06:
                ax.text(e["ts"] - lo + e["dur"] / 2, y + height / 2 - 0.08, e["name"], ha="center", va="top",
                        fontsize=7, clip_on=True)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"{procs.get(k[0], k[0])}: {names.get(k, k[1])}" for k in reversed(order)], fontsize=8)
    ax.set_xlim(0, hi - lo)
    ax.set_xlabel("microseconds from the first range shown (host monotonic clock)")
    other = doc.get("otherData", {})
    ax.set_title(f"{a.trace}: {sum(len(v) for v in tracks.values())} ranges shown; "
                 f"written {other.get('written')}, dropped {other.get('dropped')}, lost {other.get('lost')}, "
                 f"anchor error <= {other.get('max_anchor_error_us')} us", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, list(colours), fontsize=7, loc="upper right", ncol=3)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
