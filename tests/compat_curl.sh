#!/usr/bin/env bash
# ctest entry point (issue 30): what agent frameworks and chat front ends send, asked with curl
# against picolm-provider serving the Qwen3-vocabulary test model (it thinks by default):
#   - every thinking switch (thinking.type, reasoning.enabled, reasoning.effort, reasoning_effort
#     incl. xhigh/max, enable_thinking, chat_template_kwargs), alone and against each other in the
#     README's precedence order, on chat completions and the Responses API: off = 0 reasoning tokens;
#   - image / audio / file content parts: a 400 in the words clients fall back on;
#   - legacy functions / function_call: a function_call reply, streamed and not;
#   - GET / DELETE /v1/responses/{id} (responses.retrieve / responses.delete);
#   - /v1/models lists the alias "picolm".
# Usage: compat_curl.sh PROVIDER_BIN QWEN3_MODEL WORKDIR
set -euo pipefail
provider="$1"; model="$2"; workdir="$3"
[ -x "$provider" ] || { echo "FAIL: no provider binary at $provider"; exit 1; }
[ -f "$model" ] || { echo "FAIL: missing model $model"; exit 1; }
mkdir -p "$workdir"
log="$workdir/provider.log"
"$provider" -m "$model" --host 127.0.0.1 --port 0 -np 1 -c 2048 -j 2 --cache-dir none >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/^listening on [^:]*:\([0-9]*\)$/\1/p' "$log" | head -n1)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
[ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 || { echo "FAIL: the provider did not start"; cat "$log"; exit 1; }
base="http://127.0.0.1:$port"
out="$workdir/body"
status=0
fails=0

# req METHOD PATH [JSON]: the answer's body goes to $out, its status to $status.
req() {
  local args=(-s -o "$out" -w '%{http_code}' -X "$1" "$base$2")
  [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  status=$(curl "${args[@]}")
}

# check NAME PYTHON_EXPR: the expression holds for the last answer. It sees `status`, `body`, `j`
# (the body as JSON, or None) and `sse` (the JSON of each "data:" event of a stream).
check() {
  if python3 - "$out" "$status" "$2" <<'EOF'; then echo "ok: $1"; else echo "FAIL: $1 (status $status): $(head -c 1500 "$out")"; fails=$((fails + 1)); fi
import json, sys
body = open(sys.argv[1], encoding="utf-8").read()
status = int(sys.argv[2])
try:
    j = json.loads(body)
except ValueError:
    j = None
sse = [json.loads(l[6:]) for l in body.splitlines() if l.startswith("data: ") and l[6:] != "[DONE]"]
try:
    ok = eval(sys.argv[3], {"status": status, "body": body, "j": j, "sse": sse, "json": json})
except Exception as e:
    print("  ", type(e).__name__, e)
    ok = False
sys.exit(0 if ok else 1)
EOF
}

chat() {  # chat EXTRA_FIELDS: a short chat request with the given extra fields
  req POST /v1/chat/completions '{"model":"picolm","messages":[{"role":"user","content":"Hello"}],"max_tokens":40,"temperature":0'"${1:+,$1}"'}'
}
RT='j["usage"]["completion_tokens_details"]["reasoning_tokens"]'

# ---- thinking switches, chat completions ----
# The model thinks by default, so every "off" below must come from the switch being read.
chat ''
check "default: the model thinks" "status == 200 and $RT > 0 and j['choices'][0]['message'].get('reasoning_content')"
for off in '"thinking":{"type":"disabled"}' '"reasoning":{"effort":"none"}' '"reasoning":{"enabled":false}' \
           '"reasoning_effort":"none"' '"enable_thinking":false' '"chat_template_kwargs":{"enable_thinking":false}' \
           '"thinking":{"type":"disabled"},"reasoning_effort":"high"' \
           '"reasoning":{"enabled":false,"effort":"high"}' \
           '"enable_thinking":false,"thinking":{"type":"enabled"}' \
           '"chat_template_kwargs":{"enable_thinking":false},"enable_thinking":true'; do
  chat "$off"
  check "off: {$off} -> 0 reasoning tokens" "status == 200 and $RT == 0 and 'reasoning_content' not in j['choices'][0]['message']"
done
for on in '"thinking":{"type":"enabled"},"reasoning_effort":"none"' '"reasoning":{"enabled":true},"reasoning_effort":"none"' \
          '"thinking":{"type":"enabled","budget_tokens":1024},"reasoning":{"enabled":false}' \
          '"chat_template_kwargs":{"enable_thinking":true},"thinking":{"type":"disabled"}' \
          '"reasoning_effort":"low","reasoning":{"effort":"none"}' \
          '"reasoning_effort":"xhigh"' '"reasoning_effort":"max"' '"reasoning":{"effort":"xhigh"}'; do
  chat "$on"
  check "on: {$on} -> thinks" "status == 200 and $RT > 0"
done
# xhigh / max are high: 3/4 of max_tokens (+ the forced close); low is 1/4.
chat '"reasoning_effort":"max"'
check "max thinks as high (<= 3/4 of 40 + 4)" "status == 200 and 10 < $RT <= 34"
chat '"reasoning_effort":"low"'
check "low thinks <= 1/4 of 40 + 4" "status == 200 and 0 < $RT <= 14"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":40,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"thinking":{"type":"disabled"}}'
check "streamed, thinking disabled: no reasoning delta, 0 reasoning tokens" \
  "status == 200 and not any('reasoning_content' in c['choices'][0]['delta'] for c in sse if c['choices']) and sse[-1]['usage']['completion_tokens_details']['reasoning_tokens'] == 0"
chat '"thinking":{"type":"adaptive"}'
check "thinking.type adaptive -> 400 naming it" "status == 400 and j['error']['param'] == 'thinking.type'"
chat '"reasoning":{"enabled":"no"}'
check "reasoning.enabled not a boolean -> 400" "status == 400 and j['error']['param'] == 'reasoning.enabled'"
chat '"reasoning_effort":"extreme"'
check "reasoning_effort extreme -> 400" "status == 400 and j['error']['param'] == 'reasoning_effort'"

# ---- thinking switches, Responses API ----
RRT='j["usage"]["output_tokens_details"]["reasoning_tokens"]'
resp() { req POST /v1/responses '{"model":"picolm","input":"Hello","max_output_tokens":40,"temperature":0'"${1:+,$1}"'}'; }
resp ''
check "responses default: thinks" "status == 200 and $RRT > 0 and j['output'][0]['type'] == 'reasoning'"
for off in '"reasoning":{"effort":"none"}' '"reasoning":{"enabled":false}' '"thinking":{"type":"disabled"}' \
           '"reasoning":{"effort":"high","enabled":false}'; do
  resp "$off"
  check "responses off: {$off} -> 0 reasoning tokens" "status == 200 and $RRT == 0 and all(o['type'] != 'reasoning' for o in j['output'])"
done
resp '"reasoning":{"effort":"none","enabled":true}'
check "responses reasoning.enabled true beats effort none" "status == 200 and $RRT > 0"
resp '"reasoning":{"effort":"xhigh"}'
check "responses reasoning.effort xhigh accepted" "status == 200 and $RRT > 0"

# ---- image / audio / file parts ----
img='{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}'
req POST /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},'"$img"']}]}'
check "chat image_url -> 400 'this model does not support image input'" \
  "status == 400 and 'this model does not support image input' in j['error']['message'] and j['error']['type'] == 'invalid_request_error' and j['error']['param'] == 'messages[0].content[1].type'"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}'
check "chat input_audio -> 400 'this model does not support audio input'" \
  "status == 400 and 'this model does not support audio input' in j['error']['message']"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}]}'
check "chat file -> 400 'does not support file input'" "status == 400 and 'does not support file input' in j['error']['message']"
req POST /v1/responses '{"input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"https://example.com/a.png"}]}]}'
check "responses input_image -> 400 'this model does not support image input'" \
  "status == 400 and 'this model does not support image input' in j['error']['message'] and j['error']['param'] == 'input[0].content[1].type'"
req POST /v1/responses '{"input":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}}]}]}'
check "responses input_audio -> 400 'this model does not support audio input'" \
  "status == 400 and 'this model does not support audio input' in j['error']['message']"

# ---- legacy functions / function_call ----
fns='"functions":[{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"]}}]'
legacy_ok="status == 200 and 'tool_calls' not in j['choices'][0]['message'] and j['choices'][0]['finish_reason'] == 'function_call' and j['choices'][0]['message']['function_call']['name'] == 'get_weather' and isinstance(json.loads(j['choices'][0]['message']['function_call']['arguments'])['city'], str)"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Weather in Paris?"}],'"$fns"',"function_call":{"name":"get_weather"},"max_tokens":60,"temperature":0,"enable_thinking":false}'
check "functions + function_call named -> message.function_call, finish_reason function_call" "$legacy_ok"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Weather in Paris?"}],'"$fns"',"function_call":{"name":"get_weather"},"max_tokens":60,"temperature":0,"enable_thinking":false,"stream":true}'
check "streamed: delta.function_call, finish_reason function_call" \
  "status == 200 and [c['choices'][0]['delta']['function_call']['name'] for c in sse if 'name' in c['choices'][0]['delta'].get('function_call', {})] == ['get_weather'] and isinstance(json.loads(''.join(c['choices'][0]['delta']['function_call'].get('arguments', '') for c in sse if 'function_call' in c['choices'][0]['delta']))['city'], str) and not any('tool_calls' in c['choices'][0]['delta'] for c in sse) and sse[-1]['choices'][0]['finish_reason'] == 'function_call'"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"role":"function","name":"get_weather","content":"18 C, sunny"}],'"$fns"',"function_call":"none","max_tokens":16,"temperature":0,"enable_thinking":false}'
check "a legacy history (assistant function_call, role function) is accepted; function_call none -> no call" \
  "status == 200 and 'function_call' not in j['choices'][0]['message'] and j['choices'][0]['finish_reason'] in ('stop', 'length')"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"},{"role":"function","content":"18 C"}],'"$fns"'}'
check "role function without name -> 400" "status == 400 and j['error']['param'] == 'messages[1].name'"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],'"$fns"',"tools":[{"type":"function","function":{"name":"f"}}]}'
check "functions and tools together -> 400" "status == 400 and j['error']['param'] == 'functions'"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],'"$fns"',"function_call":"required"}'
check "function_call required -> 400" "status == 400 and j['error']['param'] == 'function_call'"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],'"$fns"',"function_call":{"name":"nope"}}'
check "function_call naming an unknown function -> 400" "status == 400"

# ---- GET / DELETE /v1/responses/{id} ----
resp '"reasoning":{"effort":"none"},"metadata":{"k":"v"}'
check "a stored response" "status == 200 and j['id'].startswith('resp_') and j['store'] is True"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out")
cp "$out" "$workdir/created"
req GET "/v1/responses/$id"
check "GET /v1/responses/{id} -> the same response object" \
  "status == 200 and j == json.load(open('$workdir/created'))"
req GET "/responses/$id"
check "GET /responses/{id} (no /v1) too" "status == 200 and j['id'] == '$id'"
req GET "/v1/responses/$id?stream=true"
check "GET ?stream=true -> 400 naming stream" "status == 400 and j['error']['param'] == 'stream'"
req DELETE "/v1/responses/$id"
check "DELETE -> deleted" "status == 200 and j == {'id': '$id', 'object': 'response.deleted', 'deleted': True}"
req GET "/v1/responses/$id"
check "GET after DELETE -> 404 with an OpenAI error" \
  "status == 404 and j['error']['type'] == 'invalid_request_error' and j['error']['code'] == 'response_not_found' and '$id' in j['error']['message']"
req DELETE "/v1/responses/$id"
check "DELETE again -> 404" "status == 404 and j['error']['code'] == 'response_not_found'"
req POST /v1/responses '{"input":"Hello","previous_response_id":"'"$id"'","max_output_tokens":8}'
check "a deleted response is no previous_response_id" "status == 400 and j['error']['code'] == 'previous_response_not_found'"
req GET /v1/responses/resp_unknown
check "GET unknown id -> 404" "status == 404 and j['error']['code'] == 'response_not_found'"
resp '"reasoning":{"effort":"none"},"store":false'
nid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out")
req GET "/v1/responses/$nid"
check "store false -> not kept (404)" "status == 404"
req POST /v1/responses '{"input":"Hello","max_output_tokens":12,"temperature":0,"stream":true,"reasoning":{"effort":"none"}}'
sid=$(python3 -c '
import json,sys
ev=[json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
print([e for e in ev if e["type"] in ("response.completed","response.incomplete")][-1]["response"]["id"])' "$out")
python3 -c '
import json,sys
ev=[json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
json.dump([e for e in ev if e["type"] in ("response.completed","response.incomplete")][-1]["response"], open(sys.argv[2],"w"))' "$out" "$workdir/streamed"
req GET "/v1/responses/$sid"
check "a streamed response is retrievable, as its last event showed it" "status == 200 and j == json.load(open('$workdir/streamed'))"

# ---- model ids ----
req GET /v1/models
check "/v1/models: the file's id first, then the alias picolm" \
  "status == 200 and [m['id'] for m in j['data']] == ['qwen3-bpe-q4km', 'picolm']"
req GET /v1/models/picolm
check "/v1/models/picolm -> 200" "status == 200 and j['id'] == 'picolm'"

if [ "$fails" -ne 0 ]; then echo "compat_curl: $fails check(s) failed"; exit 1; fi
echo "compat_curl: all checks passed"
