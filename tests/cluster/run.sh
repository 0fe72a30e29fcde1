#!/usr/bin/env bash
# Runs one program under mpiexec across a cluster of network-namespace hosts (scripts/cluster.sh):
# brings the cluster up, runs, brings it down (also on failure or interruption) and checks that
# nothing of it is left (processes, namespaces, links, state). Exits 77 (the tests' "skipped")
# with the reason printed where this machine cannot create namespaces.
# The run is stopped (mpiexec sent SIGTERM, 10 s later SIGKILL) after $EMBER_CLUSTER_LIMIT_S
# seconds (default 240), under ctest's TIMEOUT, so that this script still takes the cluster down;
# where ctest kills the script itself, the cluster.teardown test does (tests/cluster/teardown.sh).
# Usage: run.sh NAME NET HOSTS SLOTS NP RATE program args...   (RATE: e.g. 1gbit, or off)
set -u
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
name=$1 net=$2 hosts=$3 slots=$4 np=$5 rate=$6
shift 6
limit=${EMBER_CLUSTER_LIMIT_S:-240}
if ! why=$(bash "$cluster" check); then
  echo "SKIPPED: $why"
  exit 77
fi
c() { bash "$cluster" --name "$name" --net "$net" "$@"; }
c down >/dev/null 2>&1 # a cluster left behind by an interrupted run of this test
trap 'c down >/dev/null 2>&1' EXIT
trap 'exit 143' TERM INT HUP # (the EXIT trap runs)
c up --hosts "$hosts" --slots "$slots" || exit 1
c shape "$rate" >/dev/null || exit 1
timeout --foreground -k 10 "$limit" bash "$cluster" --name "$name" run -n "$np" "$@"
rc=$?
[ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "cluster/run.sh: the run was stopped after its limit of $limit s"
trap - EXIT
c down >/dev/null || { echo "cluster/run.sh: cluster '$name' could not be taken down"; rc=1; }
exit "$rc"
