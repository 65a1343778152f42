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

// Per block and token the work outside the multiply-adds is kept small, since with tiles of up to
// 8 tokens it rivals them: the weight side (unpacked nibbles, scale broadcasts, the per-lane
// factors d | -dmin) is built once per block for all tokens; per token the 8 subblock sums and
// the 8 min products (min[s] * (bsum[2s] + bsum[2s+1]), one VPMADDWD) are packed into one
// register and enter the float accumulator with one multiply and one FMA.
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
  // Two groups of 64 weights per step: VPDPBUSD gives sums of 4 products per 32-bit lane (at most
  // 4 * 15 * 128 = 7680, so VPACKSSDW packs them to 16 bits exactly), and one VPDPWSSD applies
  // the subblock scales: 3 multiply ops per 128 weights instead of 4 (VPMADDUBSW + VPDPWSSD
  // twice). In 128-bit lane L of the packed register, words 0-3 come from the first group's lane
  // L and words 4-7 from the second's, so word w of step h has subblock
  // 4h + (L >= 2) + 2 * (w % 8 >= 4), with L = w / 8; sidx holds those indices.
  __m512i sidx[2];
  PICOLM_UNROLL for (int h = 0; h < 2; ++h) {
    alignas(64) int16_t idx[32];
    for (int w = 0; w < 32; ++w) idx[w] = static_cast<int16_t>(4 * h + (w / 8 >= 2 ? 1 : 0) + (w % 8 >= 4 ? 2 : 0));
    sidx[h] = _mm512_load_si512(idx);
  }
  // 16-bit element k of the result is min[k / 2] (the mins are elements 8..15 of the unpacked set).
  const __m256i min_dup_idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  __m512 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m512 dd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x86_h2f(x[i].d)), _mm512_set1_ps(-x86_h2f(x[i].dmin)));
    const __m256i ms = unpack_k4_scales_mins_i16(x[i].scales);
    const __m256i mins_dup = _mm256_permutexvar_epi16(min_dup_idx, ms);
    const __m512i ms512 = _mm512_castsi256_si512(ms);
    __m512i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) sumi[t] = _mm512_setzero_si512();
    PICOLM_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i q4a = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load256(x[i].qs + 64 * h)), nib_shift), m4);
      const __m512i q4b = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load256(x[i].qs + 64 * h + 32)), nib_shift), m4);
      const __m512i sc = _mm512_permutexvar_epi16(sidx[h], ms512);
      PICOLM_UNROLL for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 128 * h;
        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q4a, _mm512_loadu_si512(q8));
        const __m512i pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q4b, _mm512_loadu_si512(q8 + 64));
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_packs_epi32(pa, pb), sc);
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[t]), _mm512_extracti64x4_epi64(sumi[t], 1));
      const __m256i mp = _mm256_madd_epi16(mins_dup, load256(y[t][i].bsums));
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(s8), mp, 1)), dd);
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y[t][i].d), v, acc[t]);
    }
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]);
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
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = x86_h2f(x[i].d);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc512 = _mm512_castsi256_si512(sc16);
    __m512i sumi[N];
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y[t][i].bsums)), 5);  // 32*sum(sc*bsum)
      sumi[t] = combine256(_mm256_sub_epi32(_mm256_setzero_si256(), corr), _mm256_setzero_si256());
    }
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    PICOLM_UNROLL for (int half = 0; half < 2; ++half) {
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
      PICOLM_UNROLL for (int t = 0; t < N; ++t) {
        const int8_t* q8 = y[t][i].qs + 128 * half;
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], sa, _mm512_maddubs_epi16(qa, _mm512_loadu_si512(q8)));
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], sb, _mm512_maddubs_epi16(qb, _mm512_loadu_si512(q8 + 64)));
      }
    }
    PICOLM_UNROLL for (int t = 0; t < N; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(y[t][i].d * xd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]);
}
PICOLM_TILE_ENTRY_POINTS(tile512_q6_K_n, avx512_tile_q6_K, avx512_dot_q6_K)

// Weight types whose activations are Q8_0: two 32-element blocks per 512-bit register (lanes
// 0-7 block ib, lanes 8-15 block ib+1). `unpack` gives a block's 32 signed weights; an odd last
// block goes through the 256-bit tile `tail` (same N, so single dots and tiles still agree).
// VPDPBUSD wants one unsigned operand: the activations are offset to y + 128 (one XOR per
// token) and the weights' share of that offset, 128 * sum(x) per lane, is subtracted once per
// block pair for all tokens, instead of moving signs onto every token's activations (4 ops).
// The integers equal sum(x * y) exactly either way.
template <int N, class Block, class Unpack, class Tail>
inline void tile512_q8act(int64_t n, const Block* x, const void* va, size_t astride, float* out, int64_t ostride,
                          Unpack unpack, Tail tail) {
  const BlockQ8_0* y[N];
  act_rows(va, astride, y);
  const int64_t nb = n / QK8_0;
  const __m512i off = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[N];
  PICOLM_UNROLL for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  // Groups of 4 blocks: the two registers of dot products are folded to 4 lanes per block (two
  // VPERMT2D + add), so the float part (convert, weight scales, activation scales, FMA) runs once
  // per 4 blocks; the activation scales of the 4 blocks (fp16 at byte offsets 0, 34, 68, 102)
  // come from two loads of the 136-byte group and one VPERMT2W.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // 16-bit words 0-3 <- word 0, 4-7 <- word 17, 8-11 <- word 34, 12-15 <- word 51 (pairs packed as
  // lo | hi << 16).
  const __m512i d_idx = _mm512_setr_epi32(0, 0, 17 | 17 << 16, 17 | 17 << 16, 34 | 34 << 16, 34 | 34 << 16, 51 | 51 << 16, 51 | 51 << 16, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i quad_idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  int64_t ib = 0;
  for (; ib + 4 <= nb; ib += 4) {
    static_assert(sizeof(BlockQ8_0) == 34, "activation scale offsets below assume 34-byte Q8_0 blocks");
    const __m512i qx01 = combine256(unpack(x[ib]), unpack(x[ib + 1]));
    const __m512i qx23 = combine256(unpack(x[ib + 2]), unpack(x[ib + 3]));
    const __m512i base01 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qx01));
    const __m512i base23 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qx23));
    const __m128 dx4 = _mm_setr_ps(x86_h2f(x[ib].d), x86_h2f(x[ib + 1].d), x86_h2f(x[ib + 2].d), x86_h2f(x[ib + 3].d));
    const __m512 dx = _mm512_permutexvar_ps(quad_idx, _mm512_castps128_ps512(dx4));
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const BlockQ8_0* yb = &y[t][ib];
      const __m512i p01 = _mm512_dpbusd_epi32(base01, _mm512_xor_si512(combine256(load256(yb[0].qs), load256(yb[1].qs)), off), qx01);
      const __m512i p23 = _mm512_dpbusd_epi32(base23, _mm512_xor_si512(combine256(load256(yb[2].qs), load256(yb[3].qs)), off), qx23);
      const __m512i p = _mm512_add_epi32(_mm512_permutex2var_epi32(p01, even, p23), _mm512_permutex2var_epi32(p01, odd, p23));
      const auto* raw = reinterpret_cast<const uint8_t*>(yb);
      const __m512i dw = _mm512_permutex2var_epi16(_mm512_loadu_si512(raw), d_idx, _mm512_loadu_si512(raw + 64));
      const __m512 dy = _mm512_cvtph_ps(_mm512_castsi512_si256(dw));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), dx), dy, acc[t]);
    }
  }
  for (; ib + 2 <= nb; ib += 2) {
    const __m512i qx = combine256(unpack(x[ib]), unpack(x[ib + 1]));
    const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qx));
    const __m512 dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x86_h2f(x[ib].d)), _mm512_set1_ps(x86_h2f(x[ib + 1].d)));
    PICOLM_UNROLL for (int t = 0; t < N; ++t) {
      const __m512i yu = _mm512_xor_si512(combine256(load256(y[t][ib].qs), load256(y[t][ib + 1].qs)), off);
      const __m512i p = _mm512_dpbusd_epi32(base, yu, qx);
      const __m256i dh = _mm256_mask_set1_epi16(_mm256_set1_epi16(static_cast<short>(y[t][ib].d)), 0xFF00,
                                                static_cast<short>(y[t][ib + 1].d));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), dx), _mm512_cvtph_ps(dh), acc[t]);
    }
  }
  float rest[N] = {};
  if (ib < nb) tail(&x[ib], &y[0][ib], astride, rest);
  PICOLM_UNROLL for (int t = 0; t < N; ++t) out[t * ostride] = hsum512(acc[t]) + rest[t];
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
        // value - 16 = nibble | 0xF0 (as int8) when the fifth bit is clear, the nibble when set;
        // the 32 fifth bits are used directly as a byte mask.
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        const __m256i nib = nibbles_to_bytes(b.qs);
        return _mm256_mask_mov_epi8(_mm256_or_si256(nib, _mm256_set1_epi8(static_cast<char>(0xF0))), _cvtu32_mask32(qh), nib);
      },
      [](const BlockQ5_0* x, const BlockQ8_0* y, size_t as, float* o) { tile_q5_0_n<N>(QK5_0, x, y, as, o, 1); });
}
PICOLM_TILE_ENTRY_POINTS(tile512_q5_0_n, avx512_tile_q5_0, avx512_dot_q5_0)

}  // namespace

void fill_avx512_table(KernelTable& t) {
  t.name = "avx512";
  fill_x86_common(t);
  t.max_dot_tile = 8;
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
