#!/usr/bin/env bash
# Shared by the npm end-to-end tests' run.sh: copies a test folder's package.json, package-lock.json
# and scripts, and tests/e2e_common's modules (as e2e_common/), into the work folder, then installs
# the pinned packages with `npm ci` from the npm registry, only when the lock file changed since
# the last install there.
# Usage: install.sh TEST_DIR WORKDIR
set -euo pipefail
src="$1"; workdir="$2"
common="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$workdir/e2e_common"
cp "$src/package.json" "$src/package-lock.json" "$src"/*.mjs "$workdir/"
cp "$common"/*.mjs "$workdir/e2e_common/"
cd "$workdir"
if ! cmp -s package-lock.json node_modules/.picolm-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.picolm-lock
fi
