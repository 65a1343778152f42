#!/usr/bin/env bash
# Streaming chat completion (SSE): prints the raw `data: {...}` lines, then `data: [DONE]`.
# Usage: examples/curl_stream.sh [BASE_URL]   (default http://127.0.0.1:8080)
set -euo pipefail
BASE=${1:-http://127.0.0.1:8080}
curl -sSN "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "local",
  "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write one sentence about the sea."}
  ],
  "max_tokens": 64,
  "stream": true,
  "stream_options": {"include_usage": true}
}'
