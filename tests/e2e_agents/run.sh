#!/usr/bin/env bash
# ctest entry point (issue 30): installs the pinned agent frameworks (package-lock.json: the OpenAI
# Agents SDK, Mastra, the openai client, zod) into WORKDIR with `npm ci` from the npm registry, then
# runs agents.mjs against a freshly started picolm-provider for each model, and the README's agents
# snippets against the first.
# Usage: run.sh PROVIDER_BIN WORKDIR MODEL [MODEL...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
provider="$(realpath "$1")"; workdir="$2"; shift 2
# (@mastra/core 1.71 declares node >= 22.13; npm ci only warns, and this test passes on node 20.)
bash "$here/../e2e_common/install.sh" "$here" "$workdir"
cd "$workdir"
# No usage reports from Mastra (PostHog) during a test.
export MASTRA_TELEMETRY_DISABLED=1
# The README's snippets run against the first model only (their runs are not capped by max tokens,
# and a thinking model thinks at length).
readme=(--readme "$here/../../README.md")
for model in "$@"; do
  if [ ! -f "$model" ]; then echo "missing model $model" >&2; exit 1; fi
  node agents.mjs --provider "$provider" --model "$model" "${readme[@]}"
  readme=()
done
