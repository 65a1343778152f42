#!/usr/bin/env bash
# ctest entry point (issue 21, CORS): what a browser sees, asked with curl. Starts picolm-provider
# with --cors for one origin, then checks the preflight, the headers on a JSON answer, an error, a
# 404 and an SSE stream, and that another origin gets no Access-Control-Allow-Origin.
# Usage: cors_curl.sh PROVIDER_BIN MODEL WORKDIR
set -euo pipefail
provider="$1"; model="$2"; workdir="$3"
app="https://dashboard.example"
mkdir -p "$workdir"
log="$workdir/provider.log"
"$provider" -m "$model" --host 127.0.0.1 --port 0 --cors "$app" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/^listening on [^:]*:\([0-9]*\)$/\1/p' "$log" | head -n1)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: the provider did not start"; cat "$log"; exit 1; }
base="http://127.0.0.1:$port"
fails=0
# expect NAME HEADERS_FILE PATTERN: the response headers contain PATTERN (case-insensitive)
expect() {
  if grep -qi -- "$3" "$2"; then echo "ok: $1"; else echo "FAIL: $1: no '$3' in:"; cat "$2"; fails=$((fails + 1)); fi
}
absent() {
  if grep -qi -- "$3" "$2"; then echo "FAIL: $1: unexpected '$3' in:"; cat "$2"; fails=$((fails + 1)); else echo "ok: $1"; fi
}
h="$workdir/headers"

curl -s -o /dev/null -D "$h" -X OPTIONS "$base/v1/chat/completions" -H "Origin: $app" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type"
expect "preflight status 204" "$h" "^HTTP/1.1 204"
expect "preflight allows the origin" "$h" "^Access-Control-Allow-Origin: $app"
expect "preflight allows POST" "$h" "^Access-Control-Allow-Methods:.*POST"
expect "preflight allows the asked headers" "$h" "^Access-Control-Allow-Headers:.*authorization"
expect "preflight max age" "$h" "^Access-Control-Max-Age:"

curl -s -o /dev/null -D "$h" "$base/v1/models" -H "Origin: $app"
expect "GET /v1/models status 200" "$h" "^HTTP/1.1 200"
expect "GET /v1/models allows the origin" "$h" "^Access-Control-Allow-Origin: $app"
expect "GET /v1/models varies by origin" "$h" "^Vary:.*Origin"

curl -s -o /dev/null -D "$h" "$base/v1/chat/completions" -H "Origin: $app" -H "Content-Type: application/json" -d '{"messages":5}'
expect "a 400 still carries the header" "$h" "^Access-Control-Allow-Origin: $app"
expect "the bad request is a 400" "$h" "^HTTP/1.1 400"

curl -s -o /dev/null -D "$h" "$base/v1/nothing-here" -H "Origin: $app"
expect "a 404 still carries the header" "$h" "^Access-Control-Allow-Origin: $app"

curl -s -N -o "$workdir/stream" -D "$h" "$base/v1/chat/completions" -H "Origin: $app" -H "Content-Type: application/json" \
  -d '{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8,"stream":true,"temperature":0}'
expect "SSE stream carries the header" "$h" "^Access-Control-Allow-Origin: $app"
expect "SSE stream is an event stream" "$h" "^Content-Type: text/event-stream"
expect "SSE stream ends with [DONE]" "$workdir/stream" "data: \[DONE\]"

curl -s -o /dev/null -D "$h" "$base/v1/models" -H "Origin: https://elsewhere.example"
absent "another origin gets no Access-Control-Allow-Origin" "$h" "^Access-Control-Allow-Origin:"

if [ "$fails" -ne 0 ]; then echo "cors_curl: $fails check(s) failed"; exit 1; fi
echo "cors_curl: all checks passed"
