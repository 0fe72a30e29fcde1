# Sourced by the bench scripts: bench_host_key prints this host's results folder name, the CPU
# model, its best kernel variant (from the CPU flags) and its core count, e.g. amd-epyc-avx2-2c.
# Results are kept per host under bench/results/<host>/ because a kernel tuned on one host can be
# far off on another.
bench_host_key() {
  local model isa=generic
  model="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2)"
  grep -qw avx2 /proc/cpuinfo 2>/dev/null && isa=avx2
  grep -qw avx512f /proc/cpuinfo 2>/dev/null && isa=avx512
  grep -qw avx512_fp16 /proc/cpuinfo 2>/dev/null && isa=avx512fp16
  echo "${model:-unknown}-$isa-$(nproc)c" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-*//; s/-*$//'
}
