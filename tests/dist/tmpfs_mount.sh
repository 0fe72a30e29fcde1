# A real full disk for the tests that need one (sourced): tmpfs_mount SIZE INSTEAD mounts a tmpfs
# of SIZE on a new directory, $mnt, or exits 77 (ctest's skip) saying why and INSTEAD (what
# covers the failure path there) where this machine does not let the test mount one (not root, or
# a container without CAP_SYS_ADMIN). tmpfs_unmount, for the caller's EXIT trap, undoes it.
mnt=
tmpfs_mount() {
  mnt=$(mktemp -d)
  local why
  if ! why=$(mount -t tmpfs -o size="$1" tmpfs "$mnt" 2>&1); then
    echo "$(basename "$0" .sh): skipped: cannot mount a tmpfs here ($why); $2"
    exit 77
  fi
}
tmpfs_unmount() {
  [ -n "$mnt" ] || return 0
  umount "$mnt" 2>/dev/null
  rmdir "$mnt"
}
