#!/usr/bin/env bash
# picolm-bench against ik_llama.cpp's llama-bench on the same synthetic GGUF files, interleaved, for
# the speed table of docs/BENCHMARKS.md (issue 17: pp512 and tg64, 2 threads).
#
#   scripts/bench-vs-ik.sh                       # 5 rounds, 2 threads, the three default models
#   ROUNDS=9 THREADS=2 scripts/bench-vs-ik.sh
#
# Env:
#   IK_BENCH   ik_llama.cpp's llama-bench (default ../peer/ik_llama.cpp/build/bin/llama-bench)
#   BUILD      picolm build folder with bin/picolm-bench and bin/picolm-synth (default build)
#   MODELS     folder for the synthetic models (default /tmp/bench-vs-ik; made if missing)
#   ROUNDS     interleaved rounds (default 5); REPS: repetitions inside each run (default 3)
#   THREADS    threads for both engines (default 2)
#   IK_VARIANTS  ik configurations, ';'-separated extra arguments (default: "-rtr 0 -fa 1;-rtr 1 -fa 1")
#   SHAPES     "shape:type" list (default tinyllama-1.1b:q4_k_m qwen2.5-0.5b:q4_k_m tinyllama-1.1b:q8_0)
#   OUT        folder for the raw results (default $MODELS/results-<UTC time>); ROUNDS=0 OUT=<folder>
#              only tabulates an earlier run's results
#
# Each round runs, for every model, picolm-bench once and every ik variant once, back to back, so
# both engines meet the same minutes of the shared host (its memory bandwidth changes from minute to
# minute). The table takes, per engine and figure, the median over the rounds of each run's median;
# for ik the best of its variants (named in the table). The ratio is ours / ik's best; the last
# column is decode's read rate (bytes of weights per token x tok/s) over the bandwidth probe that
# ran with it (median of the rounds' ratios).
set -euo pipefail
cd "$(dirname "$0")/.."
IK_BENCH=${IK_BENCH:-../peer/ik_llama.cpp/build/bin/llama-bench}
BUILD=${BUILD:-build}
MODELS=${MODELS:-/tmp/bench-vs-ik}
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
IK_VARIANTS=${IK_VARIANTS:-"-rtr 0 -fa 1;-rtr 1 -fa 1"}
SHAPES=${SHAPES:-"tinyllama-1.1b:q4_k_m qwen2.5-0.5b:q4_k_m tinyllama-1.1b:q8_0"}
OUT=${OUT:-$MODELS/results-$(date -u +%Y%m%dT%H%M%S)}

for b in "$BUILD/bin/picolm-bench" "$BUILD/bin/picolm-synth" "$IK_BENCH"; do
  [ -x "$b" ] || { echo "bench-vs-ik: $b is missing (build it first)" >&2; exit 2; }
done
mkdir -p "$MODELS" "$OUT"

files=()
for st in $SHAPES; do
  shape=${st%%:*} type=${st##*:}
  f="$MODELS/$shape-$type.gguf"
  [ -s "$f" ] || "$BUILD/bin/picolm-synth" --shape "$shape" --type "$type" -o "$f" >/dev/null
  files+=("$f")
done

IFS=';' read -r -a variants <<<"$IK_VARIANTS"
echo "bench-vs-ik: $ROUNDS rounds, $THREADS threads, results in $OUT" >&2
for ((round = 1; round <= ROUNDS; ++round)); do
  for f in "${files[@]}"; do
    name=$(basename "$f" .gguf)
    echo "[$(date -u +%T)] round $round $name: picolm" >&2
    "$BUILD/bin/picolm-bench" -m "$f" -t "$THREADS" -p 512 -n 64 -r "$REPS" --bandwidth --json \
      >"$OUT/$name.picolm.$round.json" || echo "bench-vs-ik: picolm-bench failed on $name (round $round)" >&2
    for ((v = 0; v < ${#variants[@]}; ++v)); do
      echo "[$(date -u +%T)] round $round $name: ik ${variants[$v]}" >&2
      # shellcheck disable=SC2086  # the variant is a list of arguments
      "$IK_BENCH" -m "$f" -t "$THREADS" -p 512 -n 64 -r "$REPS" ${variants[$v]} -o json \
        >"$OUT/$name.ik$v.$round.json" 2>"$OUT/$name.ik$v.$round.log" ||
        echo "bench-vs-ik: llama-bench failed on $name (round $round, ${variants[$v]}; see its .log)" >&2
    done
  done
done

python3 - "$OUT" "$IK_VARIANTS" "$THREADS" "${files[@]}" <<'EOF'
import json, os, statistics, sys
out, variants, threads, files = sys.argv[1], sys.argv[2].split(';'), sys.argv[3], sys.argv[4:]
def med(v): return statistics.median(v) if v else float('nan')
rows = []
for f in files:
    name = os.path.basename(f)[:-5]
    ours = {'pp': [], 'tg': [], 'bw': []}
    ik = [{'pp': [], 'tg': []} for _ in variants]
    for fn in sorted(os.listdir(out)):
        p = os.path.join(out, fn)
        if not fn.startswith(name + '.') or not fn.endswith('.json') or os.path.getsize(p) == 0:
            continue
        kind = fn[len(name) + 1:].split('.')[0]
        try:
            d = json.load(open(p))
        except ValueError:  # a run that failed part-way (reported above); left out
            continue
        if kind == 'picolm':
            ours['pp'].append(d['pp_tok_s']); ours['tg'].append(d['tg_tok_s'])
            if d.get('bandwidth_gb_s'):
                ours['bw'].append(d['tg_tok_s'] * d['weight_bytes_per_token'] / 1e9 / d['bandwidth_gb_s'])
        elif kind.startswith('ik'):
            v = int(kind[2:])
            for t in d:
                key = 'pp' if t['n_prompt'] > 0 and t['n_gen'] == 0 else 'tg' if t['n_gen'] > 0 and t['n_prompt'] == 0 else None
                if key: ik[v][key].append(t['avg_ts'])
    def best(key):
        cands = [(med(ik[v][key]), variants[v]) for v in range(len(variants)) if ik[v][key]]
        return max(cands) if cands else (float('nan'), '-')
    pp_ik, pp_v = best('pp'); tg_ik, tg_v = best('tg')
    pp, tg = med(ours['pp']), med(ours['tg'])
    rows.append((name, len(ours['pp']), pp, pp_ik, pp_v, pp / pp_ik, tg, tg_ik, tg_v, tg / tg_ik, med(ours['bw'])))
    for v in range(len(variants)):
        print(f"{name}: ik '{variants[v]}' pp {med(ik[v]['pp']):.1f} {ik[v]['pp']} tg {med(ik[v]['tg']):.1f} {ik[v]['tg']}", file=sys.stderr)
    print(f"{name}: picolm pp {ours['pp']} tg {ours['tg']}", file=sys.stderr)
print(f"| model ({threads} threads) | rounds | pp512 picolm | pp512 ik (best of) | ratio | tg64 picolm | tg64 ik (best of) | ratio | decode / probed bandwidth |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} (`{r[4]}`) | {r[5]:.2f}x | {r[6]:.1f} | {r[7]:.1f} (`{r[8]}`) | {r[9]:.2f}x | {r[10]:.0%} |")
EOF
