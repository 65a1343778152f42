// granitehybrid (Granite-4.0-H, dense form: H-Micro; also Bamba): a hybrid of Mamba-2 layers and
// attention layers, per layer
//   x += s_r * mixer(attn_norm(x));  x += s_r * ffn(ffn_norm(x))        (SwiGLU FFN)
// where the mixer is Mamba-2 (engine/mamba2.h) on layers whose head_count_kv entry is 0 and
// attention (optional q/k/v biases) elsewhere, with Granite's multipliers: embeddings times
// embedding_scale, s_r = residual_scale, attention.scale as the q.k scale and logits divided by
// logit_scale (each 0 or absent: none). Granite-4.0-H uses no positional encoding
// (rope.scaling.finetuned = false: NoPE attention layers); Bamba files set it and get normal
// (non-NeoX) RoPE. Output tied to token_embd when the file has no output.weight.
// The MoE form (H-Tiny, H-Small: a file with expert_count) routes every layer's FFN (engine/moe.h):
// softmax router, top n_expert_used renormalised to sum 1, no scale (llama.cpp's graph hard-codes
// these for the family), experts of feed_forward_length (llama.cpp reads n_ff for them, not
// expert_feed_forward_length), plus, when expert_shared_feed_forward_length > 0, a shared SwiGLU
// expert added without a gate; the residual scale applies to their sum.
// Reference: llama.cpp src/models/granite-hybrid.cpp, mamba-base.cpp and src/llama-model.cpp.
#include <cmath>

#include "arch/common_decoder.h"

namespace picolm {
namespace {

// Attention with optional q/k/v biases; the shared expert (when the file has one) has no gate.
DecoderLayout layout(const HParams& hp) {
  return {.attn = {.qkv_bias = Presence::Optional, .qk_norm = Presence::Absent},
          .moe = {.shared_expert = hp.n_ff_shexp > 0, .shared_expert_gate = false}};
}

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::GraniteHybrid;
  hp.rope_neox = false;
  const std::string a = "granitehybrid.";
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(a + key);
    if (!v) missing += " " + a + key;
    return v.value_or(0);
  };
  const int64_t conv = need("ssm.conv_kernel"), inner = need("ssm.inner_size"), state = need("ssm.state_size");
  const int64_t heads = need("ssm.time_step_rank"), groups = need("ssm.group_count");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (conv < 1 || conv > 64 || state < 1 || state > 1024 || heads < 1 || heads > 4096 || groups < 1 ||
      heads % groups != 0 || inner < heads || inner % heads != 0 || inner / heads > 4096 || inner > (1 << 20))
    return Error{"implausible granitehybrid.ssm.* hyper-parameters"};
  hp.m2_conv = int32_t(conv);
  hp.m2_state = int32_t(state);
  hp.m2_heads = int32_t(heads);
  hp.m2_groups = int32_t(groups);
  hp.m2_head_dim = int32_t(inner / heads);
  auto scale = [&](const std::string& key, float& out) -> bool {
    const double v = f.get_float(a + key).value_or(0.0);
    if (!std::isfinite(v) || v < 0.0 || v > 1e6) return false;
    out = float(v);
    return true;
  };
  float attn_scale = 0.0f;
  if (!scale("embedding_scale", hp.embedding_scale) || !scale("residual_scale", hp.residual_scale) ||
      !scale("logit_scale", hp.logit_scale) || !scale("attention.scale", attn_scale))
    return Error{"implausible granitehybrid multiplier (embedding_scale, residual_scale, logit_scale, attention.scale)"};
  if (attn_scale > 0.0f) hp.attn_scale = attn_scale;
  if (f.get_int(a + "expert_count").value_or(0) > 0) {
    if (Status s = read_softmax_routing(f, hp); !s) return s;
    hp.n_ff_exp = hp.layers[0].n_ff;
    for (const LayerHParams& lp : hp.layers)
      if (lp.n_ff != hp.n_ff_exp) return Error{"granitehybrid with experts: feed_forward_length differs between layers"};
    // llama.cpp: no shared expert unless the key says so (read_moe_hparams defaults it to n_ff).
    const int64_t shexp = f.get_int(a + "expert_shared_feed_forward_length").value_or(0);
    if (shexp < 0 || shexp > (1 << 20)) return Error{"implausible " + a + "expert_shared_feed_forward_length"};
    hp.n_ff_shexp = int32_t(shexp);
  }
  const bool use_rope = f.get_bool(a + "rope.scaling.finetuned").value_or(true);
  for (LayerHParams& lp : hp.layers) {
    if (lp.n_head_kv == 0) lp.kind = LayerKind::Mamba2;  // llama.cpp: recurrent iff head_count_kv is 0
    if (lp.n_head_kv == 0 || !use_rope) lp.rope = -1;
  }
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  load_decoder(L, m, layout(m.hp));
  for (int l = 0; l < m.hp.n_layer; ++l)
    if (L.file().tensor("blk." + std::to_string(l) + ".attn_output.bias"))
      L.errors.push_back("granitehybrid: attn_output.bias is not supported");
}

// y *= s (a sublayer's output before its residual add); ggml_scale's single multiply.
void scale_output(Forward& f, float s) {
  if (s == 0.0f) return;
  const int64_t E = f.hp().n_embd;
  float* const y = f.w.q.data();
  f.for_rows(f.T, [&](int64_t t) {
    for (int64_t i = 0; i < E; ++i) y[t * E + i] *= s;
  });
}

void forward(Forward& f) {
  const HParams& hp = f.hp();
  const DecoderLayout d = layout(hp);
  const auto& layers = f.m.layers;
  const int n_layer = hp.n_layer;
  embed(f, hp.embedding_scale != 0.0f ? hp.embedding_scale : 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    mixer(f, l, d);  // Mamba-2 or attention
    scale_output(f, hp.residual_scale);
    residual(f, nullptr, &layers[size_t(l)].ffn_norm);
    feed_forward(f, l, d);  // dense, or routed + shared expert
    scale_output(f, hp.residual_scale);
    residual(f, nullptr, l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
  if (hp.logit_scale != 0.0f) {  // llama.cpp: ggml_scale(logits, 1 / logit_scale)
    const float inv = 1.0f / hp.logit_scale;
    const size_t nv = size_t(hp.n_vocab);
    for (const OutputRow& o : f.out)
      for (size_t i = 0; i < nv; ++i) o.dst[i] *= inv;
  }
}

}  // namespace

const Architecture kArchGraniteHybrid = {"granitehybrid", Arch::GraniteHybrid, read_hparams, load_weights, forward};

}  // namespace picolm
