"""Reads the CSV that libcupti_referee.so writes (see referee.c) and puts CUPTI's timestamps on the
host's CLOCK_MONOTONIC, through the clock rows: each row is a CUPTI timestamp, a CLOCK_MONOTONIC
reading and a second CUPTI timestamp, taken back to back every 100 ms. A CUPTI time maps through
the offset (monotonic - the midpoint of the pair) interpolated between the rows either side, so a
clock that slews (CUPTI's is CLOCK_REALTIME here) is followed; the error is at most half a pair's
width (reported as `pair_width_ns`)."""
import bisect
import csv
import statistics


class Records:
    def __init__(self, path):
        self.kernels, self.memsets, self.memcpys, self.pairs, self.dropped = [], [], [], [], 0
        with open(path, newline="") as f:
            for row in csv.reader(f):
                kind = row[0]
                if kind == "clock":
                    before, mono, after = map(int, row[1:4])
                    self.pairs.append(((before + after) // 2, mono - (before + after) // 2, after - before))
                elif kind == "dropped":
                    self.dropped += int(row[1])
                elif kind in ("kernel", "memset", "memcpy"):
                    start, end, stream, correlation = map(int, row[1:5])
                    record = {"start": start, "end": end, "stream": stream, "correlation": correlation,
                              "what": row[5]}
                    getattr(self, kind + "s").append(record)
        if len(self.pairs) < 2:
            raise SystemExit(f"{path}: fewer than two clock rows")
        self.pairs.sort()
        self._at = [p[0] for p in self.pairs]
        for group in (self.kernels, self.memsets, self.memcpys):
            for r in group:
                r["start_mono"], r["end_mono"] = self.monotonic(r["start"]), self.monotonic(r["end"])
                r["duration_ns"] = r["end"] - r["start"]
            group.sort(key=lambda r: r["start"])

    def monotonic(self, t):
        """CUPTI time t on CLOCK_MONOTONIC (ns)."""
        i = bisect.bisect_left(self._at, t)
        i = min(max(i, 1), len(self._at) - 1)
        (t0, o0, _), (t1, o1, _) = self.pairs[i - 1], self.pairs[i]
        offset = o0 + (o1 - o0) * (t - t0) / (t1 - t0)
        return t + offset

    def pair_width_ns(self):
        return statistics.median(p[2] for p in self.pairs), max(p[2] for p in self.pairs)
