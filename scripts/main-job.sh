#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains DLRM on the built-in synthetic
# click data set with 2 MPI ranks (sharded embeddings, data-parallel dense layers), ending with
# the eval AUC next to the planted model's AUC. Extra arguments go to `ember train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
mpiexec -n 2 build/bin/ember train --dataset synthetic "$@"
