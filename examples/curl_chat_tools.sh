#!/usr/bin/env bash
# A chat completion with tools, the way PicoClaw sends it (tool_choice auto).
# Usage: examples/curl_chat_tools.sh [BASE_URL]   (default http://127.0.0.1:8080)
set -euo pipefail
BASE=${1:-http://127.0.0.1:8080}
curl -sS "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "local",
  "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}],
  "tool_choice": "auto",
  "max_tokens": 256
}'
echo
