#!/usr/bin/env bash
# Rewrites the README's option lists from the binaries' --help (the blocks between
# "<!-- BEGIN NAME --help" and "<!-- END NAME --help -->"); ctest test_docs fails when they differ.
#   ./scripts/update-readme-help.sh            # uses build/bin (BUILD_DIR to change)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/bin
for name in picolm picolm-provider picolm-bench picolm-synth picolm-gguf picolm-grammar picolm-cachebench picolm-budgetbench picolm-loadbench picolm-agentbench; do
  [ -x "$BIN/$name" ] || { echo "missing $BIN/$name: build it first (cmake --build build --target $name)" >&2; exit 1; }
done
python3 - "$BIN" <<'PY'
import re, subprocess, sys
bin_dir = sys.argv[1]
path = "README.md"
text = open(path, encoding="utf-8").read()
for name in ("picolm", "picolm-provider", "picolm-bench", "picolm-synth", "picolm-gguf", "picolm-grammar", "picolm-cachebench", "picolm-budgetbench", "picolm-loadbench", "picolm-agentbench"):
    help_text = subprocess.run([f"{bin_dir}/{name}", "--help"], check=True, capture_output=True, text=True).stdout
    pattern = re.compile(r"(<!-- BEGIN %s --help[^\n]*-->\n```text\n).*?(```\n<!-- END %s --help -->)"
                         % (re.escape(name), re.escape(name)), re.S)
    if not pattern.search(text):
        sys.exit(f"README.md has no block for {name}")
    text = pattern.sub(lambda m: m.group(1) + help_text + m.group(2), text)
open(path, "w", encoding="utf-8").write(text)
print("README.md: option lists updated")
PY
