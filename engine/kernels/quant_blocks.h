// Internal to engine/kernels: ggml block layouts, inline fp16 helpers and the per-variant table
// builders. Not part of the public API (model code includes kernels.h only).
// Pure data and pure functions; thread-safe.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/kernels.h"

// Tier-2 check (STYLE.md) for broken caller invariants at API entry points (never in hot loops):
// throws std::logic_error naming file and line, so a shape bug fails loudly instead of computing
// on garbage.
#define PICOLM_KCHECK(cond, what)                                                                    \
  do {                                                                                               \
    if (!(cond))                                                                                     \
      throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": check `" + \
                             #cond + "` failed: " + (what));                                         \
  } while (0)

namespace picolm::kq {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

// Layouts follow ggml-common.h byte for byte (GGUF files are read in place).
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[QK8_0]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[QK8_1]; };  // s = d * sum(qs)
// Q2_K: 16 sub-blocks of 16; scales byte = scale (low nibble) | min (high nibble).
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; };
// Q3_K: 2 low bits in qs, high bit in hmask (set = no -4 offset), 16 6-bit scales packed in 12 bytes.
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
// Q4_K: 8 sub-blocks of 32, 6-bit scale and min each, packed in 12 bytes.
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
// Q6_K: low 4 bits in ql, high 2 bits in qh, 16 signed 8-bit scales.
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
// Q8_K: activation format of the K-quants; d is fp32, bsums are sums of 16 consecutive qs.
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Exact binary16 -> binary32 (every half is representable), branch-light so hot loops can inline it.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // inf, or NaN quieted with its payload kept (as F16C's VCVTPH2PS does)
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: mant * 2^-24 is exact in fp32.
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    uint32_t fb;
    std::memcpy(&fb, &f, 4);
    bits = sign | fb;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// All 8 scales and 8 mins of a Q4_K/Q5_K super-block at once: out[0..8) scales, out[8..16) mins
// (the same values as scale_min_k4 for j = 0..7, with word operations instead of 16 byte picks).
inline void scales_mins_k4_all(const uint8_t* packed, uint8_t* out16) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = uaux;
  u[0] &= kmask1;
  std::memcpy(out16, u, 16);
}

// Unpacks the 16 6-bit Q3_K scales into signed values in [-32, 31].
inline void unpack_q3k_scales(const uint8_t* packed, int8_t* out16) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  uint8_t u[16];
  std::memcpy(u, aux, 16);
  for (int i = 0; i < 16; ++i) out16[i] = static_cast<int8_t>(static_cast<int>(u[i]) - 32);
}

// Scalar table entries, used by the SIMD tables for what they do not override.
void fill_scalar_table(KernelTable& t);
#if defined(__x86_64__) || defined(_M_X64)
void fill_avx2_table(KernelTable& t);    // quant_avx2.cpp
void fill_avx2_packed(KernelTable& t);   // packed_avx2.cpp
void fill_avx512_table(KernelTable& t);  // quant_avx512.cpp
void fill_avx512_gemm(KernelTable& t);   // gemm_avx512.cpp
#endif
#if defined(__aarch64__)
void fill_neon_table(KernelTable& t);          // quant_neon.cpp
void fill_neon_dotprod_table(KernelTable& t);  // quant_neon_dotprod.cpp
void fill_neon_packed(KernelTable& t);          // packed_neon.cpp
void fill_neon_dotprod_packed(KernelTable& t);  // packed_neon_dotprod.cpp
void fill_neon_i8mm_packed(KernelTable& t);     // packed_neon_i8mm.cpp
#endif

// Scalar activation quantizers, exposed for SIMD files that reuse them.
void quantize_row_q8_0_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_1_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_K_ref(const float* x, void* y, int64_t n);

}  // namespace picolm::kq

namespace picolm::kq {
// Round-to-nearest quantizer for any type (see quantize_row_weights_ref); nullptr if unknown.
QuantizeRowFn weight_quantizer(GgmlType t);
}  // namespace picolm::kq
