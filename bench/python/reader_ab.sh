#!/usr/bin/env bash
# The criteo_npy day-file reader of `ember train` (ember bench reader) against TorchRec's
# InMemoryBinaryCriteoIterDataPipe (bench/python/reader_torchrec.py: mmap_mode, as ember reads in
# place, and in memory, TorchRec's default, which loads and hashes every day first), one process
# each, on the same files from the page cache, alternating within each round. Every line carries
# the checksum of what was read (the sum of every id and label): the three must agree.
#
# Usage: bench/python/reader_ab.sh [--rows N] [--rounds R] [--batch_size B] [--dir DIR] [--out FILE]
#   --rows      rows per day (default 2000000; 3 days are written: 2 train, 1 eval), with numpy,
#               into --dir (default /tmp/ember-reader-days), reused when they are already there
#   --rounds    rounds (default 3); each runs every reader with 2 timed passes
#   --out       default bench/results/<host>/reader-YYYY-MM-DD.jsonl (appended to)
# Env: EMBER_PYTHON (default: the venv of scripts/pyenv.sh), EMBER_BIN (default build/bin/ember).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rows=2000000 rounds=3 batch=2048 dir=/tmp/ember-reader-days out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --batch_size) batch="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "reader_ab.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source "$root/bench/host.sh"
[ -n "$out" ] || out="$root/bench/results/$(bench_host_key)/reader-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"
py="${EMBER_PYTHON:-$(bash "$root/scripts/pyenv.sh" | tail -n 1)/bin/python}"
ember="${EMBER_BIN:-$root/build/bin/ember}"
export OMP_NUM_THREADS=1
"$py" - "$dir" "$rows" <<'PY' || exit 1
import os, sys
import numpy as np
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(1)
for day in range(3):
    p = os.path.join(d, "day_%d_labels.npy" % day)
    if os.path.exists(p) and np.load(p, mmap_mode="r").shape[0] == n:
        continue
    np.save(os.path.join(d, "day_%d_dense.npy" % day), rng.random((n, 13), dtype=np.float32))
    np.save(os.path.join(d, "day_%d_sparse.npy" % day), rng.integers(-2**31, 2**31 - 1, (n, 26), dtype=np.int32))
    np.save(p, rng.integers(0, 2, (n, 1), dtype=np.int32))
    print("reader_ab.sh: wrote day %d (%d rows) in %s" % (day, n, d), file=sys.stderr)
PY
start=$(($(wc -l <"$out" 2>/dev/null || echo 0) + 1))
for ((r = 1; r <= rounds; r++)); do
  order=(ember torchrec_mmap torchrec_in_memory)
  ((r % 2 == 0)) && order=(torchrec_in_memory torchrec_mmap ember)
  for impl in "${order[@]}"; do
    echo "reader_ab.sh: round $r $impl" >&2
    case "$impl" in
      ember) "$ember" bench reader --data_dir "$dir" --batch_size "$batch" --rounds 2 --json ;;
      torchrec_mmap) "$py" "$root/bench/python/reader_torchrec.py" --data_dir "$dir" --batch_size "$batch" --rounds 2 --mmap 2>/dev/null ;;
      torchrec_in_memory) "$py" "$root/bench/python/reader_torchrec.py" --data_dir "$dir" --batch_size "$batch" --rounds 2 2>/dev/null ;;
    esac | grep '^{' >>"$out"
  done
done
tail -n +"$start" "$out" | "$py" -c '
import json, statistics, sys
runs = {}
for line in sys.stdin:
    d = json.loads(line)
    if d.get("bench") == "reader":
        runs.setdefault(d["impl"], []).append(d)
med = {k: statistics.median(x["rows_per_s"] for x in v) for k, v in runs.items()}
sums = {k: sorted({x["checksum"] for x in v}) for k, v in runs.items()}
s = {"bench": "reader_ab", "median_rows_per_s": {k: round(v) for k, v in med.items()},
     "checksums_agree": len({c for v in sums.values() for c in v}) == 1,
     "load_seconds_in_memory": runs.get("torchrec_in_memory", [{}])[0].get("load_seconds")}
for k in med:
    if k != "ember":
        s["ember_over_" + k] = round(med["ember"] / med[k], 2)
print(json.dumps(s))' | tee -a "$out"
echo "reader_ab.sh: appended to $out" >&2
