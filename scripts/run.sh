#!/usr/bin/env bash
# Builds the project and starts picolm-provider: ./scripts/run.sh [picolm-provider options]
# Without -m it serves the built-in demo model (random weights: noise text, valid tool calls).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPICOLM_BUILD_TESTS=OFF ${PICOLM_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
exec "$BUILD_DIR/bin/picolm-provider" "$@"
