#!/usr/bin/env bash
# Step time of every sharding scheme under two builds of ember, alternating A B A B ... so that
# both see the same machine (a before/after comparison of a change to the sharded step).
#
# Usage: bench/shard_ab.sh EMBER_A EMBER_B [options] [-- ember bench shard options]
#   --ranks W     ranks (default 2; more than the cores is allowed, and noisier)
#   --rounds N    alternations (default 5)
#   --out DIR     keep every run's JSON lines there (default: a temporary folder, removed)
# Env: MPIEXEC (default mpiexec).
#
# Prints one JSON line per scheme: the median over rounds of each build's ms_med (the median step
# of the slowest rank), the median of the per-round ratios A/B, and both builds' ids examined.
set -euo pipefail
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
a="$1" b="$2"; shift 2
ranks=2 rounds=5 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "shard_ab.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "shard_ab.sh: '$bin' is not an executable" >&2; exit 2; }; done
mpiexec="${MPIEXEC:-mpiexec}"
# Open MPI as root, more ranks than cores (other MPIs ignore these).
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
keep=1
if [ -z "$out" ]; then out="$(mktemp -d)"; keep=0; fi
mkdir -p "$out"
for ((r = 0; r < rounds; r++)); do
  for side in a b; do
    bin="$a"; [ "$side" = b ] && bin="$b"
    "$mpiexec" -n "$ranks" "$bin" bench shard "$@" > "$out/$side.$r.jsonl"
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(side, r):
    rows = {}
    for line in open(f"{out}/{side}.{r}.jsonl"):
        if line.startswith("{"):
            d = json.loads(line)
            rows[d["scheme"]] = d
    return rows
runs = {s: [load(s, r) for r in range(rounds)] for s in "ab"}
for scheme in runs["a"][0]:
    if not all(scheme in x for x in runs["b"]):
        continue
    a = [x[scheme]["ms_med"] for x in runs["a"]]
    b = [x[scheme]["ms_med"] for x in runs["b"]]
    first = runs["a"][0][scheme]
    print(json.dumps({"bench": "shard_ab", "scheme": scheme, "W": first["W"], "rounds": rounds,
                      "a_ms_med": statistics.median(a), "b_ms_med": statistics.median(b),
                      "ratio_a_over_b": round(statistics.median(x / y for x, y in zip(a, b)), 4),
                      "a_ids_examined": first.get("ids_examined"), "nnz": first.get("nnz"),
                      "b_ids_examined": runs["b"][0][scheme].get("ids_examined"),
                      "residual_max": max(x[scheme]["residual"] or 0 for x in runs["a"] + runs["b"])}))
PY
[ "$keep" = 1 ] || rm -rf "$out"
