#!/usr/bin/env bash
# Installs what is missing, builds (preset `release`, or the one given), and runs every test.
# Usage: scripts/test.sh [release|sanitize] [extra ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j "$(nproc)" "$@"
