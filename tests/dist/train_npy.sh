#!/usr/bin/env bash
# `ember train --dataset criteo_npy` (TorchRec's preprocessed day files, apps/ember/criteo_npy.h):
# the same data written as day files and as TSV (npy_days) trains the same model, bit for bit
# (the digest line), with the val and the test half of the last day as eval data, on 1, 2 and 3
# ranks (each rank reads its share of each global batch as the TSV reader does); and what cannot
# be read is one error line naming the file and what differs. --target_auc and --mllog (MLPerf's
# log) on the same data.
# Usage: train_npy.sh EMBER NPY_DAYS MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
ember=$1 gen=$2 mpiexec=$3 npflag=$4
shift 4
preflags=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
mkdir -p days/expect
"$gen" days 201 || exit 1
common=(--batch_size 64 --limit_train_batches 0 --limit_val_batches 0 --eval_interval 3
        --num_embeddings 4096 --progress lines --digest) # 4096 divides 2^32: negative int32 hashes agree
fails=0
run() { # run NP OUT ARGS...: ember train under mpiexec -n NP, output in OUT
  local np=$1 out=$2
  shift 2
  timeout 240 "$mpiexec" "$npflag" "$np" "${preflags[@]}" "$ember" train "${common[@]}" "$@" </dev/null >"$out" 2>&1
}
digest() { grep -m1 '^digest:' "$1"; }
same() { # same NAME A B: the two runs' digests agree (and exist)
  local a b
  a=$(digest "$2") b=$(digest "$3")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then
    printf 'ok    %s\n' "$1"
  else
    printf 'FAIL  %s\n  %s: %s\n  %s: %s\n' "$1" "$2" "${a:-no digest}" "$3" "${b:-no digest}"
    tail -n 5 "$2" "$3" | sed 's/^/  | /'
    fails=$((fails + 1))
  fi
}

run 1 tsv_val.txt --dataset criteo --data_path days/train.tsv --eval_data_path days/val.tsv
run 1 npy_val.txt --dataset criteo_npy --data_dir days
same "day files = TSV (val half)" tsv_val.txt npy_val.txt
run 1 tsv_test.txt --dataset criteo --data_path days/train.tsv --eval_data_path days/test.tsv
run 1 npy_test.txt --dataset criteo_npy --data_dir days --train_days 2 --eval_split test
same "day files = TSV (test half)" tsv_test.txt npy_test.txt
for np in 2 3; do # each rank's share of each global batch, as the TSV reader's
  run "$np" "tsv_np$np.txt" --dataset criteo --data_path days/train.tsv --eval_data_path days/val.tsv
  run "$np" "npy_np$np.txt" --dataset criteo_npy --data_dir days
  same "day files = TSV on $np ranks" "tsv_np$np.txt" "npy_np$np.txt"
done
run 1 npy_one_day.txt --dataset criteo_npy --data_dir days --train_days 1
if digest npy_one_day.txt >/dev/null && [ "$(digest npy_one_day.txt)" != "$(digest npy_val.txt)" ]; then
  printf 'ok    --train_days 1 trains on less\n'
else
  printf 'FAIL  --train_days 1\n'
  tail -5 npy_one_day.txt | sed 's/^/  | /'
  fails=$((fails + 1))
fi

# --target_auc stops at the first evaluation that reaches it, on every rank at the same step;
# --mllog writes MLPerf's lines, run_stop "success" (reached) or "aborted" (not).
for np in 1 2; do
  run "$np" "target_np$np.txt" --dataset criteo_npy --data_dir days --eval_interval 2 --target_auc 0.01 \
    --mllog "mllog_np$np.txt"
done
if grep -q '^target AUC 0.01000 reached at step 2: time to train' target_np1.txt &&
   grep -q '^target AUC 0.01000 reached at step 2: ' target_np2.txt &&
   grep -q '"key": "eval_accuracy", "value": 0\.[0-9]*, "metadata": {"file": "train.c", "lineno": [0-9]*, "epoch_num": 1}' mllog_np1.txt &&
   [ "$(grep -c ':::MLLOG' mllog_np2.txt)" -eq "$(grep -c ':::MLLOG' mllog_np1.txt)" ] &&
   tail -n 1 mllog_np1.txt | grep -q '"key": "run_stop".*"status": "success"'; then
  printf 'ok    --target_auc reached, --mllog\n'
else
  printf 'FAIL  --target_auc reached, --mllog\n'
  tail -n 3 target_np1.txt target_np2.txt mllog_np1.txt | sed 's/^/  | /'
  fails=$((fails + 1))
fi
run 1 missed.txt --dataset criteo_npy --data_dir days --target_auc 0.999 --mllog missed_mllog.txt
if grep -q '^target AUC 0.99900 not reached in 7 steps' missed.txt &&
   tail -n 1 missed_mllog.txt | grep -q '"status": "aborted"'; then
  printf 'ok    --target_auc not reached\n'
else
  printf 'FAIL  --target_auc not reached\n'
  tail -n 3 missed.txt missed_mllog.txt | sed 's/^/  | /'
  fails=$((fails + 1))
fi

# ember preprocess: each day's TSV into TorchRec's layout, byte for byte what tsv_to_npys writes;
# a second run keeps the complete days; a lost file has its day redone.
files_equal() { # files_equal NAME: every day file of pre/ equals days/expect/'s
  local d k bad=0
  for d in 0 1 2; do for k in dense sparse labels; do
    cmp -s "pre/day_${d}_$k.npy" "days/expect/day_${d}_$k.npy" || { echo "  differs: day_${d}_$k.npy"; bad=1; }
  done; done
  if [ $bad -eq 0 ]; then printf 'ok    %s\n' "$1"; else printf 'FAIL  %s\n' "$1"; fails=$((fails + 1)); fi
}
"$ember" preprocess --input days/day0.tsv,days/day1.tsv,days/day2.tsv --output_dir pre >prep.txt 2>&1
files_equal "preprocess = tsv_to_npys's layout"
"$ember" preprocess --input days/day0.tsv,days/day1.tsv,days/day2.tsv --output_dir pre >prep2.txt 2>&1
[ "$(grep -c ': kept$' prep2.txt)" -eq 3 ] && printf 'ok    preprocess again: 3 days kept\n' ||
  { printf 'FAIL  preprocess again\n'; sed 's/^/  | /' prep2.txt; fails=$((fails + 1)); }
rm pre/day_1_sparse.npy
"$ember" preprocess --input days/day0.tsv,days/day1.tsv,days/day2.tsv --output_dir pre >prep3.txt 2>&1
grep -q '^day 1: 201 rows from' prep3.txt && [ "$(grep -c ': kept$' prep3.txt)" -eq 2 ] && ! ls pre/*.partial 2>/dev/null &&
  files_equal "preprocess redoes a day with a lost file" ||
  { printf 'FAIL  preprocess redo\n'; sed 's/^/  | /' prep3.txt; fails=$((fails + 1)); }
printf '1\t2\n' >>days/day2.tsv
"$ember" preprocess --input days/day2.tsv --output_dir pre_bad --first_day 5 >prep4.txt 2>&1
grep -q '^day 5: 201 rows from .*; 1 malformed lines skipped, the first at line 202: 2 tab-separated fields' prep4.txt &&
  printf 'ok    preprocess skips and counts a malformed line\n' ||
  { printf 'FAIL  preprocess malformed\n'; sed 's/^/  | /' prep4.txt; fails=$((fails + 1)); }

# What cannot be read: one error line (from rank 0 only) naming the file and what differs.
expect() { # expect NAME REGEX ARGS...: a non-zero exit, one line matching REGEX, at most one error line
  local name=$1 regex=$2
  shift 2
  timeout 120 "$mpiexec" "$npflag" 2 "${preflags[@]}" "$ember" train "${common[@]}" "$@" </dev/null >err.txt 2>&1
  local rc=$? hits errs
  hits=$(grep -c -E -- "$regex" err.txt)
  errs=$(grep -c -E '^ember train: error: ' err.txt)
  if [ "$rc" -ne 0 ] && [ "$hits" -eq 1 ] && [ "$errs" -le 1 ]; then
    printf 'ok    %s\n' "$name"
  else
    printf 'FAIL  %s: exit %s, %s match(es) of /%s/, %s error line(s)\n' "$name" "$rc" "$hits" "$regex" "$errs"
    sed 's/^/  | /' err.txt | tail -8
    fails=$((fails + 1))
  fi
}
e='^ember train: error: '
mkdir empty
expect "no day files" "${e}--data_dir 'empty': no day_0_dense.npy there" --dataset criteo_npy --data_dir empty
expect "too many train days" "${e}--data_dir 'days' holds days 0..2: --train_days needs days 0..2 for training and day 3" \
  --dataset criteo_npy --data_dir days --train_days 3
cp -r days bad
printf 'not a numpy file at all, just text\n' >bad/day_1_sparse.npy
expect "not an npy file" "${e}'bad/day_1_sparse.npy': not a .npy file" --dataset criteo_npy --data_dir bad
cp days/day_0_dense.npy bad/day_1_sparse.npy
expect "dense where sparse belongs" "${e}'bad/day_1_sparse.npy': <f4 of shape \\(201, 13\\): expected int32 or int64" \
  --dataset criteo_npy --data_dir bad
cp days/day_1_sparse.npy bad/day_1_sparse.npy
head -c 1000 days/day_1_labels.npy >bad/day_1_labels.npy
expect "truncated" "${e}'bad/day_1_labels.npy': [0-9]+ bytes of data after the header, its shape \\(201, 1\\) of <i8 needs 1608" \
  --dataset criteo_npy --data_dir bad
expect "criteo option with criteo_npy" "^ember train: --data_path is an option of --dataset criteo, but the dataset is criteo_npy" \
  --dataset criteo_npy --data_dir days --data_path days/train.tsv
expect "npy option with criteo" "^ember train: --data_dir is an option of --dataset criteo_npy, but the dataset is criteo" \
  --dataset criteo --data_path days/train.tsv --data_dir days

[ "$fails" -eq 0 ] && echo "train_npy: all passed" || echo "train_npy: $fails failed"
[ "$fails" -eq 0 ]
