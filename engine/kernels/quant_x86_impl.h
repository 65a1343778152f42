// Internal to engine/kernels: x86 SIMD kernels shared by quant_avx2.cpp and quant_avx512.cpp.
// Included only by those two files, each compiled with its own ISA flags; everything here is in an
// anonymous namespace so each file gets its own copy built for its ISA. Where AVX-512 VNNI (with
// VL) is enabled, the u8 x s8 dot helper uses VPDPBUSD instead of VPMADDUBSW + VPMADDWD; integer
// results are identical either way.
//
// Dot products differ from the scalar reference only in the order of float additions (vector
// lanes instead of a running sum); integer block sums are exact. Activation quantizers,
// dequantizers and the Exact-mode F32 dot are bit-identical to the reference, and every tile
// kernel is bit-identical to its single-row dot (all tested).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/quant_blocks.h"

// Full unrolling of the loops over a tile's tokens (and over a block's groups) is what keeps the
// per-token accumulators in registers; GCC at -O2 otherwise leaves them in stack arrays, which
// cost more than the multiply-adds themselves (measured: 2-3x slower tiles).
#define PICOLM_UNROLL _Pragma("GCC unroll 8")

namespace picolm::kq {
namespace {

inline float x86_h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t x86_f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

inline float hsum_ps(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline float hsum_ps128(__m128 r) {
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// Sum of u8*s8 products in groups of 4 -> 8 x s32. ax must be in [0, 255] and the pair sums of
// VPMADDUBSW must not saturate (true for all callers: |ax| <= 128 with |y| <= 127, or ax <= 63).
inline __m256i dot_us8_s32(__m256i ax, __m256i sy) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
#endif
}

// acc + madd(a, b) (pairs of s16 products summed into s32); one VPDPWSSD with VNNI. Same integers.
inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Signed s8 x s8 via the sign trick (|x| as unsigned, sign moved onto y). y must not be -128.
inline __m256 dot_s8_float(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_cvtepi32_ps(dot_us8_s32(ax, sy));
}

// 16 packed nibbles -> 32 bytes: low nibbles in the low 128-bit lane (elements 0..15), high
// nibbles in the high lane (elements 16..31), the order of Q4_0/Q4_1/Q5_x blocks.
inline __m256i nibbles_to_bytes(const uint8_t* qs) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte k = 0xFF if bit k is set.
inline __m256i bits_to_bytes(const uint8_t* qh) {
  uint32_t x32;
  std::memcpy(&x32, qh, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers (bit-exact with quantize_row_*_ref)
// ---------------------------------------------------------------------------------------------

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// roundf semantics (halfway cases away from zero), exact for |v| < 2^23.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 frac = abs_ps(_mm256_sub_ps(v, t));  // exact
  const __m256 tie = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_EQ_OQ);
  const __m256 away = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f)));
  return _mm256_blendv_ps(r, away, tie);
}

// 32 int32 (four registers) -> 32 int8 in order, saturating.
inline __m256i pack_32_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i a = _mm256_packs_epi32(i0, i1);  // lanes interleaved: [i0 lo, i1 lo | i0 hi, i1 hi]
  const __m256i b = _mm256_packs_epi32(i2, i3);
  const __m256i c = _mm256_packs_epi16(a, b);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Quantizes 32 floats with ggml's Q8_0 rule; returns d (unrounded) and writes qs.
inline float quant_block32_q8(const float* x, int8_t* qs) {
  __m256 v[4];
  __m256 mx = _mm256_setzero_ps();
  PICOLM_UNROLL for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    mx = _mm256_max_ps(mx, abs_ps(v[k]));
  }
  const float amax = hmax_ps(mx);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 mul = _mm256_set1_ps(id);
  __m256i iv[4];
  for (int k = 0; k < 4; ++k) iv[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], mul)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_32_i8(iv[0], iv[1], iv[2], iv[3]));
  return d;
}

void simd_quantize_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) y[i].d = x86_f2h(quant_block32_q8(x, y[i].qs));
}

inline int sum_i8_32(const int8_t* q) {
  // Sum of 32 signed bytes via SAD on the bytes offset by 128.
  const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), _mm256_set1_epi8(-128));
  const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int>(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 32 * 128;
}

void simd_quantize_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    const float d = quant_block32_q8(x, y[i].qs);
    y[i].d = x86_f2h(d);
    y[i].s = x86_f2h(static_cast<float>(sum_i8_32(y[i].qs)) * d);
  }
}

void simd_quantize_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < QK_K; k += 8) mx = _mm256_max_ps(mx, abs_ps(_mm256_loadu_ps(x + k)));
    const float amax = hmax_ps(mx);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the first element of largest magnitude (strict >), with its sign.
    float max = 0.0f;
    const __m256 vmax = _mm256_set1_ps(amax);
    for (int j = 0; j < QK_K; j += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), vmax, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    for (int k = 0; k < QK_K; k += 32) {
      __m256i iv[4];
      // VCVTPS2DQ rounds half to even under the default MXCSR mode, like ggml's nearest_int;
      // packing saturates at 127, which is the reference's MIN(127, v).
      for (int q = 0; q < 4; ++q) iv[q] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * q), mul));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + k), pack_32_i8(iv[0], iv[1], iv[2], iv[3]));
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y[i].qs + 16 * j)), _mm_set1_epi8(-128));
      const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
      y[i].bsums[j] = static_cast<int16_t>(_mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128);
    }
    y[i].d = 1.0f / iscale;
  }
}

void simd_quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = x86_f2h(x[i]);
}

void simd_dequantize_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = x86_h2f(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Float dots
// ---------------------------------------------------------------------------------------------

float simd_dot_f32(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const float*>(vw);
  const auto* y = static_cast<const float*>(va);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

float simd_dot_f16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * k), load_f16x8(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), acc[0]);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += x86_h2f(x[i]) * x86_h2f(y[i]);
  return s;
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float simd_dot_bf16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * k), load_bf16x8(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc[0]);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += bf16_to_float(x[i]) * bf16_to_float(y[i]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// 32-element block types
// ---------------------------------------------------------------------------------------------

// Tile kernels: template over the number of activation rows N; the single-row dot is N = 1 of
// the same code, so tiles and single dots are bit-identical.
#define PICOLM_TILE_ENTRY_POINTS(templ, tile, dot)                                                                  \
  void tile(int64_t n, const void* w, const void* a, size_t as, int n_act, float* out, int64_t os) {        \
    switch (n_act) {                                                                                         \
      case 1: templ<1>(n, w, a, as, out, os); break;                                                    \
      case 2: templ<2>(n, w, a, as, out, os); break;                                                    \
      case 3: templ<3>(n, w, a, as, out, os); break;                                                    \
      case 4: templ<4>(n, w, a, as, out, os); break;                                                    \
      case 5: templ<5>(n, w, a, as, out, os); break;                                                    \
      case 6: templ<6>(n, w, a, as, out, os); break;                                                    \
      case 7: templ<7>(n, w, a, as, out, os); break;                                                    \
      default: templ<8>(n, w, a, as, out, os); break;                                                   \
    }                                                                                                        \
  }                                                                                                          \
  float dot(int64_t n, const void* w, const void* a) {                                                      \
    float o;                                                                                                 \
    templ<1>(n, w, a, 0, &o, 1);                                                                          \
    return o;                                                                                                \
  }

template <class B, int N>
inline void act_rows(const void* va, size_t astride, const B* (&y)[N]) {
  PICOLM_UNROLL for (int t = 0; t < N; ++t) y[t] = reinterpret_cast<const B*>(static_cast<const uint8_t*>(va) + t * astride);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <int N>
void tile_q8_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ8_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK8_0;
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float dx = x86_h2f(x[ib].d);
    const __m256i qx = load256(x[ib].qs);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i sy = _mm256_sign_epi8(load256(y[t][ib].qs), qx);
      const __m256 p = _mm256_cvtepi32_ps(dot_us8_s32(ax, sy));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * x86_h2f(y[t][ib].d)), p, acc[t]);
    }
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q8_0_n, simd_tile_q8_0, simd_dot_q8_0)

template <int N>
void tile_q4_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ4_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK8_0;
  const __m256i off = _mm256_set1_epi8(8);
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float dx = x86_h2f(x[ib].d);
    const __m256i qx = _mm256_sub_epi8(nibbles_to_bytes(x[ib].qs), off);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i sy = _mm256_sign_epi8(load256(y[t][ib].qs), qx);
      const __m256 p = _mm256_cvtepi32_ps(dot_us8_s32(ax, sy));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * x86_h2f(y[t][ib].d)), p, acc[t]);
    }
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q4_0_n, simd_tile_q4_0, simd_dot_q4_0)

float simd_dot_q4_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ4_1*>(vw);
  const auto* y = static_cast<const BlockQ8_1*>(va);
  const int64_t nb = n / QK8_1;
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    summs += x86_h2f(x[ib].m) * x86_h2f(y[ib].s);
    const __m256 d = _mm256_set1_ps(x86_h2f(x[ib].d) * x86_h2f(y[ib].d));
    const __m256i qx = nibbles_to_bytes(x[ib].qs);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_us8_s32(qx, qy)), acc);
  }
  return hsum_ps(acc) + summs;
}

template <int N>
void tile_q5_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ5_0*>(vw);
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK8_0;
  const __m256i hi_off = _mm256_set1_epi8(static_cast<char>(0xF0));
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float dx = x86_h2f(x[ib].d);
    // value - 16 = nibble | 0xF0 (as int8) when the fifth bit is clear, the nibble when it is set.
    const __m256i hi = _mm256_andnot_si256(bits_to_bytes(x[ib].qh), hi_off);
    const __m256i qx = _mm256_or_si256(nibbles_to_bytes(x[ib].qs), hi);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i sy = _mm256_sign_epi8(load256(y[t][ib].qs), qx);
      const __m256 p = _mm256_cvtepi32_ps(dot_us8_s32(ax, sy));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * x86_h2f(y[t][ib].d)), p, acc[t]);
    }
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q5_0_n, simd_tile_q5_0, simd_dot_q5_0)

float simd_dot_q5_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const BlockQ5_1*>(vw);
  const auto* y = static_cast<const BlockQ8_1*>(va);
  const int64_t nb = n / QK8_1;
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    summs += x86_h2f(x[ib].m) * x86_h2f(y[ib].s);
    const __m256 d = _mm256_set1_ps(x86_h2f(x[ib].d) * x86_h2f(y[ib].d));
    const __m256i hi = _mm256_and_si256(bits_to_bytes(x[ib].qh), _mm256_set1_epi8(0x10));
    const __m256i qx = _mm256_or_si256(nibbles_to_bytes(x[ib].qs), hi);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[ib].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_us8_s32(qx, qy)), acc);
  }
  return hsum_ps(acc) + summs;
}

// ---------------------------------------------------------------------------------------------
// K-quants
// ---------------------------------------------------------------------------------------------

// Q4_K/Q5_K: the 12 packed bytes -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15).
inline __m256i unpack_k4_scales_mins_i16(const uint8_t* packed) {
  uint8_t sm[16];
  scales_mins_k4_all(packed, sm);
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
}

// Shuffle that broadcasts 16-bit element i of a 128-bit lane to the whole lane.
inline __m256i bcast_i16_shuffle(int i) {
  const int lo = 2 * i, hi = 2 * i + 1;
  const __m128i s = _mm_set1_epi16(static_cast<short>(lo | (hi << 8)));
  return _mm256_set_m128i(s, s);
}

// sum over the 8 sub-blocks of min_j * (bsums[2j] + bsums[2j+1]), as 4 x s32.
inline __m128i k4_min_products(__m256i mins_and_scales, const int16_t* bsums) {
  const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256(q8sums, 1));
  return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
}

template <int N>
void tile_q4_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ4_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[N];
  __m128 acc_m[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps(), acc_m[t] = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d), xdmin = x86_h2f(x[i].dmin);
    const __m256i ms = unpack_k4_scales_mins_i16(x[i].scales);
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-y[t][i].d * xdmin), _mm_cvtepi32_ps(k4_min_products(ms, y[t][i].bsums)), acc_m[t]);
    const __m128i sc128 = _mm256_castsi256_si128(ms);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    __m256i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) sumi[t] = _mm256_setzero_si256();
    PICOLM_UNROLL for (int j = 0; j < QK_K / 64; ++j) {
      const __m256i scale_l = _mm256_shuffle_epi8(scales, bcast_i16_shuffle(2 * j + 0));
      const __m256i scale_h = _mm256_shuffle_epi8(scales, bcast_i16_shuffle(2 * j + 1));
      const __m256i q4bits = load256(x[i].qs + 32 * j);
      const __m256i q4l = _mm256_and_si256(q4bits, m4);
      const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      PICOLM_UNROLL for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 64 * j;
        sumi[t] = madd_acc(sumi[t], scale_l, _mm256_maddubs_epi16(q4l, load256(q8)));
        sumi[t] = madd_acc(sumi[t], scale_h, _mm256_maddubs_epi16(q4h, load256(q8 + 32)));
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]) + hsum_ps128(acc_m[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q4_K_n, simd_tile_q4_K, simd_dot_q4_K)

template <int N>
void tile_q5_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ5_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i bit16 = _mm256_set1_epi8(16);
  __m256 acc[N];
  __m128 acc_m[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps(), acc_m[t] = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d), xdmin = x86_h2f(x[i].dmin);
    const __m256i ms = unpack_k4_scales_mins_i16(x[i].scales);
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-y[t][i].d * xdmin), _mm_cvtepi32_ps(k4_min_products(ms, y[t][i].bsums)), acc_m[t]);
    const __m128i sc128 = _mm256_castsi256_si128(ms);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    const __m256i hbits = load256(x[i].qh);
    __m256i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) sumi[t] = _mm256_setzero_si256();
    PICOLM_UNROLL for (int j = 0; j < QK_K / 64; ++j) {
      const __m256i scale_l = _mm256_shuffle_epi8(scales, bcast_i16_shuffle(2 * j + 0));
      const __m256i scale_h = _mm256_shuffle_epi8(scales, bcast_i16_shuffle(2 * j + 1));
      const __m256i q5bits = load256(x[i].qs + 32 * j);
      // Bit 2j of qh is the fifth bit of the low-nibble values, bit 2j+1 of the high ones. Shifting
      // 16-bit words right keeps each byte's own bit at position 0 after the mask below (bits
      // that cross a byte boundary land above bit 0 and are masked off).
      const __m256i hl = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), bit16);
      const __m256i hh = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), bit16);
      const __m256i q5l = _mm256_or_si256(_mm256_and_si256(q5bits, m4), hl);
      const __m256i q5h = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), hh);
      PICOLM_UNROLL for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 64 * j;
        sumi[t] = madd_acc(sumi[t], scale_l, _mm256_maddubs_epi16(q5l, load256(q8)));
        sumi[t] = madd_acc(sumi[t], scale_h, _mm256_maddubs_epi16(q5h, load256(q8 + 32)));
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]) + hsum_ps128(acc_m[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q5_K_n, simd_tile_q5_K, simd_dot_q5_K)

// Shuffle giving [s[i] x8, s[i+1] x8] from 16 int8 scales (before sign extension to 16 bits).
inline __m128i pair_scale_shuffle(int i) {
  return _mm_set_epi64x(0x0101010101010101LL * (i + 1), 0x0101010101010101LL * i);
}

template <int N>
void tile_q6_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ6_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d);
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    // Values are stored +32; sum(sc * (q - 32) * q8) = sum(sc * q * q8) - 32 * sum(sc * bsum).
    const __m256i sc16 = _mm256_cvtepi8_epi16(scales);
    __m256i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y[t][i].bsums)), 5));
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    PICOLM_UNROLL for (int half = 0; half < 2; ++half) {
      const __m256i b1 = load256(ql);
      const __m256i b2 = load256(ql + 32);
      const __m256i bh = load256(qh);
      ql += 64;
      qh += 32;
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
      PICOLM_UNROLL for (int k = 0; k < 4; ++k) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pair_scale_shuffle(8 * half + 2 * k)));
        PICOLM_UNROLL for (int t = 0; t < N; ++t) {
          const __m256i q8v = load256(y[t][i].qs + 128 * half + 32 * k);
          sumi[t] = madd_acc(sumi[t], sc, _mm256_maddubs_epi16(q[k], q8v));
        }
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q6_K_n, simd_tile_q6_K, simd_dot_q6_K)

template <int N>
void tile_q2_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ2_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0xF);
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d), xdmin = x86_h2f(x[i].dmin);
    const __m128i mins_and_scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m128i scales8 = _mm_and_si128(mins_and_scales, m4);
    const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4));
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i prod_m = _mm256_madd_epi16(mins, load256(y[t][i].bsums));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t][i].d * xdmin), _mm256_cvtepi32_ps(prod_m), acc[t]);
    }
    __m256i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) sumi[t] = _mm256_setzero_si256();
    PICOLM_UNROLL for (int j = 0; j < 2; ++j) {
      const __m256i bits = load256(x[i].qs + 32 * j);
      PICOLM_UNROLL for (int k = 0; k < 4; ++k) {
        const __m256i q2v = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pair_scale_shuffle(8 * j + 2 * k)));
        PICOLM_UNROLL for (int t = 0; t < N; ++t)
          sumi[t] = madd_acc(sumi[t], sc, _mm256_maddubs_epi16(q2v, load256(y[t][i].qs + 128 * j + 32 * k)));
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q2_K_n, simd_tile_q2_K, simd_dot_q2_K)

template <int N>
void tile_q3_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ3_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d);
    int8_t sc8[16];
    unpack_q3k_scales(x[i].scales, sc8);
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc8));
    const __m256i hbits = load256(x[i].hmask);
    __m256i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) sumi[t] = _mm256_setzero_si256();
    PICOLM_UNROLL for (int j = 0; j < 2; ++j) {
      const __m256i bits = load256(x[i].qs + 32 * j);
      PICOLM_UNROLL for (int k = 0; k < 4; ++k) {
        // value = low2 - 4 * (1 - hbit): products of the unsigned low bits minus 4 * q8 where the
        // high bit is clear (both fit VPMADDUBSW without saturation).
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * j + k), one);
        const __m256i sub4 = _mm256_slli_epi16(_mm256_xor_si256(hb, one), 2);  // 4 where the bit is clear
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pair_scale_shuffle(8 * j + 2 * k)));
        PICOLM_UNROLL for (int t = 0; t < N; ++t) {
          const __m256i q8v = load256(y[t][i].qs + 128 * j + 32 * k);
          const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, q8v), _mm256_maddubs_epi16(sub4, q8v));
          sumi[t] = madd_acc(sumi[t], sc, p);
        }
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum_ps(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile_q3_K_n, simd_tile_q3_K, simd_dot_q3_K)

// ---------------------------------------------------------------------------------------------
// Exact-mode F32 dot and dequantization, bit-identical to the scalar reference: same products,
// same order of additions, separate mul and add (the kernels library builds with
// -ffp-contract=off so nothing is fused behind our back).
// ---------------------------------------------------------------------------------------------

float simd_exact_dot_f32(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // partial sums 0..7 and 8..15
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  float acc[16];
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// y[k] = float(q[k]) * (k < 16 ? s0 : s1) [+ (k < 16 ? o0 : o1)] for 32 int8 values. The add is
// optional because x*d + 0 would turn -0 into +0 where the reference has no add.
template <bool kAdd>
inline void dq32(__m256i q, float* y, float s0, float s1, float o0 = 0.0f, float o1 = 0.0f) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int g = 0; g < 4; ++g) {
    __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[g])), _mm256_set1_ps(g < 2 ? s0 : s1));
    if constexpr (kAdd) r = _mm256_add_ps(r, _mm256_set1_ps(g < 2 ? o0 : o1));
    _mm256_storeu_ps(y + 8 * g, r);
  }
}

void simd_dequant_q8_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = x86_h2f(x[i].d);
    dq32<false>(load256(x[i].qs), y, d, d);
  }
}

void simd_dequant_q4_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = x86_h2f(x[i].d);
    dq32<false>(_mm256_sub_epi8(nibbles_to_bytes(x[i].qs), _mm256_set1_epi8(8)), y, d, d);
  }
}

void simd_dequant_q5_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(vx);
  for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
    const float d = x86_h2f(x[i].d);
    const __m256i hi = _mm256_andnot_si256(bits_to_bytes(x[i].qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    dq32<false>(_mm256_or_si256(nibbles_to_bytes(x[i].qs), hi), y, d, d);
  }
}

void simd_dequant_q4_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(vx);
  for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
    const float d = x86_h2f(x[i].d), m = x86_h2f(x[i].m);
    dq32<true>(nibbles_to_bytes(x[i].qs), y, d, d, m, m);
  }
}

void simd_dequant_q5_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(vx);
  for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
    const float d = x86_h2f(x[i].d), m = x86_h2f(x[i].m);
    const __m256i hi = _mm256_and_si256(bits_to_bytes(x[i].qh), _mm256_set1_epi8(0x10));
    dq32<true>(_mm256_or_si256(nibbles_to_bytes(x[i].qs), hi), y, d, d, m, m);
  }
}

void simd_dequant_q4_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = x86_h2f(x[i].d), min = x86_h2f(x[i].dmin);
    for (int j = 0; j < 4; ++j, y += 64) {
      uint8_t sc, m;
      scale_min_k4(2 * j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(2 * j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      const __m256i bits = load256(x[i].qs + 32 * j);
      // d1*q - m1 == q*d1 + (-m1) exactly in IEEE arithmetic.
      dq32<true>(_mm256_and_si256(bits, m4), y, d1, d1, -m1, -m1);
      dq32<true>(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), y + 32, d2, d2, -m2, -m2);
    }
  }
}

void simd_dequant_q5_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0xF), bit16 = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = x86_h2f(x[i].d), min = x86_h2f(x[i].dmin);
    const __m256i hbits = load256(x[i].qh);
    for (int j = 0; j < 4; ++j, y += 64) {
      uint8_t sc, m;
      scale_min_k4(2 * j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(2 * j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      const __m256i bits = load256(x[i].qs + 32 * j);
      const __m256i hl = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), bit16);
      const __m256i hh = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), bit16);
      dq32<true>(_mm256_or_si256(_mm256_and_si256(bits, m4), hl), y, d1, d1, -m1, -m1);
      dq32<true>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hh), y + 32, d2, d2, -m2, -m2);
    }
  }
}

void simd_dequant_q6_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = x86_h2f(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, y += 128) {
      const __m256i b1 = load256(ql), b2 = load256(ql + 32), bh = load256(qh);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
      PICOLM_UNROLL for (int k = 0; k < 4; ++k) {
        const int8_t* sc = x[i].scales + 8 * half + 2 * k;
        // Reference: d * sc * q, i.e. (d * sc) rounded, then times q.
        dq32<false>(_mm256_sub_epi8(q[k], off), y + 32 * k, d * sc[0], d * sc[1]);
      }
    }
  }
}

constexpr int ix(GgmlType t) { return static_cast<int>(t); }

// Entries common to the AVX2 and AVX-512 tables (each built for its own ISA).
inline void fill_x86_common(KernelTable& t) {
  t.quantize_row[ix(GgmlType::Q8_0)] = simd_quantize_q8_0;
  t.quantize_row[ix(GgmlType::Q8_1)] = simd_quantize_q8_1;
  t.quantize_row[ix(GgmlType::Q8_K)] = simd_quantize_q8_K;
  t.quantize_row[ix(GgmlType::F16)] = simd_quantize_f16;
  t.dequantize_row[ix(GgmlType::F16)] = simd_dequantize_f16;
  t.dequantize_row[ix(GgmlType::Q8_0)] = simd_dequant_q8_0;
  t.dequantize_row[ix(GgmlType::Q4_0)] = simd_dequant_q4_0;
  t.dequantize_row[ix(GgmlType::Q5_0)] = simd_dequant_q5_0;
  t.dequantize_row[ix(GgmlType::Q4_1)] = simd_dequant_q4_1;
  t.dequantize_row[ix(GgmlType::Q5_1)] = simd_dequant_q5_1;
  t.dequantize_row[ix(GgmlType::Q4_K)] = simd_dequant_q4_K;
  t.dequantize_row[ix(GgmlType::Q5_K)] = simd_dequant_q5_K;
  t.dequantize_row[ix(GgmlType::Q6_K)] = simd_dequant_q6_K;
  t.exact_dot_f32 = simd_exact_dot_f32;
  t.vec_dot[ix(GgmlType::F32)] = simd_dot_f32;
  t.vec_dot[ix(GgmlType::F16)] = simd_dot_f16;
  t.vec_dot[ix(GgmlType::BF16)] = simd_dot_bf16;
  t.vec_dot[ix(GgmlType::Q8_0)] = simd_dot_q8_0;
  t.vec_dot[ix(GgmlType::Q4_0)] = simd_dot_q4_0;
  t.vec_dot[ix(GgmlType::Q4_1)] = simd_dot_q4_1;
  t.vec_dot[ix(GgmlType::Q5_0)] = simd_dot_q5_0;
  t.vec_dot[ix(GgmlType::Q5_1)] = simd_dot_q5_1;
  t.vec_dot[ix(GgmlType::Q2_K)] = simd_dot_q2_K;
  t.vec_dot[ix(GgmlType::Q3_K)] = simd_dot_q3_K;
  t.vec_dot[ix(GgmlType::Q4_K)] = simd_dot_q4_K;
  t.vec_dot[ix(GgmlType::Q5_K)] = simd_dot_q5_K;
  t.vec_dot[ix(GgmlType::Q6_K)] = simd_dot_q6_K;
  t.vec_dot_tile[ix(GgmlType::Q8_0)] = simd_tile_q8_0;
  t.vec_dot_tile[ix(GgmlType::Q4_0)] = simd_tile_q4_0;
  t.vec_dot_tile[ix(GgmlType::Q5_0)] = simd_tile_q5_0;
  t.vec_dot_tile[ix(GgmlType::Q4_K)] = simd_tile_q4_K;
  t.vec_dot_tile[ix(GgmlType::Q6_K)] = simd_tile_q6_K;
  t.vec_dot_tile[ix(GgmlType::Q5_K)] = simd_tile_q5_K;
  t.vec_dot_tile[ix(GgmlType::Q2_K)] = simd_tile_q2_K;
  t.vec_dot_tile[ix(GgmlType::Q3_K)] = simd_tile_q3_K;
}

}  // namespace
}  // namespace picolm::kq
