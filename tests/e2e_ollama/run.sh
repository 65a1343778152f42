#!/usr/bin/env bash
# ctest entry point (issue 30 item 7): installs the pinned ollama client and zod (package-lock.json)
# into WORKDIR with `npm ci` from the npm registry, then runs ollama.mjs against a freshly started
# picolm-provider for each model (qwen3* models also check `think`), and the README's Ollama snippet.
# Usage: run.sh PROVIDER_BIN WORKDIR MODEL [MODEL...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
provider="$(realpath "$1")"; workdir="$2"; shift 2
bash "$here/../e2e_common/install.sh" "$here" "$workdir"
cd "$workdir"
for model in "$@"; do
  if [ ! -f "$model" ]; then echo "missing model $model" >&2; exit 1; fi
  node ollama.mjs --provider "$provider" --model "$model" --readme "$here/../../README.md"
done
