// qwen35 (Qwen3.5, dense): a hybrid of gated delta-net (linear attention) layers and gated full
// attention layers, every full_attention_interval-th layer being full attention; per layer
//   x += mixer(attn_norm(x));  x += ffn(post_attention_norm(x))       (SwiGLU FFN)
// (post_attention_norm is the pre-FFN norm; there is no ffn_norm). Full attention (recurrent.h,
// gated_attention): q and its sigmoid gate interleaved per head in attn_q, QK-norm, RoPE on the first
// rope.dimension_count dims of each head (the file asks for IMROPE with sections; for text every
// section gets the token's position, which is partial NeoX RoPE). Separate output.weight.
#include "arch/arch.h"
#include "recurrent.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen35;
  hp.rope_neox = true;
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(std::string("qwen35.") + key);
    if (!v) missing += std::string(" qwen35.") + key;
    return v.value_or(0);
  };
  const int64_t interval = need("full_attention_interval");
  hp.dn_conv = int32_t(need("ssm.conv_kernel"));
  hp.dn_head_dim = int32_t(need("ssm.state_size"));
  hp.dn_k_heads = int32_t(need("ssm.group_count"));
  hp.dn_v_heads = int32_t(need("ssm.time_step_rank"));
  const int64_t inner = need("ssm.inner_size");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (interval < 1 || interval > 1024) return Error{"implausible qwen35.full_attention_interval"};
  if (inner != int64_t(hp.dn_v_heads) * hp.dn_head_dim)
    return Error{"qwen35.ssm.inner_size is not time_step_rank * state_size"};
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    if ((l + 1) % interval != 0) {
      lp.kind = LayerKind::DeltaNet;
      lp.n_head_kv = 0;
      lp.rope = -1;
    }
  }
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
    w.ffn_norm = L.vec(p + "post_attention_norm.weight", hp.n_embd);
    if (hp.layers[size_t(l)].kind == LayerKind::DeltaNet)
      load_delta_net(L, hp, l, w.dn);
    else
      load_gated_attention(L, hp, l, w.attn);
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
    if (f.hp().layers[size_t(l)].kind == LayerKind::DeltaNet)
      delta_net(f, l);
    else
      gated_attention(f, l);
    residual(f, nullptr, &w.ffn_norm);
    ffn(f, l, FfnActivation::SiluGated);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchQwen35 = {"qwen35", Arch::Qwen35, read_hparams, load_weights, forward};

}  // namespace picolm
