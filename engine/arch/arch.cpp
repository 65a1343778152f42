#include "arch/arch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/recurrent_ops.h"

namespace picolm {
namespace {

const Architecture* const kAll[] = {&kArchLlama,  &kArchQwen2, &kArchQwen3,    &kArchGemma3,  &kArchSmollm3,
                                     &kArchQwen35, &kArchLfm2,  &kArchQwen3Moe, &kArchLfm2Moe, &kArchQwen35Moe,
                                     &kArchPhi3,   &kArchGraniteHybrid,         &kArchGemma4};

// Integers are checked in 64 bits before they are narrowed: a uint64 of 2^32 + 64 must not pass as
// 64 (issue 15 item 10). Values outside int32 are refused here; plausibility is validate_hparams'.
bool fits_i32(int64_t v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); }

// A per-layer value: the file may store a scalar (every layer) or an array of n_layer values.
bool per_layer(const GgufFile& f, const std::string& key, int32_t n_layer, std::vector<int32_t>& out,
               std::vector<std::string>& problems) {
  if (auto v = f.get_int(key)) {
    if (!fits_i32(*v)) {
      problems.push_back(key + " = " + std::to_string(*v) + " is out of range");
      return false;
    }
    out.assign(size_t(n_layer), int32_t(*v));
    return true;
  }
  const GgufValue* raw = f.find(key);
  if (raw && raw->type == GgufValueType::ARRAY) {
    const std::vector<int64_t> wide = f.get_int_array(key);
    out.clear();
    for (int64_t v : wide) {
      if (!fits_i32(v)) {
        problems.push_back(key + " has an out-of-range entry " + std::to_string(v));
        return false;
      }
      out.push_back(int32_t(v));
    }
    if (out.size() != size_t(n_layer)) {
      problems.push_back(key + " has " + std::to_string(raw->count) + " entries for " + std::to_string(n_layer) +
                         " layers");
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture* a : kAll)
    if (name == a->name) return a;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (const Architecture* a : kAll) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

Status read_common_hparams(const GgufFile& f, HParams& hp) {
  const std::string a = hp.arch_name + ".";
  std::vector<std::string> missing, problems;
  auto need = [&](const std::string& key) -> int32_t {
    auto v = f.get_int(a + key);
    if (!v) {
      missing.push_back(a + key);
      return 0;
    }
    if (!fits_i32(*v)) {
      problems.push_back(a + key + " = " + std::to_string(*v) + " is out of range");
      return 0;
    }
    return int32_t(*v);
  };
  hp.n_embd = need("embedding_length");
  hp.n_layer = need("block_count");
  hp.n_head = need("attention.head_count");
  hp.n_ctx_train = need("context_length");
  if (!problems.empty()) return Error{"implausible hyper-parameters: " + problems.front()};
  if (hp.n_layer < 1 || hp.n_layer > 1024) return Error{"implausible hyper-parameters (block_count)"};
  std::vector<int32_t> n_ff, n_kv;
  if (!per_layer(f, a + "feed_forward_length", hp.n_layer, n_ff, problems) && problems.empty()) {
    // Mixture-of-experts files need not state a dense width (every layer routed): the experts' then.
    if (!per_layer(f, a + "expert_feed_forward_length", hp.n_layer, n_ff, problems) && problems.empty())
      missing.push_back(a + "feed_forward_length");
  }
  if (!per_layer(f, a + "attention.head_count_kv", hp.n_layer, n_kv, problems)) n_kv.assign(size_t(hp.n_layer), hp.n_head);
  if (!missing.empty()) {
    std::string m = "missing metadata:";
    for (auto& k : missing) m += " " + k;
    return Error{m};
  }
  if (!problems.empty()) return Error{problems.front()};
  hp.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp.rope_base = static_cast<float>(f.get_float(a + "rope.freq_base").value_or(10000.0));
  hp.rope_bases = {hp.rope_base};
  if (hp.n_head < 1 || hp.n_embd < 1) return Error{"implausible hyper-parameters"};
  const int64_t key_length = f.get_int(a + "attention.key_length").value_or(hp.n_embd / hp.n_head);
  if (!fits_i32(key_length)) return Error{"implausible hyper-parameters: attention.key_length out of range"};
  hp.head_dim = static_cast<int32_t>(key_length);
  // Partial RoPE (Qwen3.5: 16 of 64 dims) rotates the first n_rot dims of each head.
  const int64_t n_rot = f.get_int(a + "rope.dimension_count").value_or(hp.head_dim);
  if (!fits_i32(n_rot)) return Error{"implausible hyper-parameters: rope.dimension_count out of range"};
  hp.n_rot = static_cast<int32_t>(n_rot);
  if (hp.head_dim > 0) hp.attn_scale = 1.0f / std::sqrt(float(hp.head_dim));
  hp.layers.assign(size_t(hp.n_layer), LayerHParams{});
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerHParams& lp = hp.layers[size_t(l)];
    lp.n_ff = n_ff[size_t(l)];
    lp.n_head_kv = n_kv[size_t(l)];
    lp.head_dim = hp.head_dim;
  }
  return Ok{};
}

Status validate_hparams(HParams& hp) {
  auto bad = [](int64_t v, int64_t lo, int64_t hi) { return v < lo || v > hi; };
  if (bad(hp.n_embd, 1, 1 << 16) || bad(hp.n_layer, 1, 1024) || bad(hp.n_head, 1, 1024) ||
      bad(hp.n_ctx_train, 1, 1 << 24) || int32_t(hp.layers.size()) != hp.n_layer)
    return Error{"implausible hyper-parameters"};
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.head_dim > 1024) return Error{"invalid head dimension"};
  if (hp.n_rot <= 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim) return Error{"invalid rope.dimension_count"};
  if (!(hp.rms_eps > 0.0f) || !std::isfinite(hp.rms_eps)) return Error{"invalid rms epsilon"};
  if (hp.rope_bases.empty()) return Error{"no rope base"};
  for (float b : hp.rope_bases)
    if (!(b > 0.0f) || !std::isfinite(b)) return Error{"invalid rope base"};
  if (!(hp.attn_scale > 0.0f) || !std::isfinite(hp.attn_scale)) return Error{"invalid attention scale"};
  hp.n_ff = 0;
  hp.n_head_kv = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    const LayerHParams& lp = hp.layers[size_t(l)];
    const std::string at = " (layer " + std::to_string(l) + ")";
    if (!lp.moe && bad(lp.n_ff, 1, 1 << 20)) return Error{"implausible feed_forward_length" + at};
    if (lp.moe && (bad(hp.n_expert, 1, 4096) || bad(hp.n_expert_used, 1, std::min(hp.n_expert, 64)) ||
                   bad(hp.n_ff_exp, 1, 1 << 20) || bad(hp.n_ff_shexp, 0, 1 << 20) ||
                   !(hp.expert_weights_scale > 0.0f) || !std::isfinite(hp.expert_weights_scale)))
      return Error{"implausible expert hyper-parameters (expert_*)" + at};
    if (lp.kind != LayerKind::Attention) {  // a recurrent mixer: no K/V, its own hyper-parameters
      if (lp.n_head_kv != 0) return Error{"a recurrent layer with head_count_kv " + std::to_string(lp.n_head_kv) + at};
      if (lp.kind == LayerKind::DeltaNet &&
          (bad(hp.dn_k_heads, 1, 1024) || bad(hp.dn_v_heads, 1, 1024) || hp.dn_v_heads % hp.dn_k_heads != 0 ||
           bad(hp.dn_head_dim, 1, kMaxDeltaRuleDv) || bad(hp.dn_conv, 1, 64)))
        return Error{"implausible delta-net hyper-parameters (ssm.*)" + at};
      if (lp.kind == LayerKind::ShortConv && bad(hp.sc_taps, 1, 64))
        return Error{"implausible short-convolution length" + at};
      if (lp.kind == LayerKind::Mamba2 &&
          (bad(hp.m2_heads, 1, 4096) || bad(hp.m2_groups, 1, hp.m2_heads) || hp.m2_heads % hp.m2_groups != 0 ||
           bad(hp.m2_head_dim, 1, 4096) || bad(hp.m2_state, 1, 1024) || bad(hp.m2_conv, 1, 64)))
        return Error{"implausible Mamba-2 hyper-parameters (ssm.*)" + at};
      hp.n_ff = std::max(hp.n_ff, lp.n_ff);
      continue;
    }
    if (bad(lp.n_head_kv, 1, hp.n_head)) return Error{"implausible head_count_kv" + at};
    if (hp.n_head % lp.n_head_kv != 0) return Error{"head_count is not a multiple of head_count_kv" + at};
    if (lp.head_dim <= 0 || lp.head_dim % 2 != 0 || lp.head_dim > 1024) return Error{"invalid head dimension" + at};
    if (lp.window < 0) return Error{"negative sliding window" + at};
    if (lp.rope < -1 || lp.rope >= int32_t(hp.rope_bases.size())) return Error{"invalid rope table" + at};
    if (lp.rope >= 0) {
      const size_t r = size_t(lp.rope);
      const int32_t dims = r < hp.rope_dims.size() && hp.rope_dims[r] > 0 ? hp.rope_dims[r] : hp.n_rot;
      if (dims % 2 != 0 || dims > lp.head_dim) return Error{"invalid rope dimension count" + at};
    }
    if (lp.kv_source >= 0) {  // reads an earlier layer's K/V: it must be laid out as this layer's
      if (lp.kv_source >= l) return Error{"a layer shares the K/V of a later layer" + at};
      const LayerHParams& src = hp.layers[size_t(lp.kv_source)];
      if (src.kind != LayerKind::Attention || src.kv_source >= 0 || src.window != lp.window ||
          src.head_dim != lp.head_dim || src.n_head_kv != lp.n_head_kv || src.rope != lp.rope)
        return Error{"the K/V source layer " + std::to_string(lp.kv_source) +
                     " differs in kind, window, heads or RoPE" + at};
    }
    hp.n_head_kv = std::max(hp.n_head_kv, lp.n_head_kv);
    hp.head_dim = std::max(hp.head_dim, lp.head_dim);
    hp.n_ff = std::max(hp.n_ff, lp.n_ff);
  }
  // Every model has attention layers; the session's attention scratch is sized from them.
  if (hp.n_head_kv == 0) return Error{"no attention layer"};
  return Ok{};
}

}  // namespace picolm
