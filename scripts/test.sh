#!/usr/bin/env bash
# Builds everything and runs all tests: ./scripts/test.sh [ctest args, e.g. -L golden]
# Env: BUILD_DIR (default build), PICOLM_CMAKE_ARGS (extra cmake args).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${PICOLM_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "$@"
