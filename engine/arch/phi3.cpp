// phi3 (Phi-3 / Phi-3.5 / Phi-4-mini): the pre-norm decoder of llama with
//  - one fused projection attn_qkv ([q | k | v] rows) and one fused ffn_up ([gate | up] rows,
//    SwiGLU: silu of the first half times the second), used here as row slices of the file's matrix;
//  - NeoX RoPE on rope.dimension_count dims of each head (Phi-4-mini: 96 of 128) with LongRoPE:
//    per-frequency divisors rope_factors_short (a context up to rope.scaling.original_context_length)
//    or rope_factors_long (beyond it), and cos/sin scaled by rope.scaling.attn_factor
//    (sqrt(1 + ln(scale) / ln(original context)), written by the converter);
//  - a tied output when the file has no output.weight (Phi-4-mini).
// Phi-3's sliding window (attention.sliding_window) is ignored, as llama.cpp does (66d65ec).
// Reference: llama.cpp src/models/phi3.cpp and the LLM_ARCH_PHI3 cases of src/llama-model.cpp.
#include <cmath>

#include "arch/arch.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Phi3;
  hp.rope_neox = true;
  if (int64_t(hp.n_head) * hp.head_dim != hp.n_embd)
    return Error{"phi3: head_count * key_length must equal embedding_length (attn_output is square)"};
  const double mscale = f.get_float("phi3.rope.scaling.attn_factor").value_or(1.0);
  if (!(mscale > 0.0) || !std::isfinite(mscale) || mscale > 16.0) return Error{"implausible phi3.rope.scaling.attn_factor"};
  hp.rope_mscale = float(mscale);
  const int64_t orig = f.get_int("phi3.rope.scaling.original_context_length").value_or(hp.n_ctx_train);
  if (orig < 1 || orig > (int64_t(1) << 24)) return Error{"implausible phi3.rope.scaling.original_context_length"};
  hp.rope_long_ctx = int32_t(orig);
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  HParams& hp = m.hp;
  const int64_t E = hp.n_embd, hd = hp.head_dim, q_dim = int64_t(hp.n_head) * hd;
  m.tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
  m.output_norm = L.vec("output_norm.weight", E);
  m.output = L.matrix("output.weight", hp.n_vocab, E, /*optional=*/true);
  if (!m.output.data) {
    hp.tied_output = true;
    m.output = m.tok_embd;
  }
  // LongRoPE factors, one pair for every layer (llama.cpp duplicates layer 0's): both or neither.
  const int64_t n_freq = hp.n_rot / 2;
  m.rope_freq_factors = L.vec("rope_factors_short.weight", n_freq, /*optional=*/true);
  m.rope_freq_factors_long = L.vec("rope_factors_long.weight", n_freq, /*optional=*/true);
  if (m.rope_freq_factors.empty() != m.rope_freq_factors_long.empty())
    L.errors.push_back("phi3: rope_factors_short.weight and rope_factors_long.weight come together");
  for (const auto* v : {&m.rope_freq_factors, &m.rope_freq_factors_long})
    for (float x : *v)
      if (!(x > 0.0f) || !std::isfinite(x)) L.errors.push_back("phi3: a rope factor is non-positive or non-finite");
  if (m.rope_freq_factors_long.empty()) hp.rope_long_ctx = 0;

  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t kv_dim = int64_t(hp.layers[size_t(l)].n_head_kv) * hd, n_ff = hp.layers[size_t(l)].n_ff;
    w.attn_norm = L.vec(p + "attn_norm.weight", E);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", E);
    const WeightView qkv = L.matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, E);
    w.attn.wq = row_slice(qkv, 0, q_dim);
    w.attn.wk = row_slice(qkv, q_dim, kv_dim);
    w.attn.wv = row_slice(qkv, q_dim + kv_dim, kv_dim);
    w.attn.wo = L.matrix(p + "attn_output.weight", E, q_dim);
    const WeightView gate_up = L.matrix(p + "ffn_up.weight", 2 * n_ff, E);
    w.ffn.gate = row_slice(gate_up, 0, n_ff);
    w.ffn.up = row_slice(gate_up, n_ff, n_ff);
    w.ffn.down = L.matrix(p + "ffn_down.weight", E, n_ff);
  }
}

void forward(Forward& f) { forward_prenorm_decoder(f, FfnActivation::SiluGated); }

}  // namespace

const Architecture kArchPhi3 = {"phi3", Arch::Phi3, read_hparams, load_weights, forward};

}  // namespace picolm
