// AVX2+FMA twins of recurrent_ops_ref.cpp (compiled with -mavx2 -mfma; called only when the CPU
// has both). Results differ from the reference only by fused multiply-add rounding.
#include <immintrin.h>

#include "kernels/recurrent_ops.h"

namespace picolm {
namespace {

void causal_conv_avx2(const CausalConv& c) {
  const int C = c.channels;
  for (int t = 0; t < c.n_tok; ++t) {
    float* out = c.out + t * c.out_stride;
    const float* in = c.in + size_t(t) * C;
    int ch = 0;
    for (; ch + 8 <= C; ch += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int j = 0; j < c.taps; ++j)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(c.w + size_t(j) * C + ch), _mm256_loadu_ps(in + size_t(j) * C + ch), acc);
      _mm256_storeu_ps(out + ch, acc);
    }
    for (; ch < C; ++ch) {
      float sum = 0.0f;
      for (int j = 0; j < c.taps; ++j) sum += c.w[size_t(j) * C + ch] * in[size_t(j) * C + ch];
      out[ch] = sum;
    }
  }
}

// Columns of 8 values of dv at a time: S^T k, the update d and S^T q of those columns depend only
// on the same columns of S, so each 8-wide column strip is decayed, read for S^T k, updated and
// read for the output while it is in L1 (dk x 32 bytes), with kv and out in registers.
void delta_rule_avx2(const DeltaRuleHead& h) {
  const int dk = h.dk, dv = h.dv;
  for (int t = 0; t < h.n_tok; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    const float decay = h.decay[t * h.gb_stride], beta = h.beta[t * h.gb_stride];
    float* out = h.out + t * h.out_stride;
    const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta);
    int j = 0;
    for (; j + 8 <= dv; j += 8) {
      float* col = h.state + j;
      __m256 kv = _mm256_setzero_ps();
      for (int i = 0; i < dk; ++i) {
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(col + size_t(i) * dv), vdecay);
        _mm256_storeu_ps(col + size_t(i) * dv, s);
        kv = _mm256_fmadd_ps(s, _mm256_set1_ps(k[i]), kv);
      }
      const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j), kv), vbeta);
      __m256 o = _mm256_setzero_ps();
      for (int i = 0; i < dk; ++i) {
        const __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(k[i]), d, _mm256_loadu_ps(col + size_t(i) * dv));
        _mm256_storeu_ps(col + size_t(i) * dv, s);
        o = _mm256_fmadd_ps(s, _mm256_set1_ps(q[i]), o);
      }
      _mm256_storeu_ps(out + j, o);
    }
    for (; j < dv; ++j) {  // dv not a multiple of 8: the reference's arithmetic per column
      float* col = h.state + j;
      float kv = 0.0f;
      for (int i = 0; i < dk; ++i) {
        col[size_t(i) * dv] *= decay;
        kv += col[size_t(i) * dv] * k[i];
      }
      const float d = (v[j] - kv) * beta;
      float o = 0.0f;
      for (int i = 0; i < dk; ++i) {
        col[size_t(i) * dv] += k[i] * d;
        o += col[size_t(i) * dv] * q[i];
      }
      out[j] = o;
    }
  }
}

// Eight state elements at a time along d_state: the decay-and-update and the dot with C of a row of
// S in one pass, the row's partial sums in a register; the d_state % 8 tail as the reference.
void ssm_scan_avx2(const SsmScanHead& h) {
  const int ds = h.d_state;
  for (int t = 0; t < h.n_tok; ++t) {
    const float* x = h.x + t * h.x_stride;
    const float* B = h.B + t * h.bc_stride;
    const float* C = h.C + t * h.bc_stride;
    const float dt = h.dt[t * h.dt_stride], dA = h.dA[t * h.dt_stride];
    float* out = h.out + t * h.out_stride;
    const __m256 vdA = _mm256_set1_ps(dA);
    for (int i = 0; i < h.head_dim; ++i) {
      float* s = h.state + size_t(i) * ds;
      const float x_dt = x[i] * dt;
      const __m256 vxdt = _mm256_set1_ps(x_dt);
      __m256 acc = _mm256_setzero_ps();
      int j = 0;
      for (; j + 8 <= ds; j += 8) {
        const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(B + j), vxdt, _mm256_mul_ps(_mm256_loadu_ps(s + j), vdA));
        _mm256_storeu_ps(s + j, v);
        acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(C + j), acc);
      }
      // Horizontal sum of the 8 lanes.
      __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
      lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
      lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
      float sum = _mm_cvtss_f32(lo);
      for (; j < ds; ++j) {
        s[j] = s[j] * dA + B[j] * x_dt;
        sum += s[j] * C[j];
      }
      out[i] = sum;
    }
  }
}

}  // namespace

namespace recurrent_detail {
void fill_avx2(RecurrentOps& r) {
  r.name = "avx2";
  r.causal_conv = causal_conv_avx2;
  r.delta_rule = delta_rule_avx2;
  r.ssm_scan = ssm_scan_avx2;
}
}  // namespace recurrent_detail

}  // namespace picolm
