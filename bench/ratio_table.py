#!/usr/bin/env python3
"""Markdown ratio table from JSON-lines benchmark files (ember's C bench and the peers).

Usage: bench/ratio_table.py FILE.jsonl [FILE.jsonl ...] [--threads 1] [--ops fwd,train_sgd]
                            [--where dtype=fp32 --where pool=sum ...]

Reads every {"bench":"tbe", ...} line (others, such as "meta" or "tbe_semantics", are ignored)
and prints one row per (op, pool, dtype, dist, T, E, threads) with:
  ember ms, fbgemm ms, torch ms   ms_med; when a file holds several lines for one cell (repeated
                                  runs) the median of their ms_med; "skip" when only skipped
                                  lines exist (reasons listed under the table), "–" when none
  ember/limit                     ember's "ratio" field, else gbps/limit_gbps
                                  (the ember columns are left out when no file has ember lines)
  vs fbgemm, vs torch             ember's speed-up: peer ms / ember ms
  fbgemm vs torch                 torch ms / fbgemm ms
An "fbgemm-stock" column appears when such lines exist (FBGEMM as installed, see
bench/peers/fbgemm_tbe.py). ember lines that name their kernel variant ("isa", e.g. from
`bench/run_all.sh --isa all`) get one group of ember columns per variant ("ember[avx2] ms",
"[avx2]/limit", "[avx2] vs fbgemm", ...), all joined with the same peer lines. Standard library
only.

Op names are joined on ember's meaning (the issue's): `train_X` is the fused backward + optimizer
update alone and `step_X` a whole training step (forward + backward + update). The peers' scripts
call their whole step `train_X` and its backward + update part `bwd_X`; their lines are renamed
on reading (train_X -> step_X, bwd_X -> train_X) so that like is compared with like.
"""

import argparse
import json
import signal
import statistics
import sys

OP_ORDER = ["fwd", "train_sgd", "step_sgd", "train_rowwise_adagrad", "step_rowwise_adagrad",
            "train_adam", "step_adam"]
KEY = ("op", "pool", "dtype", "dist", "T", "E", "threads")


def load(paths):
    recs, bad = [], 0
    for path in paths:
        try:
            fh = open(path, encoding="utf-8")
        except OSError as e:
            print(f"ratio_table: cannot read {path}: {e}", file=sys.stderr)
            continue
        with fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    bad += 1
                    continue
                if isinstance(r, dict) and r.get("bench") == "tbe" and all(k in r for k in KEY + ("impl",)):
                    if r["impl"] != "ember":
                        op = str(r["op"])
                        if op.startswith("train_"):
                            r["op"] = "step_" + op[len("train_"):]
                        elif op.startswith("bwd_"):
                            r["op"] = "train_" + op[len("bwd_"):]
                    recs.append(r)
    if bad:
        print(f"ratio_table: ignored {bad} lines that are not JSON", file=sys.stderr)
    return recs


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def cells(recs):
    """{key: {impl: {"ms": [...], "ratio": [...], "skipped": set()}}}"""
    table = {}
    for r in recs:
        key = tuple(r[k] for k in KEY)
        impl = r["impl"]
        if impl == "ember" and r.get("isa"):
            impl = f"ember[{r['isa']}]"
        c = table.setdefault(key, {}).setdefault(impl, {"ms": [], "ratio": [], "skipped": set()})
        if "skipped" in r:
            c["skipped"].add(str(r["skipped"]))
            continue
        ms = _num(r.get("ms_med"))
        if ms is not None and ms > 0:
            c["ms"].append(ms)
        ratio = _num(r.get("ratio"))
        if ratio is None and _num(r.get("gbps")) is not None and _num(r.get("limit_gbps")):
            ratio = r["gbps"] / r["limit_gbps"]
        if ratio is not None:
            c["ratio"].append(ratio)
    return table


def med(c, field):
    if not c or not c[field]:
        return None
    return statistics.median(c[field])


def fmt_ms(c):
    v = med(c, "ms")
    if v is not None:
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return "skip" if c and c["skipped"] else "–"


def fmt_x(num, den):
    return f"{num / den:.2f}×" if num is not None and den else "–"


def sort_key(key):
    op = key[0]
    return (key[4], key[5], OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER), op,
            str(key[1]), str(key[2]), str(key[3]), key[6])


ISA_ORDER = ["generic", "avx2", "avx512"]


def ember_impls(table):
    """The ember columns present: "ember" and/or "ember[<isa>]", variants in ISA_ORDER."""
    found = {i for v in table.values() for i in v if i == "ember" or i.startswith("ember[")}

    def order(i):
        isa = i[len("ember["):-1] if i.startswith("ember[") else ""
        return (ISA_ORDER.index(isa) if isa in ISA_ORDER else len(ISA_ORDER), i)
    return sorted(found, key=order)


def render(table, out=sys.stdout):
    has_stock = any("fbgemm-stock" in v for v in table.values())
    embers = ember_impls(table)
    label = {e: ("" if e == "ember" else e[len("ember"):]) for e in embers}
    head = ["op", "pool", "dtype", "dist", "T", "E", "thr"] + [f"ember{label[e]} ms" for e in embers]
    head += ["fbgemm ms", "torch ms"]
    if has_stock:
        head.append("fbgemm-stock ms")
    for e in embers:
        head += [f"{label[e] or 'ember'}/limit", f"{label[e] or 'ember'} vs fbgemm", f"{label[e] or 'ember'} vs torch"]
    head.append("fbgemm vs torch")
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" if i < 4 else "--:" for i in range(len(head))) + "|", file=out)
    reasons = {}
    for key in sorted(table, key=sort_key):
        impls = table[key]
        f, t = impls.get("fbgemm"), impls.get("torch")
        fm, tm = med(f, "ms"), med(t, "ms")
        row = [str(k) for k in key] + [fmt_ms(impls.get(e)) for e in embers] + [fmt_ms(f), fmt_ms(t)]
        if has_stock:
            row.append(fmt_ms(impls.get("fbgemm-stock")))
        for e in embers:
            em, r = med(impls.get(e), "ms"), med(impls.get(e), "ratio")
            row += [f"{r:.2f}" if r is not None else "–", fmt_x(fm, em), fmt_x(tm, em)]
        row.append(fmt_x(tm, fm))
        print("| " + " | ".join(row) + " |", file=out)
        for impl, c in impls.items():
            if c["skipped"] and not c["ms"]:
                for why in c["skipped"]:
                    reasons.setdefault((impl, why), []).append(key)
    if reasons:
        print("\nSkipped cells:", file=out)
        for (impl, why), keys in sorted(reasons.items()):
            print(f"- {impl} ({len(keys)} cells, e.g. {keys[0][0]} {keys[0][2]}): {why}", file=out)


def main(argv=None):
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--threads", default=None, help="comma list: keep only these thread counts")
    p.add_argument("--ops", default=None, help="comma list: keep only these ops")
    p.add_argument("--where", action="append", default=[], metavar="FIELD=V1[,V2]",
                   help="keep only lines whose FIELD (as text) is one of the values; repeatable")
    a = p.parse_args(argv)
    recs = load(a.files)
    if a.threads:
        keep = {int(x) for x in a.threads.split(",") if x}
        recs = [r for r in recs if r.get("threads") in keep]
    if a.ops:
        keep = set(a.ops.split(","))
        recs = [r for r in recs if r.get("op") in keep]
    for cond in a.where:
        field, _, vals = cond.partition("=")
        keep = set(vals.split(","))
        recs = [r for r in recs if str(r.get(field)) in keep]
    if not recs:
        print("ratio_table: no tbe lines found", file=sys.stderr)
        return 1
    render(cells(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
