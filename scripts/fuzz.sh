#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan, build-fuzz/) and runs each in
# turn, from a working copy of its seed corpus (fuzz/corpus/<target> copied into
# build-fuzz/corpus/<target>, where what the fuzzer adds accumulates between runs; the checkout is
# never written). Crash inputs go to build-fuzz/artifacts/<target>/; any crash, leak, timeout or
# sanitizer report makes the script fail after the last target. One summary line per target:
# executions, executions per second, coverage (libFuzzer's cov: edges, ft: features), corpus size.
# docs/fuzzing.md says what each target covers and how to reproduce a crash.
#
# Usage: scripts/fuzz.sh [SECONDS | --runs N] [TARGET...]   (default 60 seconds per target; all
#        targets: kjt criteo checkpoint cli trainstate planfile npz)
#        scripts/fuzz.sh --coverage [TARGET...]   source coverage of the sources under test reached
#                   by the working corpus (preset fuzz-coverage, build-fuzz-cov/; llvm-cov report)
#        scripts/fuzz.sh --seeds    rewrite fuzz/corpus/checkpoint from checkpoints the library saves
set -euo pipefail

# All in one function, parsed whole before it runs: editing this file during a long run cannot
# change what the run does.
main() {
  cd "$(dirname "$0")/.."
  root=$PWD
  budget=(-max_total_time=60)
  targets=()
  seeds=0
  coverage=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --runs) budget=(-runs="$2"); shift 2 ;;
      --seeds) seeds=1; shift ;;
      --coverage) coverage=1; shift ;;
      [0-9]*) budget=(-max_total_time="$1"); shift ;;
      kjt|criteo|checkpoint|cli|trainstate|planfile|npz) targets+=("$1"); shift ;;
      *) echo "usage: scripts/fuzz.sh [SECONDS | --runs N | --coverage] [kjt|criteo|checkpoint|cli|trainstate|planfile ...] | --seeds" >&2
         exit 2 ;;
    esac
  done
  [ ${#targets[@]} -gt 0 ] || targets=(kjt criteo checkpoint cli trainstate planfile npz)

  # Per target: the largest input (the seeds' sizes and what each input format needs: a Criteo
  # line longer than the reader's 4 KiB buffer, a checkpoint manifest of one-row records, a plan
  # of 26 tables) and extras.
  declare -A max_len=([kjt]=4096 [criteo]=16384 [checkpoint]=32768 [cli]=4096 [trainstate]=8192 [planfile]=8192 [npz]=8192)
  declare -A extra=([cli]="-dict=$root/fuzz/cli.dict" [checkpoint]="-dict=$root/fuzz/checkpoint.dict"
                    [trainstate]="-dict=$root/fuzz/trainstate.dict" [planfile]="-dict=$root/fuzz/planfile.dict")

  bash scripts/setup.sh # clang's OpenMP, sanitizer and libFuzzer runtimes among the rest
  if [ "$coverage" = 0 ]; then
    cmake --preset fuzz >/dev/null
    cmake --build --preset fuzz -j "$(nproc)"
  fi
  bin=$root/build-fuzz/fuzz

  # The targets' scratch directories (one per process) live under one folder of this run.
  shm=/dev/shm
  [ -w "$shm" ] || shm=${TMPDIR:-/tmp}
  export EMBER_FUZZ_TMP
  EMBER_FUZZ_TMP=$(mktemp -d "$shm/ember-fuzz.XXXXXX")
  # A crashed process leaves its LLVM OpenMP registration file in /dev/shm: remove those of
  # processes that no longer run, created during this run.
  kmp_before=$(ls /dev/shm 2>/dev/null | grep '^__KMP_REGISTERED_LIB_' || true)
  cleanup() {
    rm -rf "$EMBER_FUZZ_TMP"
    for f in $(ls /dev/shm 2>/dev/null | grep '^__KMP_REGISTERED_LIB_' || true); do
      grep -qx "$f" <<<"$kmp_before" && continue
      pid=${f#__KMP_REGISTERED_LIB_}
      pid=${pid%%_*}
      kill -0 "$pid" 2>/dev/null || rm -f "/dev/shm/$f"
    done
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM # through the EXIT trap

  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export OMP_NUM_THREADS=1

  if [ "$coverage" = 1 ]; then
    # The sources each target is meant to reach (the CLI's: the files of its parsers).
    declare -A sources=([kjt]="src/kjt/kjt.c src/kjt/vbe.c src/tbe/forward.c" [criteo]="apps/ember/criteo.c"
                        [checkpoint]="src/state/manifest.c src/state/inspect.c src/state/load.c"
                        [cli]="apps/ember/cmd_train.c apps/ember/cmd_eval.c apps/ember/cmd_plan.c
                               apps/ember/cmd_ckpt.c apps/ember/cli.c bench/tbe_bench.c bench/shard_bench.c
                               bench/ckpt_bench.c"
                        [trainstate]="apps/ember/trainstate.c" [planfile]="apps/ember/planfile.c")
    if ! command -v llvm-cov >/dev/null; then
      echo "fuzz.sh --coverage needs llvm-cov and llvm-profdata (Debian: llvm)" >&2
      exit 1
    fi
    cmake --preset fuzz-coverage >/dev/null
    cmake --build --preset fuzz-coverage -j "$(nproc)"
    for t in "${targets[@]}"; do
      prof=build-fuzz-cov/profile/$t
      rm -rf "$prof" && mkdir -p "$prof"
      LLVM_PROFILE_FILE="$root/$prof/%p.profraw" build-fuzz-cov/fuzz/fuzz_"$t" -runs=0 -max_len="${max_len[$t]}" \
        fuzz/corpus/"$t" $( [ -d build-fuzz/corpus/"$t" ] && echo build-fuzz/corpus/"$t" ) >"$prof.log" 2>&1
      llvm-profdata merge -sparse "$prof"/*.profraw -o "$prof.profdata"
      echo "== fuzz_$t: $(grep -c . <(ls fuzz/corpus/"$t" build-fuzz/corpus/"$t" 2>/dev/null)) corpus files"
      # shellcheck disable=SC2086
      llvm-cov report build-fuzz-cov/fuzz/fuzz_"$t" -instr-profile="$prof.profdata" ${sources[$t]} | sed 's/^/  /'
    done
    exit 0
  fi

  if [ "$seeds" = 1 ]; then
    # The generator rewrites its own named seeds; the hand-kept inputs beside them (findings kept
    # as reproducers, docs/fuzzing.md) stay.
    ASAN_OPTIONS=detect_leaks=0 "$bin/fuzz_checkpoint_seeds" fuzz/corpus/checkpoint
    exit 0
  fi

  failed=()
  for t in "${targets[@]}"; do
    corpus=build-fuzz/corpus/$t artifacts=build-fuzz/artifacts/$t log=build-fuzz/logs/$t.log
    rm -rf "$artifacts" # this run's crashes only
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
    rc=0
    # shellcheck disable=SC2086
    "$bin/fuzz_$t" "${budget[@]}" -max_len="${max_len[$t]}" -timeout=30 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" ${extra[$t]:-} "$corpus" >"$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9]*[A-Za-z]*' "$log" | tail -1)
    crashes=$(find "$artifacts" -type f | wc -l)
    printf 'fuzz_%-10s %10s runs %7s exec/s  %s  exit %d, %d crash file(s) in %s\n' "$t" "${runs:-?}" "${speed:-?}" \
      "${cov:-cov: ?}" "$rc" "$crashes" "$artifacts"
    if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
      failed+=("$t")
      grep -m1 -E 'ERROR|runtime error|fuzz oracle' "$log" || tail -5 "$log"
      echo "  log: $log; reproduce: $bin/fuzz_$t $artifacts/<file>"
    fi
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: failed: ${failed[*]}" >&2
    exit 1
  fi
}

main "$@"
