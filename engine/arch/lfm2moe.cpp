// lfm2moe (Liquid LFM2 MoE, e.g. LFM2-8B-A1B): lfm2's hybrid of gated short-convolution and
// attention layers (engine/arch/lfm2.cpp) whose FFN is dense in the first
// leading_dense_block_count layers and the routed FFN (engine/moe.h) after them: the file's gating
// (expert_gating_func: sigmoid in the released models), experts chosen by probability + the
// per-layer exp_probs_b bias, weighted by the unbiased probabilities renormalised to sum 1, no
// scale, no shared expert (llama.cpp src/models/lfm2.cpp, build_moe_ffn). Final norm
// token_embd_norm, output tied to token_embd.
#include "arch/arch.h"
#include "moe.h"
#include "recurrent.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Lfm2Moe;
  hp.rope_neox = true;
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(std::string("lfm2moe.") + key);
    if (!v) missing += std::string(" lfm2moe.") + key;
    return v.value_or(0);
  };
  const int64_t taps = need("shortconv.l_cache");
  const int64_t n_dense = need("leading_dense_block_count");
  const int64_t gating = need("expert_gating_func");
  need("expert_feed_forward_length");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (taps < 1 || taps > 64) return Error{"implausible lfm2moe.shortconv.l_cache"};
  if (n_dense < 0 || n_dense > hp.n_layer) return Error{"implausible lfm2moe.leading_dense_block_count"};
  if (gating < 1 || gating > 3) return Error{"unsupported lfm2moe.expert_gating_func " + std::to_string(gating)};
  if (Status s = read_moe_hparams(f, hp); !s) return s;
  hp.sc_taps = int32_t(taps);
  hp.expert_gating = gating == 1 ? ExpertGating::Softmax : gating == 2 ? ExpertGating::Sigmoid : ExpertGating::SoftmaxWeight;
  hp.expert_weights_norm = true;
  hp.n_ff_shexp = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    lp.moe = l >= n_dense;
    if (lp.n_head_kv == 0) {  // the per-layer head_count_kv array marks the conv layers with 0
      lp.kind = LayerKind::ShortConv;
      lp.rope = -1;
    }
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
    const LayerHParams& lp = hp.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", E);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", E);
    if (lp.kind == LayerKind::ShortConv)
      load_short_conv(L, hp, l, w.sc);
    else
      load_attention(L, hp, l, {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required}, w.attn);
    if (lp.moe)
      load_moe(L, hp, l, {.select_bias = true}, w.moe);
    else
      load_ffn(L, hp, l, w.ffn);
  }
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    const LayerHParams& lp = f.hp().layers[size_t(l)];
    if (lp.kind == LayerKind::ShortConv)
      short_conv(f, l);
    else
      attention(f, l);
    residual(f, nullptr, &layers[size_t(l)].ffn_norm);
    if (lp.moe)
      routed_ffn(f, l);
    else
      ffn(f, l, FfnActivation::SiluGated);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchLfm2Moe = {"lfm2moe", Arch::Lfm2Moe, read_hparams, load_weights, forward};

}  // namespace picolm
