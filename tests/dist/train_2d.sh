#!/usr/bin/env bash
# `ember train --sharding_group_size` from the command line at 4 ranks: 2D (2 groups of 2, and 4
# groups of 1) says so and ends where one group ends, up to summation order (train and eval loss
# within 1e-4, the same AUC to 3 decimals), overlapped and not; its checkpoint (one group's)
# resumes with another group size; a size that does not divide the ranks, and the options 2D
# cannot take, are refused naming the flag.
# Usage: train_2d.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 4)
set -u
# shellcheck source=tests/dist/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

common=(--batch_size 256 --limit_train_batches 12 --limit_val_batches 2 --eval_interval 0 --progress lines
        --threads 1)
for sharding in tw auto; do
  for overlap in on off; do
    run one.txt "$@" "$ember" train "${common[@]}" --sharding "$sharding" --overlap "$overlap" ||
      { bad "one group ($sharding $overlap)"; cat one.txt; }
    for g in 2 1; do
      run two.txt "$@" "$ember" train "${common[@]}" --sharding "$sharding" --overlap "$overlap" \
        --sharding_group_size $g || { bad "groups of $g ($sharding $overlap)"; cat two.txt; }
      grep -q "^  2D          the placement above (ranks of a group) in each of $((4 / g)) sharding groups of $g " \
        two.txt ||
        bad "no 2D line (groups of $g, $sharding $overlap)"
      same_losses one.txt two.txt ||
        bad "losses differ (groups of $g, $sharding $overlap): $(losses one.txt) against $(losses two.txt)"
    done
  done
done
# A 2D checkpoint is one group's: resumed by one group of 4, and by groups of 1, which ends where
# the uninterrupted run ends (eval loss and AUC: the train loss printed averages this process's
# steps only).
run save.txt "$@" "$ember" train "${common[@]}" --sharding tw --sharding_group_size 2 --save_dir ck2d ||
  { bad "2D save"; cat save.txt; }
run resume.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 16 --sharding rw \
  --resume ck2d/step-0000000012 --save_dir ck1 || { bad "resume of a 2D checkpoint by one group"; cat resume.txt; }
grep -q "^  resume      'ck2d/step-0000000012': step 12, epoch 0, next batch 12 (written by 2 ranks" resume.txt ||
  { bad "no resume line"; grep resume resume.txt; }
run back.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 20 --sharding tw --sharding_group_size 1 \
  --resume ck2d/step-0000000012 --save_dir ck1b || { bad "resume by groups of 1"; cat back.txt; }
run full.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 20 --sharding tw
read -r _ ef af < <(losses full.txt)
read -r _ eb ab < <(losses back.txt)
awk -v a="$ef" -v b="$eb" -v c="$af" -v d="$ab" 'BEGIN { exit !(a != "" && (a - b)^2 <= 1e-8 && (c - d)^2 <= 1e-6) }' ||
  bad "resumed 2D run differs from the uninterrupted one: eval loss, AUC $ef $af against $eb $ab"
run three.txt "$@" "$ember" train --sharding_group_size 3
[ $? -ne 0 ] && grep -q "^ember train: error: --sharding_group_size 3 does not divide the 4 ranks" three.txt ||
  { bad "a group size that does not divide the ranks"; cat three.txt; }
run rebal.txt "$@" "$ember" train --sharding_group_size 2 --rebalance_every 5
[ $? -eq 2 ] &&
  grep -q "^ember train: --sharding_group_size replicates the tables over groups of ranks: not with --rebalance_every" \
  rebal.txt || { bad "2D with --rebalance_every"; cat rebal.txt; }
[ "$fails" -eq 0 ] && echo "2d: all checks passed"
exit $((fails > 0))
