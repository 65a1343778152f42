// AVX-512 (F, BW, VL, VNNI) kernels, compiled with per-file flags; only called when the CPU has
// them. The 256-bit kernels of quant_x86_impl.h are rebuilt here with VPDPBUSD for the u8 x s8
// dots; the hottest types (Q4_K, Q6_K, Q8_0, Q4_0, Q5_0) get 512-bit versions below that handle
// two 32-element groups per instruction.
// GCC 12's AVX-512 intrinsics headers use _mm512_undefined_*() and trigger false
// -W(maybe-)uninitialized warnings when inlined (GCC PR 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/quant_x86_impl.h"

namespace picolm::kq {
namespace {

inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }

inline __m512i combine256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 16-bit permutation index with four 128-bit lanes taking elements a, b, c, d (8 copies each).
inline __m512i lane_bcast_idx(int a, int b, int c, int e) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(b)), _mm_set1_epi16(static_cast<short>(a)))),
      _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(e)), _mm_set1_epi16(static_cast<short>(c))), 1);
}

template <int N>
void tile512_q4_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ4_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m512i m4 = _mm512_set1_epi8(0xF);
  // Shift the upper 256 bits by 4 so one register holds low nibbles | high nibbles, which is the
  // element order of 64 consecutive q8 values.
  const __m512i nib_shift = combine256(_mm256_setzero_si256(), _mm256_set1_epi16(4));
  __m512i sidx[4];
  for (int j = 0; j < 4; ++j) sidx[j] = lane_bcast_idx(2 * j, 2 * j, 2 * j + 1, 2 * j + 1);
  __m512 acc[N];
  __m128 acc_m[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps(), acc_m[t] = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d), xdmin = x86_h2f(x[i].dmin);
    const __m256i ms = unpack_k4_scales_mins_i16(x[i].scales);
    for (int t = 0; t < N; ++t)
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-y[t][i].d * xdmin), _mm_cvtepi32_ps(k4_min_products(ms, y[t][i].bsums)), acc_m[t]);
    const __m512i ms512 = _mm512_castsi256_si512(ms);
    __m512i sumi[N];
    for (int t = 0; t < N; ++t) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x[i].qs + 32 * j);
      const __m512i q4v = _mm512_and_si512(_mm512_srlv_epi16(combine256(bits, bits), nib_shift), m4);
      const __m512i sc = _mm512_permutexvar_epi16(sidx[j], ms512);
      for (int t = 0; t < N; ++t) {
        const __m512i q8v = _mm512_loadu_si512(y[t][i].qs + 64 * j);
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], sc, _mm512_maddubs_epi16(q4v, q8v));
      }
    }
    for (int t = 0; t < N; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y[t][i].d * xd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]) + hsum_ps128(acc_m[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile512_q4_K_n, avx512_tile_q4_K, avx512_dot_q4_K)

template <int N>
void tile512_q6_K_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  const auto* x = static_cast<const BlockQ6_K*>(vw);
  const BlockQ8_K* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK_K;
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i m2 = _mm512_set1_epi8(3);
  const __m512i shiftA = combine256(_mm256_setzero_si256(), _mm256_set1_epi16(2));  // qh bits 0-1 | 2-3
  const __m512i shiftB = combine256(_mm256_set1_epi16(4), _mm256_set1_epi16(6));    // qh bits 4-5 | 6-7
  const __m512i nib_hi = _mm512_set1_epi16(4);
  __m512i sidx[4];
  for (int k = 0; k < 4; ++k) sidx[k] = lane_bcast_idx(4 * k + 0, 4 * k + 1, 4 * k + 2, 4 * k + 3);
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc512 = _mm512_castsi256_si512(sc16);
    __m512i sumi[N];
    for (int t = 0; t < N; ++t) {
      const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y[t][i].bsums)), 5);  // 32*sum(sc*bsum)
      sumi[t] = combine256(_mm256_sub_epi32(_mm256_setzero_si256(), corr), _mm256_setzero_si256());
    }
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int half = 0; half < 2; ++half) {
      const __m512i b12 = combine256(load256(ql), load256(ql + 32));
      const __m256i bh = load256(qh);
      const __m512i bh2 = combine256(bh, bh);
      ql += 64;
      qh += 32;
      // A: elements 0..63 of this half, B: elements 64..127 (see dequant_q6_K for the layout).
      const __m512i qa = _mm512_or_si512(_mm512_and_si512(b12, m4),
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(bh2, shiftA), m2), 4));
      const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(b12, nib_hi), m4),
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(bh2, shiftB), m2), 4));
      const __m512i sa = _mm512_permutexvar_epi16(sidx[2 * half + 0], sc512);
      const __m512i sb = _mm512_permutexvar_epi16(sidx[2 * half + 1], sc512);
      for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 128 * half;
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], sa, _mm512_maddubs_epi16(qa, _mm512_loadu_si512(q8)));
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], sb, _mm512_maddubs_epi16(qb, _mm512_loadu_si512(q8 + 64)));
      }
    }
    for (int t = 0; t < N; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y[t][i].d * xd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile512_q6_K_n, avx512_tile_q6_K, avx512_dot_q6_K)

// y * sign(x) for 64 bytes (there is no 512-bit VPSIGNB): negate where x < 0, zero where x == 0.
inline __m512i sign_epi8_512(__m512i y, __m512i x) {
  const __mmask64 neg = _mm512_movepi8_mask(x);
  const __mmask64 nonzero = _mm512_test_epi8_mask(x, x);
  return _mm512_maskz_mov_epi8(nonzero, _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y));
}

// Weight types whose activations are Q8_0: two 32-element blocks per 512-bit register (lanes
// 0-7 block ib, lanes 8-15 block ib+1). `unpack` gives a block's 32 signed weights; an odd last
// block goes through the 256-bit tile `tail` (same N, so single dots and tiles still agree).
template <int N, class Block, class Unpack, class Tail>
inline void tile512_q8act(int64_t n, const Block* x, const void* va, size_t astride, float* out, int64_t ostride,
                          Unpack unpack, Tail tail) {
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK8_0;
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    const __m512i qx = combine256(unpack(x[ib]), unpack(x[ib + 1]));
    const __m512i ax = _mm512_abs_epi8(qx);
    const float dx0 = x86_h2f(x[ib].d), dx1 = x86_h2f(x[ib + 1].d);
    for (int t = 0; t < N; ++t) {
      const __m512i qy = combine256(load256(y[t][ib].qs), load256(y[t][ib + 1].qs));
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sign_epi8_512(qy, qx));
      const __m256 d0 = _mm256_set1_ps(dx0 * x86_h2f(y[t][ib].d));
      const __m256 d1 = _mm256_set1_ps(dx1 * x86_h2f(y[t][ib + 1].d));
      const __m512 dv =
          _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(d0)), _mm256_castps_pd(d1), 1));
      acc[t] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(p), acc[t]);
    }
  }
  float rest[N] = {};
  if (ib < nb) tail(&x[ib], &y[0][ib], astride, rest);
  for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]) + rest[t];
}

template <int N>
void tile512_q8_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  tile512_q8act<N>(
      n, static_cast<const BlockQ8_0*>(vw), va, astride, out, ostride, [](const BlockQ8_0& b) { return load256(b.qs); },
      [](const BlockQ8_0* x, const BlockQ8_0* y, size_t as, float* o) { tile_q8_0_n<N>(QK8_0, x, y, as, o, 1); });
}
PICOLM_TILE_ENTRY_POINTS(tile512_q8_0_n, avx512_tile_q8_0, avx512_dot_q8_0)

template <int N>
void tile512_q4_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  tile512_q8act<N>(
      n, static_cast<const BlockQ4_0*>(vw), va, astride, out, ostride,
      [](const BlockQ4_0& b) { return _mm256_sub_epi8(nibbles_to_bytes(b.qs), _mm256_set1_epi8(8)); },
      [](const BlockQ4_0* x, const BlockQ8_0* y, size_t as, float* o) { tile_q4_0_n<N>(QK4_0, x, y, as, o, 1); });
}
PICOLM_TILE_ENTRY_POINTS(tile512_q4_0_n, avx512_tile_q4_0, avx512_dot_q4_0)

template <int N>
void tile512_q5_0_n(int64_t n, const void* vw, const void* va, size_t astride, float* out, int64_t ostride) {
  tile512_q8act<N>(
      n, static_cast<const BlockQ5_0*>(vw), va, astride, out, ostride,
      [](const BlockQ5_0& b) {
        // value - 16 = nibble | 0xF0 (as int8) when the fifth bit is clear, the nibble when set.
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
        return _mm256_or_si256(nibbles_to_bytes(b.qs), hi);
      },
      [](const BlockQ5_0* x, const BlockQ8_0* y, size_t as, float* o) { tile_q5_0_n<N>(QK5_0, x, y, as, o, 1); });
}
PICOLM_TILE_ENTRY_POINTS(tile512_q5_0_n, avx512_tile_q5_0, avx512_dot_q5_0)

}  // namespace

void fill_avx512_table(KernelTable& t) {
  t.name = "avx512";
  fill_x86_common(t);
  t.vec_dot[ix(GgmlType::Q4_K)] = avx512_dot_q4_K;
  t.vec_dot[ix(GgmlType::Q6_K)] = avx512_dot_q6_K;
  t.vec_dot[ix(GgmlType::Q8_0)] = avx512_dot_q8_0;
  t.vec_dot_tile[ix(GgmlType::Q4_K)] = avx512_tile_q4_K;
  t.vec_dot_tile[ix(GgmlType::Q6_K)] = avx512_tile_q6_K;
  t.vec_dot_tile[ix(GgmlType::Q8_0)] = avx512_tile_q8_0;
  t.vec_dot[ix(GgmlType::Q4_0)] = avx512_dot_q4_0;
  t.vec_dot[ix(GgmlType::Q5_0)] = avx512_dot_q5_0;
  t.vec_dot_tile[ix(GgmlType::Q4_0)] = avx512_tile_q4_0;
  t.vec_dot_tile[ix(GgmlType::Q5_0)] = avx512_tile_q5_0;
}

}  // namespace picolm::kq
