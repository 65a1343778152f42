// gemma3 (Gemma 3 text): embeddings scaled by sqrt(n_embd); per layer
//   x += post_attention_norm(attention(attn_norm(x)))
//   x += post_ffw_norm(ffn(ffn_norm(x)))          (GELU(tanh)-gated FFN)
// with QK-norm and NeoX RoPE, five sliding-window layers for every global one, the local layers
// on their own RoPE base, and a tied output.
#include <cmath>

#include "arch/arch.h"

namespace picolm {
namespace {

// llama.cpp makes layer il a sliding-window layer when il % 6 < 5; the period is not in the files.
constexpr int kSlidingPeriod = 6;
// Base of the local layers when the file has no rope.freq_base_swa (Gemma 3's rope_local_base_freq).
constexpr double kLocalRopeBase = 10000.0;

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Gemma3;
  hp.rope_neox = true;
  auto window = f.get_int("gemma3.attention.sliding_window");
  if (!window) return Error{"missing metadata: gemma3.attention.sliding_window"};
  if (*window < 1 || *window > (1 << 24)) return Error{"implausible gemma3.attention.sliding_window"};
  const float local_base = float(f.get_float("gemma3.rope.freq_base_swa").value_or(kLocalRopeBase));
  hp.rope_bases = {hp.rope_base, local_base};
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    const bool sliding = l % kSlidingPeriod < kSlidingPeriod - 1;
    lp.window = sliding ? int32_t(*window) : 0;
    lp.rope = sliding ? 1 : 0;
  }
  // Queries are scaled by 1/sqrt(head_dim), except in the 27B model (62 layers), whose
  // query_pre_attn_scalar is n_embd / n_head (llama.cpp keys the rule on the layer count too).
  if (hp.n_layer == 62) hp.attn_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));
  return Ok{};
}

// The pre-norm decoder's tensors, plus the norms gemma3 applies to each sublayer's output.
void load_weights(WeightLoader& L, Model::Impl& m) {
  const HParams& hp = m.hp;
  load_prenorm_decoder(L, m, {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required});
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_post_norm = L.vec(p + "post_attention_norm.weight", hp.n_embd);
    w.ffn_post_norm = L.vec(p + "post_ffw_norm.weight", hp.n_embd);
  }
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, std::sqrt(float(f.hp().n_embd)));
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    const LayerWeights& w = layers[size_t(l)];
    attention(f, l);
    residual(f, &w.attn_post_norm, &w.ffn_norm);
    ffn(f, l, FfnActivation::GeluTanhGated);
    residual(f, &w.ffn_post_norm, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchGemma3 = {"gemma3", Arch::Gemma3, read_hparams, load_weights, forward};

}  // namespace picolm
