// qwen35moe (Qwen3.5 MoE, e.g. Qwen3.5-35B-A3B): qwen35's hybrid of gated delta-net and gated
// full-attention layers (engine/arch/qwen35.cpp) with the routed FFN (engine/moe.h) in every
// layer: softmax router, top n_expert_used renormalised to sum 1, plus a shared SwiGLU expert
// (n_ff_shexp) whose output is scaled by sigmoid(ffn_gate_inp_shexp . x) (llama.cpp
// src/models/qwen35moe.cpp). Per layer
//   x += mixer(attn_norm(x));  x += moe(post_attention_norm(x))
// The gate and up experts may be stored merged (ffn_gate_up_exps).
#include "arch/arch.h"
#include "moe.h"
#include "recurrent.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen35Moe;
  hp.rope_neox = true;
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(std::string("qwen35moe.") + key);
    if (!v) missing += std::string(" qwen35moe.") + key;
    return v.value_or(0);
  };
  // llama.cpp reads full_attention_interval as optional, default 4.
  const int64_t interval = f.get_int("qwen35moe.full_attention_interval").value_or(4);
  hp.dn_conv = int32_t(need("ssm.conv_kernel"));
  hp.dn_head_dim = int32_t(need("ssm.state_size"));
  hp.dn_k_heads = int32_t(need("ssm.group_count"));
  hp.dn_v_heads = int32_t(need("ssm.time_step_rank"));
  const int64_t inner = need("ssm.inner_size");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (interval < 1 || interval > 1024) return Error{"implausible qwen35moe.full_attention_interval"};
  if (inner != int64_t(hp.dn_v_heads) * hp.dn_head_dim)
    return Error{"qwen35moe.ssm.inner_size is not time_step_rank * state_size"};
  if (Status s = read_moe_hparams(f, hp); !s) return s;
  hp.expert_gating = ExpertGating::Softmax;
  hp.expert_weights_norm = true;
  if (hp.n_ff_shexp < 1) return Error{"implausible qwen35moe.expert_shared_feed_forward_length"};
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    lp.moe = true;
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
    load_moe(L, hp, l, {.shared_expert = true}, w.moe);
  }
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const int n_layer = f.hp().n_layer;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    if (f.hp().layers[size_t(l)].kind == LayerKind::DeltaNet)
      delta_net(f, l);
    else
      gated_attention(f, l);
    residual(f, nullptr, &layers[size_t(l)].ffn_norm);
    routed_ffn(f, l);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

}  // namespace

const Architecture kArchQwen35Moe = {"qwen35moe", Arch::Qwen35Moe, read_hparams, load_weights, forward};

}  // namespace picolm
