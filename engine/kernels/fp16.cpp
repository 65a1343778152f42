// IEEE binary16 and bfloat16 conversions (scalar reference; SIMD files use F16C/AVX-512 twins).
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace picolm {

float fp16_to_fp32(uint16_t h) { return kq::half_to_float(h); }

// Round-to-nearest-even, overflow to infinity, gradual underflow; matches F16C's VCVTPS2PH with
// rounding mode 0 for every input (checked exhaustively over halves and sampled over floats in tests).
uint16_t fp32_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    // NaN: keep the top payload bits and force quiet, as the hardware does.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs & 0x7fffffu) >> 13));
  }
  if (abs >= 0x38800000u) {  // >= 2^-14: a normal half (or overflow)
    uint32_t h = (abs - 0x38000000u) >> 13;  // rebias exponent 127 -> 15, keep 10 mantissa bits
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
    if (h >= 0x7c00u) h = 0x7c00u;                            // overflow (and +-inf) -> inf
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half: value / 2^-24 rounded to nearest even. Below 2^-26 everything rounds to zero.
  const uint32_t e = abs >> 23;
  if (e < 101) return sign;
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // value = m * 2^(e-150) = (m >> shift) units of 2^-24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // h may become 0x400, the smallest normal: correct
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) { return kq::bf16_to_float(h); }

// As ggml_compute_fp32_to_bf16: NaN forced quiet, otherwise round-to-nearest-even on the top 16 bits
// (no flush of subnormals).
uint16_t fp32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace picolm
