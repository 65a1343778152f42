// Internal to engine/kernels: NEON kernels for AArch64, included by quant_neon.cpp (plain ARMv8-A,
// e.g. Cortex-A53/A72 of a Raspberry Pi 3/4) and quant_neon_dotprod.cpp (built with +dotprod,
// chosen at run time when the CPU reports SDOT, e.g. Cortex-A76 of a Pi 5). Everything is in an
// anonymous namespace so each file gets its own copy for its ISA.
//
// The K-quant dots reduce each sub-block to an exact integer and combine floats once per block in
// the same order as the scalar reference, so they are bit-identical to it; the 32-element types
// and float dots accumulate in vector lanes (tested against the double oracle with tolerances).
#pragma once
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "kernels/quant_blocks.h"

namespace picolm::kq {
namespace {

inline float h2f(uint16_t h) { return half_to_float(h); }

// acc + sum of the 16 products a[i]*b[i], spread over four s32 lanes.
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

inline int dot32_i(const int8x16_t a0, const int8x16_t a1, const int8_t* q8) {
  return vaddvq_s32(dot16(dot16(vdupq_n_s32(0), a0, vld1q_s8(q8)), a1, vld1q_s8(q8 + 16)));
}

// ---- activation quantizers (bit-exact with the reference) -----------------------------------

inline float absmax(const float* x, int n) {
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int j = 0; j < n; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
  return vmaxvq_f32(m);
}

// 32 floats -> int8 with roundf semantics (VRNDA rounds halfway cases away from zero).
inline void quant32(const float* x, float id, int8_t* qs) {
  for (int j = 0; j < 32; j += 8) {
    const int32x4_t a = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(vld1q_f32(x + j), id)));
    const int32x4_t b = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(vld1q_f32(x + j + 4), id)));
    vst1_s8(qs + j, vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b))));
  }
}

void neon_quantize_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    const float d = absmax(x, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    quant32(x, id, y[i].qs);
  }
}

void neon_quantize_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    const float d = absmax(x, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    quant32(x, id, y[i].qs);
    const int sum = vaddlvq_s8(vld1q_s8(y[i].qs)) + vaddlvq_s8(vld1q_s8(y[i].qs + 16));
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

void neon_quantize_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float amax = absmax(x, QK_K);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.0f;  // first element of largest magnitude, as the reference's strict '>'
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; j += 8) {
      // VCVTN rounds half to even, like ggml's nearest_int; then MIN(127, v).
      const int32x4_t a = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j), iscale)), vdupq_n_s32(127));
      const int32x4_t b = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4), iscale)), vdupq_n_s32(127));
      vst1_s8(y[i].qs + j, vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b))));
    }
    for (int j = 0; j < QK_K / 16; ++j) y[i].bsums[j] = static_cast<int16_t>(vaddlvq_s8(vld1q_s8(y[i].qs + 16 * j)));
    y[i].d = 1.0f / iscale;
  }
}

void neon_quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void neon_dequantize_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
  for (; i < n; ++i) y[i] = h2f(x[i]);
}

// ---- float dots ------------------------------------------------------------------------------

float neon_dot_f32(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const float*>(vw);
  const auto* y = static_cast<const float*>(va);
  float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
  for (; i + 4 <= n; i += 4) acc[0] = vfmaq_f32(acc[0], vld1q_f32(x + i), vld1q_f32(y + i));
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

float neon_dot_f16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  float32x4_t acc[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t a = vreinterpretq_f16_u16(vld1q_u16(x + i));
    const float16x8_t b = vreinterpretq_f16_u16(vld1q_u16(y + i));
    acc[0] = vfmaq_f32(acc[0], vcvt_f32_f16(vget_low_f16(a)), vcvt_f32_f16(vget_low_f16(b)));
    acc[1] = vfmaq_f32(acc[1], vcvt_high_f32_f16(a), vcvt_high_f32_f16(b));
  }
  float s = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
  for (; i < n; ++i) s += h2f(x[i]) * h2f(y[i]);
  return s;
}

// ---- 32-element blocks -----------------------------------------------------------------------

// Tile kernels: template over the number of activation rows N; the single dot is N = 1 of the
// same code, so tiles and single dots are bit-identical.
#define PICOLM_NEON_TILE_ENTRY_POINTS(templ, tile, dot)                                                  \
  void tile(int64_t n, const void* w, const void* a, size_t as, int n_act, float* out, int64_t os) {    \
    switch (n_act) {                                                                                     \
      case 1: templ<1>(n, w, a, as, out, os); break;                                                     \
      case 2: templ<2>(n, w, a, as, out, os); break;                                                     \
      case 3: templ<3>(n, w, a, as, out, os); break;                                                     \
      default: templ<4>(n, w, a, as, out, os); break;                                                    \
    }                                                                                                    \
  }                                                                                                      \
  float dot(int64_t n, const void* w, const void* a) {                                                  \
    float o;                                                                                             \
    templ<1>(n, w, a, 0, &o, 1);                                                                         \
    return o;                                                                                            \
  }

template <class B, int N>
inline void act_rows(const void* va, size_t astride, const B* (&y)[N]) {
  for (int t = 0; t < N; ++t) y[t] = reinterpret_cast<const B*>(static_cast<const uint8_t*>(va) + t * astride);
}

template <int N>
void tile_q8_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ8_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  float32x4_t acc[N];
  for (int t = 0; t < N; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    const int8x16_t x0 = vld1q_s8(x[ib].qs), x1 = vld1q_s8(x[ib].qs + 16);
    const float dx = h2f(x[ib].d);
    for (int t = 0; t < N; ++t) {
      const int32x4_t s = dot16(dot16(vdupq_n_s32(0), x0, vld1q_s8(y[t][ib].qs)), x1, vld1q_s8(y[t][ib].qs + 16));
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(s), dx * h2f(y[t][ib].d));
    }
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = vaddvq_f32(acc[t]);
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q8_0_n, neon_tile_q8_0, neon_dot_q8_0)

template <int N>
void tile_q4_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ4_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  const int8x16_t s8 = vdupq_n_s8(8);
  float32x4_t acc[N];
  for (int t = 0; t < N; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    const uint8x16_t v = vld1q_u8(x[ib].qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), s8);
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), s8);
    const float dx = h2f(x[ib].d);
    for (int t = 0; t < N; ++t) {
      const int32x4_t s = dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y[t][ib].qs)), hi, vld1q_s8(y[t][ib].qs + 16));
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(s), dx * h2f(y[t][ib].d));
    }
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = vaddvq_f32(acc[t]);
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q4_0_n, neon_tile_q4_0, neon_dot_q4_0)

// 16 bits of qh -> 16 bytes, 0xFF where the bit is set.
inline uint8x16_t bits16(uint32_t bits) {
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t b = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits & 0xff)), vdup_n_u8(static_cast<uint8_t>((bits >> 8) & 0xff)));
  return vtstq_u8(b, vld1q_u8(kBit));
}

template <int N>
void tile_q5_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ5_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const uint8x16_t m4 = vdupq_n_u8(0x0F), hi_off = vdupq_n_u8(0xF0);
  float32x4_t acc[N];
  for (int t = 0; t < N; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    const uint8x16_t v = vld1q_u8(x[ib].qs);
    // value - 16 = nibble | 0xF0 (as int8) when the fifth bit is clear, the nibble when it is set.
    const int8x16_t lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), vbicq_u8(hi_off, bits16(qh))));
    const int8x16_t hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), vbicq_u8(hi_off, bits16(qh >> 16))));
    const float dx = h2f(x[ib].d);
    for (int t = 0; t < N; ++t) {
      const int32x4_t s = dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y[t][ib].qs)), hi, vld1q_s8(y[t][ib].qs + 16));
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(s), dx * h2f(y[t][ib].d));
    }
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = vaddvq_f32(acc[t]);
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q5_0_n, neon_tile_q5_0, neon_dot_q5_0)

float neon_dot_q4_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ4_1*>(vw);
  const auto* y = static_cast<const BlockQ8_1*>(va);
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t acc = vdupq_n_f32(0.0f);
  float summs = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    summs += h2f(x[ib].m) * h2f(y[ib].s);
    const uint8x16_t v = vld1q_u8(x[ib].qs);
    // Nibbles are 0..15, so they are valid as signed bytes too.
    int32x4_t s = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(v, m4)), vld1q_s8(y[ib].qs));
    s = dot16(s, vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vld1q_s8(y[ib].qs + 16));
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), h2f(x[ib].d) * h2f(y[ib].d));
  }
  return vaddvq_f32(acc) + summs;
}

float neon_dot_q5_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ5_1*>(vw);
  const auto* y = static_cast<const BlockQ8_1*>(va);
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b16 = vdupq_n_u8(0x10);
  float32x4_t acc = vdupq_n_f32(0.0f);
  float summs = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    summs += h2f(x[ib].m) * h2f(y[ib].s);
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    const uint8x16_t v = vld1q_u8(x[ib].qs);
    const int8x16_t lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), vandq_u8(bits16(qh), b16)));
    const int8x16_t hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), vandq_u8(bits16(qh >> 16), b16)));
    int32x4_t s = dot16(vdupq_n_s32(0), lo, vld1q_s8(y[ib].qs));
    s = dot16(s, hi, vld1q_s8(y[ib].qs + 16));
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), h2f(x[ib].d) * h2f(y[ib].d));
  }
  return vaddvq_f32(acc) + summs;
}

// bf16 -> f32 is a 16-bit left shift of the bits.
float neon_dot_bf16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  float32x4_t acc[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint16x8_t a = vld1q_u16(x + i), b = vld1q_u16(y + i);
    acc[0] = vfmaq_f32(acc[0], vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16)),
                       vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)));
    acc[1] = vfmaq_f32(acc[1], vreinterpretq_f32_u32(vshll_high_n_u16(a, 16)), vreinterpretq_f32_u32(vshll_high_n_u16(b, 16)));
  }
  float s = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
  for (; i < n; ++i) s += bf16_to_float(x[i]) * bf16_to_float(y[i]);
  return s;
}

// ---- K-quants (bit-identical to the scalar reference) ------------------------------------

template <int N>
void tile_q4_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ4_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float sumf[N] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
    int isum[N] = {}, summ[N] = {};
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < QK_K / 16; ++j) summ[t] += y[t][i].bsums[j] * mn[j / 2];
    for (int j = 0; j < QK_K / 64; ++j) {
      const uint8x16_t v0 = vld1q_u8(x[i].qs + 32 * j), v1 = vld1q_u8(x[i].qs + 32 * j + 16);
      const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(v0, m4)), lo1 = vreinterpretq_s8_u8(vandq_u8(v1, m4));
      const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
      for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 64 * j;
        isum[t] += sc[2 * j] * dot32_i(lo0, lo1, q8) + sc[2 * j + 1] * dot32_i(hi0, hi1, q8 + 32);
      }
    }
    const float xd = h2f(x[i].d), xdmin = h2f(x[i].dmin);
    for (int t = 0; t < N; ++t) {
      const float d = xd * y[t][i].d, dmin = xdmin * y[t][i].d;
      sumf[t] += d * static_cast<float>(isum[t]) - dmin * static_cast<float>(summ[t]);
    }
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = sumf[t];
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q4_K_n, neon_tile_q4_K, neon_dot_q4_K)

template <int N>
void tile_q5_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ5_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b16 = vdupq_n_u8(16);
  float sumf[N] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
    int isum[N] = {}, summ[N] = {};
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < QK_K / 16; ++j) summ[t] += y[t][i].bsums[j] * mn[j / 2];
    const uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
    for (int j = 0; j < QK_K / 64; ++j) {
      // Bit 2j of qh[l] is the fifth bit of low-nibble value l, bit 2j+1 of high-nibble value l.
      const uint8x16_t ml = vdupq_n_u8(static_cast<uint8_t>(1u << (2 * j))), mh = vdupq_n_u8(static_cast<uint8_t>(2u << (2 * j)));
      const uint8x16_t v0 = vld1q_u8(x[i].qs + 32 * j), v1 = vld1q_u8(x[i].qs + 32 * j + 16);
      const int8x16_t lo0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v0, m4), vandq_u8(vtstq_u8(h0, ml), b16)));
      const int8x16_t lo1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v1, m4), vandq_u8(vtstq_u8(h1, ml), b16)));
      const int8x16_t hi0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v0, 4), vandq_u8(vtstq_u8(h0, mh), b16)));
      const int8x16_t hi1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v1, 4), vandq_u8(vtstq_u8(h1, mh), b16)));
      for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 64 * j;
        isum[t] += sc[2 * j] * dot32_i(lo0, lo1, q8) + sc[2 * j + 1] * dot32_i(hi0, hi1, q8 + 32);
      }
    }
    const float xd = h2f(x[i].d), xdmin = h2f(x[i].dmin);
    for (int t = 0; t < N; ++t) {
      const float d = xd * y[t][i].d, dmin = xdmin * y[t][i].d;
      sumf[t] += d * static_cast<float>(isum[t]) - dmin * static_cast<float>(summ[t]);
    }
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = sumf[t];
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q5_K_n, neon_tile_q5_K, neon_dot_q5_K)

template <int N>
void tile_q6_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ6_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
  const int8x16_t s32 = vdupq_n_s8(32);
  float sumf[N] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int isum[N] = {};
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const uint8_t* qh = x[i].qh + 32 * half;
      const int8_t* sc = x[i].scales + 8 * half;
      for (int l = 0; l < 32; l += 16) {
        const uint8x16_t a = vld1q_u8(ql + l), b = vld1q_u8(ql + l + 32), h = vld1q_u8(qh + l);
        const int8x16_t q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(h, m2), 4))), s32);
        const int8x16_t q2 =
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(b, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2), 4))), s32);
        const int8x16_t q3 =
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2), 4))), s32);
        const int8x16_t q4 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(b, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4))), s32);
        const int is = l / 16;  // sub-block of 16 within each 32-element group
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = y[t][i].qs + 128 * half + l;
          isum[t] += sc[is + 0] * vaddvq_s32(dot16(vdupq_n_s32(0), q1, vld1q_s8(q8)));
          isum[t] += sc[is + 2] * vaddvq_s32(dot16(vdupq_n_s32(0), q2, vld1q_s8(q8 + 32)));
          isum[t] += sc[is + 4] * vaddvq_s32(dot16(vdupq_n_s32(0), q3, vld1q_s8(q8 + 64)));
          isum[t] += sc[is + 6] * vaddvq_s32(dot16(vdupq_n_s32(0), q4, vld1q_s8(q8 + 96)));
        }
      }
    }
    const float xd = h2f(x[i].d);
    for (int t = 0; t < N; ++t) sumf[t] += (xd * y[t][i].d) * static_cast<float>(isum[t]);
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = sumf[t];
}
PICOLM_NEON_TILE_ENTRY_POINTS(tile_q6_K_n, neon_tile_q6_K, neon_dot_q6_K)

float neon_dot_q2_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ2_K*>(vw);
  const auto* y = static_cast<const BlockQ8_K*>(va);
  const uint8x16_t m3 = vdupq_n_u8(3);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    int isum = 0;
    for (int j = 0; j < 2; ++j) {
      const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * j), b1 = vld1q_u8(x[i].qs + 32 * j + 16);
      for (int k = 0; k < 4; ++k) {
        const int8_t* q8 = y[i].qs + 128 * j + 32 * k;
        const int8x16_t v0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b0, vdupq_n_s8(static_cast<int8_t>(-2 * k))), m3));
        const int8x16_t v1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b1, vdupq_n_s8(static_cast<int8_t>(-2 * k))), m3));
        isum += (sc[8 * j + 2 * k] & 0xF) * vaddvq_s32(dot16(vdupq_n_s32(0), v0, vld1q_s8(q8)));
        isum += (sc[8 * j + 2 * k + 1] & 0xF) * vaddvq_s32(dot16(vdupq_n_s32(0), v1, vld1q_s8(q8 + 16)));
      }
    }
    const float dall = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float neon_dot_q3_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ3_K*>(vw);
  const auto* y = static_cast<const BlockQ8_K*>(va);
  const uint8x16_t m3 = vdupq_n_u8(3), four = vdupq_n_u8(4);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int8_t sc[16];
    unpack_q3k_scales(x[i].scales, sc);
    const uint8x16_t h0 = vld1q_u8(x[i].hmask), h1 = vld1q_u8(x[i].hmask + 16);
    int isum = 0;
    for (int j = 0; j < 2; ++j) {
      const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * j), b1 = vld1q_u8(x[i].qs + 32 * j + 16);
      for (int k = 0; k < 4; ++k) {
        const int8_t* q8 = y[i].qs + 128 * j + 32 * k;
        const int8x16_t sh = vdupq_n_s8(static_cast<int8_t>(-2 * k));
        const uint8x16_t hb = vdupq_n_u8(static_cast<uint8_t>(1u << (4 * j + k)));
        // value = low 2 bits - 4 where the high bit is clear.
        const int8x16_t v0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b0, sh), m3)),
                                      vreinterpretq_s8_u8(vbicq_u8(four, vtstq_u8(h0, hb))));
        const int8x16_t v1 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b1, sh), m3)),
                                      vreinterpretq_s8_u8(vbicq_u8(four, vtstq_u8(h1, hb))));
        isum += sc[8 * j + 2 * k] * vaddvq_s32(dot16(vdupq_n_s32(0), v0, vld1q_s8(q8)));
        isum += sc[8 * j + 2 * k + 1] * vaddvq_s32(dot16(vdupq_n_s32(0), v1, vld1q_s8(q8 + 16)));
      }
    }
    sumf += (h2f(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// Exact-mode dot: the reference's 16 partial sums in four registers, same order, no fusion.
float neon_exact_dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t acc4[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k) acc4[k] = vaddq_f32(acc4[k], vmulq_f32(vld1q_f32(a + i + 4 * k), vld1q_f32(b + i + 4 * k)));
  float acc[16];
  for (int k = 0; k < 4; ++k) vst1q_f32(acc + 4 * k, acc4[k]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

constexpr int ix(GgmlType t) { return static_cast<int>(t); }

inline void fill_neon_common(KernelTable& t) {
  t.exact_dot_f32 = neon_exact_dot_f32;
  t.quantize_row[ix(GgmlType::Q8_0)] = neon_quantize_q8_0;
  t.quantize_row[ix(GgmlType::Q8_1)] = neon_quantize_q8_1;
  t.quantize_row[ix(GgmlType::Q8_K)] = neon_quantize_q8_K;
  t.quantize_row[ix(GgmlType::F16)] = neon_quantize_f16;
  t.dequantize_row[ix(GgmlType::F16)] = neon_dequantize_f16;
  t.vec_dot[ix(GgmlType::F32)] = neon_dot_f32;
  t.vec_dot[ix(GgmlType::F16)] = neon_dot_f16;
  t.vec_dot[ix(GgmlType::Q8_0)] = neon_dot_q8_0;
  t.vec_dot[ix(GgmlType::Q4_0)] = neon_dot_q4_0;
  t.vec_dot[ix(GgmlType::Q5_0)] = neon_dot_q5_0;
  t.vec_dot[ix(GgmlType::Q4_K)] = neon_dot_q4_K;
  t.vec_dot[ix(GgmlType::Q6_K)] = neon_dot_q6_K;
  t.vec_dot_tile[ix(GgmlType::Q8_0)] = neon_tile_q8_0;
  t.vec_dot_tile[ix(GgmlType::Q4_K)] = neon_tile_q4_K;
  t.vec_dot_tile[ix(GgmlType::Q6_K)] = neon_tile_q6_K;
  t.vec_dot[ix(GgmlType::Q5_K)] = neon_dot_q5_K;
  t.vec_dot[ix(GgmlType::Q4_1)] = neon_dot_q4_1;
  t.vec_dot[ix(GgmlType::Q5_1)] = neon_dot_q5_1;
  t.vec_dot[ix(GgmlType::BF16)] = neon_dot_bf16;
  t.vec_dot[ix(GgmlType::Q2_K)] = neon_dot_q2_K;
  t.vec_dot[ix(GgmlType::Q3_K)] = neon_dot_q3_K;
  t.vec_dot_tile[ix(GgmlType::Q5_K)] = neon_tile_q5_K;
  t.vec_dot_tile[ix(GgmlType::Q4_0)] = neon_tile_q4_0;
  t.vec_dot_tile[ix(GgmlType::Q5_0)] = neon_tile_q5_0;
}

}  // namespace
}  // namespace picolm::kq
