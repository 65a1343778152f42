// AVX-512F twins of vec_ops_ref.cpp (compiled with -mavx512f -mavx2 -mfma -mf16c): batched
// attention and SiLU on 16-lane vectors; the FP16 row ops stay on the AVX2 versions.
// GCC 12's AVX-512 intrinsics headers use _mm512_undefined_*() and trigger false
// -W(maybe-)uninitialized warnings when inlined (GCC PR 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/vec_ops.h"
#include "kernels/vec_ops_x86_impl.h"

namespace picolm {
namespace {

struct V512 {
  static constexpr int W = 16;
  static constexpr int kJ = 8;  // scores: 8 positions x 2 vectors = 16 accumulators
  static constexpr int kD = 8;  // values: 8 dimensions x 2 vectors = 16 accumulators
  using F = __m512;
  using M = __mmask16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, F x) { _mm512_store_ps(p, x); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M lanes_see(const int32_t* pos, const int32_t* lo, int32_t p) {
    const __m512i vp = _mm512_set1_epi32(p);
    return _mm512_mask_cmple_epi32_mask(_mm512_cmpge_epi32_mask(_mm512_load_si512(pos), vp), _mm512_load_si512(lo), vp);
  }
  static F select(M m, F x, F y) { return _mm512_mask_blend_ps(m, y, x); }
  static F select0(M m, F x) { return _mm512_maskz_mov_ps(m, x); }
  static F fma_mask(M m, F a, F b, F c) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
  static bool any(M m) { return m != 0; }
  static F round_nearest(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F pow2i(F n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static F iota() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static float hmax(F x) { return _mm512_reduce_max_ps(x); }
  static float first(F x) { return _mm512_cvtss_f32(x); }
  static F from_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};

// Rows in lanes for tiles of many rows; positions in lanes when a tile would fill at most half a
// vector (decoding one token of a small GQA group). The two give bit-identical rows.
void attention_avx512(const AttentionTile& a) {
  if (2 * a.n_tok * a.n_grp <= V512::W) vecops_detail::attention_rows_simd<V512>(a);
  else vecops_detail::attention_simd<V512>(a);
}
void silu_mul_avx512(int n, float* gate, const float* up) { vecops_detail::silu_mul_simd<V512>(n, gate, up); }

}  // namespace

void vecops_detail::fill_avx512(VecOps& v) {
  v.name = "avx512";
  v.attention = attention_avx512;
  v.silu_mul = silu_mul_avx512;
}

}  // namespace picolm
