#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"
#include "kernels/vec_ops_attention.h"

namespace picolm {
namespace {

void to_f16_ref(int n, const float* x, uint16_t* y) {
  for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// One row at a time, the plain form of the algorithm the SIMD twins run on tiles: blocks of
// kAttentionBlock positions aligned to position 0, from the block holding the row's first visible
// position; per block, scores of the visible positions, the running max m, the rescale factor
// exp(m_old - m_new), then the weights exp(s - m) summed and applied to V in position order.
void attention_ref(const AttentionTile& a) {
  const int hd = a.head_dim, n_rows = a.n_tok * a.n_grp;
  const vecops_detail::AttentionWork w = vecops_detail::carve_attention_work(hd, n_rows, a.work);
  float* qs = w.qt;   // [head_dim]
  float* acc = w.acc; // [head_dim]
  float* s = w.s;     // [kAttentionBlock]
  for (int r = 0; r < n_rows; ++r) {
    const int t = r / a.n_grp, g = r % a.n_grp;
    const float* q = a.q + t * a.row_stride + g * hd;
    float* out = a.out + t * a.row_stride + g * hd;
    const int32_t last = a.pos0 + t;
    const int32_t first = vecops_detail::window_first(last, a.window);
    for (int d = 0; d < hd; ++d) qs[d] = q[d] * a.scale;
    std::fill(acc, acc + hd, 0.0f);
    float m = -INFINITY, l = 0.0f;
    for (int32_t b0 = first / kAttentionBlock * kAttentionBlock; b0 <= last; b0 += kAttentionBlock) {
      const int j0 = std::max(0, first - b0);  // positions of the block below the window
      const int nb = std::min<int32_t>(kAttentionBlock, last + 1 - b0);
      float bmax = -INFINITY;
      for (int j = j0; j < nb; ++j) {
        const uint16_t* k = a.k + vecops_detail::kv_slot(b0 + j, a.kv_ring) * a.kv_stride;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qs[d] * fp16_to_fp32(k[d]);
        s[j] = dot;
        bmax = std::max(bmax, dot);
      }
      const float m_new = std::max(m, bmax);
      const float alpha = m_new > m ? std::exp(m - m_new) : 1.0f;  // exp(-inf) = 0 on the first block
      l *= alpha;
      for (int d = 0; d < hd; ++d) acc[d] *= alpha;
      for (int j = j0; j < nb; ++j) {
        const float p = std::exp(s[j] - m_new);
        l += p;
        const uint16_t* v = a.v + vecops_detail::kv_slot(b0 + j, a.kv_ring) * a.kv_stride;
        for (int d = 0; d < hd; ++d) acc[d] += p * fp16_to_fp32(v[d]);
      }
      m = m_new;
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
  }
}

void silu_mul_ref(int n, float* gate, const float* up) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

struct Tables {
  VecOps scalar{"scalar", to_f16_ref, attention_ref, silu_mul_ref};
  VecOps avx2 = scalar, avx512 = scalar;
  const VecOps* list[3] = {&scalar, nullptr, nullptr};
  int count = 1;
  const VecOps* best = &scalar;
  Tables() {
#if defined(__x86_64__)
    const CpuFeatures f = detect_cpu_features();
    if (f.avx2 && f.fma && f.f16c) {
      vecops_detail::fill_avx2(avx2);
      list[count++] = &avx2;
      best = &avx2;
      if (f.avx512f) {
        avx512 = avx2;  // entries the AVX-512 file lacks use AVX2
        vecops_detail::fill_avx512(avx512);
        list[count++] = &avx512;
        best = &avx512;
      }
    }
#endif
    const char* env = std::getenv("PICOLM_KERNELS");
    if (env && std::strcmp(env, "scalar") == 0) best = &scalar;
    if (env && std::strcmp(env, "avx2") == 0 && count > 1) best = &avx2;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

size_t attention_work_bytes(int head_dim, int n_rows) {
  return vecops_detail::carve_attention_work(head_dim, n_rows, nullptr).bytes;
}

const VecOps& scalar_vec_ops() { return tables().scalar; }
const VecOps& best_vec_ops() { return *tables().best; }
int available_vec_ops(const VecOps** out, int max_out) {
  int n = 0;
  for (int i = 0; i < tables().count && n < max_out; ++i) out[n++] = tables().list[i];
  return n;
}

}  // namespace picolm
