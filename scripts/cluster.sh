#!/usr/bin/env bash
# Starts N picolm-provider replicas and HAProxy in front of them on loopback, for trying the cluster
# setup of docs/SCALING.md on one machine:
#   ./scripts/cluster.sh N [picolm-provider options]
# Replica i is named r<i> (--instance-id) and listens on 127.0.0.1:$((BASE_PORT + i)); the proxy on
# 127.0.0.1:$PROXY_PORT (defaults: 8080 and BASE_PORT 8080, i.e. replicas on 8081..). All replicas
# share one prompt-cache directory (--cache-dir, default the provider's). Clients use
# http://127.0.0.1:8080/v1; each replica's metrics are at /replica/r<i>/metrics, the proxy's at
# /haproxy/metrics. A replica that exits (crash, kill, drain after SIGTERM) leaves the proxy and the
# other replicas running; Ctrl-C or SIGTERM to this script drains and stops everything, and so does
# the proxy exiting. Builds like scripts/run.sh (BUILD_DIR,
# PICOLM_CMAKE_ARGS); PROVIDER=path/to/picolm-provider skips the build. Installs haproxy if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/cluster.sh N [picolm-provider options]   (N replicas, N >= 1)" >&2
  exit 2
fi
n=$1
shift
PROXY_PORT=${PROXY_PORT:-8080}
BASE_PORT=${BASE_PORT:-8080}
if [ -z "${PROVIDER:-}" ]; then
  scripts/deps.sh
  BUILD_DIR=${BUILD_DIR:-build}
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPICOLM_BUILD_TESTS=OFF ${PICOLM_CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target picolm-provider picolm_demo_model
  PROVIDER=$BUILD_DIR/bin/picolm-provider
fi
if ! command -v haproxy >/dev/null 2>&1 && [ -x /usr/sbin/haproxy ]; then PATH=$PATH:/usr/sbin; fi
if ! command -v haproxy >/dev/null 2>&1; then
  echo "installing: haproxy"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends haproxy
  PATH=$PATH:/usr/sbin
fi

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/picolm-cluster.XXXXXX")
pids=()
cleanup() {
  trap - EXIT INT TERM
  echo "stopping: SIGTERM to the replicas (they drain) and the proxy"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "logs: $run_dir"
  exit "${1:-0}"
}
trap 'cleanup 0' INT TERM
trap 'cleanup 1' EXIT

addrs=()
for i in $(seq 1 "$n"); do
  port=$((BASE_PORT + i))
  "$PROVIDER" --host 127.0.0.1 --port "$port" --instance-id "r$i" "$@" >"$run_dir/r$i.out" 2>"$run_dir/r$i.log" &
  pids+=($!)
  addrs+=("r$i=127.0.0.1:$port")
done
examples/cluster/make-haproxy-cfg.sh --listen "127.0.0.1:$PROXY_PORT" "${addrs[@]}" >"$run_dir/haproxy.cfg"
haproxy -db -f "$run_dir/haproxy.cfg" >"$run_dir/haproxy.log" 2>&1 &
pids+=($!)

echo "waiting for $n replica(s) to load..."
for i in $(seq 1 "$n"); do
  until curl -sf "http://127.0.0.1:$((BASE_PORT + i))/health" >/dev/null; do
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null || { echo "a process exited; logs in $run_dir:"; tail -n 5 "$run_dir"/*.log; exit 1; }
    done
    sleep 0.5
  done
done
replica_pids=""
declare -A name_of
for i in $(seq 1 "$n"); do
  replica_pids+=" r$i=${pids[$((i - 1))]}"
  name_of[${pids[$((i - 1))]}]=r$i
done
proxy_pid=${pids[$n]}
cat <<EOF
cluster up: $n replica(s) behind http://127.0.0.1:$PROXY_PORT/v1 (logs and haproxy.cfg in $run_dir)
  replica pids:$replica_pids
  curl -s http://127.0.0.1:$PROXY_PORT/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}]}'
  curl -s http://127.0.0.1:$PROXY_PORT/replica/r1/metrics     # one replica's metrics
  curl -s http://127.0.0.1:$PROXY_PORT/haproxy/metrics        # the proxy's
  kill -TERM <pid of a replica>   # a drain: its requests finish, new ones go to the other replicas
  kill -9 <pid of a replica>      # a crash: requests not yet answered are retried on the others
  (the proxy and the other replicas keep running when a replica exits)
Ctrl-C stops all.
EOF
# Until Ctrl-C/SIGTERM (the trap) or the proxy's exit: a replica that exits is reported and left out
# (the proxy's health checks have moved its chats to the other replicas).
live=("${pids[@]}")
while :; do
  exited="" status=0
  wait -n -p exited "${live[@]}" || status=$?
  if [ -z "$exited" ]; then
    [ "$status" -ne 127 ] && continue  # (a signal; the trap has run)
    echo "no process left to wait for; stopping"
    cleanup 1
  fi
  rest=()
  for p in "${live[@]}"; do [ "$p" = "$exited" ] || rest+=("$p"); done
  live=("${rest[@]}")
  if [ "$exited" = "$proxy_pid" ]; then
    echo "the proxy exited (status $status); stopping the replicas"
    cleanup 1
  fi
  name=${name_of[$exited]}
  echo "replica $name (pid $exited) exited (status $status; log $run_dir/$name.log); the proxy and $((${#live[@]} - 1)) replica(s) go on"
done
