#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: GGUF reader + model hyper-parameters, JSON-Schema and
# tool-list compiler + matcher, OpenAI request parser) with clang, ASan and UBSan in build-fuzz/,
# and runs each for SECONDS, one at a time and niced (they share the machine).
#   scripts/fuzz.sh                 # 20 s each
#   scripts/fuzz.sh 600 fuzz_gguf   # 10 minutes of one target
# New inputs go to build-fuzz/corpus/<target>/ (the seeds in tests/fuzz/corpus/ are not modified);
# a crash leaves crash-* / leak-* / oom-* files in build-fuzz/ and fails the script.
# Env: BUILD_DIR (default build-fuzz), PICOLM_FUZZ_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_gguf fuzz_schema fuzz_request)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
if ! command -v clang++ >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  ./scripts/deps.sh --fuzz
fi
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPICOLM_FUZZ=ON \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $san" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" ${PICOLM_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "${PICOLM_FUZZ_JOBS:-2}" --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  seeds=$(pwd)/tests/fuzz/corpus/${t#fuzz_}
  mkdir -p "$BUILD_DIR/corpus/$t"
  echo "== $t: $secs s (seeds $seeds)"
  # -rss_limit_mb: an input that makes the parser allocate gigabytes is a finding too.
  if ! (cd "$BUILD_DIR" && nice -n 10 "./bin/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 \
          -print_final_stats=1 "corpus/$t" "$seeds" 2>"$t.log"); then
    status=1
    tail -n 40 "$BUILD_DIR/$t.log"
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs" "$BUILD_DIR/$t.log" || true
done
exit $status
