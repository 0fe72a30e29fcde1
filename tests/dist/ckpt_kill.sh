#!/usr/bin/env bash
# Kill loop: SIGKILL one rank of a process that saves a checkpoint over and over, at a random
# moment, KILLS times; after each kill the checkpoint at the path must load whole (every value
# equal to the step it was saved with: nothing torn) and be no older than the last one loaded.
# Usage: ckpt_kill.sh SAVER KILLS NP MPIEXEC NUMPROC_FLAG [MPIEXEC_PREFLAGS...]
set -u
saver=$1 kills=$2 np=$3 mpiexec=$4 npflag=$5
shift 5
dir=$(mktemp -d)
ck=$dir/ck
# mpiexec's session directory in ours: a launcher killed by the fallback below leaves it behind.
mkdir "$dir/tmp"
export TMPDIR=$dir/tmp
job=0
# A process and all its descendants (Open MPI puts every rank in a process group of its own:
# killing the launcher's group does not reach them).
tree() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
killtree() { local p; p=$(tree "$1"); kill -9 $p 2>/dev/null; }
cleanup() { [ "$job" -gt 0 ] && killtree "$job"; rm -rf "$dir"; }
trap cleanup EXIT

# Starts the saver on NP ranks in its own process group, numbering saves from $1; waits for
# every rank's pid file.
start() {
  rm -f "$ck".pid.*
  setsid "$mpiexec" "$npflag" "$np" "$@" "$saver" save "$ck" "$first" > "$dir/out" 2>&1 &
  job=$!
  for _ in $(seq 600); do
    [ "$(ls "$ck".pid.* 2>/dev/null | wc -l)" -eq "$np" ] && return 0
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  echo "ckpt_kill: the saver did not start:"; cat "$dir/out"; exit 1
}

# Waits for the job to end after a kill (the launcher takes the other ranks down).
reap() {
  for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  killtree "$job"
  wait "$job" 2>/dev/null
  job=0
}

# A first checkpoint: run until one save is reported, then kill.
first=1
start "$@"
for _ in $(seq 600); do grep -q '^saved' "$dir/out" && break; sleep 0.05; done
grep -q '^saved' "$dir/out" || { echo "ckpt_kill: no first save:"; cat "$dir/out"; exit 1; }
kill -9 "$(cat "$ck.pid.0")"; reap

last=0 torn=0 partial=0
for k in $(seq "$kills"); do
  first=$((k * 100000))
  start "$@"
  sleep "$((RANDOM % 12)).$((RANDOM % 10))e-1"  # 0 to 1.2 s into the loop of saves
  victim=$((RANDOM % np))
  kill -9 "$(cat "$ck.pid.$victim")"
  reap
  ls "$ck"/*.partial >/dev/null 2>&1 && partial=$((partial + 1))
  # Load on one rank and on NP ranks in turn (a checkpoint loads under any world size).
  vnp=$(( k % 2 ? 1 : np ))
  out=$("$mpiexec" "$npflag" "$vnp" "$@" "$saver" verify "$ck" 2>&1)
  step=$(printf '%s\n' "$out" | sed -n 's/^ok //p' | head -1)
  if [ -z "$step" ] || [ "$step" -lt "$last" ]; then
    torn=$((torn + 1))
    echo "ckpt_kill: kill $k (rank $victim): the checkpoint did not load whole (last step $last):"
    printf '%s\n' "$out"
  else
    last=$step
  fi
done
echo "ckpt_kill: $kills kills of a random rank during saves; a save was mid-write (partial files left) at $partial of them;" \
     "the checkpoint loaded whole and no older after $((kills - torn)) of $kills"
[ "$torn" -eq 0 ]
