#!/usr/bin/env bash
# Installs what ember needs on Debian 12 (as root), only what is missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin mpich libmpich-dev libcmocka-dev libopenblas-dev
      libcjson-dev zlib1g-dev python3-numpy python3-venv python3-dev gnuplot-nox libsimde-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross clang libomp-dev
      libclang-rt-dev iproute2 libmicrohttpd-dev wrk)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
