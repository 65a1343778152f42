#!/usr/bin/env bash
# ctest entry point: installs the pinned openai client (package-lock.json) into WORKDIR with `npm ci`
# (npm registry), then runs e2e.mjs against a freshly started picolm-provider for each model, and
# thinking.mjs (reasoning_content, the thinking budget, PicoClaw-like tools) for the thinking models
# (qwen3*).
# Usage: run.sh PROVIDER_BIN WORKDIR MODEL [MODEL...]
# E2E_SCRIPT picks the script (default e2e.mjs; budget.mjs: issue 13's budget guarantees).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
provider="$(realpath "$1")"; workdir="$2"; shift 2
script="${E2E_SCRIPT:-e2e.mjs}"
bash "$here/../e2e_common/install.sh" "$here" "$workdir"
cd "$workdir"
for model in "$@"; do
  if [ ! -f "$model" ]; then echo "missing model $model" >&2; exit 1; fi
  node "$script" --provider "$provider" --model "$model"
  if [ "$script" = e2e.mjs ]; then
    case "$(basename "$model")" in
      qwen3*)
        tools="$(dirname "$model")/../tool-lists/picoclaw-like-tools.json"
        if [ ! -f "$tools" ]; then echo "missing tool list $tools" >&2; exit 1; fi
        node thinking.mjs --provider "$provider" --model "$model" --tools "$tools"
        ;;
    esac
  fi
done
