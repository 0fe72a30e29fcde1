#!/usr/bin/env bash
# Quantized pooled lookups, ember against FBGEMM's CPU IntNBit TBE on one shape, alternating per
# round (1 thread each): `ember bench quant` (its lines also carry the gather limit and ember's fp32
# training forward, timed in the same iterations) and bench/python/quant_fbgemm.py.
# Usage: bench/python/quant_ab.sh [--rounds R] [--shape T,E,D,B,L] [--qtypes int8,int4] [--out FILE]
# Env: EMBER_PYTHON (default: the venv of scripts/pyenv.sh), EMBER_BIN (default build/bin/ember).
# Every line goes to --out (default bench/results/<host>/quant-YYYY-MM-DD.jsonl); then one summary
# line per type: {"bench":"quant_ab","qtype":..,"ember_ms":[..],"fbgemm_ms":[..],"ember_over_fbgemm":
# median over rounds of fbgemm ms / ember ms}.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=3 shape=32,100000,128,512,20 qtypes=int8,int4 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --qtypes) qtypes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "quant_ab.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source "$root/bench/host.sh"
[ -n "$out" ] || out="$root/bench/results/$(bench_host_key)/quant-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"
py="${EMBER_PYTHON:-$(bash "$root/scripts/pyenv.sh" | tail -n 1)/bin/python}"
ember="${EMBER_BIN:-$root/build/bin/ember}"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
export OMP_NUM_THREADS=1
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    "$ember" bench quant --shape "$shape" --qtypes "$qtypes" --threads 1 --json | tee -a "$tmp"
    "$py" "$root/bench/python/quant_fbgemm.py" --shape "$shape" --qtypes "$qtypes" | tee -a "$tmp"
  else
    "$py" "$root/bench/python/quant_fbgemm.py" --shape "$shape" --qtypes "$qtypes" | tee -a "$tmp"
    "$ember" bench quant --shape "$shape" --qtypes "$qtypes" --threads 1 --json | tee -a "$tmp"
  fi
done
cat "$tmp" >>"$out"
"$py" - "$tmp" <<'PY' | tee -a "$out"
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for q in sorted({l["qtype"] for l in lines}):
    e = [l["ms_med"] for l in lines if l["qtype"] == q and l["impl"] == "ember"]
    f = [l["ms_med"] for l in lines if l["qtype"] == q and l["impl"] == "fbgemm"]
    ratios = [b / a for a, b in zip(e, f)]
    print(json.dumps({"bench": "quant_ab", "qtype": q, "ember_ms": e, "fbgemm_ms": f,
                      "ember_over_fbgemm": round(statistics.median(ratios), 2) if ratios else None},
                     separators=(",", ":")))
PY
