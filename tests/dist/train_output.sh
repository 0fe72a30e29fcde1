#!/usr/bin/env bash
# What `ember train` writes where: a log (output redirected, under mpiexec or not) holds plain
# lines, never the progress bar's carriage returns or escape sequences; an interactive terminal
# (stderr a terminal, by `script`) gets the bar; a host whose ranks run more threads than it has
# CPUs gets one warning, and a host that fits none.
# Usage: train_output.sh EMBER MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
ember=$1 mpiexec=$2 np_flag=$3
shift 3
pre=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
short=(--batch_size 256 --limit_train_batches 6 --limit_val_batches 1 --eval_interval 3)
fails=0
fail() {
  printf 'FAIL  %s; output:\n%s\n' "$1" "$(cat "$2")"
  fails=$((fails + 1))
}
ok() { printf 'ok    %s\n' "$1"; }
launch() { local n=$1; shift; "$mpiexec" "$np_flag" "$n" "${pre[@]}" "$@"; }
cr=$(printf '\r') esc=$(printf '\033')

# A log under mpiexec (whose ranks' stdout is a pseudo-terminal under Open MPI) and without it:
# the default progress is plain lines there, two evaluations' worth, and no bar bytes.
for how in mpiexec single; do
  log=$dir/$how.log
  if [ "$how" = mpiexec ]; then launch 2 "$ember" train "${short[@]}" >"$log" 2>&1
  else "$ember" train --threads 1 "${short[@]}" >"$log" 2>&1; fi
  status=$?
  if [ "$status" -ne 0 ] || grep -q "[$cr$esc]" "$log" || [ "$(grep -c -E '^step +[36] +epoch 0 +train loss' "$log")" -ne 2 ]; then
    fail "log_$how: exit $status; the log must hold 2 evaluation lines and no carriage return or escape" "$log"
  else
    ok "log_$how"
  fi
done

# An interactive terminal: the bar, drawn in place on stderr; --progress lines draws none.
if command -v script >/dev/null 2>&1; then
  tty=$dir/tty.log
  script -qec "$(printf '%q ' "$ember" train --threads 1 "${short[@]}")" /dev/null >"$tty" 2>&1
  if ! grep -a -q -E "${cr}"$'\033\\[K\\[#+\\.*\\] step [0-9]+/6  epoch 0' "$tty"; then
    fail "tty_bar: no progress bar on a terminal" "$tty"
  else
    ok "tty_bar"
  fi
  script -qec "$(printf '%q ' "$ember" train --threads 1 --progress lines "${short[@]}")" /dev/null >"$tty" 2>&1
  if grep -a -q -E '\[#+\.*\] step' "$tty"; then fail "tty_lines: a bar despite --progress lines" "$tty"; else ok "tty_lines"; fi
else
  ok "tty_bar (skipped: no script command)"
fi

# Two ranks of as many threads as this machine has CPUs online: twice too many, one warning (from
# the host's first rank), and the run still trains. One rank of one thread: no warning. (Not
# nproc: it counts OMP_NUM_THREADS, which the tests set to 1.)
cpus=$(getconf _NPROCESSORS_ONLN)
log=$dir/over.log
launch 2 "$ember" train --threads "$cpus" "${short[@]}" >"$log" 2>&1
status=$?
if [ "$status" -ne 0 ] || [ "$(grep -c -E "^ember train: warning: 2 ranks x $cpus threads? on this host's [0-9]+ CPUs?: .*(--threads [0-9]+|mpiexec -n [0-9]+)" "$log")" -ne 1 ] ||
   [ "$(grep -c 'warning' "$log")" -ne 1 ]; then
  fail "oversubscribed: exit $status, wanted exactly one warning" "$log"
else
  ok "oversubscribed"
fi
log=$dir/fits.log
launch 1 "$ember" train --threads 1 "${short[@]}" >"$log" 2>&1
status=$?
if [ "$status" -ne 0 ] || grep -q 'warning' "$log"; then fail "fits: exit $status, wanted no warning" "$log"; else ok "fits"; fi
exit $((fails > 0))
