// Internal: 8-lane AVX2 + FMA + F16C vector traits for vec_ops_x86_impl.h. Included by
// vec_ops_avx2.cpp and by vec_ops_avx512.cpp (which uses them for tiles of a few rows).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace picolm::vecops_detail {
namespace {  // each including file gets its own copy, built for its ISA flags (no ODR merging)

struct V256 {
  static constexpr int W = 8;
  static constexpr int kJ = 6;  // scores: 6 positions x 2 vectors = 12 accumulators (16 registers)
  static constexpr int kD = 4;  // values: 4 dimensions x 2 vectors = 8 accumulators, plus masks
  using F = __m256;
  using M = __m256;  // all-ones / all-zeros lanes
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, F x) { _mm256_store_ps(p, x); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M lanes_see(const int32_t* pos, const int32_t* lo, int32_t p) {
    const __m256i vp = _mm256_load_si256(reinterpret_cast<const __m256i*>(pos));
    const __m256i vl = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
    const __m256i ge = _mm256_cmpgt_epi32(vp, _mm256_set1_epi32(p - 1));  // pos >= p (p >= 0)
    const __m256i below = _mm256_cmpgt_epi32(vl, _mm256_set1_epi32(p));   // p < lo
    return _mm256_castsi256_ps(_mm256_andnot_si256(below, ge));
  }
  static F select(M m, F x, F y) { return _mm256_blendv_ps(y, x, m); }
  static F select0(M m, F x) { return _mm256_and_ps(m, x); }
  static F fma_mask(M m, F a, F b, F c) { return _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), m); }
  static bool any(M m) { return _mm256_movemask_ps(m) != 0; }
  static F round_nearest(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F pow2i(F n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static F iota() { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
  static float hmax(F x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float first(F x) { return _mm256_cvtss_f32(x); }
  static F from_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

}  // namespace
}  // namespace picolm::vecops_detail
