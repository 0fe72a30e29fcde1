#!/usr/bin/env bash
# Runs ember's peer benchmarks back to back (torch nn.EmbeddingBag, then FBGEMM's CPU TBE) and
# appends their JSON lines to one file, for bench/ratio_table.py.
#
# Usage: bench/run_peers.sh [--config small|full] [--threads 1,2] [--out FILE] [--stock]
#                           [--quick] [-- extra args passed to both peer scripts]
#   --threads  comma list; each count runs in its own processes with OMP_NUM_THREADS set to it
#   --out      default bench/results/<host>/peers-YYYY-MM-DD.jsonl (appended to)
#   --stock    also measure FBGEMM as installed (no cpuinfo fix: see bench/peers/fbgemm_tbe.py),
#              fp32 sum uniform only, recorded as impl "fbgemm-stock"
# The interpreter is bench/peers/.venv/bin/python, made by bench/peers/setup.sh (run first, and a
# no-op when the venv already works); EMBER_PEERS_PYTHON overrides it. A peer that cannot import
# its library prints {"skipped": ...} lines and exits 0, so this script always completes.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
config=small
threads=1
out=""
stock=0
quick=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --stock) stock=1; shift ;;
    --quick) quick=(--quick); shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run_peers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$root/bench/host.sh"
[ -n "$out" ] || out="$root/bench/results/$(bench_host_key)/peers-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"

if [ -n "${EMBER_PEERS_PYTHON:-}" ]; then
  py="$EMBER_PEERS_PYTHON"
else
  bash "$root/bench/peers/setup.sh"
  py="$root/bench/peers/.venv/bin/python"
  [ -x "$py" ] || py=python3
fi

# One line describing the run: the machine is a shared 2-core VM, so load and time matter.
"$py" - "$config" "$threads" >>"$out" <<'PY'
import json, os, platform, sys, time
thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip() if os.path.exists(
    "/sys/kernel/mm/transparent_hugepage/enabled") else None
print(json.dumps({"bench": "meta", "what": "run_peers.sh", "config": sys.argv[1], "threads": sys.argv[2],
                  "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
                  "loadavg": os.getloadavg(), "kernel": platform.release(), "python": sys.executable,
                  "thp": thp}, separators=(",", ":")))
PY

IFS=',' read -r -a tlist <<<"$threads"
for t in "${tlist[@]}"; do
  echo "run_peers.sh: config=$config threads=$t -> $out" >&2
  OMP_NUM_THREADS="$t" "$py" "$root/bench/peers/torch_embeddingbag.py" --config "$config" \
    --threads "$t" --out "$out" "${quick[@]}" "${extra[@]}" >/dev/null
  OMP_NUM_THREADS="$t" "$py" "$root/bench/peers/fbgemm_tbe.py" --config "$config" \
    --threads "$t" --out "$out" "${quick[@]}" "${extra[@]}" >/dev/null
  if [ "$stock" = 1 ]; then
    OMP_NUM_THREADS="$t" "$py" "$root/bench/peers/fbgemm_tbe.py" --config "$config" \
      --threads "$t" --out "$out" --cpuinfo-fix off --stock-name --dtypes fp32 --pools sum \
      --dists uniform "${quick[@]}" "${extra[@]}" >/dev/null
  fi
done
echo "run_peers.sh: $(grep -c . "$out") lines in $out" >&2
