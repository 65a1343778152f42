#!/usr/bin/env bash
# PicoClaw's 8-turn agent session (clock changing every turn) against picolm-provider and, if given,
# llama.cpp's llama-server, in interleaved rounds (issue 27; table in docs/BENCHMARKS.md):
#   MODEL=/path/model.gguf [LLAMA_SERVER=/path/llama-server] [ROUNDS=3] [THREADS=2] scripts/bench-agent-session.sh
# Per round: picolm with --volatile-context on (clock changing), off (the behaviour before), off
# with the clock frozen (a turn whose minute did not change: the old best case), llama-server
# (clock changing). Prints
# per turn the median over rounds of the uncached share and of the time to first token, from the
# --json lines of picolm-agentbench kept in OUT (default a new folder under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MODEL:?MODEL=path to a GGUF}"
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
CTX=${CTX:-8192}
BIN=${BUILD_DIR:-build}/bin
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/agent-bench.XXXXXX")}
mkdir -p "$OUT"
bench=(--json --max-tokens 16)
for r in $(seq 1 "$ROUNDS"); do
  for mode in on off off-frozen; do
    extra=()
    [ "$mode" = off-frozen ] && extra=(--frozen-clock)
    vc=on
    [ "$mode" != on ] && vc=off
    echo "round $r: picolm $mode" >&2
    "$BIN/picolm-agentbench" "${bench[@]}" "${extra[@]}" --provider "$BIN/picolm-provider" -m "$MODEL" \
      -- -j "$THREADS" -c "$CTX" --volatile-context "$vc" >"$OUT/picolm-$mode-$r.jsonl" || echo "  failed" >&2
  done
  if [ -n "${LLAMA_SERVER:-}" ]; then
    echo "round $r: llama-server" >&2
    port=$((20000 + RANDOM % 20000))
    "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -c "$CTX" --jinja --host 127.0.0.1 --port "$port" -np 1 \
      >"$OUT/llama-server-$r.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.5; done
    "$BIN/picolm-agentbench" "${bench[@]}" --url "http://127.0.0.1:$port" >"$OUT/llama-$r.jsonl" || echo "  failed" >&2
    kill "$pid"; wait "$pid" 2>/dev/null || true
  fi
done
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    name = os.path.basename(path)[:-len(".jsonl")].rsplit("-", 1)[0]
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "turn" not in d:
            continue
        rows.setdefault(name, {}).setdefault(d["turn"], []).append(d)
names = [n for n in ("picolm-on", "picolm-off", "picolm-off-frozen", "llama") if n in rows]
print("turn | " + " | ".join("%s uncached, TTFT s" % n for n in names))
turns = sorted({t for n in names for t in rows[n]})
for t in turns:
    cells = []
    for n in names:
        ds = rows[n].get(t, [])
        if not ds:
            cells.append("-")
            continue
        un = statistics.median(d["uncached_share"] for d in ds if d.get("uncached_share") is not None)
        ttft = statistics.median(d["ttft_ms"] for d in ds) / 1000.0
        cells.append("%.3f, %.2f" % (un, ttft))
    print("%d | %s" % (t, " | ".join(cells)))
print("(medians of %d rounds; json lines in %s)" % (max(len(v) for n in names for v in rows[n].values()), out))
PY
