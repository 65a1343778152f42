// lfm2 (Liquid LFM2 / LFM2.5): a hybrid of gated short-convolution layers and attention layers,
// per layer
//   x += mixer(attn_norm(x));  x += ffn(ffn_norm(x))                 (SwiGLU FFN)
// where the mixer is the short conv (recurrent.h) on layers whose head_count_kv entry is 0 and
// QK-normed attention with NeoX RoPE elsewhere. The final norm is token_embd_norm; the output is
// tied to token_embd.
#include "arch/arch.h"
#include "recurrent.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Lfm2;
  hp.rope_neox = true;
  auto taps = f.get_int("lfm2.shortconv.l_cache");
  if (!taps) return Error{"missing metadata: lfm2.shortconv.l_cache"};
  if (*taps < 1 || *taps > 64) return Error{"implausible lfm2.shortconv.l_cache"};
  hp.sc_taps = int32_t(*taps);
  // The per-layer head_count_kv array marks the conv layers with 0.
  for (LayerHParams& lp : hp.layers)
    if (lp.n_head_kv == 0) {
      lp.kind = LayerKind::ShortConv;
      lp.rope = -1;
    }
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  HParams& hp = m.hp;
  const int64_t E = hp.n_embd;
  m.tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
  m.output_norm = L.vec("token_embd_norm.weight", E);  // llama.cpp's name for LFM2's final norm
  m.output = L.matrix("output.weight", hp.n_vocab, E, /*optional=*/true);
  if (!m.output.data) {
    hp.tied_output = true;
    m.output = m.tok_embd;
  }
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", E);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", E);
    if (hp.layers[size_t(l)].kind == LayerKind::ShortConv)
      load_short_conv(L, hp, l, w.sc);
    else
      load_attention(L, hp, l, {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required}, w.attn);
    load_ffn(L, hp, l, w.ffn);
  }
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    const LayerWeights& w = layers[size_t(l)];
    if (f.hp().layers[size_t(l)].kind == LayerKind::ShortConv)
      short_conv(f, l);
    else
      attention(f, l);
    residual(f, nullptr, &w.ffn_norm);
    ffn(f, l, FfnActivation::SiluGated);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchLfm2 = {"lfm2", Arch::Lfm2, read_hparams, load_weights, forward};

}  // namespace picolm
