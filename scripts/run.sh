#!/usr/bin/env bash
# Builds the project and starts picolm-provider: ./scripts/run.sh [picolm-provider options]
# Without -m or --hf it serves the built-in demo model (random weights: noise text, valid tool calls).
#   ./scripts/run.sh --hf Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf
# downloads a real model once into $PICOLM_MODELS (default ~/.cache/picolm/models) and serves it;
# ./scripts/run.sh --list-models shows the recommended ones.
# The build leaves the tests out (faster); scripts/test.sh switches them on again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPICOLM_BUILD_TESTS=OFF ${PICOLM_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
exec "$BUILD_DIR/bin/picolm-provider" "$@"
