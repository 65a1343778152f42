#!/usr/bin/env bash
# POST /tool_call: one message in, a validated tool call out.
# Usage: examples/curl_tool_call.sh [BASE_URL]   (default http://127.0.0.1:8080)
set -euo pipefail
BASE=${1:-http://127.0.0.1:8080}
curl -sS "$BASE/tool_call" -H 'Content-Type: application/json' -d '{
  "system": "You control a smart home. Call a tool.",
  "prompt": "Please switch on the light in the kitchen",
  "tools": [
    {"type": "function", "function": {"name": "set_light", "description": "Switch a light",
      "parameters": {"type": "object", "properties": {
        "room": {"type": "string", "enum": ["kitchen", "bedroom", "hall"]},
        "on": {"type": "boolean"}}, "required": ["room", "on"]}}},
    {"type": "function", "function": {"name": "set_volume", "description": "Set the speaker volume",
      "parameters": {"type": "object", "properties": {
        "level": {"type": "integer", "minimum": 0, "maximum": 10}}, "required": ["level"]}}}
  ],
  "max_tokens": 256
}'
echo
