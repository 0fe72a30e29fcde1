#!/usr/bin/env bash
# The Python binding's cost over C on the same library calls: `ember bench shard` (C) and
# bench/python/shard_binding.py (the same collection, plans, batch and steps through `import ember`)
# alternating for R rounds at W ranks, one thread per rank. Prints every line, then one summary line
# per scheme: the medians of ms per step and the median over rounds of the paired ratio
# python / C (1.00 = no overhead). Appends all to bench/results/<host>/binding-<date>.jsonl.
# Usage: bench/python/binding_ab.sh [--rounds R] [--np W] [--iters N]   (build/ and the venv of
# scripts/pyenv.sh, with the package installed, must exist: scripts/test-python.sh installs it)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 np=2 iters=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
py=${EMBER_PYTHON:-$(bash scripts/pyenv.sh --no-torch | tail -n 1)/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. bench/host.sh
host=$(bench_host_key)   # before OMP_NUM_THREADS, which nproc obeys
export OMP_NUM_THREADS=1
out="bench/results/$host/binding-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for r in $(seq "$rounds"); do
  mpiexec -n "$np" build/bin/ember bench shard --iters "$iters" | sed "s/^{/{\"round\":$r,/" | tee -a "$tmp"
  mpiexec -n "$np" "$py" bench/python/shard_binding.py --iters "$iters" | sed "s/^{/{\"round\": $r, /" | tee -a "$tmp"
done
"$py" - "$tmp" <<'PY' | tee -a "$tmp"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for scheme in dict.fromkeys(r["scheme"] for r in rows):
    c = {r["round"]: r["ms_med"] for r in rows if r["scheme"] == scheme and r["impl"] == "ember"}
    p = {r["round"]: r["ms_med"] for r in rows if r["scheme"] == scheme and r["impl"] == "ember-python"}
    paired = [p[k] / c[k] for k in c if k in p]
    print(json.dumps({"bench": "binding_ab", "scheme": scheme, "W": rows[0]["W"], "rounds": len(paired),
                      "ms_med_c": round(statistics.median(c.values()), 3),
                      "ms_med_python": round(statistics.median(p.values()), 3),
                      "python_over_c_paired": round(statistics.median(paired), 3)}))
PY
cat "$tmp" >> "$out"
echo "binding_ab.sh: appended to $out" >&2
