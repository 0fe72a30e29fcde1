#!/usr/bin/env bash
# `ember train` and `ember eval` on files with nothing to learn from: an empty file, every line
# malformed, binary bytes, a .npy array, an eval file of nothing, a file held out whole, a
# training part of nothing after a good eval head. Each fails with one error line from rank 0
# naming the option, the file and what it held, and a non-zero exit; a good file trains.
# Usage: train_data.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 3)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1

# 300 valid lines: label, 13 counts, 26 hexadecimal hashes.
awk 'BEGIN { srand(7); for (i = 0; i < 300; i++) { printf "%d", (rand() < 0.3);
             for (j = 0; j < 13; j++) printf "\t%d", int(rand() * rand() * 100);
             for (c = 0; c < 26; c++) printf "\t%x", int(rand() * 2147483647); printf "\n" } }' >good.tsv
head -n 64 good.tsv >head64.tsv
: >empty.tsv
for i in $(seq 1 1032); do echo "garbage line $i"; done >bad.tsv
cat head64.tsv bad.tsv >good_then_bad.tsv
# Bytes 0..255, 40 times: every "line" holds a NUL byte, the first one at its first byte.
bytes=$(printf '\\%03o' $(seq 0 255))
for i in $(seq 1 40); do printf "$bytes"; done >binary.bin
# A .npy array of 1000 float64: its magic, a header of text ending in '\n', then binary data.
header="{'descr': '<f8', 'fortran_order': False, 'shape': (1000,), }"
{ printf '\223NUMPY\001\000\166\000'; printf '%-117s\n' "$header"; for i in $(seq 1 32); do printf "$bytes"; done; } >array.npy

short=(--batch_size 64 --limit_train_batches 4 --eval_interval 0 --progress lines)
fails=0
# check NAME STATUS REGEX -- COMMAND...: the exit status (a number or "nonzero"), exactly one
# line matching REGEX, and no other rank's error line (one "error:" line in all).
check() {
  local name=$1 want=$2 regex=$3
  shift 4
  local out status
  out=$("$@" 2>&1)
  status=$?
  local hits errors
  hits=$(printf '%s\n' "$out" | grep -c -E -- "$regex")
  errors=$(printf '%s\n' "$out" | grep -c -E -- '^ember [a-z]+: error: ')
  local ok=1
  if [ "$want" = nonzero ]; then [ "$status" -ne 0 ] || ok=0; else [ "$status" -eq "$want" ] || ok=0; fi
  [ "$hits" -eq 1 ] || ok=0
  if [ "$want" = nonzero ]; then [ "$errors" -eq 1 ] || ok=0; fi
  if [ "$ok" -eq 1 ]; then
    printf 'ok    %s\n' "$name"
  else
    printf 'FAIL  %s: exit %s (wanted %s), %s line(s) match /%s/, %s error line(s); output:\n%s\n' \
      "$name" "$status" "$want" "$hits" "$regex" "$errors" "$out"
    fails=$((fails + 1))
  fi
}

e="^ember train: error: "
check empty nonzero "$e--data_path 'empty.tsv': no data: the file is empty \\(rank 0\\)$" -- \
  "$@" "$ember" train --dataset criteo --data_path empty.tsv "${short[@]}"
check empty_train nonzero "$e--data_path 'empty.tsv': no training data: the file is empty" -- \
  "$@" "$ember" train --dataset criteo --data_path empty.tsv --eval_data_path good.tsv "${short[@]}"
check all_malformed nonzero \
  "$e--data_path 'bad.tsv': no usable data: 0 usable lines of 1032 \\(1032 malformed: first at line 1: 1 tab-separated fields, expected 40\\)" -- \
  "$@" "$ember" train --dataset criteo --data_path bad.tsv "${short[@]}"
check binary nonzero \
  "$e--data_path 'binary.bin': no usable data: 0 usable lines of 41 \\(41 malformed: first at line 1: a NUL byte at byte 1 " -- \
  "$@" "$ember" train --dataset criteo --data_path binary.bin "${short[@]}"
check npy nonzero "$e--data_path 'array.npy': no usable data: 0 usable lines of [0-9]+ \\([0-9]+ malformed: first at line 1: a NUL byte at byte 8 " -- \
  "$@" "$ember" train --dataset criteo --data_path array.npy "${short[@]}"
check eval_empty nonzero "$e--eval_data_path 'empty.tsv': no eval data: the file is empty" -- \
  "$@" "$ember" train --dataset criteo --data_path good.tsv --eval_data_path empty.tsv "${short[@]}"
check eval_malformed nonzero \
  "$e--eval_data_path 'bad.tsv': no usable eval data: 0 usable lines of 1024 \\(read: at most --limit_val_batches 16 x --batch_size 64; 1024 malformed: first at line 1: " -- \
  "$@" "$ember" train --dataset criteo --data_path good.tsv --eval_data_path bad.tsv "${short[@]}"
check all_held_out nonzero \
  "$e--data_path 'good.tsv': no training data: its 300 lines all lie in the first 320, held out for evaluation \\(--limit_val_batches 5 x --batch_size 64\\): give --eval_data_path FILE" -- \
  "$@" "$ember" train --dataset criteo --data_path good.tsv --limit_val_batches 5 "${short[@]}"
check train_malformed nonzero \
  "$e--data_path 'good_then_bad.tsv': no usable training data: 0 usable lines of 1032 \\(after the first 64, held out for evaluation; 1032 malformed: first at line 65: " -- \
  "$@" "$ember" train --dataset criteo --data_path good_then_bad.tsv --limit_val_batches 1 --batch_size 64 \
  --eval_interval 0 --progress lines
# A good file trains (the held-out head of 64 lines, 236 training lines: 3 batches and 44 lines).
check good 0 "^eval AUC 0\\.[0-9]+ +eval loss [0-9.]+$" -- \
  "$@" "$ember" train --dataset criteo --data_path good.tsv --limit_val_batches 1 "${short[@]}" --save_dir ckpt
check eval_load_malformed nonzero \
  "^ember eval: error: --data_path 'bad.tsv': no usable eval data: 0 usable lines of 1032 \\(1032 malformed: first at line 1: " -- \
  "$@" "$ember" eval --load ckpt --data_path bad.tsv
check eval_load_good 0 "^eval loss [0-9.]+  eval AUC 0\\.[0-9]+$" -- "$@" "$ember" eval --load ckpt --data_path good.tsv
exit $((fails > 0))
