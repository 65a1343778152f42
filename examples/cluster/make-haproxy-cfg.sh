#!/usr/bin/env bash
# Prints an HAProxy 2.6 configuration for picolm-provider replicas (see examples/cluster/README.md).
#   make-haproxy-cfg.sh [--listen HOST:PORT] [--maxconn N] [--key-bytes N] [NAME=]HOST:PORT...
# A replica without NAME= is called r1, r2, ... in its order on the command line; give each the same
# name as its --instance-id, so logs, /metrics and the proxy's /replica/NAME/ paths agree.
# --key-bytes N: a conversation is keyed on the first N bytes (default 2048) of its first message
# with the digits taken out (0: the whole message); X-Prompt-Key overrides.
# examples/cluster/haproxy.cfg is this script's output for three replicas on 127.0.0.1:8081-8083.
set -euo pipefail
listen=127.0.0.1:8080
maxconn=4
key_bytes=2048
servers=()
while [ $# -gt 0 ]; do
  case "$1" in
    --listen) listen=$2; shift 2 ;;
    --maxconn) maxconn=$2; shift 2 ;;
    --key-bytes) key_bytes=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make-haproxy-cfg.sh: unknown option $1" >&2; exit 2 ;;
    *) servers+=("$1"); shift ;;
  esac
done
if ! [[ $key_bytes =~ ^[0-9]+$ ]]; then
  echo "make-haproxy-cfg.sh: --key-bytes wants a number of bytes (0 = the whole message), got '$key_bytes'" >&2
  exit 2
fi
if [ "$key_bytes" -eq 0 ]; then
  key_cut="" key_what="the whole of it"
else
  key_cut=",bytes(0,$key_bytes)" key_what="its first $key_bytes bytes"
fi
if [ ${#servers[@]} -eq 0 ]; then
  echo "make-haproxy-cfg.sh: give at least one replica address HOST:PORT" >&2
  exit 2
fi
names=()
addrs=()
i=0
for s in "${servers[@]}"; do
  i=$((i + 1))
  if [[ $s == *=* ]]; then names+=("${s%%=*}"); addrs+=("${s#*=}"); else names+=("r$i"); addrs+=("$s"); fi
  if ! [[ ${names[-1]} =~ ^[A-Za-z0-9_.-]+$ ]]; then
    echo "make-haproxy-cfg.sh: replica name '${names[-1]}' must be letters, digits, '_', '.' or '-'" >&2
    exit 2
  fi
done

cat <<CFG
# HAProxy 2.6 (Debian 12's haproxy) in front of ${#servers[@]} picolm-provider replicas.
# Made by examples/cluster/make-haproxy-cfg.sh; why each setting is there: examples/cluster/README.md.

global
    # A request is hashed by its body and retried only if it sits whole in one buffer: 128 KB holds
    # a PicoClaw request (a 3,000-token system prompt, tools and a 4k-token history: ~50 KB); a larger
    # one is still served, routed round robin unless it has X-Prompt-Key, and not retried. Memory:
    # up to two buffers per connection, so maxconn 256 bounds the proxy to ~64 MB.
    maxconn 256
    tune.bufsize 131072

defaults
    mode http
    timeout connect 2s
    timeout client 150s
    # Longer than the provider's per-request --timeout (110 s), which ends a reply with
    # finish_reason "length" rather than letting the proxy cut it.
    timeout server 150s
    timeout queue 60s
    timeout http-request 30s
    timeout http-keep-alive 5s
    # The proxy's own errors (no replica up, a replica's answer lost or too slow) in the OpenAI
    # error shape, which clients parse, instead of HAProxy's HTML pages.
    http-error status 502 content-type application/json string '{"error":{"message":"no answer from the replica (bad gateway)","type":"server_error","code":"bad_gateway"}}'
    http-error status 503 content-type application/json string '{"error":{"message":"no replica is available","type":"server_error","code":"no_replica"}}' hdr Retry-After 2
    http-error status 504 content-type application/json string '{"error":{"message":"the replica did not answer in time","type":"server_error","code":"gateway_timeout"}}'
    # One connection per request to a replica: no idle keep-alive connection holds a draining
    # replica's exit for its keep-alive timeout or races its close against a new request; a
    # loopback or LAN connect is nothing beside a generation.
    option http-server-close

frontend picolm
    bind ${listen}
    # The proxy's own figures (per replica: up/down, active, queued, retries, redispatches).
    http-request use-service prometheus-exporter if { path /haproxy/metrics }
    # GET /replica/NAME/metrics (or /health): that replica's own endpoint, whichever replica the
    # hash would pick.
    use_backend direct if { path_beg /replica/ }
    default_backend replicas

backend replicas
    # Route by the stable part of the system prompt, so every turn of a conversation lands on the
    # replica whose slots and prompt cache hold it. The key is the first message's content (Chat
    # Completions; a string or its first text part), else the instructions (Responses API), with
    # its digits taken out, ${key_what} (make-haproxy-cfg.sh --key-bytes): PicoClaw's system
    # message ends with a clock line that changes every minute and a sender line (and the date and
    # time of day are digits wherever a client puts them), so the whole message would send every
    # turn elsewhere. The client's X-Prompt-Key header, if it sends one, is the key instead.
    # Requests without any (GET /v1/models) go round robin.
    option http-buffer-request
    http-request set-var(txn.prompt_key) req.body,json_query('\$.messages[0].content') if { method POST }
    http-request set-var(txn.prompt_key) req.body,json_query('\$.messages[0].content[0].text') if !{ var(txn.prompt_key) -m found } { method POST }
    http-request set-var(txn.prompt_key) req.body,json_query('\$.instructions') if !{ var(txn.prompt_key) -m found } { method POST }
    http-request set-var(txn.prompt_key) var(txn.prompt_key),regsub("[0-9]+",,g)${key_cut} if { var(txn.prompt_key) -m found }
    http-request set-var(txn.prompt_key) req.hdr(X-Prompt-Key) if { req.hdr(X-Prompt-Key) -m found }
    balance hash var(txn.prompt_key)
    # Consistent: adding or losing a replica moves only the prompts it held. Bounded load: a replica
    # with more than 1.5x the average of active requests passes new ones to the next on the ring
    # (a spilled prompt is prefilled once more there, which beats queueing behind a busy board).
    hash-type consistent
    hash-balance-factor 150
    # A replica that refuses the connection, closes it without an answer (killed, restarting) or
    # answers 503 (loading, draining) has not started the request: send it to another replica.
    retry-on conn-failure empty-response 503
    retries 3
    option redispatch 1
    # /health answers 503 while the model loads and while the replica drains (SIGTERM).
    option httpchk GET /health
    http-check expect status 200
    # maxconn: requests one replica runs or queues at once (its --parallel slots plus a few); more wait
    # here, where any replica that frees up can take them, instead of in one replica's queue.
    default-server check inter 1s fastinter 250ms fall 2 rise 1 maxconn ${maxconn}
CFG
for k in "${!names[@]}"; do
  echo "    server ${names[$k]} ${addrs[$k]}"
done
cat <<CFG

backend direct
    # /replica/NAME/PATH -> PATH on replica NAME (no health check: a down replica answers 503 here).
    http-request set-var(txn.replica) path,field(3,/)
    http-request set-path %[path,regsub("^/replica/[^/]*",)]
CFG
for k in "${!names[@]}"; do
  echo "    use-server ${names[$k]} if { var(txn.replica) -m str ${names[$k]} }"
done
for k in "${!names[@]}"; do
  echo "    server ${names[$k]} ${addrs[$k]}"
done
