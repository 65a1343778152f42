#!/usr/bin/env bash
# Builds everything and runs all tests: ./scripts/test.sh [ctest args, e.g. -L golden]
# Env: BUILD_DIR (default build), PICOLM_CMAKE_ARGS (extra cmake args).
# Tests are switched on whatever an earlier configure cached (scripts/run.sh caches them off), and
# a run in which ctest finds no test fails: "0 tests, exit 0" must never pass for a green run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${PICOLM_CMAKE_ARGS:-} -DPICOLM_BUILD_TESTS=ON
cmake --build "$BUILD_DIR" -j"$(nproc)"
# Count first, so the failure says why (ctest's own --no-tests=error is the second guard).
count=$(ctest --test-dir "$BUILD_DIR" -N "$@" | sed -n 's/^Total Tests: *//p')
if [ "${count:-0}" -eq 0 ]; then
  echo "test.sh: FAILED: ctest found no test to run in $BUILD_DIR (arguments: ${*:-none})" >&2
  exit 1
fi
echo "test.sh: running $count tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j"$(nproc)" "$@"
