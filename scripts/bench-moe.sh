#!/usr/bin/env bash
# picolm-bench, llama.cpp's and ik_llama.cpp's llama-bench on the same GGUF files, interleaved, each under
# /usr/bin/time (peak RSS), for the mixture-of-experts table of docs/BENCHMARKS.md (issue 32).
#
#   MODELS="a.gguf b.gguf" LLAMA_BENCH=... IK_BENCH=... scripts/bench-moe.sh OUT.txt
#
# Env: BUILD (picolm build folder, default build), LLAMA_BENCH / IK_BENCH (llama-bench binaries; unset
# or missing = that engine is skipped), ROUNDS (default 3), THREADS (default 2), IK_ARGS (';'-separated
# ik variants, default "-fa 1 -rtr 0"), IK_SKIP (a grep -E pattern of files ik cannot load, e.g. lfm2).
# Run as root for the priority: every run at nice -15, and the script's own session (start it under
# setsid) gets autogroup nice -15, because with sched_autogroup_enabled=1 the kernel shares the CPUs
# equally between sessions whatever each process's nice is.
set -u
out=${1:?usage: scripts/bench-moe.sh OUT.txt}
BUILD=${BUILD:-build}; ROUNDS=${ROUNDS:-3}; THREADS=${THREADS:-2}
IK_ARGS=${IK_ARGS:-"-fa 1 -rtr 0"}; IK_SKIP=${IK_SKIP:-'^$'}
: > "$out"
echo -15 > /proc/self/autogroup 2> /dev/null && echo "autogroup: $(cat /proc/self/autogroup)" >> "$out"
run() {
  echo "== round $1 $(basename "$2" .gguf) $3 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out"
  shift 3
  nice -n -15 /usr/bin/time -f "time: wall %e s, CPU %P, max RSS %M kB, major faults %F" "$@" >> "$out" 2>&1
}
for r in $(seq "$ROUNDS"); do
  for m in ${MODELS:?set MODELS to the GGUF files}; do
    run "$r" "$m" picolm "$BUILD/bin/picolm-bench" -m "$m" -t "$THREADS" -p 512 -n 64 -r 3 -c 4096
    [ -x "${LLAMA_BENCH:-}" ] && run "$r" "$m" llama.cpp "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p 512 -n 64 -r 3
    if [ -x "${IK_BENCH:-}" ] && ! basename "$m" | grep -qE "$IK_SKIP"; then
      IFS=';' read -ra variants <<< "$IK_ARGS"
      for v in "${variants[@]}"; do
        # shellcheck disable=SC2086  # a variant is several arguments
        run "$r" "$m" "ik_llama.cpp[$v]" "$IK_BENCH" -m "$m" -t "$THREADS" -p 512 -n 64 -r 3 $v
      done
    fi
  done
done
echo DONE >> "$out"
