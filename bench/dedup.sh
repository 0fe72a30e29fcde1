#!/usr/bin/env bash
# Samples/s of `ember train` with and without --dedup_features on requests of candidates that share
# a user's features (--candidates_per_request, --user_features): the user features are long
# multi-hot histories (HOT ids each), the others one id. Runs alternate (plain, dedup) ROUNDS
# times; one JSON line per run (samples/s, eval loss and AUC), then one per pair with the speed-up
# and the residual (the two runs' eval losses differ only by summation order).
# Usage: bench/dedup.sh [EMBER] [LAUNCHER...]   (defaults: build/bin/ember, no launcher)
#   REQ (20) candidates per request, USERS (0,1,2,3,4,5) user features, HOT (100) ids per user
#   feature, DIM (64), BATCH (4096) global batch, STEPS (30), ROUNDS (3), LR (0.01), GENERATED (0:
#   every batch generated on the step's path, as `ember train` does by default; N: N batches
#   generated before training and cycled, as the Python peers make theirs, so that the figure is
#   the training step's alone).
set -eu
ember=${1:-build/bin/ember}
[ $# -gt 0 ] && shift
req=${REQ:-20} users=${USERS:-0,1,2,3,4,5} hot=${HOT:-100} dim=${DIM:-64} batch=${BATCH:-4096}
steps=${STEPS:-30} rounds=${ROUNDS:-3} lr=${LR:-0.01} generated=${GENERATED:-0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sizes=$(awk -v u="$users" -v h="$hot" 'BEGIN { n = split(u, a, ","); for (i = 1; i <= n; i++) is[a[i]] = 1
  for (f = 0; f < 26; f++) printf "%s%d", f ? "," : "", (f in is) ? h : 1 }')
common=(--batch_size "$batch" --limit_train_batches "$steps" --limit_val_batches 4 --eval_interval 0 --progress lines
        --embedding_dim "$dim" --dense_arch_layer_sizes "128,$dim" --multi_hot_sizes "$sizes" --learning_rate "$lr"
        --candidates_per_request "$req" --user_features "$users")
if [ "$generated" -gt 0 ]; then common+=(--num_generated_batches "$generated"); fi

run() { # case, then extra flags; prints the JSON line, leaves "sps loss" in $dir/last
  local name=$1
  shift
  "$@" >"$dir/out.txt" 2>&1 || { cat "$dir/out.txt" >&2; exit 1; }
  awk -v name="$name" -v gen="$generated" -v req="$req" -v hot="$hot" -v last="$dir/last" '
    /^done:/ { for (i = 1; i <= NF; i++) if ($i == "samples/s)") sps = substr($(i - 1), 2) }
    /^dedup:/ { ratio = $NF; sub(/\)/, "", ratio) }
    /^eval AUC/ { auc = $3; loss = $NF }
    END { printf "{\"bench\":\"dedup\",\"case\":\"%s\",\"generated_batches\":%d,\"candidates_per_request\":%d,\"user_hot\":%d,\"samples_per_s\":%s,\"eval_auc\":%s,\"eval_loss\":%s%s}\n",
                 name, gen, req, hot, sps, auc, loss, ratio != "" ? ",\"bags_per_lookup\":" ratio : ""
          print sps, loss > last }' "$dir/out.txt"
}

for r in $(seq 1 "$rounds"); do
  run plain "$@" "$ember" train "${common[@]}"
  read -r a la <"$dir/last"
  run dedup "$@" "$ember" train "${common[@]}" --dedup_features "$users"
  read -r b lb <"$dir/last"
  awk -v gen="$generated" -v r="$r" -v a="$a" -v b="$b" -v la="$la" -v lb="$lb" 'BEGIN {
    d = la - lb; if (d < 0) d = -d
    printf "{\"bench\":\"dedup\",\"case\":\"ratio\",\"generated_batches\":%d,\"round\":%d,\"speedup\":%.3f,\"eval_loss_residual\":%.2g}\n", gen, r, b / a, d }'
done
