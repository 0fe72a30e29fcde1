#!/usr/bin/env python3
"""Markdown table of `ember bench dense` runs, one run per OpenBLAS kernel.

Usage: bench/dense_table.py DIR [--batch 1024] [--threads 1]

DIR holds openblas-default.jsonl, openblas-haswell.jsonl and openblas-skylakex.jsonl (one
`ember bench dense --json` run each, with OPENBLAS_CORETYPE unset, =Haswell, =SkylakeX; a missing
file leaves its column empty). One row per (preset, layer, op) at the given batch and thread
count:
  ember GFLOP/s         the median of ember's gflops over the runs
  OpenBLAS default, Haswell, SkylakeX   each run's openblas_gflops
  vs best pinned        ember's speed over the faster of the Haswell and SkylakeX kernels: that
                        run's ratio_openblas (paired rounds, see bench/README.md)
  /peak                 ember's ratio_peak (median over the runs)
Standard library only.
"""

import argparse
import json
import os
import statistics
import sys

KERNELS = ("default", "haswell", "skylakex")


def load(path):
    lines = {}
    if not os.path.exists(path):
        return lines
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if not raw.startswith("{"):
                continue
            d = json.loads(raw)
            if d.get("bench") != "dense":
                continue
            key = (d["preset"], d["layer"], d["op"], d["count"] if d["count"] > 1 else d["M"] if d["op"] != "dw" else d["K"],
                   d["threads"])
            lines[key] = d
    return lines


def batch_of(d):
    # The per-rank batch B: M of fwd/dx, K of dw, the product count of the interaction.
    if d["count"] > 1:
        return d["count"]
    return d["K"] if d["op"] == "dw" else d["M"]


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    runs = {k: load(os.path.join(a.dir, f"openblas-{k}.jsonl")) for k in KERNELS}
    keys = []
    for k in KERNELS:
        for key, d in runs[k].items():
            if batch_of(d) == a.batch and d["threads"] == a.threads and key not in keys:
                keys.append(key)
    if not keys:
        sys.exit(f"no lines for batch {a.batch}, {a.threads} thread(s) in {a.dir}")
    print(f"B = {a.batch}, {a.threads} thread(s); GFLOP/s (medians of the timed rounds)\n")
    print("| set | layer | op | M x N x K | ember | OpenBLAS default | Haswell | SkylakeX | ember vs best pinned | ember/peak |")
    print("| --- | --- | --- | --- | --: | --: | --: | --: | --: | --: |")
    worst = []
    for key in keys:
        ds = {k: runs[k].get(key) for k in KERNELS}
        any_d = next(d for d in ds.values() if d)
        ours = [d["gflops"] for d in ds.values() if d and d.get("gflops") is not None]
        peaks = [d["ratio_peak"] for d in ds.values() if d and d.get("ratio_peak") is not None]
        pinned = [(ds[k]["openblas_gflops"], ds[k]["ratio_openblas"]) for k in ("haswell", "skylakex")
                  if ds[k] and ds[k].get("openblas_gflops") is not None]
        best = max(pinned) if pinned else None
        shape = any_d["shape"].replace("xbatch", f" x{any_d['count']}")
        ratio = best[1] if best else None
        if ratio is not None:
            worst.append((ratio, key))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {shape} | {fmt(statistics.median(ours) if ours else None)} | "
              + " | ".join(fmt(ds[k]["openblas_gflops"] if ds[k] else None) for k in KERNELS)
              + f" | {fmt(ratio, 2)} | {fmt(statistics.median(peaks) if peaks else None, 2)} |")
    if worst:
        below = sorted(w for w in worst if w[0] < 0.8)
        print(f"\n{len(worst) - len(below)} of {len(worst)} products at or above 0.8 x the best pinned OpenBLAS kernel"
              + (": below, " + ", ".join(f"{k[0]} {k[1]} {k[2]} ({r:.2f})" for r, k in below) if below else ""))


if __name__ == "__main__":
    main()
