#!/usr/bin/env bash
# `ember plan --output FILE`, then `ember train --plan FILE`: the run trains, and places every
# table as `ember train --sharding auto` does for the same sizes, world and batch (the same
# planner, the same table names).
# Usage: plan_roundtrip.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -eu
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--batch_size 512 --limit_train_batches 4 --limit_val_batches 1 --eval_interval 0 --progress lines)
"$ember" plan --world_size 2 --batch_size 512 --num_embeddings 40000 --output "$dir/plan.json" >"$dir/plan.txt"
"$@" "$ember" train "${common[@]}" --num_embeddings 40000 --plan "$dir/plan.json" >"$dir/file.txt"
"$@" "$ember" train "${common[@]}" --num_embeddings 40000 >"$dir/auto.txt"
tables() { grep -E '^    t_cat_[0-9]+ ' "$1" || true; }
if [ "$(tables "$dir/file.txt" | wc -l)" -ne 26 ] || ! grep -q '^eval AUC' "$dir/file.txt" ||
   ! diff <(tables "$dir/file.txt") <(tables "$dir/auto.txt"); then
  printf 'plan:\n%s\ntrain --plan:\n%s\ntrain --sharding auto:\n%s\n' "$(cat "$dir/plan.txt")" \
    "$(cat "$dir/file.txt")" "$(cat "$dir/auto.txt")"
  exit 1
fi
