"""The events benchmark's record scaling at two settings of CUDA_DEVICE_MAX_CONNECTIONS, side by
side: one panel per run (events.json from systest/benches/events.rs), each report.py's scaling chart.

    python3 bench/connections_chart.py OUT_SVG CONNECTIONS:EVENTS_JSON...
"""
import json
import re
import sys

from report import scaling_svg


def main():
    out, runs = sys.argv[1], sys.argv[2:]
    panels = []
    for run in runs:
        connections, path = run.split(":", 1)
        title = f"record, calls/s against raw runtime FFI, fresh threads, {connections} connections"
        panels.append(scaling_svg(json.load(open(path))["scaling"], title=title, low=0.2))
    widths = [int(re.search(r'width="(\d+)"', p).group(1)) for p in panels]
    heights = [int(re.search(r'height="(\d+)"', p).group(1)) for p in panels]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{sum(widths)}" height="{max(heights)}">']
    x = 0
    for panel, width in zip(panels, widths):
        svg.append(panel.replace("<svg ", f'<svg x="{x}" ', 1))
        x += width
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
