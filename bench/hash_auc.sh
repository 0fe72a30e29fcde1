#!/usr/bin/env bash
# Eval AUC of `ember train` with modulo hashing against collisionless hashed tables at the same
# row budget (docs/hashed.md), on (a) the synthetic set with K items per table row and (b) a
# Criteo-format file written here whose categorical values collide modulo the table size: K x
# rows distinct values per feature, Zipf-distributed, each with an effect of its own on the
# click probability, so rows shared under modulo hashing mix unrelated effects.
# One JSON line per run on stdout.
# Usage: bench/hash_auc.sh [EMBER] [LAUNCHER...]   (defaults: build/bin/ember, no launcher)
#   ROWS (2000) rows per table, K (4) items per row, LINES (300000) lines of the file,
#   STEPS (120) training batches of 2048, SEED (7).
set -eu
ember=${1:-build/bin/ember}
[ $# -gt 0 ] && shift
rows=${ROWS:-2000} k=${K:-4} lines=${LINES:-300000} steps=${STEPS:-120} seed=${SEED:-7}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--num_embeddings "$rows" --batch_size 2048 --limit_train_batches "$steps" --limit_val_batches 16
        --eval_interval 0 --progress lines --seed "$seed")

run() { # name, then ember train flags
  local name=$1
  shift
  "$@" >"$dir/out.txt" 2>&1 || { cat "$dir/out.txt" >&2; exit 1; }
  awk -v name="$name" -v rows="$rows" -v k="$k" '/^eval AUC/ {
      printf "{\"bench\":\"hash_auc\",\"case\":\"%s\",\"rows\":%d,\"items_per_row\":%d,\"eval_auc\":%s,\"eval_loss\":%s", name, rows, k, $3, $NF
      if ($4 == "planted") printf ",\"planted_auc\":%s", $7
      printf "}\n" }' "$dir/out.txt"
}

# (a) synthetic: K items per row, each a 64-bit value.
run synthetic_modulo "${@}" "$ember" train "${common[@]}" --synth_items "$k"
run synthetic_collisionless "${@}" "$ember" train "${common[@]}" --synth_items "$k" --hash collisionless
run synthetic_collisionless_min2 "${@}" "$ember" train "${common[@]}" --synth_items "$k" --hash collisionless \
  --hash_min_count 2
run synthetic_collisionless_lfu "${@}" "$ember" train "${common[@]}" --synth_items "$k" --hash collisionless \
  --hash_policy lfu

# (b) a Criteo-format file: label, 13 counts, 26 hex values.
awk -v n="$lines" -v items=$((rows * k)) -v seed="$seed" 'BEGIN {
  srand(seed)
  # Zipf(1.1) over the items, one table for every feature.
  tot = 0
  for (i = 1; i <= items; i++) { w[i] = 1 / (i ^ 1.1); tot += w[i] }
  c = 0
  for (i = 1; i <= items; i++) { c += w[i] / tot; cdf[i] = c }
  for (f = 0; f < 26; f++) {
    for (i = 1; i <= items; i++) {
      raw[f, i] = int(rand() * 4294967296)   # the categorical value, 32 bits as in Criteo
      # an effect per value: the sum of three uniforms, centred, scaled
      eff[f, i] = (rand() + rand() + rand() - 1.5) * 0.9
    }
  }
  for (l = 0; l < n; l++) {
    z = -1.2
    line = ""
    for (j = 0; j < 13; j++) line = line "\t" int(rand() * 20)
    for (f = 0; f < 26; f++) {
      u = rand(); lo = 1; hi = items
      while (lo < hi) { mid = int((lo + hi) / 2); if (cdf[mid] < u) lo = mid + 1; else hi = mid }
      z += eff[f, lo] / 2
      line = line "\t" sprintf("%08x", raw[f, lo])
    }
    label = rand() < 1 / (1 + exp(-z)) ? 1 : 0
    print label line
  }
}' >"$dir/criteo.tsv"
run criteo_modulo "${@}" "$ember" train "${common[@]}" --dataset criteo --data_path "$dir/criteo.tsv"
run criteo_collisionless "${@}" "$ember" train "${common[@]}" --dataset criteo --data_path "$dir/criteo.tsv" \
  --hash collisionless
run criteo_collisionless_min2 "${@}" "$ember" train "${common[@]}" --dataset criteo --data_path "$dir/criteo.tsv" \
  --hash collisionless --hash_min_count 2
run criteo_collisionless_lfu "${@}" "$ember" train "${common[@]}" --dataset criteo --data_path "$dir/criteo.tsv" \
  --hash collisionless --hash_policy lfu
