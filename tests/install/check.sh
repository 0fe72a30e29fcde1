#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a tiny consumer against the
# install tree alone: once with CMake (find_package(ember)), once with pkg-config (ember.pc).
# Usage: check.sh BUILD_DIR SOURCE_DIR [CFLAGS]   (CFLAGS: e.g. the sanitizer the library was built with)
set -euo pipefail
build="$1" src="$2" flags="${3:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# CMake package
cmake -S "$src/tests/install" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/cmake-build/consumer"
# pkg-config
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:${PKG_CONFIG_PATH:-}"
cc -std=c11 -Wall -Werror $flags "$src/tests/install/consumer.c" -o "$tmp/consumer-pc" $(pkg-config --cflags --libs ember)
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/consumer-pc"
# Nothing of the source tree's internals is installed.
if find "$tmp/prefix" -name 'internal.h' | grep -q .; then echo "check.sh: internal headers installed" >&2; exit 1; fi
echo "install check: ok"
