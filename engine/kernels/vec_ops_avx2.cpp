// AVX2 + FMA + F16C twins of vec_ops_ref.cpp (compiled with -mavx2 -mfma -mf16c).
#include <immintrin.h>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"
#include "kernels/vec_ops_x86_impl.h"
#include "kernels/vec_ops_x86_v256.h"

namespace picolm {
namespace {

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
  v.f32_to_f16 = to_f16_avx2;
  v.attention = attention_avx2;
  v.silu_mul = silu_mul_avx2;
}

}  // namespace picolm
