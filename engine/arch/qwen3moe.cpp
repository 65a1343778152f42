// qwen3moe (Qwen3 MoE, e.g. Qwen3-30B-A3B): qwen3's attention (QK-norm, NeoX RoPE, no biases) with
// the routed FFN (engine/moe.h) in every layer: softmax router, top n_expert_used, the chosen
// probabilities renormalised to sum 1 (llama.cpp's graph hard-codes norm_w for this family; the
// file's expert_weights_norm is not read), no scale, no shared expert. Per layer
//   x += attention(attn_norm(x));  x += moe(ffn_norm(x))
#include "arch/arch.h"
#include "moe.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen3Moe;
  hp.rope_neox = true;
  if (Status s = read_moe_hparams(f, hp); !s) return s;
  hp.expert_gating = ExpertGating::Softmax;
  hp.expert_weights_norm = true;
  hp.n_ff_shexp = 0;
  for (LayerHParams& lp : hp.layers) lp.moe = true;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  const HParams& hp = m.hp;
  load_embeddings_and_output(L, m);
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", hp.n_embd);
    load_attention(L, hp, l, {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required}, w.attn);
    load_moe(L, hp, l, {}, w.moe);
  }
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    attention(f, l);
    residual(f, nullptr, &layers[size_t(l)].ffn_norm);
    routed_ffn(f, l);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchQwen3Moe = {"qwen3moe", Arch::Qwen3Moe, read_hparams, load_weights, forward};

}  // namespace picolm
