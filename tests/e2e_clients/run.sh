#!/usr/bin/env bash
# ctest entry point (issue 21): installs the pinned clients (package-lock.json: the Vercel AI SDK
# with its OpenAI and OpenAI-compatible providers, the openai client, LangChain JS, zod) into
# WORKDIR with `npm ci`, then runs clients.mjs against a freshly started picolm-provider (it also
# runs the README's "Clients" snippets).
# Usage: run.sh PROVIDER_BIN WORKDIR MODEL
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
provider="$(realpath "$1")"; workdir="$2"; model="$3"
if [ ! -f "$model" ]; then echo "missing model $model" >&2; exit 1; fi
bash "$here/../e2e_common/install.sh" "$here" "$workdir"
cd "$workdir"
node clients.mjs --provider "$provider" --model "$model" --readme "$here/../../README.md"
