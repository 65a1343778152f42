// gemma4 (Gemma 4 text: the dense E2B / E4B / 31B layout and the 26B-A4B mixture of experts), as llama.cpp 3f545be computes it
// (src/models/gemma4.cpp). Embeddings scaled by sqrt(n_embd); per layer
//   x += post_attention_norm(attention(attn_norm(x)))
//   x += post_ffw_norm(ffn(ffn_norm(x)))                      (GELU(tanh)-gated, per-layer widths)
//   x += post_norm(proj(gelu(inp_gate(x)) * e_l))             (per-layer embeddings, when present)
//   x *= layer_output_scale
// then the final norm, the tied output and a soft-cap tanh(logits / cap) * cap. Norm weights are
// used as stored (Gemma 4 files hold them unshifted, unlike Gemma 3's 1 + w).
//
// Attention: the layers named by attention.sliding_window_pattern see the last sliding_window
// positions, on their own head size (key_length_swa), KV heads, RoPE base (rope.freq_base_swa) and
// rotated dims (rope.dimension_count_swa); the global layers use key_length, rope.freq_base and
// rope_freqs.weight, whose factors of 1e30 leave the unrotated pairs of "proportional" RoPE still.
// QK-norm, an RMS norm without weight on each V head, attention scale 1. The last
// attention.shared_kv_layers layers keep no K/V: each reads that of the last earlier layer of its kind
// with K/V (llama.cpp: layer n_kv - 2 for a sliding layer, n_kv - 1 for a global one).
//
// Per-layer embeddings (embedding_length_per_layer_input d > 0): for every token the input of layer l
// is e_l = (rms_norm(P x0 / sqrt(n_embd))_l * per_layer_proj_norm + sqrt(d) * T[token]_l) / sqrt(2),
// x0 the scaled embedding, P per_layer_model_proj ([n_layer * d][n_embd]) and T the per-layer token
// table ([n_vocab][n_layer * d]), read row by row from the map.
//
// Mixture-of-experts layers (26B-A4B: every layer has blk.N.ffn_gate_inp), as 3f545be: the dense FFN
// and the routed experts (engine/moe.h) side by side on the same residual h,
//   x_mlp = post_ffw_norm_1(ffn(ffn_norm(h)))
//   x_moe = post_ffw_norm_2(moe(pre_ffw_norm_2(h)))      router on rms_norm(h) / sqrt(n_embd) * ffn_gate_inp.scale
//   h    += post_ffw_norm(x_mlp + x_moe)
// with softmax routing over expert_count, the top expert_used_count renormalised to sum 1, GELU(tanh)
// experts of expert_feed_forward_length, and each expert's output times ffn_down_exps.scale.
#include <cmath>
#include <cstring>

#include "arch/arch.h"
#include "moe.h"

namespace picolm {
namespace {

// llama.cpp's default base of the sliding layers when the file has no rope.freq_base_swa.
constexpr double kDefaultSwaRopeBase = 10000.0;

// attention.sliding_window_pattern: one bool (or integer) per layer, true = sliding.
bool read_pattern(const GgufFile& f, const std::string& key, int32_t n_layer, std::vector<bool>& out) {
  const GgufValue* v = f.find(key);
  if (!v || v->type != GgufValueType::ARRAY || v->count != uint64_t(n_layer)) return false;
  out.assign(size_t(n_layer), false);
  if (v->elem_type == GgufValueType::BOOL) {
    for (int32_t l = 0; l < n_layer; ++l) out[size_t(l)] = v->elems[l] != 0;
    return true;
  }
  const std::vector<int64_t> ints = f.get_int_array(key);
  if (ints.size() != size_t(n_layer)) return false;
  for (int32_t l = 0; l < n_layer; ++l) out[size_t(l)] = ints[size_t(l)] != 0;
  return true;
}

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Gemma4;
  hp.rope_neox = true;
  hp.attn_scale = 1.0f;  // q.k unscaled (QK-norm keeps it in range)
  hp.v_norm = true;
  const std::string a = "gemma4.";
  std::string missing;
  auto need = [&](const std::string& key) -> int64_t {
    auto v = f.get_int(a + key);
    if (!v) missing += " " + a + key;
    return v.value_or(0);
  };
  const int64_t window = need("attention.sliding_window");
  const int64_t hd_swa = need("attention.key_length_swa");
  const int64_t hd_v_swa = need("attention.value_length_swa");
  const int64_t n_pl = need("embedding_length_per_layer_input");
  std::vector<bool> swa;
  if (!read_pattern(f, a + "attention.sliding_window_pattern", hp.n_layer, swa))
    missing += " " + a + "attention.sliding_window_pattern (a per-layer array)";
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  const int64_t hd_v = f.get_int(a + "attention.value_length").value_or(hp.head_dim);
  if (hd_v != hp.head_dim || hd_v_swa != hd_swa)
    return Error{"gemma4 needs key_length == value_length (and the same for the sliding layers)"};
  if (window < 1 || window > (1 << 24)) return Error{"implausible gemma4.attention.sliding_window"};
  if (hd_swa < 2 || hd_swa > 1024 || hd_swa % 2 != 0) return Error{"implausible gemma4.attention.key_length_swa"};
  if (n_pl < 0 || n_pl > (1 << 16)) return Error{"implausible gemma4.embedding_length_per_layer_input"};
  const int64_t n_rot_swa = f.get_int(a + "rope.dimension_count_swa").value_or(hp.n_rot);
  if (n_rot_swa < 2 || n_rot_swa > hd_swa || n_rot_swa % 2 != 0)
    return Error{"implausible gemma4.rope.dimension_count_swa"};
  const int64_t n_shared = f.get_int(a + "attention.shared_kv_layers").value_or(0);
  const int64_t n_kv = hp.n_layer - n_shared;
  if (n_shared < 0 || (n_shared > 0 && n_kv < 2)) return Error{"implausible gemma4.attention.shared_kv_layers"};
  hp.n_embd_per_layer = int32_t(n_pl);
  hp.logit_softcap = float(f.get_float(a + "final_logit_softcapping").value_or(0.0));
  if (!(hp.logit_softcap >= 0.0f) || !std::isfinite(hp.logit_softcap))
    return Error{"invalid gemma4.final_logit_softcapping"};
  // Table 0: the global layers (rope.freq_base, rope_freqs.weight); table 1: the sliding ones.
  hp.rope_bases = {hp.rope_base, float(f.get_float(a + "rope.freq_base_swa").value_or(kDefaultSwaRopeBase))};
  hp.rope_dims = {hp.n_rot, int32_t(n_rot_swa)};
  // MoE layers are the ones with a router (llama.cpp decides by the tensor, too).
  bool any_moe = false;
  for (int l = 0; l < hp.n_layer; ++l) {
    hp.layers[size_t(l)].moe = f.tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr;
    any_moe |= hp.layers[size_t(l)].moe;
  }
  if (any_moe) {
    if (Status s = read_moe_hparams(f, hp); !s) return s;
    hp.expert_gating = ExpertGating::Softmax;
    hp.expert_weights_norm = true;  // the graph passes norm_w = true, scale 1 (the file's keys are not read)
    hp.expert_weights_scale = 1.0f;
    hp.n_ff_shexp = 0;  // the dense FFN beside the experts is gemma4's own, not the block's shared expert
  }
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    const bool sliding = swa[size_t(l)];
    lp.window = sliding ? int32_t(window) : 0;
    lp.rope = sliding ? 1 : 0;
    lp.head_dim = sliding ? int32_t(hd_swa) : hp.head_dim;
    if (l >= n_kv) lp.kv_source = int32_t(n_kv - (sliding ? 2 : 1));
    if (lp.moe && (lp.n_ff < 1 || lp.n_ff > (1 << 20)))  // the dense FFN beside the experts (validate_hparams skips MoE layers')
      return Error{"implausible feed_forward_length (layer " + std::to_string(l) + ")"};
  }
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  const HParams& hp = m.hp;
  const int64_t E = hp.n_embd, PL = hp.n_embd_per_layer;
  load_embeddings_and_output(L, m);
  if (PL > 0) {
    m.ple_tok_embd = L.matrix("per_layer_token_embd.weight", hp.n_vocab, hp.n_layer * PL);
    m.ple_model_proj = L.matrix("per_layer_model_proj.weight", hp.n_layer * PL, E);
    m.ple_proj_norm = L.vec("per_layer_proj_norm.weight", PL);
  }
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const LayerHParams& lp = hp.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t hd = lp.head_dim, q_dim = int64_t(hp.n_head) * hd, kv_dim = int64_t(lp.n_head_kv) * hd;
    w.attn_norm = L.vec(p + "attn_norm.weight", E);
    w.attn.wq = L.matrix(p + "attn_q.weight", q_dim, E);
    w.attn.q_norm = L.vec(p + "attn_q_norm.weight", hd);
    if (lp.kv_source < 0) {  // a KV-sharing layer's attn_k / attn_v, if a file has them, go unused
      w.attn.wk = L.matrix(p + "attn_k.weight", kv_dim, E);
      w.attn.wv = L.matrix(p + "attn_v.weight", kv_dim, E, /*optional=*/true);  // absent: V is K's projection
      w.attn.k_norm = L.vec(p + "attn_k_norm.weight", hd);
    }
    w.attn.wo = L.matrix(p + "attn_output.weight", E, q_dim);
    w.attn_post_norm = L.vec(p + "post_attention_norm.weight", E);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", E);
    load_ffn(L, hp, l, w.ffn);
    w.ffn_post_norm = L.vec(p + "post_ffw_norm.weight", E);
    if (lp.moe) {
      w.ffn_post_norm_dense = L.vec(p + "post_ffw_norm_1.weight", E);
      w.moe_pre_norm = L.vec(p + "pre_ffw_norm_2.weight", E);
      w.moe_post_norm = L.vec(p + "post_ffw_norm_2.weight", E);
      load_moe(L, hp, l, {.router_scale = true, .expert_scale = true, .act = FfnActivation::GeluTanhGated}, w.moe);
    }
    if (PL > 0) {
      w.ple_gate = L.matrix(p + "inp_gate.weight", PL, E);
      w.ple_proj = L.matrix(p + "proj.weight", E, PL);
      w.ple_post_norm = L.vec(p + "post_norm.weight", E);
    }
    const std::vector<float> scale = L.vec(p + "layer_output_scale.weight", 1, /*optional=*/true);
    if (!scale.empty()) {
      if (!std::isfinite(scale[0])) L.errors.push_back("tensor '" + p + "layer_output_scale.weight' is not finite");
      w.out_scale = scale[0];
    }
  }
}

// W.ple = every layer's per-layer input for every row (see the top of the file); reads W.x (the
// scaled embeddings).
void per_layer_inputs(Forward& f) {
  const Model::Impl& m = f.m;
  const HParams& hp = f.hp();
  EvalWorkspace& W = f.w;
  const int64_t E = hp.n_embd, PL = hp.n_embd_per_layer, width = int64_t(hp.n_layer) * PL;
  const WeightView& P = m.ple_model_proj;
  matmul(*m.kernels, f.pool, m.opts.activations, P.type, P.data, P.rows, P.cols, W.x.data(), f.T, W.ple.data(),
         P.packed);
  const WeightView& tab = m.ple_tok_embd;
  const size_t tab_row = row_bytes(tab.type, width);
  const auto dequantize = m.kernels->dequantize_row[static_cast<uint32_t>(tab.type)];
  const float proj_scale = 1.0f / std::sqrt(float(E));
  const float tok_scale = std::sqrt(float(PL));
  const float input_scale = 1.0f / std::sqrt(2.0f);
  f.for_rows(f.T, [&](int64_t t) {
    float* e = &W.ple[size_t(t * width)];
    float* tok = &W.ple_gate[size_t(t * width)];  // ple_gate is sized for a whole table row per row
    dequantize(static_cast<const uint8_t*>(tab.data) + size_t(f.toks[t]) * tab_row, tok, width);
    for (int64_t i = 0; i < width; ++i) e[i] *= proj_scale;
    for (int l = 0; l < hp.n_layer; ++l) rms_norm_row(e + l * PL, m.ple_proj_norm.data(), e + l * PL, PL, hp.rms_eps);
    for (int64_t i = 0; i < width; ++i) e[i] = (e[i] + tok[i] * tok_scale) * input_scale;
  });
}

// x += post_norm(proj(gelu(inp_gate(x)) * e_l)) for layer l.
void per_layer_embedding(Forward& f, int l) {
  const Model::Impl& m = f.m;
  const HParams& hp = f.hp();
  EvalWorkspace& W = f.w;
  const LayerWeights& w = m.layers[size_t(l)];
  const int64_t PL = hp.n_embd_per_layer, width = int64_t(hp.n_layer) * PL;
  const KernelTable& K = *m.kernels;
  matmul(K, f.pool, m.opts.activations, w.ple_gate.type, w.ple_gate.data, w.ple_gate.rows, w.ple_gate.cols,
         W.x.data(), f.T, W.ple_gate.data(), w.ple_gate.packed);
  f.for_rows(f.T, [&](int64_t t) {
    gelu_tanh_mul(int(PL), &W.ple_gate[size_t(t * PL)], &W.ple[size_t(t * width + l * PL)]);
  });
  matmul(K, f.pool, m.opts.activations, w.ple_proj.type, w.ple_proj.data, w.ple_proj.rows, w.ple_proj.cols,
         W.ple_gate.data(), f.T, W.q.data(), w.ple_proj.packed);
  residual(f, &w.ple_post_norm, nullptr);
}

// A MoE layer's second branch, after ffn() left the dense one in q: q = post_ffw_norm_1(q) +
// post_ffw_norm_2(moe(pre_ffw_norm_2(x))), x the residual stream after attention (the router's input
// is derived from x inside routed_ffn).
void routed_branch(Forward& f, int l) {
  const HParams& hp = f.hp();
  EvalWorkspace& W = f.w;
  const LayerWeights& w = f.m.layers[size_t(l)];
  const int64_t E = hp.n_embd;
  std::vector<float>& dense = W.moe.dense;
  if (dense.size() < size_t(f.T * E)) dense.resize(size_t(f.T * E));
  f.for_rows(f.T, [&](int64_t t) {
    rms_norm_row(&W.q[size_t(t * E)], w.ffn_post_norm_dense.data(), &dense[size_t(t * E)], E, hp.rms_eps);
    rms_norm_row(&W.x[size_t(t * E)], w.moe_pre_norm.data(), &W.xn[size_t(t * E)], E, hp.rms_eps);
  });
  routed_ffn(f, l);
  f.for_rows(f.T, [&](int64_t t) {
    float* y = &W.q[size_t(t * E)];
    const float* d = &dense[size_t(t * E)];
    rms_norm_row(y, w.moe_post_norm.data(), y, E, hp.rms_eps);
    for (int64_t i = 0; i < E; ++i) y[i] = d[i] + y[i];
  });
}

void forward(Forward& f) {
  const auto& layers = f.m.layers;
  const HParams& hp = f.hp();
  const int n_layer = hp.n_layer;
  const int64_t E = hp.n_embd;
  EvalWorkspace& W = f.w;
  embed(f, std::sqrt(float(E)));
  const bool ple = hp.n_embd_per_layer > 0;
  if (ple) per_layer_inputs(f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < n_layer; ++l) {
    const LayerWeights& w = layers[size_t(l)];
    attention(f, l);
    residual(f, &w.attn_post_norm, &w.ffn_norm);
    ffn(f, l, FfnActivation::GeluTanhGated);
    if (hp.layers[size_t(l)].moe) routed_branch(f, l);
    residual(f, &w.ffn_post_norm, nullptr);
    if (ple) per_layer_embedding(f, l);
    const std::vector<float>* next = l + 1 < n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr;
    f.for_rows(f.T, [&](int64_t t) {
      float* xt = &W.x[size_t(t * E)];
      if (w.out_scale != 1.0f)
        for (int64_t i = 0; i < E; ++i) xt[i] *= w.out_scale;
      if (next) rms_norm_row(xt, next->data(), &W.xn[size_t(t * E)], E, hp.rms_eps);
    });
  }
  output(f);
  if (hp.logit_softcap > 0.0f) {
    // As llama.cpp: scale by 1/cap, tanh, scale by cap (each in float).
    const float cap = hp.logit_softcap, inv = 1.0f / cap;
    const int64_t nv = hp.n_vocab;
    f.for_rows(int64_t(f.out.size()), [&](int64_t i) {
      float* d = f.out[size_t(i)].dst;
      for (int64_t j = 0; j < nv; ++j) d[j] = std::tanh(d[j] * inv) * cap;
    });
  }
}

}  // namespace

const Architecture kArchGemma4 = {"gemma4", Arch::Gemma4, read_hparams, load_weights, forward};

}  // namespace picolm
