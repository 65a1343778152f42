// AVX2 + FMA + F16C twins of vec_ops_ref.cpp (compiled with -mavx2 -mfma -mf16c).
#include <immintrin.h>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"
#include "kernels/vec_ops_x86_impl.h"
#include "kernels/vec_ops_x86_v256.h"

namespace picolm {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

float dot_avx2(int n, const uint16_t* x, const float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8)));
    a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + i), a0);
  }
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += fp16_to_fp32(x[i]) * y[i];
  return s;
}

void axpy_avx2(int n, float a, const uint16_t* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, x0, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

void to_f16_avx2(int n, const float* x, uint16_t* y) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Rows in lanes for tiles of many rows; positions in lanes when a tile would fill at most half a
// vector. The two give bit-identical rows.
void attention_avx2(const AttentionTile& a) {
  using vecops_detail::V256;
  if (2 * a.n_tok * a.n_grp <= V256::W) vecops_detail::attention_rows_simd<V256>(a);
  else vecops_detail::attention_simd<V256>(a);
}
void silu_mul_avx2(int n, float* gate, const float* up) {
  vecops_detail::silu_mul_simd<vecops_detail::V256>(n, gate, up);
}

}  // namespace

void vecops_detail::fill_avx2(VecOps& v) {
  v.name = "avx2";
  v.dot_f16_f32 = dot_avx2;
  v.axpy_f16 = axpy_avx2;
  v.f32_to_f16 = to_f16_avx2;
  v.attention = attention_avx2;
  v.silu_mul = silu_mul_avx2;
}

}  // namespace picolm
