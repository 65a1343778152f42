#!/usr/bin/env bash
# ctest entry `cluster` (issue 22): three picolm-provider replicas behind HAProxy on loopback.
#   tests/cluster/run.sh PROVIDER MODEL WORKDIR AGENTBENCH SESSION_MODEL
# Installs Debian's haproxy if it is missing (as scripts/deps.sh does for the build); exits 77 (ctest:
# skipped) with a message only if it cannot be installed.
set -euo pipefail
provider=$1 model=$2 workdir=$3 agentbench=$4 session_model=$5
if ! command -v haproxy >/dev/null 2>&1 && [ -x /usr/sbin/haproxy ]; then PATH=$PATH:/usr/sbin; fi
if ! command -v haproxy >/dev/null 2>&1; then
  echo "cluster test: installing haproxy"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $SUDO apt-get install -y -qq --no-install-recommends haproxy ||
         { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends haproxy; }; } >/dev/null 2>&1
  then
    echo "SKIPPED: haproxy is not installed and 'apt-get install haproxy' failed (no root/sudo or no network)"
    exit 77
  fi
  if ! command -v haproxy >/dev/null 2>&1 && [ -x /usr/sbin/haproxy ]; then PATH=$PATH:/usr/sbin; fi
fi
{ haproxy -v || true; } | head -n 1
exec python3 "$(dirname "$0")/cluster_test.py" "$provider" "$model" "$workdir" "$agentbench" "$session_model"
