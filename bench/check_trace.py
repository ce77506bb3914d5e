#!/usr/bin/env python3
"""Checks a trace written by cuda-event's `Trace` (ChromeTrace) against the rules of the Chrome
trace event format's JSON object form, as Perfetto and chrome://tracing read it:

- the file is one JSON object with a `traceEvents` array (and `displayTimeUnit` "ms" or "ns");
- every event has a string `name`, a one-character `ph`, integer `pid` and `tid`;
- complete events (`X`) have numeric `ts` and `dur` >= 0 (microseconds) and an object `args`;
- metadata events (`M`) are `process_name`, `thread_name` (args.name a string) or
  `process_sort_index` / `thread_sort_index` (args.sort_index an integer);
- every pid and (pid, tid) that an X event uses is named by metadata, once;
- on one track, X events nest: two that overlap, one holds the other (a partial overlap is
  reported as a warning: ranges of two threads on one stream may overlap partly).

Prints a summary (events per track, the time span) and exits 1 on any rule broken.
Usage: python3 bench/check_trace.py trace.json
"""
import json
import sys
from collections import defaultdict


def main(path):
    errors, warnings = [], []
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        print(f"{path}: not a JSON object with a traceEvents array")
        return 1
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        errors.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is neither ms nor ns")
    pids, tids = defaultdict(int), defaultdict(int)
    tracks = defaultdict(list)
    for i, e in enumerate(doc["traceEvents"]):
        where = f"event {i}"
        if not isinstance(e.get("name"), str):
            errors.append(f"{where}: no string name")
        ph = e.get("ph")
        if not isinstance(ph, str) or len(ph) != 1:
            errors.append(f"{where}: ph {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            errors.append(f"{where}: pid/tid not integers")
            continue
        if ph == "M":
            args = e.get("args", {})
            if e["name"] in ("process_name", "thread_name"):
                if not isinstance(args.get("name"), str):
                    errors.append(f"{where}: {e['name']} without a string args.name")
                if e["name"] == "process_name":
                    pids[e["pid"]] += 1
                else:
                    tids[(e["pid"], e["tid"])] += 1
            elif e["name"] in ("process_sort_index", "thread_sort_index"):
                if not isinstance(args.get("sort_index"), int):
                    errors.append(f"{where}: {e['name']} without an integer sort_index")
            else:
                errors.append(f"{where}: unknown metadata {e['name']!r}")
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                errors.append(f"{where}: ts/dur not numbers")
                continue
            if dur < 0 or ts < 0:
                errors.append(f"{where}: negative ts or dur")
            if not isinstance(e.get("args", {}), dict):
                errors.append(f"{where}: args not an object")
            tracks[(e["pid"], e["tid"])].append((ts, ts + dur, e["name"]))
        else:
            errors.append(f"{where}: phase {ph!r} is not one this writer makes")
    for (pid, tid), events in tracks.items():
        if pids.get(pid, 0) != 1:
            errors.append(f"pid {pid} named {pids.get(pid, 0)} times")
        if tids.get((pid, tid), 0) != 1:
            errors.append(f"track {pid}/{tid} named {tids.get((pid, tid), 0)} times")
        events.sort(key=lambda e: (e[0], -e[1]))
        stack = []
        for start, end, name in events:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:
                warnings.append(f"track {pid}/{tid}: {name!r} [{start}, {end}] overlaps {stack[-1][2]!r} partly")
            stack.append((start, end, name))
    n = sum(len(v) for v in tracks.values())
    span = [min(s for v in tracks.values() for s, _, _ in v), max(e for v in tracks.values() for _, e, _ in v)] if n else [0, 0]
    print(f"{path}: {n} ranges on {len(tracks)} tracks, {span[0]:.3f}..{span[1]:.3f} us; other data: {doc.get('otherData')}")
    for (pid, tid), events in sorted(tracks.items()):
        print(f"  track {pid}/{tid}: {len(events)} ranges")
    for w in warnings[:20]:
        print(f"warning: {w}")
    for e in errors[:50]:
        print(f"error: {e}")
    print("ok" if not errors else f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
