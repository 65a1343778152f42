// Internal: batched causal attention and SiLU written once over a small vector-traits type V,
// instantiated by vec_ops_avx2.cpp (V = 8 x f32) and vec_ops_avx512.cpp (V = 16 x f32).
//
// V provides: W (lanes), F (vector), M (lane mask), kJ / kD (register blocking of the two
// products), zero, set1, load, store (aligned), loadu, storeu, add, sub, mul, div, min, max (max(a, b)
// returns b when a is NaN, like maxps), fma, gt, lanes_see (lo[lane] <= p <= pos[lane]: the row of the
// lane sees position p), select (m ? x : y),
// select0 (m ? x : 0), fma_mask (m ? a * b + c : c), any, round_nearest, pow2i (2^n for integral
// n in [-126, 127]), from_f16 (W fp16 values, unaligned), iota (lane i holds float(i)), hmax
// (largest lane), first (lane 0).
//
// Attention keeps query rows in vector lanes (q and the output accumulator are stored transposed,
// [head_dim][rows]), so a row's arithmetic never leaves its lane: the max, the sum and the products
// are lane-wise, in position order, whatever the other lanes hold. Lanes whose row must not see a
// position (above it, or below its sliding window) are masked (score -inf, weight 0, accumulator
// update skipped), so the operations a row performs are the same in any tile: this is what makes
// results independent of batch splits. A block a row sees nothing of leaves its state untouched
// (alpha exactly 1, weights +0), so such blocks may be run or skipped without changing any bit.
// Masking selects rather than multiplies, so whatever the cache holds at a masked position
// (another position's row in a ring, even NaN) cannot reach the result.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"
#include "kernels/vec_ops_attention.h"

namespace picolm::vecops_detail {
namespace {  // each including file gets its own copy, built for its ISA flags (no ODR merging)

// exp(x) for float lanes: Cephes' expf polynomial (about 1 ulp on [-ln2/2, ln2/2]) scaled by 2^n.
// Inputs are clamped to [-87.33, 88]: below, the result is ~1e-38 instead of a denormal or 0
// (callers that need an exact 0 mask it); above, ~1.6e38 instead of inf. exp(0) is exactly 1.
template <class V>
inline typename V::F exp_lanes(typename V::F x) {
  using F = typename V::F;
  x = V::max(x, V::set1(-87.33654f));  // max() returns the constant for a NaN x
  x = V::min(x, V::set1(88.0f));
  const F n = V::round_nearest(V::mul(x, V::set1(1.44269504088896341f)));
  F r = V::fma(n, V::set1(-0.693359375f), x);  // ln2 split in two so n * ln2_hi is exact
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  F p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  const F y = V::fma(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::mul(y, V::pow2i(n));
}

template <class V>
void silu_mul_simd(int n, float* gate, const float* up) {
  using F = typename V::F;
  constexpr int W = V::W;
  auto one = [](float* g, const float* u) {
    const F x = V::loadu(g);
    const F e = exp_lanes<V>(V::sub(V::zero(), x));
    V::storeu(g, V::mul(V::div(x, V::add(V::set1(1.0f), e)), V::loadu(u)));
  };
  int i = 0;
  for (; i + W <= n; i += W) one(gate + i, up + i);
  if (i < n) {  // the tail goes through the same vector code, so no element depends on its index
    alignas(64) float g[W] = {}, u[W] = {};
    std::memcpy(g, gate + i, size_t(n - i) * sizeof(float));
    std::memcpy(u, up + i, size_t(n - i) * sizeof(float));
    one(g, u);
    std::memcpy(gate + i, g, size_t(n - i) * sizeof(float));
  }
}

// Scores of J positions for C vectors of rows: s[j][rows] = sum_d qt[d][rows] * kb[j][d], d in order.
template <class V, int J, int C>
inline void attn_scores(const float* qt, int rp, const float* kb, int hd, float* s) {
  using F = typename V::F;
  F acc[J][C];
  for (int j = 0; j < J; ++j)
    for (int c = 0; c < C; ++c) acc[j][c] = V::zero();
  for (int d = 0; d < hd; ++d) {
    F q[C];
    for (int c = 0; c < C; ++c) q[c] = V::load(qt + size_t(d) * rp + c * V::W);
    for (int j = 0; j < J; ++j) {
      const F k = V::set1(kb[size_t(j) * hd + d]);
      for (int c = 0; c < C; ++c) acc[j][c] = V::fma(q[c], k, acc[j][c]);
    }
  }
  for (int j = 0; j < J; ++j)
    for (int c = 0; c < C; ++c) V::store(s + j * kAttentionLanes + c * V::W, acc[j][c]);
}

// acc[d][rows] += sum_j p[j][rows] * vb[j][d] for D dimensions, j in order. Without FULL, lanes
// whose row does not see position b0 + j keep their accumulator untouched for that j.
template <class V, int D, int C, bool FULL>
inline void attn_values(float* acc, int rp, const float* p, const float* vb, int hd, int nb, const int32_t* pos,
                        const int32_t* lo, int32_t b0) {
  using F = typename V::F;
  F a[D][C];
  for (int d = 0; d < D; ++d)
    for (int c = 0; c < C; ++c) a[d][c] = V::load(acc + size_t(d) * rp + c * V::W);
  for (int j = 0; j < nb; ++j) {
    F w[C];
    typename V::M mask[C];
    for (int c = 0; c < C; ++c) {
      w[c] = V::load(p + j * kAttentionLanes + c * V::W);
      if constexpr (!FULL) mask[c] = V::lanes_see(pos + c * V::W, lo + c * V::W, b0 + j);
    }
    for (int d = 0; d < D; ++d) {
      const F v = V::set1(vb[size_t(j) * hd + d]);
      for (int c = 0; c < C; ++c) {
        if constexpr (FULL) {
          a[d][c] = V::fma(w[c], v, a[d][c]);
        } else {
          a[d][c] = V::fma_mask(mask[c], w[c], v, a[d][c]);
        }
      }
    }
  }
  for (int d = 0; d < D; ++d)
    for (int c = 0; c < C; ++c) V::store(acc + size_t(d) * rp + c * V::W, a[d][c]);
}

// One block [b0, b0 + nb) for the C vectors of rows starting at row g0. FULL: every row sees every
// position of the block.
template <class V, int C, bool FULL>
void attn_group_block(const AttentionWork& w, int hd, int g0, int32_t b0, int nb) {
  using F = typename V::F;
  constexpr int W = V::W;
  const int rp = w.rows_padded;
  // 1. Scores.
  int j = 0;
  for (; j + V::kJ <= nb; j += V::kJ)
    attn_scores<V, V::kJ, C>(w.qt + g0, rp, w.kb + size_t(j) * hd, hd, w.s + j * kAttentionLanes);
  for (; j < nb; ++j) attn_scores<V, 1, C>(w.qt + g0, rp, w.kb + size_t(j) * hd, hd, w.s + j * kAttentionLanes);
  // 2. Online softmax, lane-wise: new max, rescale factor, weights and their sum in position order.
  F alpha[C];
  bool rescale = false;
  for (int c = 0; c < C; ++c) {
    const int r0 = g0 + c * W;
    float* s = w.s + c * W;
    const F neg_inf = V::set1(-INFINITY);
    F bmax = neg_inf;
    for (int jj = 0; jj < nb; ++jj) {
      F x = V::load(s + jj * kAttentionLanes);
      if constexpr (!FULL) {
        x = V::select(V::lanes_see(w.pos + r0, w.lo + r0, b0 + jj), x, neg_inf);
        V::store(s + jj * kAttentionLanes, x);
      }
      bmax = V::max(bmax, x);
    }
    const F m_old = V::load(w.m + r0);
    const F m_new = V::max(m_old, bmax);
    // alpha = exp(m_old - m_new) where the max rose, exactly 1 elsewhere (also for rows that see
    // none of this block: their state must not change).
    alpha[c] = V::select(V::gt(m_new, m_old), exp_lanes<V>(V::sub(m_old, m_new)), V::set1(1.0f));
    rescale = rescale || V::any(V::gt(m_new, m_old));
    F l = V::mul(V::load(w.l + r0), alpha[c]);
    for (int jj = 0; jj < nb; ++jj) {
      F p = exp_lanes<V>(V::sub(V::load(s + jj * kAttentionLanes), m_new));
      if constexpr (!FULL) p = V::select0(V::lanes_see(w.pos + r0, w.lo + r0, b0 + jj), p);
      V::store(s + jj * kAttentionLanes, p);
      l = V::add(l, p);  // masked lanes add +0 to a positive sum (or to 0 for padding): no change
    }
    V::store(w.m + r0, m_new);
    V::store(w.l + r0, l);
  }
  // 3. Rescale the accumulators (alpha is exactly 1 in lanes whose max did not rise).
  if (rescale) {
    for (int d = 0; d < hd; ++d)
      for (int c = 0; c < C; ++c) {
        float* a = w.acc + size_t(d) * rp + g0 + c * W;
        V::store(a, V::mul(V::load(a), alpha[c]));
      }
  }
  // 4. acc += P V.
  int d = 0;
  for (; d + V::kD <= hd; d += V::kD)
    attn_values<V, V::kD, C, FULL>(w.acc + size_t(d) * rp + g0, rp, w.s, w.vb + d, hd, nb, w.pos + g0, w.lo + g0, b0);
  for (; d < hd; ++d)
    attn_values<V, 1, C, FULL>(w.acc + size_t(d) * rp + g0, rp, w.s, w.vb + d, hd, nb, w.pos + g0, w.lo + g0, b0);
}

// K block [nb][hd] (fp16, rows kv_stride apart) -> kt [hd][kAttentionBlock] in f32; positions
// [nb, kAttentionBlock) are zeroed. 8 x 8 tiles go through an AVX transpose; the edges are scalar
// (fp16 -> f32 is exact, so both give the same values).
inline void transpose_k_block(const uint16_t* k, int64_t kv_stride, int nb, int hd, float* kt) {
  constexpr int B = kAttentionBlock;
  int j0 = 0;
  for (; j0 + 8 <= nb; j0 += 8) {
    int d0 = 0;
    for (; d0 + 8 <= hd; d0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + (j0 + i) * kv_stride + d0)));
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      const __m256 o[8] = {
          _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
          _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
          _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
          _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + size_t(d0 + i) * B + j0, o[i]);
    }
    for (; d0 < hd; ++d0)
      for (int i = 0; i < 8; ++i) kt[size_t(d0) * B + j0 + i] = fp16_to_fp32(k[(j0 + i) * kv_stride + d0]);
  }
  for (; j0 < nb; ++j0)
    for (int d = 0; d < hd; ++d) kt[size_t(d) * B + j0] = fp16_to_fp32(k[j0 * kv_stride + d]);
  for (int d = 0; d < hd; ++d) std::fill(kt + size_t(d) * B + nb, kt + size_t(d + 1) * B, 0.0f);
}

// The same arithmetic as attention_simd (each score a fused multiply-add chain over d from 0; max;
// rescale by exp_lanes(m_old - m_new) only where the max rose; weights exp_lanes(s - m) summed in
// position order; acc updated by one fused multiply-add per position in order), laid out with
// positions in lanes and one row at a time. For tiles of a few rows (decoding a token) this wastes
// no lanes; the results are bit-identical to attention_simd's, so either may run any tile.
template <class V>
void attention_rows_simd(const AttentionTile& a) {
  using F = typename V::F;
  constexpr int W = V::W, B = kAttentionBlock, NV = B / W;
  const int hd = a.head_dim, n_rows = a.n_tok * a.n_grp;
  const AttentionWork w = carve_attention_work(hd, n_rows, a.work);
  const int hdp = w.hd_padded;
  static_assert((kAttentionLanes / 2) % W == 0, "hd_padded is a whole number of vectors");
  float* qs = w.qt;  // [n_rows][head_dim]
  for (int r = 0; r < n_rows; ++r) {
    const float* q = a.q + (r / a.n_grp) * a.row_stride + (r % a.n_grp) * hd;
    for (int d = 0; d < hd; ++d) qs[size_t(r) * hd + d] = q[d] * a.scale;
    w.m[r] = -INFINITY;
    w.l[r] = 0.0f;
  }
  std::fill(w.acc, w.acc + size_t(n_rows) * hdp, 0.0f);
  float* p = w.s;  // [kAttentionBlock]
  const int32_t last = a.pos0 + a.n_tok - 1;
  for (int32_t b0 = window_first(a.pos0, a.window) / B * B; b0 <= last; b0 += B) {
    const int nb = std::min<int32_t>(B, last + 1 - b0);
    const int64_t slot0 = kv_slot(b0, a.kv_ring);  // the block's slots are contiguous
    transpose_k_block(a.k + slot0 * a.kv_stride, a.kv_stride, nb, hd, w.kb);
    for (int j = 0; j < nb; ++j) {
      const uint16_t* v = a.v + (slot0 + j) * a.kv_stride;
      float* vd = w.vb + size_t(j) * hdp;
      int d = 0;
      for (; d + W <= hd; d += W) V::store(vd + d, V::from_f16(v + d));
      for (; d < hd; ++d) vd[d] = fp16_to_fp32(v[d]);
      for (; d < hdp; ++d) vd[d] = 0.0f;
    }
    for (int r = 0; r < n_rows; ++r) {
      // The row sees block positions [j0, nr).
      const int32_t pos = a.pos0 + r / a.n_grp;
      const int nr = std::min<int32_t>(nb, pos + 1 - b0);
      const int j0 = std::max<int32_t>(0, window_first(pos, a.window) - b0);
      if (nr <= j0) continue;
      F sc[NV];
      for (int v = 0; v < NV; ++v) sc[v] = V::zero();
      const float* q = qs + size_t(r) * hd;
      for (int d = 0; d < hd; ++d) {
        const F qd = V::set1(q[d]);
        for (int v = 0; v < NV; ++v) sc[v] = V::fma(qd, V::load(w.kb + size_t(d) * B + v * W), sc[v]);
      }
      F bmax = V::set1(-INFINITY);
      for (int v = 0; v < NV; ++v) {
        const F x = V::select(V::gt(V::set1(float(nr - v * W)), V::iota()), sc[v], V::set1(-INFINITY));
        bmax = V::max(bmax, V::select(V::gt(V::set1(float(j0 - v * W)), V::iota()), V::set1(-INFINITY), x));
      }
      const float m_old = w.m[r], m_new = std::max(m_old, V::hmax(bmax));
      float* acc = w.acc + size_t(r) * hdp;
      float l = w.l[r];
      if (m_new > m_old) {
        const F alpha = exp_lanes<V>(V::set1(m_old - m_new));
        l *= V::first(alpha);
        for (int d = 0; d < hdp; d += W) V::store(acc + d, V::mul(V::load(acc + d), alpha));
      }
      for (int v = 0; v < NV; ++v) V::store(p + v * W, exp_lanes<V>(V::sub(sc[v], V::set1(m_new))));
      for (int j = j0; j < nr; ++j) l += p[j];
      w.m[r] = m_new;
      w.l[r] = l;
      int d = 0;
      for (; d + 4 * W <= hdp; d += 4 * W) {
        F acc4[4];
        for (int i = 0; i < 4; ++i) acc4[i] = V::load(acc + d + i * W);
        for (int j = j0; j < nr; ++j) {
          const F pj = V::set1(p[j]);
          const float* vj = w.vb + size_t(j) * hdp + d;
          for (int i = 0; i < 4; ++i) acc4[i] = V::fma(pj, V::load(vj + i * W), acc4[i]);
        }
        for (int i = 0; i < 4; ++i) V::store(acc + d + i * W, acc4[i]);
      }
      for (; d < hdp; d += W) {
        F acc1 = V::load(acc + d);
        for (int j = j0; j < nr; ++j) acc1 = V::fma(V::set1(p[j]), V::load(w.vb + size_t(j) * hdp + d), acc1);
        V::store(acc + d, acc1);
      }
    }
  }
  for (int r = 0; r < n_rows; ++r) {
    float* out = a.out + (r / a.n_grp) * a.row_stride + (r % a.n_grp) * hd;
    const float inv = 1.0f / w.l[r];
    for (int d = 0; d < hd; ++d) out[d] = w.acc[size_t(r) * hdp + d] * inv;
  }
}

template <class V>
void attention_simd(const AttentionTile& a) {
  constexpr int W = V::W, B = kAttentionBlock;
  static_assert(2 * W <= kAttentionLanes, "a row group is at most two vectors");
  const int hd = a.head_dim, n_rows = a.n_tok * a.n_grp;
  const AttentionWork w = carve_attention_work(hd, n_rows, a.work);
  const int rp = w.rows_padded;
  for (int r = 0; r < rp; ++r) {
    w.pos[r] = r < n_rows ? a.pos0 + r / a.n_grp : -1;
    w.lo[r] = r < n_rows ? window_first(w.pos[r], a.window) : 0;
    w.m[r] = -INFINITY;
    w.l[r] = 0.0f;
  }
  std::fill(w.acc, w.acc + size_t(hd) * rp, 0.0f);
  std::fill(w.qt, w.qt + size_t(hd) * rp, 0.0f);
  for (int r = 0; r < n_rows; ++r) {
    const float* q = a.q + (r / a.n_grp) * a.row_stride + (r % a.n_grp) * hd;
    for (int d = 0; d < hd; ++d) w.qt[size_t(d) * rp + r] = q[d] * a.scale;
  }
  const int32_t last = a.pos0 + a.n_tok - 1;
  for (int32_t b0 = w.lo[0] / B * B; b0 <= last; b0 += B) {  // rows are in position order: lo[0] is the least
    const int nb_tile = std::min<int32_t>(B, last + 1 - b0);
    const int64_t slot0 = kv_slot(b0, a.kv_ring);  // the block's slots are contiguous
    for (int j = 0; j < nb_tile; ++j) {  // fp16 -> f32 is exact, so vector and scalar tails agree
      const uint16_t* k = a.k + (slot0 + j) * a.kv_stride;
      const uint16_t* v = a.v + (slot0 + j) * a.kv_stride;
      float* kd = w.kb + size_t(j) * hd;
      float* vd = w.vb + size_t(j) * hd;
      int d = 0;
      for (; d + W <= hd; d += W) {
        V::store(kd + d, V::from_f16(k + d));
        V::store(vd + d, V::from_f16(v + d));
      }
      for (; d < hd; ++d) {
        kd[d] = fp16_to_fp32(k[d]);
        vd[d] = fp16_to_fp32(v[d]);
      }
    }
    for (int g0 = 0; g0 < n_rows; g0 += 2 * W) {
      const int C = n_rows - g0 > W ? 2 : 1;
      const int g_end = std::min(g0 + C * W, n_rows);  // real rows of the group
      const int32_t pmax = w.pos[g_end - 1];
      if (pmax < b0 || w.lo[g0] >= b0 + B) continue;  // no row of the group sees this block
      const int nb = std::min<int32_t>(B, pmax + 1 - b0);
      const bool full = g0 + C * W <= n_rows && w.pos[g0] >= b0 + nb - 1 && w.lo[g_end - 1] <= b0;
      if (C == 2) {
        if (full) attn_group_block<V, 2, true>(w, hd, g0, b0, nb);
        else attn_group_block<V, 2, false>(w, hd, g0, b0, nb);
      } else {
        if (full) attn_group_block<V, 1, true>(w, hd, g0, b0, nb);
        else attn_group_block<V, 1, false>(w, hd, g0, b0, nb);
      }
    }
  }
  for (int r = 0; r < n_rows; ++r) {
    float* out = a.out + (r / a.n_grp) * a.row_stride + (r % a.n_grp) * hd;
    const float inv = 1.0f / w.l[r];
    for (int d = 0; d < hd; ++d) out[d] = w.acc[size_t(d) * rp + r] * inv;
  }
}

}  // namespace
}  // namespace picolm::vecops_detail
