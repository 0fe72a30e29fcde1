#!/usr/bin/env bash
# The cluster tests' cleanup (ctest FIXTURES_CLEANUP: it runs after them, whatever their outcome):
# takes down whatever the clusters of this build left behind, with their processes and the
# tests' temporary directories (/tmp/ember-test-NAME.*). A test leaves something only when it was
# killed before its own cleanup (ctest's TIMEOUT kills a test's whole process tree with SIGKILL,
# and no trap runs then) or when its cleanup is broken: either way this says what it found,
# takes it away, and fails. Exits 77 (skipped) where this machine has no `ip` (no cluster could
# have been made).
# Usage: teardown.sh NAME...
set -u
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
command -v ip >/dev/null || { echo "SKIPPED: no 'ip' (iproute2)"; exit 77; }
found=0
for name in "$@"; do
  left=$(bash "$cluster" --name "$name" leftovers)
  tmp=$(compgen -G "/tmp/ember-test-$name.*")
  [ -z "$left$tmp" ] && continue
  found=1
  echo "cluster.teardown: cluster '$name' was left behind:"
  [ -n "$left" ] && sed 's/^/  /' <<<"$left"
  [ -n "$tmp" ] && printf '  test directory %s\n' $tmp
  bash "$cluster" --name "$name" down >/dev/null || echo "cluster.teardown: cluster '$name' could not be taken down"
  rm -rf $tmp
done
[ "$found" = 0 ] && echo "cluster.teardown: nothing left of clusters $*"
exit "$found"
