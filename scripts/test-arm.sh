#!/usr/bin/env bash
# Cross-builds for ARM with Debian's cross compilers and runs the kernel and golden tests under
# qemu-user, so the NEON code is executed, not just compiled.
#   scripts/test-arm.sh                 # aarch64 (NEON, with and without dotprod) and armhf (scalar)
#   scripts/test-arm.sh aarch64         # one target only (aarch64 | armhf)
#   scripts/test-arm.sh --build-only aarch64   # just the binaries (build-aarch64/bin/picolm for a Pi)
# Env: ARM_BUILD_PREFIX (default build-): build folders ${ARM_BUILD_PREFIX}aarch64 / ...armhf, relative
#      to the repository.
#      PICOLM_CMAKE_ARGS: extra cmake arguments (e.g. -DPICOLM_WERROR=ON).
#
# The tests parse JSON with simdjson, which Debian cannot install for arm64 next to the amd64 one
# (libsimdjson-dev is not Multi-Arch: same). So the ARM .debs are downloaded with apt's ordinary
# client, using a private state folder (the machine's apt configuration and dpkg database are not
# touched), and unpacked into the build folder, where the toolchain file finds them.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
SHARED=${PICOLM_SHARED_DIR:-$SRC/../shared}
PREFIX=${ARM_BUILD_PREFIX:-build-}

build_only=0
targets=()
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    aarch64 | armhf) targets+=("$a") ;;
    *) echo "usage: $0 [--build-only] [aarch64|armhf]..." >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=(aarch64 armhf)

# ---- Debian packages (same pattern as scripts/deps.sh) -----------------------------------------
pkgs=(cmake ninja-build catch2 qemu-user)
for t in "${targets[@]}"; do
  case "$t" in
    aarch64) pkgs+=(g++-aarch64-linux-gnu) ;;
    armhf) pkgs+=(g++-arm-linux-gnueabihf) ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- ARM simdjson, unpacked into <build>/cross-root ----------------------------------------------
# fetch_debs DEBARCH DEST: downloads libsimdjson(-dev) for DEBARCH and unpacks them into DEST.
fetch_debs() {
  local arch=$1 dest=$2
  [ -f "$dest/.done" ] && return 0
  local state
  state=$(mktemp -d)
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/debs"
  : > "$state/status"
  local opts=(-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "Dir::State::status=$state/status"
              -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Debug::NoLocking=1"
              -o "APT::Sandbox::User=root")
  echo "fetching simdjson for $arch (private apt state in $state)"
  # An index that fails to download (e.g. a security mirror mid-sync) does not matter as long as
  # the one carrying simdjson came through, so judge by the download; try twice.
  local try
  for try in 1 2; do
    apt-get "${opts[@]}" update -qq || echo "apt-get update reported errors (try $try)"
    (cd "$state/debs" && apt-get "${opts[@]}" download -qq "libsimdjson-dev:$arch" "libsimdjson14:$arch") && break
    [ "$try" -eq 2 ] && { echo "cannot download simdjson for $arch" >&2; return 1; }
    sleep 5
  done
  rm -rf "$dest"
  mkdir -p "$dest"
  for d in "$state"/debs/*.deb; do dpkg-deb -x "$d" "$dest"; done
  rm -rf "$state"
  touch "$dest/.done"
}

# Catch2 is header-only; give the cross compiler just that folder, not the host's whole
# /usr/include (its glibc headers are x86 ones).
catch_include() {
  local dir=$1/catch2-include
  mkdir -p "$dir"
  ln -sfn /usr/include/catch2 "$dir/catch2"
  echo "$dir"
}

# ---- build ----------------------------------------------------------------------------------------
TEST_TARGETS=(test_kernels test_recurrent_ops test_golden test_gguf test_batch picolm)

build() {
  local t=$1 toolchain debarch
  case "$t" in
    aarch64) toolchain=cmake/aarch64-linux-gnu.cmake; debarch=arm64 ;;
    armhf) toolchain=cmake/arm-linux-gnueabihf.cmake; debarch=armhf ;;
  esac
  local dir=$PREFIX$t
  mkdir -p "$dir"
  fetch_debs "$debarch" "$SRC/$dir/cross-root"
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$SRC/$toolchain" \
    -DPICOLM_CROSS_EXTRA_ROOT="$SRC/$dir/cross-root" -DCATCH2_INCLUDE_DIR="$(catch_include "$SRC/$dir")" \
    -DPICOLM_BUILD_SERVER=OFF -DPICOLM_DOWNLOAD=OFF -DPICOLM_SHARED_DIR="$SHARED" ${PICOLM_CMAKE_ARGS:-} > "$dir/configure.log" \
    || { cat "$dir/configure.log"; return 1; }
  cmake --build "$dir" --target "${TEST_TARGETS[@]}" -j"$(nproc)"
}

# ---- run ------------------------------------------------------------------------------------------
passed=0
failed=0
failures=()
# run_test LABEL QEMU_CPU QEMU BIN ARGS...: one test binary under qemu-user, counted.
run_test() {
  local label=$1 cpu=$2 qemu=$3 bin=$4
  shift 4
  local start=$SECONDS rc=0
  echo "== $label (qemu -cpu $cpu)"
  QEMU_CPU=$cpu "$qemu" "$bin" "$@" || rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "-- ok: $label ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failures+=("$label")
    echo "-- FAILED: $label (exit $rc, $((SECONDS - start)) s)"
  fi
}

# Golden tests run the models with the best table the emulated CPU offers (neon_i8mm on -cpu max:
# SMMLA prefill tiles, SDOT decode; neon on cortex-a72, scalar on armhf). All zoo types (the NEON table covers F16, BF16, Q4_0..Q8_0,
# Q4_K..Q6_K) take ~35 s of CPU under qemu; the two real-vocabulary models would take ~4 minutes more,
# so they stay with the native run. Catch2 v2: a comma separates alternative test names.
GOLDEN_ARM="golden: stories260K*,golden: zoo-*"
# The hybrids' recurrent layers (NEON conv and delta-rule kernels on aarch64, scalar on armhf).
GOLDEN_HYBRID="golden: qwen35-tiny-q4km,golden: lfm2-tiny-q4km"

run_aarch64() {
  local b=$PREFIX"aarch64"/bin q=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
  # max: every extension qemu has (dotprod, i8mm: tables scalar, neon, neon_dotprod, neon_i8mm);
  # cortex-a72 (Raspberry Pi 4): plain ARMv8.0 NEON.
  run_test "aarch64 test_kernels" max "${q[@]}" "$b/test_kernels"
  run_test "aarch64 test_kernels" cortex-a72 "${q[@]}" "$b/test_kernels"
  run_test "aarch64 test_recurrent_ops" cortex-a72 "${q[@]}" "$b/test_recurrent_ops"
  run_test "aarch64 test_golden hybrids" cortex-a72 "${q[@]}" "$b/test_golden" "$GOLDEN_HYBRID"
  run_test "aarch64 test_golden hybrids" max "${q[@]}" "$b/test_golden" "$GOLDEN_HYBRID"
  run_test "aarch64 test_gguf" max "${q[@]}" "$b/test_gguf"
  run_test "aarch64 test_golden" max "${q[@]}" "$b/test_golden" "$GOLDEN_ARM"
  run_test "aarch64 test_golden" cortex-a72 "${q[@]}" "$b/test_golden" "golden: stories260K*,golden: zoo-Q4_0,golden: zoo-Q4_K,golden: zoo-Q6_K"
  # eval_batch against each sequence alone (NEON packed tiles, SDOT and SMMLA: bit-identical batches).
  run_test "aarch64 test_batch" max "${q[@]}" "$b/test_batch" "$BATCH_ARM"
}

# test_batch's quick case (two tiny models, four sequences) and the all_logits split case.
BATCH_ARM="[quick],eval_batch: all_logits*"

run_armhf() {
  local b=$PREFIX"armhf"/bin q=(qemu-arm -L /usr/arm-linux-gnueabihf)
  # cortex-a7: a Raspberry Pi 2 core, the oldest that Debian armhf (ARMv7) runs on.
  run_test "armhf test_kernels" cortex-a7 "${q[@]}" "$b/test_kernels"
  run_test "armhf test_recurrent_ops" cortex-a7 "${q[@]}" "$b/test_recurrent_ops"
  run_test "armhf test_gguf" cortex-a7 "${q[@]}" "$b/test_gguf"
  run_test "armhf test_golden" cortex-a7 "${q[@]}" "$b/test_golden" "golden: stories260K*,golden: zoo-Q4_0,golden: zoo-Q4_K,golden: zoo-Q6_K"
  run_test "armhf test_batch" cortex-a7 "${q[@]}" "$b/test_batch" "$BATCH_ARM"
}

for t in "${targets[@]}"; do
  start=$SECONDS
  build "$t"
  echo "-- $t build: $((SECONDS - start)) s"
done
[ $build_only -eq 1 ] && exit 0
for t in "${targets[@]}"; do "run_$t"; done

[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "arm: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
