// NEON twins of recurrent_ops_ref.cpp (AArch64: NEON is part of the base ISA, no flags).
// Results differ from the reference only by fused multiply-add rounding.
#include <arm_neon.h>

#include "kernels/recurrent_ops.h"

namespace picolm {
namespace {

void causal_conv_neon(const CausalConv& c) {
  const int C = c.channels;
  for (int t = 0; t < c.n_tok; ++t) {
    float* out = c.out + t * c.out_stride;
    const float* in = c.in + size_t(t) * C;
    int ch = 0;
    for (; ch + 4 <= C; ch += 4) {
      float32x4_t acc = vdupq_n_f32(0.0f);
      for (int j = 0; j < c.taps; ++j)
        acc = vfmaq_f32(acc, vld1q_f32(c.w + size_t(j) * C + ch), vld1q_f32(in + size_t(j) * C + ch));
      vst1q_f32(out + ch, acc);
    }
    for (; ch < C; ++ch) {
      float sum = 0.0f;
      for (int j = 0; j < c.taps; ++j) sum += c.w[size_t(j) * C + ch] * in[size_t(j) * C + ch];
      out[ch] = sum;
    }
  }
}

// Columns of 4 values of dv at a time: S^T k, the update d and S^T q of those columns depend only
// on the same columns of S, so each 4-wide column strip is decayed, read for S^T k, updated and
// read for the output while it is in L1 (dk x 16 bytes), with kv and out in registers.
void delta_rule_neon(const DeltaRuleHead& h) {
  const int dk = h.dk, dv = h.dv;
  for (int t = 0; t < h.n_tok; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    const float decay = h.decay[t * h.gb_stride], beta = h.beta[t * h.gb_stride];
    float* out = h.out + t * h.out_stride;
    const float32x4_t vdecay = vdupq_n_f32(decay), vbeta = vdupq_n_f32(beta);
    int j = 0;
    for (; j + 4 <= dv; j += 4) {
      float* col = h.state + j;
      float32x4_t kv = vdupq_n_f32(0.0f);
      for (int i = 0; i < dk; ++i) {
        const float32x4_t s = vmulq_f32(vld1q_f32(col + size_t(i) * dv), vdecay);
        vst1q_f32(col + size_t(i) * dv, s);
        kv = vfmaq_f32(kv, s, vdupq_n_f32(k[i]));
      }
      const float32x4_t d = vmulq_f32(vsubq_f32(vld1q_f32(v + j), kv), vbeta);
      float32x4_t o = vdupq_n_f32(0.0f);
      for (int i = 0; i < dk; ++i) {
        const float32x4_t s = vfmaq_f32(vld1q_f32(col + size_t(i) * dv), vdupq_n_f32(k[i]), d);
        vst1q_f32(col + size_t(i) * dv, s);
        o = vfmaq_f32(o, s, vdupq_n_f32(q[i]));
      }
      vst1q_f32(out + j, o);
    }
    for (; j < dv; ++j) {  // dv not a multiple of 4: the reference's arithmetic per column
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

}  // namespace

namespace recurrent_detail {
void fill_neon(RecurrentOps& r) {
  r.name = "neon";
  r.causal_conv = causal_conv_neon;
  r.delta_rule = delta_rule_neon;
}
}  // namespace recurrent_detail

}  // namespace picolm
