#!/usr/bin/env bash
# The same bits on every host: the fixed runs of tests/data/train_digests.txt, each under every
# kernel variant this host runs (EMBER_ISA=generic, avx2, avx512; one the CPU lacks is skipped
# with its reason), must print the stored digest line. The first run is repeated with 2 threads
# per rank. The stored lines were made on one host (an AVX-512 Intel VM): elsewhere, equality is equality across
# hosts, variants and thread counts at once.
# Usage: train_digests.sh EMBER DIGESTS_FILE MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
ember=$1 file=$2 mpiexec=$3 npflag=$4
shift 4
preflags=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
common=(--batch_size 512 --limit_train_batches 30 --eval_interval 10 --limit_val_batches 4 --progress lines --digest)

fails=0 runs=0
# check ISA NP WANT OPTIONS...: one run, its digest line against WANT.
check() {
  local isa=$1 np=$2 want=$3
  shift 3
  local got
  EMBER_ISA=$isa timeout 240 "$mpiexec" "$npflag" "$np" "${preflags[@]}" "$ember" train "${common[@]}" "$@" \
    </dev/null >out.txt 2>&1
  local rc=$?
  if grep -q "this CPU lacks" out.txt; then
    printf 'skip  %s: %s\n' "$isa" "$(grep -m1 -o 'this CPU lacks.*' out.txt)"
    return
  fi
  runs=$((runs + 1))
  got=$(grep -m1 '^digest:' out.txt)
  if [ "$rc" -ne 0 ] || [ "$got" != "$want" ]; then
    printf 'FAIL  EMBER_ISA=%s -n %s %s (exit %s)\n  want %s\n  got  %s\n' "$isa" "$np" "$*" "$rc" "$want" "$got"
    tail -5 out.txt | sed 's/^/  | /'
    fails=$((fails + 1))
  else
    printf 'ok    EMBER_ISA=%s -n %s %s\n' "$isa" "$np" "$*"
  fi
}

n=0
while IFS='|' read -r np opts want; do
  case $np in '#'* | '') continue ;; esac
  np=${np// /} want=${want# } opts=${opts# }
  read -r -a args <<<"$opts"
  for isa in generic avx2 avx512; do check "$isa" "$np" "$want" "${args[@]}"; done
  if [ "$n" -eq 0 ]; then
    for i in "${!args[@]}"; do [ "${args[$i]}" = 1 ] && [ "${args[$((i - 1))]}" = --threads ] && args[$i]=2; done
    check auto "$np" "$want" "${args[@]}"
  fi
  n=$((n + 1))
done <"$file"

if [ "$n" -ne 3 ] || [ "$runs" -lt 4 ]; then
  echo "FAIL  expected 3 stored runs and at least 4 checked (generic and 2 threads), got $n and $runs"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "train_digests: $runs runs, one digest per configuration" || exit 1
