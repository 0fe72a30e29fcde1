#!/usr/bin/env bash
# `ember train --dedup_features` from the command line, on requests of candidates sharing a user's
# features (--candidates_per_request, --user_features; one-hot and multi-hot): the run says what
# it deduplicates and how many bags it looked up, and ends where the run without deduplication
# ends up to summation order (train and eval loss within 1e-4, the same AUC to 3 decimals), with
# the overlapped step and without; bad lists are refused naming the flag.
# Usage: train_dedup.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
# shellcheck source=tests/dist/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

common=(--batch_size 256 --limit_train_batches 12 --limit_val_batches 2 --eval_interval 0 --progress lines
        --candidates_per_request 8 --user_features 0,1,2)
for hot in "" "--multi_hot_sizes 6,3,1,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"; do
  for overlap in on off; do
    # shellcheck disable=SC2086
    run plain.txt "$@" "$ember" train "${common[@]}" $hot --overlap "$overlap" || bad "plain run ($hot $overlap)"
    # shellcheck disable=SC2086
    run dedup.txt "$@" "$ember" train "${common[@]}" $hot --overlap "$overlap" --dedup_features 0,1,cat_2 ||
      { bad "dedup run ($hot $overlap)"; cat dedup.txt; }
    grep -q '^  dedup       features cat_0,cat_1,cat_2 looked up once per distinct bag' dedup.txt ||
      bad "no dedup line ($hot $overlap)"
    grep -qE '^dedup: [0-9]+ of [0-9]+ bags of the deduplicated features looked up on rank 0 \(1 in ([89]|[1-9][0-9])\.' \
      dedup.txt || { bad "no dedup count of about 1 in 8 or better ($hot $overlap)"; grep '^dedup' dedup.txt; }
    same_losses plain.txt dedup.txt ||
      bad "losses differ ($hot $overlap): plain $(losses plain.txt), dedup $(losses dedup.txt)"
  done
done
run list.txt "$@" "$ember" train --dedup_features 3,cat_x
[ $? -eq 2 ] && grep -q "^ember train: --dedup_features 'cat_x': not a feature (all, 0..25 or cat_0..cat_25)" list.txt ||
  { bad "a bad feature list"; cat list.txt; }
run users.txt "$@" "$ember" train --user_features 0
[ $? -eq 2 ] && grep -q "^ember train: --user_features repeat over the candidates of a request: give --candidates_per_request" \
  users.txt || { bad "user features without requests"; cat users.txt; }
[ "$fails" -eq 0 ] && echo "dedup: all checks passed"
exit $((fails > 0))
