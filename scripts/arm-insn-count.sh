#!/usr/bin/env bash
# ARM instruction-count proxy (issue 17): picolm and llama.cpp, both built for aarch64, run under the
# same qemu-user with a small TCG plugin (tools/qemu_insn/insn_count.c) that counts retired guest
# instructions. No ARM hardware is needed; the result is a markdown table of instructions per prefill
# token and per decode token, picolm against llama.cpp.
#
#   scripts/arm-insn-count.sh                  # everything below with the defaults
#   PICOLM_TABLES="neon neon_dotprod neon_i8mm" scripts/arm-insn-count.sh
#
# How the per-token figures are derived. A process's count includes loading (and repacking) the
# model, warm-up runs and exit, so every figure is a difference of two runs that differ only in the
# number of tokens, each run in its own process, 1 repetition:
#   prefill: (count at -p PP_HI) - (count at -p PP_LO), divided by PP_HI - PP_LO
#            = the cost of one more prompt token in a batch of PP_HI, at positions PP_LO..PP_HI-1;
#   decode:  (count at -n TG_HI) - (count at -n TG_LO), divided by TG_HI - TG_LO
#            = one decode step at positions TG_LO..TG_HI-1.
#   picolm-bench: -t 1 -r 1 and a fixed -c CTX; its warm-up (pp of min(p, 32) tokens, tg of 4) is
#            the same in both runs of a pair as long as PP_LO >= 32, so it cancels.
#   llama-bench: -t 1 -r 1 --no-warmup (its warm-up would be a whole pp of p tokens, which does not
#            cancel); llama.cpp sizes its context as p + n itself.
# Everything runs with ONE thread: with more, threads waiting at a barrier spin (llama.cpp's
# threadpool polls, picolm's pool spins briefly) and the spin loops would be counted as work. The
# plugin reports how many guest threads (vCPUs) it saw; a run with more than one is rejected.
#
# Inputs (environment; defaults in brackets):
#   ARMPROXY_DIR     work folder for models, logs and the plugin [/tmp/armproxy]
#   ARMPROXY_MODELS  space-separated GGUF files [$ARMPROXY_DIR/qwen05-q4km.gguf $ARMPROXY_DIR/qwen05-q8.gguf];
#                    the three default names qwen05-q4km, qwen05-q8, tinyllama-q4km are made with
#                    PICOLM_SYNTH when missing
#   PICOLM_SYNTH     an x86 picolm-synth [build/bin/picolm-synth]
#   PICOLM_BENCH     aarch64 picolm-bench [build-aarch64/bin/picolm-bench; built when missing with
#                    scripts/test-arm.sh --build-only aarch64 and the picolm-bench target]
#   PICOLM_TABLES    picolm kernel tables (PICOLM_KERNELS values) [neon neon_dotprod]; a table the
#                    binary does not have is reported as missing, not measured under another name
#   LLAMA_CPP_DIR    llama.cpp source [../peer/llama.cpp]
#   LLAMA_BENCHES    space-separated NAME=PATH aarch64 llama-bench binaries
#                    [dotprod=$LLAMA_CPP_DIR/build-aarch64/bin/llama-bench
#                     i8mm=$LLAMA_CPP_DIR/build-aarch64-i8mm/bin/llama-bench]; the default ones are
#                    cross-built when missing (see build_llama below). ggml picks its ARM kernels at
#                    compile time, so each instruction-set level is its own build.
#                    Pairing: picolm's neon_i8mm row is set against the build named i8mm if there is
#                    one, every other table against the first build.
#   ARMPROXY_CPU     qemu -cpu model [max: has dotprod and i8mm; both engines' dotprod/i8mm code
#                    needs it]
#   PP_LO PP_HI TG_LO TG_HI  token counts of the pairs [32 64 8 16]
#   ARMPROXY_OUT     markdown output file [$ARMPROXY_DIR/table.md] (also printed)
#   ARMPROXY_REUSE   1: reuse the counts of runs already in $ARMPROXY_DIR/logs (same tag = same
#                    engine, model, table and token count) instead of running them again, e.g. to
#                    finish an interrupted run; only valid while the binaries are unchanged [0]
#   LLAMA_BENCHES="" measures picolm alone (the llama.cpp columns stay empty)
#
# Sanity checks (the script fails on them): the plugin must count a known loop exactly (1000
# iterations of subs/b.ne = 2004 instructions with the set-up and exit), no run may count 0
# instructions or use more than one thread, and each per-token difference must be positive.
#
# Needs: qemu-user (with plugin support: Debian's 7.2 has it), gcc (host, for the plugin),
# g++-aarch64-linux-gnu, cmake, ninja. Time: about a minute of qemu per run on a 0.5B model; 4 runs
# per model and table plus 4 per model and llama.cpp build.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)

WORK=${ARMPROXY_DIR:-/tmp/armproxy}
mkdir -p "$WORK/logs"
MODELS=${ARMPROXY_MODELS:-"$WORK/qwen05-q4km.gguf $WORK/qwen05-q8.gguf"}
SYNTH=${PICOLM_SYNTH:-$SRC/build/bin/picolm-synth}
PBENCH=${PICOLM_BENCH:-$SRC/build-aarch64/bin/picolm-bench}
TABLES=${PICOLM_TABLES:-"neon neon_dotprod"}
LLAMA_DIR=${LLAMA_CPP_DIR:-$SRC/../peer/llama.cpp}
LLAMA_BENCHES=${LLAMA_BENCHES-"dotprod=$LLAMA_DIR/build-aarch64/bin/llama-bench i8mm=$LLAMA_DIR/build-aarch64-i8mm/bin/llama-bench"}
CPU=${ARMPROXY_CPU:-max}
PP_LO=${PP_LO:-32} PP_HI=${PP_HI:-64} TG_LO=${TG_LO:-8} TG_HI=${TG_HI:-16}
OUT=${ARMPROXY_OUT:-$WORK/table.md}
SYSROOT=/usr/aarch64-linux-gnu
PLUGIN=$WORK/insn_count.so

die() { echo "arm-insn-count: $*" >&2; exit 1; }
[ "$PP_LO" -ge 32 ] || die "PP_LO must be >= 32 (picolm-bench's pp warm-up is min(p, 32) tokens)"
{ [ "$PP_HI" -gt "$PP_LO" ] && [ "$TG_HI" -gt "$TG_LO" ]; } || die "need PP_HI > PP_LO and TG_HI > TG_LO"
CTX=$((PP_HI > TG_HI ? PP_HI + 16 : TG_HI + 16))

# ---- the plugin, checked on a loop of known length -------------------------------------------------
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -o "$PLUGIN" tools/qemu_insn/insn_count.c
cat > "$WORK/loop.S" <<'EOF'
    .global _start
_start:
    mov x0, #1000
1:  subs x0, x0, #1
    b.ne 1b
    mov x8, #93      // exit(0)
    mov x0, #0
    svc #0
EOF
aarch64-linux-gnu-gcc -nostdlib -static -o "$WORK/loop" "$WORK/loop.S"
rm -f "$WORK/loop.count"
qemu-aarch64 -cpu "$CPU" -plugin "$PLUGIN,out=$WORK/loop.count" "$WORK/loop"
[ "$(cat "$WORK/loop.count")" = "insns 2004 vcpus 1" ] \
  || die "plugin self-check: expected 'insns 2004 vcpus 1', got '$(cat "$WORK/loop.count")'"
echo "plugin self-check: 2004 instructions counted for the 2004-instruction loop"

# ---- binaries --------------------------------------------------------------------------------------
if [ ! -x "$PBENCH" ]; then
  [ "$PBENCH" = "$SRC/build-aarch64/bin/picolm-bench" ] || die "PICOLM_BENCH=$PBENCH does not exist"
  scripts/test-arm.sh --build-only aarch64
  cmake --build build-aarch64 --target picolm-bench
fi

# build_llama DIR ARCH: llama-bench for aarch64, static, no OpenMP (1 thread anyway; the ggml
# threadpool needs no libgomp for the target), ARM kernels for ARCH chosen at compile time.
build_llama() {
  local dir=$1 arch=$2
  [ -f "$LLAMA_DIR/CMakeLists.txt" ] || die "no llama.cpp source in $LLAMA_DIR (set LLAMA_CPP_DIR)"
  cmake -S "$LLAMA_DIR" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
    -DCMAKE_FIND_ROOT_PATH=$SYSROOT -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER \
    -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
    -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$arch" -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$dir.configure.log" \
    || { cat "$dir.configure.log"; die "llama.cpp configure failed"; }
  nice cmake --build "$dir" --target llama-bench -j2
}
llama_names=()
declare -A llama_path
for nb in $LLAMA_BENCHES; do
  name=${nb%%=*} path=${nb#*=}
  if [ ! -x "$path" ]; then
    case "$path" in
      "$LLAMA_DIR/build-aarch64/bin/llama-bench") build_llama "$LLAMA_DIR/build-aarch64" armv8.2-a+dotprod ;;
      "$LLAMA_DIR/build-aarch64-i8mm/bin/llama-bench") build_llama "$LLAMA_DIR/build-aarch64-i8mm" armv8.2-a+dotprod+i8mm ;;
      *) die "llama-bench $name=$path does not exist" ;;
    esac
  fi
  llama_names+=("$name")
  llama_path[$name]=$path
done

# ---- models ----------------------------------------------------------------------------------------
for m in $MODELS; do
  [ -f "$m" ] && continue
  case "$(basename "$m")" in
    qwen05-q4km.gguf) args=(--shape qwen2.5-0.5b --type q4_k_m) ;;
    qwen05-q8.gguf) args=(--shape qwen2.5-0.5b --type q8_0) ;;
    tinyllama-q4km.gguf) args=(--shape tinyllama-1.1b --type q4_k_m) ;;
    *) die "model $m does not exist (and is not one of the names this script can synthesize)" ;;
  esac
  [ -x "$SYNTH" ] || die "model $m is missing and there is no picolm-synth at $SYNTH (set PICOLM_SYNTH)"
  "$SYNTH" "${args[@]}" -o "$m"
done

# ---- counting --------------------------------------------------------------------------------------
# count TAG CMD...: runs CMD (an aarch64 program) under qemu with the plugin, one thread; prints the
# instruction count. Output and errors of the program go to $WORK/logs/TAG.log.
count() {
  local tag=$1
  shift
  local cf=$WORK/logs/$tag.count log=$WORK/logs/$tag.log
  local t0=$SECONDS
  if [ "${ARMPROXY_REUSE:-0}" = 1 ] && [ -s "$cf" ] && [ -s "$log" ]; then
    echo "  $tag: reusing $cf" >&2
  else
    rm -f "$cf"
    qemu-aarch64 -L "$SYSROOT" -cpu "$CPU" -plugin "$PLUGIN,out=$cf" "$@" > "$log" 2>&1 \
      || die "$tag failed (exit $?), see $log"
  fi
  local line insns vcpus
  line=$(cat "$cf" 2>/dev/null) || die "$tag: the plugin wrote no count"
  read -r _ insns _ vcpus <<< "$line"
  [ "$insns" -gt 0 ] || die "$tag: the plugin counted 0 instructions"
  [ "$vcpus" -eq 1 ] || die "$tag: ran $vcpus guest threads; the count would include spinning"
  echo "  $tag: $insns instructions ($((SECONDS - t0)) s)" >&2
  echo "$insns"
}

# per_token HI_COUNT LO_COUNT TOKENS: the difference per token (integer), which must be positive.
per_token() {
  local d=$(( ($1 - $2) / $3 ))
  [ "$d" -gt 0 ] || die "non-positive per-token difference ($1 - $2) / $3"
  echo "$d"
}

# json_field FILE KEY: a scalar from picolm-bench --json's one-line object.
json_field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }

fmt_m() { awk -v x="$1" 'BEGIN { printf "%.1f M", x / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

declare -A ll_pp ll_tg
rows=()
for m in $MODELS; do
  mb=$(basename "$m" .gguf)
  echo "== $mb"
  for name in "${llama_names[@]+"${llama_names[@]}"}"; do
    lb=${llama_path[$name]}
    lo=$(count "llama-$name-$mb-pp$PP_LO" "$lb" -m "$m" -t 1 -r 1 --no-warmup -p "$PP_LO" -n 0 -o md)
    hi=$(count "llama-$name-$mb-pp$PP_HI" "$lb" -m "$m" -t 1 -r 1 --no-warmup -p "$PP_HI" -n 0 -o md)
    ll_pp[$mb/$name]=$(per_token "$hi" "$lo" $((PP_HI - PP_LO)))
    lo=$(count "llama-$name-$mb-tg$TG_LO" "$lb" -m "$m" -t 1 -r 1 --no-warmup -p 0 -n "$TG_LO" -o md)
    hi=$(count "llama-$name-$mb-tg$TG_HI" "$lb" -m "$m" -t 1 -r 1 --no-warmup -p 0 -n "$TG_HI" -o md)
    ll_tg[$mb/$name]=$(per_token "$hi" "$lo" $((TG_HI - TG_LO)))
  done
  for tbl in $TABLES; do
    # qemu-user hands its own environment to the guest, so the table is chosen on the host side.
    export PICOLM_KERNELS=$tbl
    pb=("$PBENCH" -m "$m" -t 1 -r 1 -c "$CTX" --json)
    lo=$(count "picolm-$tbl-$mb-pp$PP_LO" "${pb[@]}" -p "$PP_LO" -n 0)
    # A table the binary lacks falls back to the best one: say so instead of measuring that.
    got=$(json_field "$WORK/logs/picolm-$tbl-$mb-pp$PP_LO.log" kernels)
    if [ "$got" != "$tbl" ]; then
      echo "  picolm has no table $tbl (it chose $got): skipped" >&2
      rows+=("| $mb | $tbl | (not in this build) | | | | | | | |")
      continue
    fi
    hi=$(count "picolm-$tbl-$mb-pp$PP_HI" "${pb[@]}" -p "$PP_HI" -n 0)
    p_pp=$(per_token "$hi" "$lo" $((PP_HI - PP_LO)))
    lo=$(count "picolm-$tbl-$mb-tg$TG_LO" "${pb[@]}" -p 0 -n "$TG_LO")
    hi=$(count "picolm-$tbl-$mb-tg$TG_HI" "${pb[@]}" -p 0 -n "$TG_HI")
    p_tg=$(per_token "$hi" "$lo" $((TG_HI - TG_LO)))
    bytes=$(json_field "$WORK/logs/picolm-$tbl-$mb-tg$TG_HI.log" weight_bytes_per_token)
    if [ ${#llama_names[@]} -eq 0 ]; then
      rows+=("| $mb | $tbl | - | $(fmt_m "$p_pp") | | | $(fmt_m "$p_tg") | | | $(ratio "$p_tg" "$bytes") / |")
      continue
    fi
    ref=${llama_names[0]}
    [ "$tbl" = neon_i8mm ] && [ -n "${llama_path[i8mm]:-}" ] && ref=i8mm
    lp=${ll_pp[$mb/$ref]} lt=${ll_tg[$mb/$ref]}
    rows+=("| $mb | $tbl | $ref | $(fmt_m "$p_pp") | $(fmt_m "$lp") | $(ratio "$p_pp" "$lp") | $(fmt_m "$p_tg") | $(fmt_m "$lt") | $(ratio "$p_tg" "$lt") | $(ratio "$p_tg" "$bytes") / $(ratio "$lt" "$bytes") |")
  done
done

{
  echo "Retired aarch64 instructions per token (qemu-aarch64 $(qemu-aarch64 --version | head -1 | awk '{print $3}'), -cpu $CPU, 1 thread;"
  echo "prefill = one more prompt token at positions $PP_LO..$((PP_HI - 1)) of a $PP_HI-token batch, decode = one step at positions $TG_LO..$((TG_HI - 1));"
  echo "ratio = picolm / llama.cpp, below 1 = picolm executes fewer instructions; insn/byte = decode instructions per byte of weights read per token)."
  echo
  echo "| model | picolm table | llama.cpp build | picolm insn/prefill tok | llama.cpp insn/prefill tok | ratio | picolm insn/decode tok | llama.cpp insn/decode tok | ratio | decode insn/byte picolm / llama.cpp |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "llama.cpp builds, all of them (instructions per token, prefill / decode):"
  echo
  for m in $MODELS; do
    mb=$(basename "$m" .gguf)
    for name in "${llama_names[@]+"${llama_names[@]}"}"; do
      echo "- $mb, llama.cpp $name: $(fmt_m "${ll_pp[$mb/$name]}") / $(fmt_m "${ll_tg[$mb/$name]}")"
    done
  done
} > "$OUT"
echo
cat "$OUT"
