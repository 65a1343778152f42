#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/recurrent_ops.h"

namespace picolm {
namespace {

void causal_conv_ref(const CausalConv& c) {
  for (int t = 0; t < c.n_tok; ++t) {
    float* out = c.out + t * c.out_stride;
    for (int ch = 0; ch < c.channels; ++ch) {
      float sum = 0.0f;
      for (int j = 0; j < c.taps; ++j) sum += c.w[size_t(j) * c.channels + ch] * c.in[size_t(t + j) * c.channels + ch];
      out[ch] = sum;
    }
  }
}

// The rule written as in the paper, one element at a time; the twins vectorize along dv.
void delta_rule_ref(const DeltaRuleHead& h) {
  float kv[kMaxDeltaRuleDv];
  for (int t = 0; t < h.n_tok; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    const float decay = h.decay[t * h.gb_stride], beta = h.beta[t * h.gb_stride];
    float* out = h.out + t * h.out_stride;
    for (int j = 0; j < h.dv; ++j) kv[j] = 0.0f;
    for (int i = 0; i < h.dk; ++i) {
      float* s = h.state + size_t(i) * h.dv;
      for (int j = 0; j < h.dv; ++j) {
        s[j] *= decay;
        kv[j] += s[j] * k[i];
      }
    }
    for (int j = 0; j < h.dv; ++j) {
      kv[j] = (v[j] - kv[j]) * beta;  // now the update d
      out[j] = 0.0f;
    }
    for (int i = 0; i < h.dk; ++i) {
      float* s = h.state + size_t(i) * h.dv;
      for (int j = 0; j < h.dv; ++j) {
        s[j] += k[i] * kv[j];
        out[j] += s[j] * q[i];
      }
    }
  }
}

// The scan as ggml writes it per state element; the twins vectorize along d_state.
void ssm_scan_ref(const SsmScanHead& h) {
  for (int t = 0; t < h.n_tok; ++t) {
    const float* x = h.x + t * h.x_stride;
    const float* B = h.B + t * h.bc_stride;
    const float* C = h.C + t * h.bc_stride;
    const float dt = h.dt[t * h.dt_stride], dA = h.dA[t * h.dt_stride];
    float* out = h.out + t * h.out_stride;
    for (int i = 0; i < h.head_dim; ++i) {
      float* s = h.state + size_t(i) * h.d_state;
      const float x_dt = x[i] * dt;
      float sum = 0.0f;
      for (int j = 0; j < h.d_state; ++j) {
        s[j] = s[j] * dA + B[j] * x_dt;
        sum += s[j] * C[j];
      }
      out[i] = sum;
    }
  }
}

struct Tables {
  RecurrentOps scalar{"scalar", causal_conv_ref, delta_rule_ref, ssm_scan_ref};
  RecurrentOps simd = scalar;
  const RecurrentOps* list[2] = {&scalar, nullptr};
  int count = 1;
  const RecurrentOps* best = &scalar;
  Tables() {
#if defined(__x86_64__)
    const CpuFeatures f = detect_cpu_features();
    if (f.avx2 && f.fma) {
      recurrent_detail::fill_avx2(simd);
      list[count++] = &simd;
      best = &simd;
    }
#elif defined(__aarch64__)
    recurrent_detail::fill_neon(simd);  // NEON is part of the AArch64 base ISA
    list[count++] = &simd;
    best = &simd;
#endif
    const char* env = std::getenv("PICOLM_KERNELS");
    if (env && std::strcmp(env, "scalar") == 0) best = &scalar;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const RecurrentOps& scalar_recurrent_ops() { return tables().scalar; }
const RecurrentOps& best_recurrent_ops() { return *tables().best; }
int available_recurrent_ops(const RecurrentOps** out, int max_out) {
  int n = 0;
  for (int i = 0; i < tables().count && n < max_out; ++i) out[n++] = tables().list[i];
  return n;
}

}  // namespace picolm
