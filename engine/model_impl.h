// Internal: the weights of a loaded model, as views into the GGUF map.
#pragma once
#include <vector>

#include "gguf.h"
#include "kernels/vec_ops.h"
#include "model.h"

namespace picolm {

struct WeightView {
  const void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (row length)
  const uint8_t* packed = nullptr;  // the same matrix in KernelTable::packed form, if repacked
};

// Anonymous private memory (page-aligned, unmapped on destruction): the repacked weights.
class AnonMemory {
 public:
  AnonMemory() = default;
  explicit AnonMemory(size_t n);  // data() == nullptr if the mapping failed
  AnonMemory(AnonMemory&& o) noexcept;
  AnonMemory& operator=(AnonMemory&& o) noexcept;
  AnonMemory(const AnonMemory&) = delete;
  AnonMemory& operator=(const AnonMemory&) = delete;
  ~AnonMemory();
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// FFN variants: down(act(gate(x)) * up(x)).
enum class FfnActivation {
  SiluGated,      // SwiGLU (llama, qwen2, qwen3, smollm3)
  GeluTanhGated,  // GELU with the tanh approximation (gemma3), through ggml's F16 table (see layers.cpp)
};

struct AttnWeights {
  WeightView wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;      // q/k/v biases ([n_head*hd], [n_kv*hd]); empty when absent
  std::vector<float> q_norm, k_norm;  // per-head RMS norms of q and k ([head_dim]); empty when absent
};

struct FfnWeights {
  WeightView gate, up, down;
};

// Gated delta net (qwen35 linear-attention layers; engine/recurrent.h).
struct DeltaNetWeights {
  WeightView qkv;    // [2 * k_heads * hd + v_heads * hd][n_embd]: q | k | v, the conv's input channels
  WeightView z;      // [v_heads * hd][n_embd]: output gate
  WeightView beta;   // [v_heads][n_embd]
  WeightView alpha;  // [v_heads][n_embd]
  WeightView out;    // [n_embd][v_heads * hd]
  std::vector<float> conv;     // [taps][channels] (transposed from the file's [channels][taps])
  std::vector<float> dt_bias;  // [v_heads]
  std::vector<float> a;        // [v_heads], -exp(A_log): the decay rate
  std::vector<float> norm;     // [hd], RMS norm of each head's output
};

// Gated short convolution (lfm2).
struct ShortConvWeights {
  WeightView in_proj;        // [3 * n_embd][n_embd]: B | C | x
  WeightView out_proj;       // [n_embd][n_embd]
  std::vector<float> conv;   // [taps][n_embd] (transposed from the file's [n_embd][taps])
};

// One GGUF tensor of stacked experts, ne {cols, rows, n_expert}: expert e's [rows][cols] matrix
// starts `stride` bytes after expert e - 1's, in the mapped file (never copied or repacked).
struct ExpertStack {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  size_t stride = 0;
  WeightView expert(int e) const { return {data + size_t(e) * stride, type, rows, cols}; }
  size_t expert_bytes() const { return data ? size_t(rows) * row_bytes(type, cols) : 0; }
};

// Routed FFN (engine/moe.h): router, stacked experts, optional shared expert.
struct MoeWeights {
  WeightView router;               // ffn_gate_inp [n_expert][n_embd]
  std::vector<float> select_bias;  // exp_probs_b [n_expert]: added to the probabilities for choosing only; empty: none
  ExpertStack gate, up, down;      // [n_expert][n_ff_exp][n_embd] x2, [n_expert][n_embd][n_ff_exp]
  FfnWeights shared;               // shared expert (SwiGLU); gate.data null when absent
  std::vector<float> shared_gate;  // ffn_gate_inp_shexp [n_embd]: its output times sigmoid(shared_gate . x); empty: 1
  // gemma4 (26B-A4B):
  std::vector<float> expert_scale;  // ffn_down_exps.scale [n_expert]: each expert's output times its own scale; empty: 1
  std::vector<float> router_scale;  // ffn_gate_inp.scale [n_embd]: the router reads rms_norm(x) / sqrt(n_embd) *
                                    // router_scale (x the residual stream, Workspace::x) instead of xn; empty: xn
  FfnActivation act = FfnActivation::SiluGated;  // of the experts and the shared expert
};

// Mamba-2 mixer (granitehybrid; engine/mamba2.h). d_inner = heads * head_dim; the conv runs over
// xBC = x | B | C, conv_channels = d_inner + 2 * groups * d_state.
struct Mamba2Weights {
  // ssm_in ([2 * d_inner + 2 * groups * d_state + heads][n_embd]: z | xBC | dt) as three row slices.
  WeightView z, xbc, dt;
  WeightView out;                 // [n_embd][d_inner]
  std::vector<float> conv;        // [taps][conv_channels] (transposed from the file's [conv_channels][taps])
  std::vector<float> conv_bias;   // [conv_channels]; empty when the file has none
  std::vector<float> dt_bias;     // [heads]
  std::vector<float> a;           // [heads], -exp(A_log): the decay rate
  std::vector<float> d;           // [heads]: the skip x * D
  std::vector<float> norm;        // [d_inner]: RMS norm of each group of d_inner / groups, after the gate
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;             // [n_embd], dequantized at load (tiny)
  std::vector<float> attn_post_norm, ffn_post_norm;   // gemma3: sublayer outputs normed before the residual add
  AttnWeights attn;
  FfnWeights ffn;
  DeltaNetWeights dn;  // LayerKind::DeltaNet only
  ShortConvWeights sc; // LayerKind::ShortConv only
  MoeWeights moe;      // LayerHParams::moe only (ffn unused)
  Mamba2Weights m2;    // LayerKind::Mamba2 only
  // gemma4 per-layer embeddings: x += post_norm(proj(gelu(inp_gate(x)) * the layer's input))
  WeightView ple_gate;                 // [n_embd_per_layer][n_embd]
  WeightView ple_proj;                 // [n_embd][n_embd_per_layer]
  std::vector<float> ple_post_norm;    // [n_embd]
  float out_scale = 1.0f;              // gemma4 layer_output_scale: x *= out_scale after the layer
  // gemma4 MoE layers (26B-A4B): the dense FFN's output norm and the routed branch's input and output
  // norms (post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2) [n_embd]; ffn_post_norm norms their sum.
  std::vector<float> ffn_post_norm_dense, moe_pre_norm, moe_post_norm;
};

// Every matrix of a layer (repacking, accounting): new weight kinds must be listed here. The stacked
// experts (MoeWeights::gate/up/down) are not: they stay in the file's pages (engine/moe.h).
template <class Fn>
void for_each_matrix(LayerWeights& w, const Fn& fn) {
  for (WeightView* v : {&w.attn.wq, &w.attn.wk, &w.attn.wv, &w.attn.wo, &w.ffn.gate, &w.ffn.up, &w.ffn.down,
                        &w.dn.qkv, &w.dn.z, &w.dn.beta, &w.dn.alpha, &w.dn.out, &w.sc.in_proj, &w.sc.out_proj,
                        &w.moe.router, &w.moe.shared.gate, &w.moe.shared.up, &w.moe.shared.down,
                        &w.m2.z, &w.m2.xbc, &w.m2.dt, &w.m2.out, &w.ple_gate, &w.ple_proj})
    if (v->data) fn(*v);
}

struct Architecture;

struct Model::Impl {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  HParams hp;
  const Architecture* arch = nullptr;
  ModelOptions opts;
  WeightView tok_embd;  // [n_vocab][n_embd]
  WeightView output;    // [n_vocab][n_embd] (== tok_embd when tied)
  std::vector<float> output_norm;
  // Llama 3.x "rope_freqs.weight": per-frequency divisors of the rotation angle ([head_dim/2]);
  // empty when the model has none (all 1).
  std::vector<float> rope_freq_factors;
  // phi3 LongRoPE: rope_freq_factors holds rope_factors_short, this rope_factors_long (used when a
  // session's context exceeds HParams::rope_long_ctx).
  std::vector<float> rope_freq_factors_long;
  std::vector<LayerWeights> layers;
  // gemma4 per-layer embeddings (HParams::n_embd_per_layer > 0). The token table is read a row per
  // token from the map (dequantize_row), never repacked or copied: it is the largest tensor of the
  // small Gemma 4 models (n_vocab x n_layer x n_embd_per_layer).
  WeightView ple_tok_embd;            // [n_vocab][n_layer * n_embd_per_layer]
  WeightView ple_model_proj;          // [n_layer * n_embd_per_layer][n_embd]
  std::vector<float> ple_proj_norm;   // [n_embd_per_layer]
  uint64_t fingerprint = 0;
  bool locked = false;  // mlock succeeded
  AnonMemory packed;    // repacked weights (WeightView::packed points into it)
  double pack_seconds = 0.0;
  // Every matrix multiplies a row the same way alone or beside others (batch_invariant()).
  bool batch_invariant = true;
  const KernelTable* kernels = nullptr;
  const VecOps* vec_ops = nullptr;
};

}  // namespace picolm
