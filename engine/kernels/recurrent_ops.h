// Kernels of the recurrent layers of hybrid models (Qwen3.5's gated delta net, LFM2's short
// convolution, Granite-4.0-H's Mamba-2): the causal depthwise convolution over a micro-batch with its
// carried history, the gated delta-rule state update and the Mamba-2 selective scan. A scalar reference and SIMD twins (AVX2+FMA, NEON), one table
// chosen once from CPU features like VecOps.
// Thread-safety: pure functions; the tables are immutable.
#pragma once
#include <cstddef>
#include <cstdint>

namespace picolm {

// Causal depthwise convolution of n_tok tokens over `channels` channels with `taps` taps:
//   out[t * out_stride + c] = sum_{j = 0 .. taps-1} w[j * channels + c] * in[(t + j) * channels + c]
// `in` holds taps - 1 rows of history (the inputs of the positions before the batch) followed by
// the batch's n_tok rows. The sum runs in j order from 0 (as ggml's ssm_conv), so a token's
// result does not depend on the batch it is in.
struct CausalConv {
  int channels = 0, taps = 0, n_tok = 0;
  const float* in = nullptr;   // [taps - 1 + n_tok][channels]
  const float* w = nullptr;    // [taps][channels]
  float* out = nullptr;        // row t at out + t * out_stride
  int64_t out_stride = 0;
};

// The gated delta rule of one head over n_tok tokens, in token order (Yang et al., "Gated Delta
// Networks", 2024). State S is [dk][dv] (row i: key dim i), for each token t:
//   S *= decay_t;  d = beta_t * (v_t - S^T k_t);  S += k_t d^T;  out_t = S^T q_t
// Both passes over S run along dv (contiguous), so a step is two streams over the state.
struct DeltaRuleHead {
  int dk = 0, dv = 0, n_tok = 0;  // dv <= kMaxDeltaRuleDv
  float* state = nullptr;         // [dk][dv], updated in place
  const float* q = nullptr;       // token t at q + t * qk_stride ([dk]; already scaled)
  const float* k = nullptr;       // token t at k + t * qk_stride ([dk])
  int64_t qk_stride = 0;
  const float* v = nullptr;       // token t at v + t * v_stride ([dv])
  int64_t v_stride = 0;
  const float* decay = nullptr;   // exp(g) of token t at decay[t * gb_stride]
  const float* beta = nullptr;    // beta of token t at beta[t * gb_stride]
  int64_t gb_stride = 0;
  float* out = nullptr;           // token t at out + t * out_stride ([dv])
  int64_t out_stride = 0;
};
constexpr int kMaxDeltaRuleDv = 1024;

// The selective state-space scan of one Mamba-2 head over n_tok tokens, in token order (Dao & Gu,
// "Transformers are SSMs", 2024; ggml's ssm_scan with a scalar A per head). State S is
// [head_dim][d_state]; for each token t, with dt_t = softplus(dt + dt_bias) and dA_t = exp(dt_t A):
//   S[i][:] = S[i][:] * dA_t + B_t * (x_t[i] * dt_t);  out_t[i] = sum_j S[i][j] C_t[j]
// (the D skip, gate and norm are the layer's). Each pass over S runs along d_state (contiguous).
struct SsmScanHead {
  int head_dim = 0, d_state = 0, n_tok = 0;
  float* state = nullptr;        // [head_dim][d_state], updated in place
  const float* x = nullptr;      // token t at x + t * x_stride ([head_dim])
  int64_t x_stride = 0;
  const float* B = nullptr;      // token t at B + t * bc_stride ([d_state]: the head's group)
  const float* C = nullptr;      // token t at C + t * bc_stride
  int64_t bc_stride = 0;
  const float* dt = nullptr;     // dt_t at dt[t * dt_stride] (softplus applied)
  const float* dA = nullptr;     // dA_t at dA[t * dt_stride]
  int64_t dt_stride = 0;
  float* out = nullptr;          // token t at out + t * out_stride ([head_dim])
  int64_t out_stride = 0;
};

struct RecurrentOps {
  const char* name = "scalar";
  void (*causal_conv)(const CausalConv& c) = nullptr;
  void (*delta_rule)(const DeltaRuleHead& h) = nullptr;
  void (*ssm_scan)(const SsmScanHead& h) = nullptr;
};

const RecurrentOps& scalar_recurrent_ops();
const RecurrentOps& best_recurrent_ops();  // honours PICOLM_KERNELS=scalar
// Every variant this CPU can run (scalar first); returns the count.
int available_recurrent_ops(const RecurrentOps** out, int max_out);

namespace recurrent_detail {
void fill_avx2(RecurrentOps& r);  // recurrent_ops_avx2.cpp (x86-64 builds only)
void fill_neon(RecurrentOps& r);  // recurrent_ops_neon.cpp (AArch64 builds only)
}

}  // namespace picolm
