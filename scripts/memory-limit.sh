#!/usr/bin/env bash
# The provider serving a model inside a memory cgroup smaller than the file (issue 32: "a model larger than
# the RAM still runs"): page cache dropped first so the limit is real, one chat request and one with a
# required tool call, then the cgroup's peak, the bytes read from disk and /metrics.
#
#   scripts/memory-limit.sh LIMIT_BYTES MODEL.gguf OUT.txt        (as root; build/bin/picolm-provider)
#
# Uses cgroup v2 (memory.max, memory.swap.max = 0, memory.peak) where the memory controller is on the
# unified hierarchy, else cgroup v1 (memory.limit_in_bytes = memory.memsw.limit_in_bytes, i.e. no swap;
# memory.max_usage_in_bytes); both count the page cache. systemd-run --scope -p MemoryMax= does the same
# where systemd runs. Start it under setsid for the CPU priority (autogroup, see bench-moe.sh).
set -u
LIMIT=${1:?usage: scripts/memory-limit.sh LIMIT_BYTES MODEL OUT}; M=${2:?model}; OUT=${3:?output}
P=${PROVIDER:-build/bin/picolm-provider}; PORT=${PORT:-18733}
: > "$OUT"
echo -15 > /proc/self/autogroup 2> /dev/null
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2> /dev/null; then
  CG=/sys/fs/cgroup/picolm-memory-limit; mkdir -p $CG
  echo "$LIMIT" > $CG/memory.max; echo 0 > $CG/memory.swap.max
  peak() { cat $CG/memory.peak; }
else
  CG=/sys/fs/cgroup/memory/picolm-memory-limit; mkdir -p $CG
  echo "$LIMIT" > $CG/memory.limit_in_bytes; echo "$LIMIT" > $CG/memory.memsw.limit_in_bytes
  echo 0 > $CG/memory.max_usage_in_bytes
  peak() { cat $CG/memory.max_usage_in_bytes; }
fi
{ echo "== $(date -u +%FT%TZ) limit $LIMIT ($CG) model $M"; uptime; } >> "$OUT"
sync; echo 3 > /proc/sys/vm/drop_caches
sh -c "echo \$\$ > $CG/cgroup.procs; exec nice -n -15 $P -m $M --port $PORT -j 2 -c 4096 -np 1 --cache-dir none --timeout 900" \
  > "$OUT.provider.log" 2>&1 &
PID=$!
for _ in $(seq 600); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:"$PORT"/health)" = 200 ] && break; sleep 1; done
echo "ready; cgroup $(peak) bytes at peak" >> "$OUT"
chat='{"messages":[{"role":"user","content":"What is the weather in Paris?"}],"max_tokens":32,"temperature":0}'
tools='{"messages":[{"role":"user","content":"What is the weather in Paris?"}],"max_tokens":64,"temperature":0,
 "tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather of a city",
 "parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris","London","Tokyo"]},
 "unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}}}],"tool_choice":"required"}'
for req in chat tools; do
  echo "== request $req" >> "$OUT"
  if [ $req = chat ]; then body=$chat; else body=$tools; fi
  curl -s -w '\nHTTP %{http_code} in %{time_total} s\n' localhost:"$PORT"/v1/chat/completions -d "$body" >> "$OUT"
  echo "cgroup peak $(peak) bytes; $(grep -E '^read_bytes' /proc/$PID/io); $(grep -E '^VmHWM|^RssAnon' /proc/$PID/status | tr -s ' \t\n' ' ')" >> "$OUT"
done
curl -s localhost:"$PORT"/metrics | grep -E '^picolm_(prefill|decode|jump|completion)' >> "$OUT"
kill $PID; wait $PID 2> /dev/null
sleep 1; rmdir $CG 2> /dev/null || echo "cgroup $CG left behind" >> "$OUT"
echo DONE >> "$OUT"
