#!/usr/bin/env bash
# DLRM training throughput of three implementations of the same model (ember train's defaults:
# 26 tables, D 16, MLPs 64,16 and 64,32,1, global batch 2048, row-wise Adagrad tables, Adagrad
# dense, lr 0.05), one thread per rank, alternating within each round so all see the same machine:
#   torchrec     TorchRec's DLRM under DistributedModelParallel, gloo, CPU
#                (torchrun --standalone --nproc_per_node W bench/python/torchrec_dlrm.py)
#   cli          the C CLI (mpiexec -n W build/bin/ember train --threads 1): samples/s parsed from
#                its closing line "done: N steps, S samples in T s of training (X samples/s)";
#                every batch generated as it is read (on the step's path where no CPU is free)
#   cli-generated  the same with --num_generated_batches 64: 64 batches generated before training
#                and cycled, as the Python scripts make theirs before timing (examples/python/dlrm.py
#                cycles 64 too)
#   ember-torch  ember's PyTorch binding (mpiexec -n W python examples/python/dlrm.py), which
#                prints its own {"bench":"dlrm","impl":"ember-torch",...} line; skipped with a
#                message while that file does not exist
#   ember-torch-compile  the same under torch.compile (--compile inductor; its first steps
#                compile, inside --warmup): {"impl":"ember-torch-compile",...}
#   ember-torch-bmm  ember-torch with the interaction as torch's expression (--interaction torch)
#                instead of ember.torch.InteractionArch: {"impl":"ember-torch-bmm",...}
#
# Usage: bench/python/dlrm_ab.sh [--rounds R] [--ranks 1,2] [--steps N] [--warmup N]
#                                [--impls torchrec,cli,cli-generated,ember-torch,ember-torch-compile,
#                                         ember-torch-bmm]
#                                [--out FILE]
#                                [-- MODEL FLAGS]
#   --rounds   rounds (default 3); each round runs every implementation at every W, the order
#              of the implementations reversed every other round
#   --ranks    world sizes (default 1,2)
#   --steps    timed steps (default 100); --warmup untimed steps before them (default 5). The CLI
#              times every step it trains, so it trains warmup + steps and its figure includes
#              the first steps and producing its synthetic data (on a loader thread where a CPU
#              is free, else on the step's path; the Python scripts make theirs before timing)
#   --out      default bench/results/<host>/dlrm-python-YYYY-MM-DD.jsonl (appended to)
#   -- FLAGS   model and data flags every implementation gets after the defaults above, e.g. the
#              issue's DLRM-DCNv2 comparison (--impls torchrec,cli):
#              -- --interaction dcn --dcn_num_layers 3 --dcn_low_rank_dim 128 --embedding_dim 64
#                 --num_embeddings_per_feature 100000 --dense_arch_layer_sizes 256,128,64
#                 --over_arch_layer_sizes 512,256,1
# Env: EMBER_PYTHON: the interpreter (default: the venv of scripts/pyenv.sh, made if missing);
#      EMBER_BIN: the CLI (default build/bin/ember); MPIEXEC (default mpiexec);
#      EMBER_DLRM_EXAMPLE: the ember-torch script (default examples/python/dlrm.py).
#
# Every run's JSON line, a meta line and, per W, one summary line go to --out; the summaries are
# also printed on stdout:
#   {"bench":"dlrm_ab","W":..,"rounds":..,"steps":..,"median_samples_per_s":{impl: ..},
#    "runs":{impl: [.. per round, null when skipped]},"ember_torch_over_torchrec":..,
#    "ember_torch_over_cli":..,"cli_over_torchrec":..,"compile_over_torchrec":..,
#    "compile_over_ember_torch":..,"interaction_over_bmm":..,"cli_generated_over_torchrec":..,
#    "cli_generated_over_ember_torch":.., and each ratio's "_paired" twin}
# A ratio is of the medians; its _paired twin is the median over rounds of the ratio within the
# round (the two runs were neighbours in time, so it is less moved by the load drifting between
# rounds). null when one of its sides has no run. A run that fails records
# {"bench":"dlrm","impl":..,"W":..,"skipped":"why"} and the script goes on.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
rounds=3 ranks=1,2 steps=100 warmup=5 impls=torchrec,cli,ember-torch out="" model=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; model=("$@"); break ;;
    --rounds) rounds="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --impls) impls="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dlrm_ab.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
source "$root/bench/host.sh"
[ -n "$out" ] || out="$root/bench/results/$(bench_host_key)/dlrm-python-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"

if [ -n "${EMBER_PYTHON:-}" ]; then
  py="$EMBER_PYTHON"
else
  venv="$(bash "$root/scripts/pyenv.sh" | tail -n 1)" || { echo "dlrm_ab.sh: scripts/pyenv.sh failed" >&2; exit 1; }
  py="$venv/bin/python"
fi
ember="${EMBER_BIN:-$root/build/bin/ember}"
mpiexec="${MPIEXEC:-mpiexec}"
example="${EMBER_DLRM_EXAMPLE:-$root/examples/python/dlrm.py}"
# Open MPI as root, more ranks than cores, shared memory without CMA (as scripts/main-job.sh);
# one thread per rank everywhere.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMP_NUM_THREADS=1
# The same model and data settings for all three (the CLI's defaults, spelled out).
# shellcheck disable=SC2054  # the commas are layer lists
common=(--batch_size 2048 --embedding_dim 16 --dense_arch_layer_sizes 64,16 --over_arch_layer_sizes 64,32,1
        --learning_rate 0.05 --seed 1 --threads 1 "${model[@]}")

"$py" - "$rounds" "$ranks" "$steps" "$warmup" "$impls" >>"$out" <<'PY'
import json, os, platform, sys, time
print(json.dumps({"bench": "meta", "what": "dlrm_ab.sh", "rounds": int(sys.argv[1]), "ranks": sys.argv[2],
                  "steps": int(sys.argv[3]), "warmup": int(sys.argv[4]), "impls": sys.argv[5],
                  "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
                  "loadavg": os.getloadavg(), "kernel": platform.release(), "python": sys.executable},
                 separators=(",", ":")))
PY

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
skip() {  # impl W why
  printf '{"bench":"dlrm","impl":"%s","W":%d,"skipped":"%s"}\n' "$1" "$2" "$(echo "$3" | tr -d '"\\' | tr '\n\t\r' '   ' | tr -d '\000-\037' | sed 's/ *$//' | cut -c1-300)" >>"$out"
  echo "dlrm_ab.sh: $1 W=$2 skipped: $3" >&2
}
run_one() {  # impl W round
  local impl="$1" w="$2" r="$3" log="$tmp/$1.$2.$3.log" line
  echo "dlrm_ab.sh: round $r W=$w $impl" >&2
  case "$impl" in
    torchrec)
      "$py" -m torch.distributed.run --standalone --nproc_per_node "$w" "$root/bench/python/torchrec_dlrm.py" \
        "${common[@]}" --limit_train_batches "$steps" --warmup_batches "$warmup" >"$log" 2>&1
      line="$(grep -E '^\{ *"bench" *: *"dlrm"' "$log" | tail -n 1)"
      [ -n "$line" ] || { skip torchrec "$w" "no result line: $(tail -n 3 "$log")"; return; }
      echo "$line" >>"$out" ;;
    cli|cli-generated)
      [ -x "$ember" ] || { skip "$impl" "$w" "$ember is not built (cmake --preset release && cmake --build --preset release)"; return; }
      local gen=()
      [ "$impl" = cli-generated ] && gen=(--num_generated_batches 64)
      "$mpiexec" -n "$w" "$ember" train "${common[@]}" --limit_train_batches $((steps + warmup)) \
        --limit_val_batches 1 --eval_interval 0 --progress lines "${gen[@]}" >"$log" 2>&1
      # done: 105 steps, 215040 samples in 10.8 s of training (19912 samples/s)
      line="$(sed -n 's/^done: \([0-9]*\) steps, \([0-9]*\) samples in \([0-9.]*\) s of training (\([0-9.]*\) samples\/s)$/\1 \2 \3 \4/p' "$log" | tail -n 1)"
      [ -n "$line" ] || { skip "$impl" "$w" "no 'done:' line: $(tail -n 3 "$log")"; return; }
      read -r n_steps n_samples secs sps <<<"$line"
      # samples/s recomputed from samples and seconds would round to 0.1 s; the CLI's own figure is exact.
      printf '{"bench":"dlrm","impl":"%s","W":%d,"threads":1,"samples_per_s":%s,"steps":%s,"samples":%s,"seconds":%s}\n' \
        "$impl" "$w" "$sps" "$n_steps" "$n_samples" "$secs" >>"$out" ;;
    ember-torch|ember-torch-compile|ember-torch-bmm)
      [ -f "$example" ] || { skip "$impl" "$w" "examples/python/dlrm.py does not exist yet"; return; }
      local wu=()  # the example's own warm-up flag, when it has one
      grep -q -- '--warmup_batches' "$example" && wu=(--warmup_batches "$warmup")
      grep -q -- '"--json"' "$example" && wu+=(--json)
      [ "$impl" = ember-torch-compile ] && wu+=(--compile inductor)
      [ "$impl" = ember-torch-bmm ] && wu+=(--interaction torch)
      "$mpiexec" -n "$w" "$py" "$example" "${common[@]}" --limit_train_batches "$steps" "${wu[@]}" >"$log" 2>&1
      # The JSON line may share a line with rank 0's stderr (the launcher forwards the two streams apart).
      line="$(grep -oE '\{ *"bench" *: *"dlrm".*\}' "$log" | tail -n 1)"
      [ -n "$line" ] || { skip "$impl" "$w" "no result line: $(tail -n 3 "$log")"; return; }
      [ "$impl" = ember-torch-bmm ] && line="${line/\"ember-torch\"/\"ember-torch-bmm\"}"
      echo "$line" >>"$out" ;;
    *) echo "dlrm_ab.sh: unknown implementation '$impl' (torchrec, cli, cli-generated, ember-torch, ember-torch-compile," \
            "ember-torch-bmm)" >&2; exit 2 ;;
  esac
  echo "dlrm_ab.sh:   $(grep -Eo '"samples_per_s": *[0-9.]*' <<<"$(tail -n 1 "$out")")" >&2
}

start_line=$(($(wc -l <"$out") + 1))
IFS=',' read -r -a wlist <<<"$ranks"
IFS=',' read -r -a ilist <<<"$impls"
for ((r = 1; r <= rounds; r++)); do
  order=("${ilist[@]}")
  if ((r % 2 == 0)); then  # reversed every other round
    order=()
    for ((i = ${#ilist[@]} - 1; i >= 0; i--)); do order+=("${ilist[i]}"); done
  fi
  for w in "${wlist[@]}"; do
    for impl in "${order[@]}"; do run_one "$impl" "$w" "$r"; done
  done
done

# Summaries of this invocation's lines.
tail -n +"$start_line" "$out" >"$tmp/lines"
"$py" - "$tmp/lines" "$rounds" "$steps" >"$tmp/summary" <<'PY'
import json, statistics, sys
rounds, steps = int(sys.argv[2]), int(sys.argv[3])
runs = {}  # W -> impl -> [samples/s or None (skipped)], in round order
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("bench") == "dlrm":
        runs.setdefault(d["W"], {}).setdefault(d["impl"], []).append(d.get("samples_per_s"))
for w in sorted(runs):
    got = {impl: [x for x in v if x is not None] for impl, v in runs[w].items()}
    med = {impl: statistics.median(v) for impl, v in got.items() if v}
    def ratio(a, b):  # of the medians, and the median of the rounds' own ratios
        if a not in med or b not in med:
            return None, None
        paired = [x / y for x, y in zip(runs[w][a], runs[w][b]) if x is not None and y is not None]
        return round(med[a] / med[b], 3), (round(statistics.median(paired), 3) if paired else None)
    out = {"bench": "dlrm_ab", "W": w, "rounds": rounds, "steps": steps,
           "median_samples_per_s": {k: round(v, 1) for k, v in med.items()}, "runs": runs[w]}
    for name, a, b in (("ember_torch_over_torchrec", "ember-torch", "torchrec"),
                       ("ember_torch_over_cli", "ember-torch", "cli"), ("cli_over_torchrec", "cli", "torchrec"),
                       ("compile_over_torchrec", "ember-torch-compile", "torchrec"),
                       ("compile_over_ember_torch", "ember-torch-compile", "ember-torch"),
                       ("interaction_over_bmm", "ember-torch", "ember-torch-bmm"),
                       ("cli_generated_over_torchrec", "cli-generated", "torchrec"),
                       ("cli_generated_over_ember_torch", "cli-generated", "ember-torch")):
        out[name], out[name + "_paired"] = ratio(a, b)
    print(json.dumps(out, separators=(",", ":")))
PY
cat "$tmp/summary" >>"$out"
cat "$tmp/summary"
echo "dlrm_ab.sh: appended to $out" >&2
