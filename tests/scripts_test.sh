#!/usr/bin/env bash
# The scripts as a newcomer runs them on a fresh clone (run by .ci/run before the test suite):
#   1. ./scripts/run.sh starts the provider and /health answers 200 (then it is stopped);
#   2. ./scripts/test.sh on the same build folder, where run.sh cached PICOLM_BUILD_TESTS=OFF, must
#      switch the tests back on, and must fail loudly when ctest selects no test.
# .ci/run then runs ./scripts/test.sh on that folder for the real suite (no rebuild needed).
#   tests/scripts_test.sh [BUILD_DIR]      (default build; PICOLM_CMAKE_ARGS passed through)
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${1:-${BUILD_DIR:-build}}
log=$(mktemp)
fail() { echo "scripts_test: FAILED: $*" >&2; exit 1; }

# ---- 1. run.sh until healthy ----------------------------------------------------------------------
./scripts/run.sh --port 0 --cache-dir none > "$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 1800); do  # the first build may take many minutes
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log" | head -1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; fail "run.sh exited before listening"; }
  sleep 1
done
[ -n "$port" ] || { tail -50 "$log"; fail "run.sh did not start the provider"; }
healthy=""
for _ in $(seq 1 120); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  [ "$code" = 200 ] && { healthy=1; break; }
  sleep 0.5
done
[ -n "$healthy" ] || { tail -50 "$log"; fail "/health never answered 200"; }
kill -TERM "$pid"
wait "$pid" || fail "picolm-provider did not stop cleanly on SIGTERM"
trap 'rm -f "$log"' EXIT
echo "scripts_test: run.sh served /health on port $port and stopped cleanly"
grep -q '^PICOLM_BUILD_TESTS:BOOL=OFF$' "$BUILD_DIR/CMakeCache.txt" || fail "run.sh did not cache PICOLM_BUILD_TESTS=OFF (the case to prove)"

# ---- 2. test.sh on that folder: tests switched on, and no test selected is a failure --------------
if ./scripts/test.sh -R '^no_such_test_name$' > "$log" 2>&1; then
  cat "$log"
  fail "test.sh passed although ctest selected no test"
fi
grep -q "ctest found no test to run" "$log" || { cat "$log"; fail "test.sh did not say why it failed"; }
grep -q '^PICOLM_BUILD_TESTS:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt" || fail "test.sh left PICOLM_BUILD_TESTS off"
total=$(ctest --test-dir "$BUILD_DIR" -N | sed -n 's/^Total Tests: *//p')
[ "${total:-0}" -gt 10 ] || fail "only ${total:-0} tests registered after test.sh"
echo "scripts_test: test.sh switched the tests on ($total registered) and refused a run of 0 tests"
