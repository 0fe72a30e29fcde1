# Sourced by the `ember train` command-line tests (train_2d.sh, train_dedup.sh): takes EMBER off
# the arguments (the launcher stays in "$@"), runs in a temporary directory removed at exit, and
# gives them:
#   bad MSG...          counts a failure and prints it
#   run OUT CMD...      CMD (bounded to 120 s), its stdout and stderr in OUT
#   losses OUT          the last "train loss X  eval loss Y  eval AUC Z" of a run: X Y Z
#   same_losses A B     whether two runs' last losses agree up to summation order (train and eval
#                       loss within 1e-4, AUC within 1e-3)
# and "$fails", the count, for the test's exit status.
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fails=0
bad() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }
run() { local out=$1; shift; timeout 120 "$@" >"$out" 2>&1; }
losses() { grep -o 'train loss [0-9.]*  eval loss [0-9.]*  eval AUC [0-9.]*' "$1" | tail -1 | awk '{print $3, $6, $9}'; }
same_losses() {
  local ta ea aa tb eb ab
  read -r ta ea aa < <(losses "$1")
  read -r tb eb ab < <(losses "$2")
  awk -v a="$ta" -v b="$tb" -v c="$ea" -v d="$eb" -v e="$aa" -v f="$ab" 'BEGIN {
      ok = a != "" && b != "" && (a - b)^2 <= 1e-8 && (c - d)^2 <= 1e-8 && (e - f)^2 <= 1e-6; exit !ok }'
}
