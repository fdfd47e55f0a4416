#!/usr/bin/env python3
"""Sums an Nsight Compute CSV log (ncu --csv --metrics gpu__time_duration.sum
--print-units base --log-file LOG ...) by kernel name.

Usage: python3 scripts/ncu_summary.py LOG [PARTS]
With PARTS > 1 only the last of PARTS equal runs of kernels is counted (e.g.
2 when a benchmark runs a warm-up call and one timed call).
"""
import csv, sys, collections

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", ""))))
parts = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rows = rows[len(rows) - len(rows) // parts:]
total = sum(t for _, t in rows)
by = collections.defaultdict(lambda: [0, 0.0])
for name, t in rows:
    key = name.split("(")[0][:90]
    by[key][0] += 1
    by[key][1] += t
print(f"{len(rows)} kernels, {total / 1e6:.3f} ms of kernel time")
for name, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{t / 1e6:9.3f} ms {100 * t / total:5.1f}% {n:5d}x  {name}")
