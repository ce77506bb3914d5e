"""Turns a benchmark run (events.json from systest/benches/events.rs, torch_events.json from
bench/torch_events.py) into the committed results: a markdown table and an SVG bar chart of
ns/call by operation and implementation. No dependencies beyond Python 3.

    python3 bench/report.py RUN_DIR RESULTS_DIR "header line"
"""
import json
import sys

COLORS = {"raw C": "#888888", "raw Rust FFI": "#4e79a7", "cuda-event": "#e15759", "cudarc": "#59a14f", "raw driver": "#b07aa1", "PyTorch": "#f28e2b"}


def main():
    run_dir, results_dir, header = sys.argv[1], sys.argv[2], sys.argv[3]
    rust = json.load(open(f"{run_dir}/events.json"))
    torch = json.load(open(f"{run_dir}/torch_events.json"))
    torch_ns = {op["op"]: op["ns"] for op in torch["ops"]}
    impls = list(COLORS)
    rows = []
    for op in rust["ops"]:
        ns = dict(op["ns"])
        ns["PyTorch"] = torch_ns.get(op["op"])
        rows.append((op["op"], ns, op["ratio_vs_ffi"]))

    md = [header, "", f"PyTorch {torch['torch']} (CUDA {torch['cuda']}), {torch['rounds']} rounds.", ""]
    md.append("Median ns/call (lower is better); ratios are medians of per-round ratios against raw Rust FFI, measured in the same process.")
    md.append("")
    md.append("| operation | " + " | ".join(impls) + " | cuda-event / raw FFI | cudarc / raw FFI |")
    md.append("|---|" + "---|" * (len(impls) + 2))
    cell = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"
    for name, ns, ratio in rows:
        md.append(f"| {name} | " + " | ".join(cell(ns.get(i)) for i in impls) + f" | {cell(ratio.get('cuda-event'), 2)} | {cell(ratio.get('cudarc'), 2)} |")
    md.append("")
    md.append("Aggregate throughput on 1-8 threads, each thread with its own stream and events; ratios are medians of per-round ratios against raw runtime FFI, measured in the same process.")
    md.append("")
    names = list(rust["scaling"][0]["calls_per_s"])
    md.append("| threads | operation | " + " | ".join(f"{n} calls/s" for n in names) + " | " + " | ".join(f"{n} / raw runtime FFI" for n in names[1:]) + " |")
    md.append("|---|---|" + "---|" * (2 * len(names) - 1))
    for row in rust["scaling"]:
        md.append(f"| {row['threads']} | {row['op']} | " + " | ".join(f"{row['calls_per_s'][n]:.0f}" for n in names) + " | " + " | ".join(f"{row['ratio_vs_runtime_ffi'][n]:.2f}" for n in names[1:]) + " |")
    share = rust["wait_cpu_share"]
    md.append("")
    md.append(f"CPU time over a 200 ms synchronize (median of 3, CPU/wall): blocking {share['blocking'] * 100:.3f}%, spinning {share['spinning'] * 100:.1f}%.")
    if "first_record_parts_ns" in rust:
        parts = ", ".join(f"{name} {ns:.0f} ns" for name, ns in rust["first_record_parts_ns"].items())
        md.append("")
        md.append(f"Parts of cuda-event's path for a new event's first record, beyond the record, each measured alone: {parts}.")
    md.append("")
    md.append("![ns per call](events.svg)")
    md.append("")
    md.append("![record throughput against raw runtime calls](scaling.svg)")
    open(f"{results_dir}/README.md", "w").write("\n".join(md) + "\n")
    open(f"{results_dir}/events.svg", "w").write(svg(rows, impls))
    open(f"{results_dir}/scaling.svg", "w").write(scaling_svg(rust["scaling"]))


def scaling_svg(scaling, title="record, calls/s against raw runtime FFI (fresh threads, H200)", low=0.4):
    """Record throughput / raw runtime FFI by thread count, one line per implementation; the axis
    runs from `low` to `low + 1`."""
    rows = [r for r in scaling if r["op"].startswith("record") and "fresh" in r["op"]]
    names = list(rows[0]["ratio_vs_runtime_ffi"])
    colors = ["#4e79a7", "#9c755f", "#e15759", "#ff9da7", "#59a14f", "#b07aa1", "#edc948"]
    left, top, width, height = 60, 40, 420, 240
    threads = [r["threads"] for r in rows]
    x = lambda t: left + threads.index(t) * width / (len(threads) - 1)
    y = lambda v: top + height - (v - low) / 1.0 * height
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 300}" height="{top + height + 40}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">{title}</text>']
    for v in sorted({round(low + k * 0.2, 2) for k in range(6)} | {0.95, 1.0}):
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/><text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for t in threads:
        out.append(f'<text x="{x(t):.1f}" y="{top + height + 16}" text-anchor="middle">{t} thread{"s" if t > 1 else ""}</text>')
    for k, name in enumerate(names):
        color = colors[k % len(colors)]
        points = " ".join(f"{x(r['threads']):.1f},{y(r['ratio_vs_runtime_ffi'][name]):.1f}" for r in rows)
        out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.append(f'<rect x="{left + width + 20}" y="{top + k * 16}" width="10" height="10" fill="{color}"/><text x="{left + width + 34}" y="{top + k * 16 + 9}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg(rows, impls):
    bar, gap, left, top, width = 9, 10, 250, 40, 560
    top_ns = max(v for _, ns, _ in rows for v in ns.values() if v is not None)
    scale = width / top_ns
    height = top + len(rows) * (len(impls) * bar + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">ns per call, median of rounds (H200)</text>']
    for k, name in enumerate(impls):
        out.append(f'<rect x="{left + k * 110}" y="22" width="10" height="10" fill="{COLORS[name]}"/><text x="{left + k * 110 + 14}" y="31">{name}</text>')
    y = top
    for name, ns, _ in rows:
        out.append(f'<text x="{left - 6}" y="{y + len(impls) * bar / 2 + 4}" text-anchor="end">{name}</text>')
        for impl in impls:
            v = ns.get(impl)
            if v is not None:
                out.append(f'<rect x="{left}" y="{y}" width="{max(v * scale, 1):.1f}" height="{bar - 1}" fill="{COLORS[impl]}"/>')
                out.append(f'<text x="{left + v * scale + 3:.1f}" y="{y + bar - 1}" font-size="8">{v:.0f}</text>')
            y += bar
        y += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
