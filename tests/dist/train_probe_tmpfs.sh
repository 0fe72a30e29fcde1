#!/usr/bin/env bash
# `ember train` with tables on a small disk: a 40 MiB tmpfs holds the 26 tiered tables' files
# (5000 rows x 16 fp32 weights and a row-wise Adagrad value each: 8.8 MB), so the run must start
# there. The planner's disk probe writes a file of at most what those files take (once a fixed
# 64 MiB, which did not fit); with --disk_gbps the rate is given and nothing is probed. Skipped
# (exit 77, with the reason) where this machine does not let the test mount a tmpfs.
# Usage: train_probe_tmpfs.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
. "$(dirname "$0")/tmpfs_mount.sh"
trap 'tmpfs_unmount; rm -rf "$dir"' EXIT
fail() {
  printf 'train_probe_tmpfs.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
tmpfs_mount 40m "train_topology_disk_probe_bytes sizes the probe the same way on any disk"
common=(--batch_size 256 --num_embeddings 5000 --limit_train_batches 4 --limit_val_batches 1 --eval_interval 0
        --progress lines --ssd_tables all --cache_rows 1000 --ssd_dir "$mnt")
"$@" "$ember" train "${common[@]}" >"$dir/probed.txt" 2>&1 || fail "the run on a 40 MiB disk failed"
grep -Eq "^  disk        [0-9]+ MB/s to and from tiered tables' files in '$mnt' \\(probed, 8\\.4 MiB\\)$" \
  "$dir/probed.txt" || fail "no probe of the tables' 8.4 MiB"
"$@" "$ember" train "${common[@]}" --disk_gbps 4 >"$dir/given.txt" 2>&1 || fail "the run with --disk_gbps failed"
grep -q "^  disk        500 MB/s to and from tiered tables' files in '$mnt' (given)$" "$dir/given.txt" ||
  fail "--disk_gbps 4 is not the rate used"
[ -z "$(ls -A "$mnt")" ] || fail "files left on the disk: $(ls -A "$mnt")"
echo "train_probe_tmpfs.sh: tiered tables of 8.8 MB start on a 40 MiB tmpfs (probe of their size, or --disk_gbps)"
exit 0
