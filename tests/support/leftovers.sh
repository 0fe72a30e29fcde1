#!/usr/bin/env bash
# hygiene.leftovers: the suite leaves nothing running. Runs last (the cleanup of the fixture
# ember_suite, which every test of tests/ requires, so any selection of tests brings it along)
# and alone (RUN_SERIAL), and fails, naming each by pid, parent, age and command line, on any
# process still running that belongs to this build's tests:
#   - its environment holds EMBER_TEST_BUILD_DIR=BUILD: every test of tests/ gets it, and
#     everything a test starts inherits it (mpiexec, orted/prterun, hydra_pmi_proxy, the ranks,
#     ember and the test programs, the scripts' background jobs), also once orphaned; or
#   - its command line names the state directory of one of this build's clusters (mpiexec's
#     --hostfile /tmp/ember-cluster-NAME/hostfile, the daemons' launcher agent);
# and on what is left of the clusters NAME... (network namespaces, veth pairs, bridge, state and
# test directories: scripts/cluster.sh leftovers). Processes of other builds and checkouts carry
# another directory or none (an `ember` started by hand from this build is not a test's) and are
# not looked at. Ranks whose mpiexec was just killed take a moment to notice and exit: what ends
# within 10 s is not reported. Nothing is stopped or removed here: that is the tests' own cleanup
# and cluster.teardown's; this says what they missed.
# Usage: leftovers.sh BUILD [CLUSTER_NAME...]
set -u
build=${1%/}
shift
names=("$@")
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
grace_s=10
tag="EMBER_TEST_BUILD_DIR=$build"

# This script, its ancestors (ctest, a shell) and its descendants (its own subshells) are not
# leftovers.
ancestors=" $$ "
p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
  read -r _ stat 2>/dev/null </proc/$p/stat || break
  stat=${stat##*) } # after "(comm) "
  set -- $stat
  p=$2
  ancestors+="$p "
done

ppid_of() { # $1: pid; the parent from /proc/PID/stat (comm may hold spaces and parentheses)
  local s
  read -r s 2>/dev/null <"/proc/$1/stat" || return 1
  s=${s##*) }
  set -- $s
  echo "$2"
}
mine() { # $1: pid; whether it descends from this script
  local p=$1 _
  for _ in $(seq 1 64); do
    [ "$p" = $$ ] && return 0
    [ -z "$p" ] || [ "$p" -le 1 ] && return 1
    p=$(ppid_of "$p") || return 1
  done
  return 1
}
belongs() { # $1: pid; whether it is one of this build's tests' processes
  local p=$1 a e IFS=$'\n' n
  mapfile -d "" -t e 2>/dev/null <"/proc/$p/environ" || return 1
  [[ $'\n'"${e[*]}"$'\n' == *$'\n'"$tag"$'\n'* ]] && return 0
  mapfile -d "" -t a 2>/dev/null <"/proc/$p/cmdline" || return 1
  for n in "${names[@]}"; do [[ "${a[*]}" == *"/tmp/ember-cluster-$n/"* ]] && return 0; done
  return 1
}
scan() {
  local d p
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [[ "$ancestors" == *" $p "* ]] && continue
    belongs "$p" || continue
    mine "$p" && continue
    echo "$p"
  done
}

left=$(scan)
for _ in $(seq 1 $((grace_s * 2))); do
  [ -z "$left" ] && break
  sleep 0.5
  left=$(for p in $left; do [ -d "/proc/$p" ] && echo "$p"; done)
done
fail=0
if [ -n "$left" ]; then
  fail=1
  echo "hygiene.leftovers: processes of this build's tests ($build) still running after the suite:"
  for p in $left; do
    ps -o pid=,ppid=,etime=,args= -p "$p" 2>/dev/null | cut -c1-400 | sed 's/^/  pid /'
  done
fi
for n in "${names[@]}"; do
  what=$(bash "$cluster" --name "$n" leftovers 2>&1; compgen -G "/tmp/ember-test-$n.*" | sed 's/^/test directory /')
  [ -z "$what" ] && continue
  fail=1
  echo "hygiene.leftovers: left of cluster '$n':"
  sed 's/^/  /' <<<"$what"
done
if [ "$fail" = 0 ]; then
  echo "hygiene.leftovers: no process of this build's tests is running, no cluster of it (${names[*]:-none}) is left"
fi
exit "$fail"
