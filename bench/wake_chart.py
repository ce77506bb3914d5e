"""Draws the wake benchmark's latencies (wake.json from cuda-event/benches/wake.rs) as an SVG: p50
and p99 per waiter, on a log scale, with each waiter's CPU cost (its waiting thread's CPU over its
waits, in cores; wake.md also has the process's) written above its bars where the run measured
it. One group per number of waiters: a lone waiter (section 3) per set of futures pending beside
it, 64 waiters at once (section 6), and section 2's 9,984 event futures over 64 streams (the
reactor's, the flag lane's, and the thread blocked in synchronize that is their floor; a phase
the bench marked invalid is left out). Sections 3 and 6 count from a host function's clock read
at the measured point, section 2 from the first sighting of a flag the kernel sets as it ends.
Python 3 only.

    python3 bench/wake_chart.py WAKE_JSON OUT_SVG "title"
"""
import json
import math
import sys

COLORS = {"Stream::completion": "#e15759", "Event::completion": "#f28e2b",
          "spinning on a host function": "#59a14f",
          "blocking synchronize": "#4e79a7", "spinning query": "#888888",
          "Wait::Spin": "#76b7b2", "Wait::Yield": "#edc948", "Wait::SpinThen (20 us)": "#b07aa1",
          "Wait::Reactor": "#ff9da7", "Wait::Driver (default event)": "#9c755f",
          "Event::completion (flag lane)": "#d37295", "Wait::Reactor (flag lane)": "#a0cbe8",
          "Event::completion, polled in a loop": "#8cd17d",
          "Event::completion (flag lane), polled in a loop": "#499894",
          "Event::completion, Wait::Spin": "#b6992d",
          "Event::completion, Wait::SpinThen (20 us)": "#86bcb6"}
LEGEND_COLUMNS = 3


# Section 2's observers over 64 streams, as the waiters of section 3 they are: (phase, observer).
EVERY_FUTURE = {("(a) over 64 streams", "Event::completion"): "Event::completion",
                ("(a) over 64 flag-lane streams", "Event::completion"): "Event::completion (flag lane)",
                ("(a) over 64 streams", "blocked synchronize (floor)"): "blocking synchronize"}


def every_future_rows(rows):
    """Section 2's rows over 64 streams, as one group of the chart's (no CPU measured)."""
    every = [r for r in rows if r.get("section") == "every" and r.get("valid", True)
             and (r.get("phase"), r.get("observer")) in EVERY_FUTURE]
    futures = max((r["n"] for r in every), default=0)  # the floor's row counts steps, not futures
    return [dict(waiter=EVERY_FUTURE[r["phase"], r["observer"]], group=f"{futures:,} futures over 64 streams",
                 p50_us=r["p50_us"], p99_us=r["p99_us"]) for r in every]


def key(r):
    """The chart's group of a row: how many wait, and what else is pending beside a lone waiter."""
    if "group" in r:
        return r["group"]
    if r.get("waiters", 1) > 1:
        return f"{r['waiters']} waiters at once"
    return "1 waiter" + (f" + {r['pending']:,} {r['pending_kind']}" if r["pending"] else "")


def main():
    rows = json.load(open(sys.argv[1]))
    rows = [r for r in rows if "waiter" in r] + every_future_rows(rows)
    out, title = sys.argv[2], sys.argv[3]
    groups = []
    for r in rows:
        if key(r) not in groups:
            groups.append(key(r))
    # Fewest waiters first: the lone waiter's groups, 64 at once, then ten thousand.
    groups.sort(key=lambda g: 0 if g.startswith("1 waiter") else 1 if "at once" in g else 2)
    lo, hi = 1.0, 10 ** math.ceil(math.log10(max(r["p99_us"] for r in rows)))
    legend_rows = math.ceil(len(COLORS) / LEGEND_COLUMNS)
    width, left, top, plot_h = 1100, 70, 40, 300
    height = top + plot_h + 40 + 18 * legend_rows + 18
    group_w = (width - left - 20) / len(groups)
    bar_w = group_w / (len(COLORS) * 2 + 2)
    y = lambda v: top + plot_h - plot_h * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>']
    decade = lo
    while decade <= hi:
        svg.append(f'<line x1="{left}" x2="{width - 20}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 6}" y="{y(decade) + 4:.1f}" text-anchor="end">{decade:g} us</text>')
        decade *= 10
    for g, group in enumerate(groups):
        x0 = left + g * group_w + bar_w
        svg.append(f'<text x="{x0 + group_w / 2 - bar_w:.1f}" y="{top + plot_h + 18}" text-anchor="middle">{group}</text>')
        for w, (waiter, color) in enumerate(COLORS.items()):
            r = next((r for r in rows if r["waiter"] == waiter and key(r) == group), None)
            if r is None:
                continue
            for k, (stat, opacity) in enumerate((("p50_us", 1.0), ("p99_us", 0.45))):
                x = x0 + (w * 2 + k) * bar_w
                svg.append(f'<rect x="{x:.1f}" y="{y(r[stat]):.1f}" width="{bar_w - 1:.1f}" height="{top + plot_h - y(r[stat]):.1f}" fill="{color}" fill-opacity="{opacity}"><title>{waiter} {stat[:3]}: {r[stat]} us</title></rect>')
            if "cpu_cores" in r:
                x = x0 + (w * 2 + 1) * bar_w
                svg.append(f'<text x="{x:.1f}" y="{y(r["p99_us"]) - 3:.1f}" text-anchor="middle" font-size="8">{r["cpu_cores"]:.2f}</text>')
    for w, (waiter, color) in enumerate(COLORS.items()):
        lx, ly = left + (w % LEGEND_COLUMNS) * 330, top + plot_h + 34 + 18 * (w // LEGEND_COLUMNS)
        svg.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{color}"/>')
        svg.append(f'<text x="{lx + 16}" y="{ly + 10}">{waiter}</text>')
    svg.append(f'<text x="{width - 20}" y="{top - 6}" text-anchor="end">p50 solid, p99 pale; above: CPU of the waiting thread, in cores</text>')
    svg.append(f'<text x="{left}" y="{height - 6}">Latency from a host function\'s clock read at the measured point (1 and 64 waiters), '
               'from the first sighting of the flag the kernel sets as it ends (futures over 64 streams).</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


main()
