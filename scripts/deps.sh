#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, if any is missing.
set -euo pipefail
# libcurl4-openssl-dev + libssl-dev: model download (--hf) and its SHA-256 check; curl: tests/scripts_test.sh.
PKGS=(build-essential cmake ninja-build pkg-config catch2 libsimdjson-dev libcpp-httplib-dev libspdlog-dev
      libcurl4-openssl-dev libssl-dev curl python3 python3-jsonschema python3-jinja2)
# Fuzzing only (`scripts/deps.sh --fuzz`, run by scripts/fuzz.sh): clang, and its runtime with
# libFuzzer and the sanitizers (Debian 12: libclang-rt-14-dev).
if [ "${1:-}" = "--fuzz" ]; then
  PKGS+=(clang libclang-rt-14-dev)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# node + npm for the end-to-end test with the official `openai` client (tests/e2e_openai). Checked
# by command, not by package: a NodeSource nodejs (which bundles npm) must not be replaced.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "installing: nodejs npm"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
