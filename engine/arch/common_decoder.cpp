#include "arch/common_decoder.h"

#include "mamba2.h"
#include "recurrent.h"

namespace picolm {

void load_decoder_layers(WeightLoader& L, Model::Impl& m, const DecoderLayout& d) {
  const HParams& hp = m.hp;
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const LayerHParams& lp = hp.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
    w.ffn_norm = L.vec(p + d.ffn_norm, hp.n_embd);
    switch (lp.kind) {
      case LayerKind::Attention:
        if (d.gated_attention)
          load_gated_attention(L, hp, l, w.attn);
        else
          load_attention(L, hp, l, d.attn, w.attn);
        break;
      case LayerKind::ShortConv: load_short_conv(L, hp, l, w.sc); break;
      case LayerKind::DeltaNet: load_delta_net(L, hp, l, w.dn); break;
      case LayerKind::Mamba2: load_mamba2(L, hp, l, w.m2); break;
    }
    if (lp.moe)
      load_moe(L, hp, l, d.moe, w.moe);
    else
      load_ffn(L, hp, l, w.ffn);
  }
}

void load_decoder(WeightLoader& L, Model::Impl& m, const DecoderLayout& d) {
  load_embeddings_and_output(L, m, d.output_norm);
  load_decoder_layers(L, m, d);
}

void mixer(Forward& f, int layer, const DecoderLayout& d) {
  switch (f.hp().layers[size_t(layer)].kind) {
    case LayerKind::Attention:
      if (d.gated_attention)
        gated_attention(f, layer);
      else
        attention(f, layer);
      break;
    case LayerKind::ShortConv: short_conv(f, layer); break;
    case LayerKind::DeltaNet: delta_net(f, layer); break;
    case LayerKind::Mamba2: mamba2(f, layer); break;
  }
}

void feed_forward(Forward& f, int layer, const DecoderLayout& d) {
  if (f.hp().layers[size_t(layer)].moe)
    routed_ffn(f, layer);
  else
    ffn(f, layer, d.act);
}

void forward_decoder(Forward& f, const DecoderLayout& d) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    mixer(f, l, d);
    residual(f, nullptr, &layers[size_t(l)].ffn_norm);
    feed_forward(f, l, d);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

Status read_softmax_routing(const GgufFile& f, HParams& hp) {
  if (Status s = read_moe_hparams(f, hp); !s) return s;
  hp.expert_gating = ExpertGating::Softmax;
  hp.expert_weights_norm = true;
  for (LayerHParams& lp : hp.layers) lp.moe = true;
  return Ok{};
}

Status read_short_conv_pattern(const GgufFile& f, HParams& hp) {
  const std::string key = hp.arch_name + ".shortconv.l_cache";
  auto taps = f.get_int(key);
  if (!taps) return Error{"missing metadata: " + key};
  if (*taps < 1 || *taps > 64) return Error{"implausible " + key};
  hp.sc_taps = int32_t(*taps);
  for (LayerHParams& lp : hp.layers)
    if (lp.n_head_kv == 0) {  // the per-layer head_count_kv array marks the conv layers with 0
      lp.kind = LayerKind::ShortConv;
      lp.rope = -1;
    }
  return Ok{};
}

Status read_delta_net_pattern(const GgufFile& f, HParams& hp, int64_t default_interval) {
  const std::string a = hp.arch_name + ".";
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(a + key);
    if (!v) missing += " " + a + key;
    return v.value_or(0);
  };
  const int64_t interval =
      default_interval > 0 ? f.get_int(a + "full_attention_interval").value_or(default_interval) : need("full_attention_interval");
  hp.dn_conv = int32_t(need("ssm.conv_kernel"));
  hp.dn_head_dim = int32_t(need("ssm.state_size"));
  hp.dn_k_heads = int32_t(need("ssm.group_count"));
  hp.dn_v_heads = int32_t(need("ssm.time_step_rank"));
  const int64_t inner = need("ssm.inner_size");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (interval < 1 || interval > 1024) return Error{"implausible " + a + "full_attention_interval"};
  if (inner != int64_t(hp.dn_v_heads) * hp.dn_head_dim) return Error{a + "ssm.inner_size is not time_step_rank * state_size"};
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

}  // namespace picolm
