#!/usr/bin/env bash
# Runs a command and checks its exit status and output (stdout and stderr together).
# Usage: expect.sh STATUS REGEX COUNT -- COMMAND...
#   STATUS  the exit status wanted, or "nonzero"
#   REGEX   an extended regular expression (grep -E) the output must match
#   COUNT   how many output lines must match: a number, or "+" for at least one
set -u
want_status=$1 regex=$2 count=$3
shift 4
out=$("$@" 2>&1)
status=$?
lines=$(printf '%s\n' "$out" | grep -c -E -- "$regex")
ok=1
if [ "$want_status" = nonzero ]; then [ "$status" -ne 0 ] || ok=0; else [ "$status" -eq "$want_status" ] || ok=0; fi
if [ "$count" = + ]; then [ "$lines" -ge 1 ] || ok=0; else [ "$lines" -eq "$count" ] || ok=0; fi
if [ "$ok" -ne 1 ]; then
  printf 'command: %s\nexit status %s (wanted %s); %s line(s) match /%s/ (wanted %s); output:\n%s\n' \
    "$*" "$status" "$want_status" "$lines" "$regex" "$count" "$out"
  exit 1
fi
exit 0
