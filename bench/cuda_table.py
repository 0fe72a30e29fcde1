#!/usr/bin/env python3
"""The target table of the cuda backend (docs/cuda.md) from the JSON lines of
`ember bench tbe --backend cuda` and bench/peers/torch_cuda.py.

usage: cuda_table.py BENCH.jsonl [PEERS.jsonl]  -> a markdown table on stdout

Per (B, dist, dtype), SUM pooling: ember's forward (ms; against the plain gather kernel timed in
the same iterations; its fraction of the HBM read rate), its SGD and row-wise Adagrad steps as
multiples of its forward, torch's forward and training steps (where the peers ran), and whether
every case matched the cpu backend bit for bit. The targets: forward <= 1.1x the gather kernel
and >= 80% of the HBM read rate; SGD and row-wise Adagrad steps <= 3x the forward (uniform) and
<= 4x (Zipf); ember's SGD step >= 4x faster than torch's.
"""

import json
import sys


def load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except OSError:
        pass
    return rows


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ember = [r for r in load(argv[1]) if r.get("backend") == "cuda" and r.get("pool") == "sum"]
    peers = [r for r in load(argv[2])] if len(argv) > 2 else []
    if not ember:
        print("no cuda benchmark lines in", argv[1])
        return 1
    gpu = ember[0].get("gpu", "?")
    hbm = ember[0].get("hbm_gbps")
    print(f"GPU: {gpu}; HBM read {hbm} GB/s (measured in the run)\n")
    print("| B | dist | dtype | fwd ms | gather ms | fwd/gather | fwd % HBM | SGD/fwd | rw-Adagrad/fwd | torch fwd ms | "
          "torch SGD step ms (sparse / dense) | torch sparse step / ember SGD step | bitwise |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(r["B"], r["dist"], r["dtype"]) for r in ember})
    for B, dist, dt in keys:
        sel = {r["op"]: r for r in ember if (r["B"], r["dist"], r["dtype"]) == (B, dist, dt)}
        f = sel.get("fwd")
        if not f:
            continue
        sgd, rw = sel.get("train_sgd"), sel.get("train_rowwise_adagrad")
        p = {r["op"]: r for r in peers if (r.get("B"), r.get("dist"), r.get("dtype")) == (B, dist, dt)}

        def ms(r):
            return f"{r['ms']:.3f}" if r and r.get("ms") is not None else "-"

        def ratio(a, b):
            return f"{a['ms'] / b['ms']:.2f}" if a and b and a.get("ms") and b.get("ms") else "-"

        frac = f"{100 * f['fwd_of_hbm']:.0f}%" if f.get("fwd_of_hbm") is not None else "-"
        bit = all(r.get("bitwise") for r in sel.values())
        speed = f"{p['train_sgd']['ms'] / sgd['ms']:.1f}x" if sgd and p.get("train_sgd") else "-"
        print(f"| {B} | {dist} | {dt} | {f['ms']:.3f} | {f['limit_ms'] if f.get('limit_ms') is not None else '-'} | "
              f"{f['ratio'] if f.get('ratio') is not None else '-'} | {frac} | {ratio(sgd, f)} | {ratio(rw, f)} | "
              f"{ms(p.get('fwd'))} | {ms(p.get('train_sgd'))} / {ms(p.get('train_sgd_dense'))} | {speed} | "
              f"{'yes' if bit else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
