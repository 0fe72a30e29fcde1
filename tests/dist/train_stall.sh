#!/usr/bin/env bash
# A stalled rank (SIGSTOP: a frozen node or file system) mid-training: the other ranks give up at
# the collective watchdog's deadline (`ember train --timeout_s`), say which rank did not arrive,
# and the job exits non-zero within the deadline plus a small slack instead of hanging.
# Usage: train_stall.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 3; the last rank stalls)
set -u
ember=$1
shift
dir=$(mktemp -d)
# mpiexec's session directory in ours (a launcher killed below leaves it behind).
mkdir "$dir/tmp"
export TMPDIR=$dir/tmp
job=""
stopped=""
# A process and all its descendants: the launcher and its ranks (Open MPI puts every rank in a
# process group of its own, so killing the launcher's group does not reach them).
tree() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
cleanup() {
  [ -n "$job" ] && kill -KILL $(tree "$job") 2>/dev/null
  [ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  printf 'train_stall.sh: %s\n' "$*"
  cat "$dir/out.txt"
  exit 1
}
deadline=4
slack=8
"$@" "$ember" train --batch_size 64 --num_embeddings 500 --limit_train_batches 1000000 --limit_val_batches 2 \
  --eval_interval 1000000 --sharding rw --progress lines --timeout_s $deadline >"$dir/out.txt" 2>&1 &
job=$!
# The ranks are the launcher's descendants running EMBER whose environment names their rank
# (Open MPI, MPICH/PMI; not the ranks of another test running at the same time): stop the highest
# once training has started.
for _ in $(seq 1 600); do
  grep -q '^  tables' "$dir/out.txt" 2>/dev/null && break
  sleep 0.05
done
sleep 1
target=""
best=-1
for pid in $(tree "$job"); do
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$ember")" ] || continue
  r=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^\(OMPI_COMM_WORLD_RANK\|PMI_RANK\)=//p' | head -1)
  [ -n "$r" ] && [ "$r" -gt "$best" ] && best=$r && target=$pid
done
[ -n "$target" ] || fail "no rank process found"
kill -STOP "$target"
stopped=$target
start=$(date +%s.%N)
# Wait for the job to end, at most the deadline plus the slack (and then some, to report).
for _ in $(seq 1 $(((deadline + slack + 20) * 10))); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
end=$(date +%s.%N)
if kill -0 "$job" 2>/dev/null; then
  fail "the job was still running $(echo "$end - $start" | bc) s after rank $best stopped"
fi
wait "$job"
rc=$?
job=""
took=$(echo "$end - $start" | bc)
[ "$rc" -ne 0 ] || fail "the job exited 0 after rank $best stopped"
echo "$took <= $deadline + $slack" | bc | grep -q 1 || fail "the job took $took s to end (deadline $deadline s)"
grep -q "missed its $deadline s deadline" "$dir/out.txt" || fail "no deadline message"
grep -Eq "rank $best did not arrive|ranks [0-9, ]*$best[0-9, ]* did not arrive" "$dir/out.txt" ||
  fail "the message does not name rank $best"
printf 'train_stall.sh: rank %d stopped; the job ended %.1f s later with exit code %d:\n' "$best" "$took" "$rc"
grep "deadline" "$dir/out.txt" | head -3
