#!/usr/bin/env bash
# `ember train` across a cluster of network-namespace hosts (scripts/cluster.sh, 2 hosts x 2 ranks,
# Open MPI over TCP only, links shaped to 1 Gbit/s):
#   equal  the run on 2 hosts x 2 ranks is bit for bit the run of 4 ranks on one host (digests of
#          the loss curve, eval outputs, dense parameters and tables), and its loss curve and AUC
#          are the single process's within the bounds of the distributed tests (1e-5 relative,
#          1e-4 AUC: sums over ranks run in another order);
#   cut    host 1's link is cut mid-run: every rank (those of both hosts) exits with the
#          watchdog's error naming the ranks that did not arrive, within the deadline plus slack,
#          never a hang.
# Every run is stopped after $EMBER_CLUSTER_LIMIT_S seconds (default 240, under ctest's TIMEOUT);
# the cluster, every process of it (mpiexec included) and the temporary directory are taken away
# on any exit, and the test fails if anything of the cluster is left. Where ctest kills the script
# itself, the cluster.teardown test takes them away (tests/cluster/teardown.sh).
# Exits 77 (skipped) with the reason printed where namespaces cannot be created.
# Usage: train.sh equal|cut EMBER NAME NET
set -u
case=$1 ember=$2 name=$3 net=$4
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
limit=${EMBER_CLUSTER_LIMIT_S:-240}
if ! why=$(bash "$cluster" check); then
  echo "SKIPPED: $why"
  exit 77
fi
# Named after the cluster, so that cluster.teardown finds it when this script was killed.
dir=$(mktemp -d "/tmp/ember-test-$name.XXXXXX")
c() { bash "$cluster" --name "$name" --net "$net" "$@"; }
# mpiexec across the cluster, stopped after the limit (cluster.sh execs mpiexec: this is its pid).
crun() { timeout --foreground -k 10 "$limit" bash "$cluster" --name "$name" run "$@"; }
job=""
cleanup() {
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  c down >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP # (cleanup runs)
fail() {
  printf 'cluster/train.sh %s: %s\n' "$case" "$*"
  for f in "$dir"/*.txt; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}
c down >/dev/null 2>&1
c up --hosts 2 --slots 2 >/dev/null || fail "cluster up failed"
c shape 1gbit >/dev/null || fail "shaping failed"
export OMP_NUM_THREADS=1

if [ "$case" = equal ]; then
  # Every scheme, cycled over the 26 tables (a fixed plan: the planner's would change with the
  # topology).
  schemes=$(for t in $(seq 0 25); do s=(dp tw cw rw twrw grid); printf '%s,' "${s[t % 6]}"; done)
  common=(train --batch_size 256 --limit_train_batches 12 --eval_interval 4 --limit_val_batches 2 --threads 1
          --num_embeddings 2000 --sharding "${schemes%,}" --digest --progress lines)
  crun -n 4 "$ember" "${common[@]}" --metrics "$dir/cluster.jsonl" >"$dir/cluster.txt" 2>&1 || fail "cluster run failed"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    timeout -k 10 "$limit" mpiexec.openmpi -n 4 --mca btl self,vader "$ember" "${common[@]}" >"$dir/host.txt" 2>&1 ||
    fail "one-host run failed"
  timeout -k 10 "$limit" "$ember" "${common[@]}" --metrics "$dir/single.jsonl" >"$dir/single.txt" 2>&1 ||
    fail "single-process run failed"
  a=$(grep '^digest:' "$dir/cluster.txt") b=$(grep '^digest:' "$dir/host.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "2 hosts x 2 ranks differ from 4 ranks on one host: '$a' vs '$b'"
  # Loss curve and AUC against one process: field by field, every evaluation.
  paste -d '\n' "$dir/single.jsonl" "$dir/cluster.jsonl" | awk '
    function field(s, k,   m) { if (match(s, "\"" k "\":[-0-9.e+]+")) return substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0; return "none" }
    NR % 2 == 1 { one = $0; next }
    { n++
      for (i = 1; i <= 3; i++) {
        k = (i == 1) ? "train_loss" : (i == 2) ? "eval_loss" : "eval_auc"
        a = field(one, k); b = field($0, k)
        if (a == "none" || b == "none") { print "missing " k; bad = 1; continue }
        d = a - b; if (d < 0) d = -d
        tol = (k == "eval_auc") ? 1e-4 : 1e-5 * (a < 0 ? -a : a)
        printf "step %s %s: one process %.9g, 2 hosts x 2 ranks %.9g\n", field($0, "step"), k, a, b
        if (d > tol) { print "  too far: " d " > " tol; bad = 1 }
      } }
    END { if (n < 3) { print "only " n " evaluations"; bad = 1 } exit bad }' || fail "the loss curve differs from one process"
  c down >/dev/null || fail "the cluster could not be taken down"
  echo "cluster/train.sh equal: $a (also on one host), loss curve = one process within bounds"
  exit 0
fi

[ "$case" = cut ] || fail "unknown case"
deadline=4
slack=8
# Per-rank output goes to files written by each host's daemon (host 1's output cannot reach
# mpiexec once its link is cut). $job is mpiexec itself (cluster.sh execs it), not a subshell
# around it: killing a subshell would leave mpiexec running, a child of init. mpiexec is told not
# to kill the job when one rank exits with an error: by default the first rank of host 0 to give
# up has the second killed within milliseconds, before that one's own deadline (a few ms later,
# as it entered the collective a few ms later) lets it report.
bash "$cluster" --name "$name" run -n 4 --mca orte_abort_on_non_zero_status 0 \
  --output-filename "$dir/ranks" "$ember" train --batch_size 256 \
  --num_embeddings 500 --limit_train_batches 1000000 --limit_val_batches 2 --eval_interval 1000000 \
  --sharding rw --threads 1 --progress lines --timeout_s $deadline >"$dir/mpiexec.txt" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  grep -q '^  tables' "$dir/ranks/1/rank.0/stdout" 2>/dev/null && break
  sleep 0.05
done
grep -q '^  tables' "$dir/ranks/1/rank.0/stdout" 2>/dev/null || fail "training did not start"
sleep 1
ranks() { for h in 0 1; do ip netns pids "$name-h$h"; done | while read -r p; do
  [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$(readlink -f "$ember")" ] && echo "$p"; done; }
[ "$(ranks | wc -l)" = 4 ] || fail "expected 4 ranks running, found $(ranks | wc -l)"
t0=$(date +%s.%N)
c cut 1 >/dev/null
gone=""
for _ in $(seq 1 $(( (deadline + slack) * 10 ))); do
  [ -z "$(ranks)" ] && { gone=$(date +%s.%N); break; }
  sleep 0.1
done
[ -n "$gone" ] || fail "ranks still running $((deadline + slack)) s after the cut: $(ranks | tr '\n' ' ')"
took=$(awk -v a="$t0" -v b="$gone" 'BEGIN { printf "%.1f", b - a }')
for r in 0 1 2 3; do
  e="$dir/ranks/1/rank.$r/stderr"
  grep -q "missed its $deadline s deadline" "$e" 2>/dev/null || { cp "$e" "$dir/rank$r.txt" 2>/dev/null; fail "rank $r did not report the timeout"; }
  grep -q "did not arrive" "$e" || fail "rank $r's message does not name the missing ranks"
done
# mpiexec itself does not end by itself: its order to kill the job waits in TCP's retransmission
# queue to the cut host's daemon (Linux gives up after about 15 min); the ranks are gone, so the
# test stops it, as a batch system would, and checks that nothing of the cluster is left.
for _ in $(seq 1 50); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
launcher="exited"
exec 3>&2 2>/dev/null # (bash's "Killed" line for the job)
if kill -0 "$job"; then
  launcher="still waiting for the cut host's daemon 5 s later (stopped by the test)"
  kill -KILL "$job"
fi
wait "$job"
exec 2>&3 3>&-
job=""
c down >/dev/null || fail "the cluster could not be taken down"
echo "cluster/train.sh cut: every rank exited $took s after the cut (deadline $deadline s), each naming the missing ranks; mpiexec $launcher"
sed -n 's/^/  rank 0: /p' "$dir/ranks/1/rank.0/stderr" | grep error | head -1
sed -n 's/^/  rank 3: /p' "$dir/ranks/1/rank.3/stderr" | grep error | head -1
