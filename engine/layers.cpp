#include "layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/vec_ops.h"

namespace picolm {
namespace {

std::string fmt_shape(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

// rms_norm with unit weights (gemma4's V heads).
void rms_norm_plain(float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

// Rotates the first 2 * tab.half dims of n_heads heads of vec at position pos with one RoPE table.
void rope(float* vec, int n_heads, int hd, bool neox, const RopeTable& tab, int32_t pos) {
  const int half = tab.half;
  const float* c = &tab.cos[size_t(pos) * half];
  const float* s = &tab.sin[size_t(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + size_t(h) * hd;
    if (neox) {
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c[i] - b * s[i];
        v[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

// GELU as ggml's CPU backend computes it, which is what gemma3 models were validated against in
// llama.cpp: the input rounded to F16 indexes a table of F16-rounded tanh-approximation values
// (saturated to 0 / x beyond +-10). Exact GELU differs from it by up to ~5e-3 in the logits of the
// shared gemma3 goldens; the table keeps us at its own rounding noise. Built once, immutable.
float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

const float* gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_fp32(fp32_to_fp16(gelu_tanh(fp16_to_fp32(uint16_t(h)))));
    return t;
  }();
  return table.data();
}

// fp32_to_fp16 for |x| in [2^-14, 10), the range that reaches the table as a normal half: rebias
// the exponent and round the mantissa to nearest even in one add. Equal to fp32_to_fp16 on every
// float of that range (checked exhaustively when written); 3-4x faster than the general conversion,
// which matters here: the FFN runs it n_ff times per token and layer.
inline uint16_t fp16_bits_of_normal(uint32_t bits) {
  const uint32_t abs = bits & 0x7fffffffu;
  return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | ((abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u)) >> 13));
}

// PairCombineFn: gate[i] = GELU(gate[i]) * up[i]. Elementwise, so a token's result does not depend
// on the chunking of matmul_pair.
void gelu_mul(int n, float* gate, const float* up) {
  const float* table = gelu_f16_table();
  for (int i = 0; i < n; ++i) {
    const float x = gate[i];
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs >= 0x38800000u && abs < 0x41200000u) gate[i] = table[fp16_bits_of_normal(bits)] * up[i];  // 2^-14 <= |x| < 10
    else if (x <= -10.0f) gate[i] = 0.0f;
    else if (x >= 10.0f) gate[i] = x * up[i];
    else gate[i] = table[fp32_to_fp16(x)] * up[i];  // tiny, zero or NaN
  }
}

}  // namespace

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) { rms_norm(x, w, out, n, eps); }
void gelu_tanh_mul(int n, float* gate, const float* up) { gelu_mul(n, gate, up); }

// ---- blocks -------------------------------------------------------------------------------------

void embed(Forward& f, float scale) {
  EvalWorkspace& W = f.w;
  const WeightView& emb = f.m.tok_embd;
  const int64_t E = f.hp().n_embd;
  const size_t emb_row_bytes = row_bytes(emb.type, E);
  const auto dequantize = f.m.kernels->dequantize_row[static_cast<uint32_t>(emb.type)];
  f.for_rows(f.T, [&](int64_t t) {
    const auto* row = static_cast<const uint8_t*>(emb.data) + size_t(f.toks[t]) * emb_row_bytes;
    float* xt = W.x.data() + t * E;
    dequantize(row, xt, E);
    if (scale != 1.0f)
      for (int64_t i = 0; i < E; ++i) xt[i] *= scale;
  });
}

void norm_input(Forward& f, const std::vector<float>& w) {
  EvalWorkspace& W = f.w;
  const int64_t E = f.hp().n_embd;
  const float eps = f.hp().rms_eps;
  f.for_rows(f.T, [&](int64_t t) { rms_norm(&W.x[t * E], w.data(), &W.xn[t * E], E, eps); });
}

void attend(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  const HParams& hp = f.hp();
  const LayerHParams& lp = hp.layers[size_t(layer)];
  const VecOps& ops = *f.m.vec_ops;
  const int hd = lp.head_dim;
  const int64_t q_dim = int64_t(hp.n_head) * hd, kv_row = int64_t(lp.n_head_kv) * hd;
  // A KV-sharing layer's kv_off and kv_ring are its source's (Session): it reads the source's cache.
  // One task per (token tile of one sequence, KV head[, slice of its query heads]): the query
  // heads of a KV head share its K/V blocks; rows of different sequences never share a tile (each
  // has its own cache). Tiles start at each segment's first row, so a sequence is tiled as when it
  // runs alone. Tasks are handed out latest position first, since later tokens see more positions.
  struct Tile {
    int seg;
    int64_t t0;  // first row (of the micro-batch)
    int n;
    int32_t last;  // position of the tile's last row
  };
  const int tile_tokens = W.attn_tile_tokens;
  std::vector<Tile> tiles;
  for (size_t si = 0; si < f.segs.size(); ++si) {
    const Segment& sg = f.segs[si];
    for (int64_t t0 = sg.row0; t0 < sg.row0 + sg.n; t0 += tile_tokens) {
      const int n = int(std::min<int64_t>(tile_tokens, sg.row0 + sg.n - t0));
      tiles.push_back({int(si), t0, n, sg.pos0 + int32_t(t0 - sg.row0) + n - 1});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.last > b.last; });
  const int group = hp.n_head / lp.n_head_kv;
  const int n_tiles = int(tiles.size());
  const int n_workers = f.pool.size();
  // Few tiles (decode): split the query heads of a group so that every worker has a task.
  int n_split = 1;
  if (n_tiles * lp.n_head_kv < n_workers)
    n_split = std::min(group, (n_workers + n_tiles * lp.n_head_kv - 1) / (n_tiles * lp.n_head_kv));
  const int per_tile = lp.n_head_kv * n_split;
  float* const att = W.xn.data();  // the attention output (xn is dead once q/k/v are computed)
  f.pool.parallel_for(n_tiles * per_tile, [&](int task, int worker) {
    const Tile& tl = tiles[size_t(task / per_tile)];
    const Segment& sg = f.segs[size_t(tl.seg)];
    Session::Impl& S = *sg.seq;
    const int kvh = task % per_tile / n_split, part = task % n_split;
    const int g0 = group * part / n_split, g1 = group * (part + 1) / n_split;
    AttentionTile a;
    a.head_dim = hd;
    a.n_tok = tl.n;
    a.n_grp = g1 - g0;
    a.pos0 = sg.pos0 + int32_t(tl.t0 - sg.row0);
    a.window = lp.window;
    a.scale = hp.attn_scale;
    a.q = W.q.data() + tl.t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.out = att + tl.t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.row_stride = q_dim;
    a.k = S.k_layer(layer) + int64_t(kvh) * hd;
    a.v = S.v_layer(layer) + int64_t(kvh) * hd;
    a.kv_stride = kv_row;
    a.kv_ring = S.kv_ring[size_t(layer)];
    a.work = W.attn_work.data() + W.attn_work_base + size_t(worker) * W.attn_work_stride;
    ops.attention(a);
  });
}

void attention(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  const HParams& hp = f.hp();
  const LayerHParams& lp = hp.layers[size_t(layer)];
  const AttnWeights& w = f.m.layers[size_t(layer)].attn;
  const KernelTable& K = *f.m.kernels;
  const VecOps& ops = *f.m.vec_ops;
  const ActivationMode mode = f.m.opts.activations;
  const int hd = lp.head_dim;
  const int64_t q_dim = int64_t(hp.n_head) * hd, kv_row = int64_t(lp.n_head_kv) * hd;  // the cache's row
  const int64_t T = f.T;
  const bool own_kv = lp.kv_source < 0;  // else only queries: the K/V are the source layer's
  const bool v_is_k = own_kv && !w.wv.data;  // gemma4 without v_proj: V is the K projection

  // q/k/v share their input: one activation quantization and one pass of the pool, for the rows
  // of every sequence.
  const MatmulTarget qkv[3] = {{w.wq.type, w.wq.data, w.wq.rows, W.q.data(), w.wq.packed},
                               {w.wk.type, w.wk.data, w.wk.rows, W.k.data(), w.wk.packed},
                               {w.wv.type, w.wv.data, w.wv.rows, W.v.data(), w.wv.packed}};
  matmul_multi(K, f.pool, mode, qkv, own_kv ? (v_is_k ? 2 : 3) : 1, w.wq.cols, W.xn.data(), T);

  f.for_rows(T, [&](int64_t t) {
    Session::Impl& S = *f.seg_of(t).seq;
    float* qt = &W.q[t * q_dim];
    float* kt = &W.k[t * kv_row];
    float* vt = &W.v[t * kv_row];
    const int32_t pos = f.pos(t);
    if (!own_kv) {
      if (!w.q_norm.empty())
        for (int h = 0; h < hp.n_head; ++h) rms_norm(qt + h * hd, w.q_norm.data(), qt + h * hd, hd, hp.rms_eps);
      if (lp.rope >= 0) rope(qt, hp.n_head, hd, hp.rope_neox, S.rope[size_t(lp.rope)], pos);
      return;
    }
    if (v_is_k) std::memcpy(vt, kt, size_t(kv_row) * sizeof(float));
    if (!w.bq.empty()) {
      for (int64_t i = 0; i < q_dim; ++i) qt[i] += w.bq[i];
      for (int64_t i = 0; i < kv_row; ++i) kt[i] += w.bk[i];
      for (int64_t i = 0; i < kv_row; ++i) vt[i] += w.bv[i];
    }
    if (!w.q_norm.empty()) {  // per-head RMS norm of q and k, before RoPE
      for (int h = 0; h < hp.n_head; ++h) rms_norm(qt + h * hd, w.q_norm.data(), qt + h * hd, hd, hp.rms_eps);
      for (int h = 0; h < lp.n_head_kv; ++h) rms_norm(kt + h * hd, w.k_norm.data(), kt + h * hd, hd, hp.rms_eps);
    }
    if (hp.v_norm)
      for (int h = 0; h < lp.n_head_kv; ++h) rms_norm_plain(vt + h * hd, hd, hp.rms_eps);
    if (lp.rope >= 0) {
      const RopeTable& tab = S.rope[size_t(lp.rope)];
      rope(qt, hp.n_head, hd, hp.rope_neox, tab, pos);
      rope(kt, lp.n_head_kv, hd, hp.rope_neox, tab, pos);
    }
    const size_t slot = S.kv_slot(layer, pos);
    ops.f32_to_f16(int(kv_row), kt, S.k_layer(layer) + slot * size_t(kv_row));
    ops.f32_to_f16(int(kv_row), vt, S.v_layer(layer) + slot * size_t(kv_row));
  });

  attend(f, layer);
  matmul(K, f.pool, mode, w.wo.type, w.wo.data, w.wo.rows, w.wo.cols, W.xn.data(), T, W.q.data(), w.wo.packed);
}

void ffn(Forward& f, int layer, FfnActivation act) {
  EvalWorkspace& W = f.w;
  const FfnWeights& w = f.m.layers[size_t(layer)].ffn;
  const KernelTable& K = *f.m.kernels;
  const ActivationMode mode = f.m.opts.activations;
  const PairCombineFn combine = act == FfnActivation::SiluGated ? f.m.vec_ops->silu_mul : gelu_mul;
  // act(gate) * up, chunk of rows by chunk of rows: the up products are never stored whole.
  matmul_pair(K, f.pool, mode, {w.gate.type, w.gate.data, w.gate.rows, W.gate.data(), w.gate.packed},
              {w.up.type, w.up.data, w.up.rows, nullptr, w.up.packed}, w.gate.cols, W.xn.data(), f.T, combine);
  matmul(K, f.pool, mode, w.down.type, w.down.data, w.down.rows, w.down.cols, W.gate.data(), f.T, W.q.data(),
         w.down.packed);
}

void residual(Forward& f, const std::vector<float>* post_norm, const std::vector<float>* next_norm) {
  EvalWorkspace& W = f.w;
  const int64_t E = f.hp().n_embd;
  const float eps = f.hp().rms_eps;
  float* const y = W.q.data();
  f.for_rows(f.T, [&](int64_t t) {
    float* yt = y + t * E;
    float* xt = W.x.data() + t * E;
    if (post_norm) rms_norm(yt, post_norm->data(), yt, E, eps);
    for (int64_t i = 0; i < E; ++i) xt[i] += yt[i];
    if (next_norm) rms_norm(xt, next_norm->data(), &W.xn[t * E], E, eps);
  });
}

void output(Forward& f) {
  EvalWorkspace& W = f.w;
  const Model::Impl& m = f.m;
  const int64_t E = f.hp().n_embd;
  const size_t nv = size_t(f.hp().n_vocab);
  const float eps = f.hp().rms_eps;
  const int64_t n_out = int64_t(f.out.size());
  if (n_out == 0) return;
  f.for_rows(n_out, [&](int64_t i) {
    rms_norm(&W.x[f.out[size_t(i)].row * E], m.output_norm.data(), &W.xn[i * E], E, eps);
  });
  // One matmul for every output row. Rows bound for one session's consecutive logits (a prefill
  // with all_logits, or a single sequence) are written in place; others go through W.logits.
  bool in_place = true;
  const auto addr = [&](int64_t i) { return reinterpret_cast<uintptr_t>(f.out[size_t(i)].dst); };
  for (int64_t i = 1; i < n_out && in_place; ++i) in_place = addr(i) == addr(0) + size_t(i) * nv * sizeof(float);
  float* dst = f.out[0].dst;
  if (!in_place) {
    if (W.logits.size() < size_t(n_out) * nv) W.logits.resize(size_t(n_out) * nv);
    dst = W.logits.data();
  }
  matmul(*m.kernels, f.pool, m.opts.activations, m.output.type, m.output.data, m.output.rows, m.output.cols,
         W.xn.data(), n_out, dst, m.output.packed);
  if (!in_place)
    for (int64_t i = 0; i < n_out; ++i) std::memcpy(f.out[size_t(i)].dst, dst + size_t(i) * nv, nv * sizeof(float));
}

void forward_prenorm_decoder(Forward& f, FfnActivation act) {
  const auto& layers = f.m.layers;
  embed(f, 1.0f);
  norm_input(f, layers[0].attn_norm);
  for (int l = 0; l < f.hp().n_layer; ++l) {
    const LayerWeights& w = layers[size_t(l)];
    attention(f, l);
    residual(f, nullptr, &w.ffn_norm);
    ffn(f, l, act);
    residual(f, nullptr, l + 1 < f.hp().n_layer ? &layers[size_t(l) + 1].attn_norm : nullptr);
  }
  output(f);
}

// ---- loading ------------------------------------------------------------------------------------

WeightView WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols, bool optional) {
  const GgufTensor* t = f_.tensor(name);
  if (!t) {
    if (!optional) errors.push_back("missing tensor '" + name + "'");
    return {};
  }
  if (t->ne.size() != 2 || t->ne[0] != static_cast<uint64_t>(cols) || t->ne[1] != static_cast<uint64_t>(rows)) {
    errors.push_back("tensor '" + name + "' has shape " + fmt_shape(t->ne) + ", expected [" + std::to_string(cols) +
                     ", " + std::to_string(rows) + "]");
    return {};
  }
  if (!k_.vec_dot[static_cast<uint32_t>(t->type)] || !k_.dequantize_row[static_cast<uint32_t>(t->type)]) {
    errors.push_back("tensor '" + name + "' has type " + ggml_type_traits(t->type)->name +
                     ", which this engine cannot multiply");
    return {};
  }
  return {t->data, t->type, rows, cols};
}

std::vector<float> WeightLoader::vec(const std::string& name, int64_t n, bool optional, bool any_shape) {
  const GgufTensor* t = f_.tensor(name);
  if (!t) {
    if (!optional) errors.push_back("missing tensor '" + name + "'");
    return {};
  }
  if (t->n_elements() != static_cast<uint64_t>(n) || (!any_shape && t->ne[0] != static_cast<uint64_t>(n))) {
    errors.push_back("tensor '" + name + "' has shape " + fmt_shape(t->ne) + ", expected [" + std::to_string(n) + "]");
    return {};
  }
  if (!k_.dequantize_row[static_cast<uint32_t>(t->type)]) {
    errors.push_back("tensor '" + name + "' has unsupported type " + ggml_type_traits(t->type)->name);
    return {};
  }
  std::vector<float> out(static_cast<size_t>(n));
  k_.dequantize_row[static_cast<uint32_t>(t->type)](t->data, out.data(), n);
  return out;
}

WeightView row_slice(const WeightView& w, int64_t first, int64_t n) {
  if (!w.data || first < 0 || n <= 0 || first + n > w.rows) return {};
  return {static_cast<const uint8_t*>(w.data) + size_t(first) * row_bytes(w.type, w.cols), w.type, n, w.cols};
}

void load_attention(WeightLoader& L, const HParams& hp, int layer, const AttentionTensors& opt, AttnWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, hd = hp.layers[size_t(layer)].head_dim, q_dim = int64_t(hp.n_head) * hd;
  const int64_t kv_dim = int64_t(hp.layers[size_t(layer)].n_head_kv) * hd;
  w.wq = L.matrix(p + "attn_q.weight", q_dim, E);
  w.wk = L.matrix(p + "attn_k.weight", kv_dim, E);
  w.wv = L.matrix(p + "attn_v.weight", kv_dim, E);
  w.wo = L.matrix(p + "attn_output.weight", E, q_dim);
  if (opt.qkv_bias != Presence::Absent) {
    const bool optional = opt.qkv_bias == Presence::Optional;
    w.bq = L.vec(p + "attn_q.bias", q_dim, optional);
    w.bk = L.vec(p + "attn_k.bias", kv_dim, optional);
    w.bv = L.vec(p + "attn_v.bias", kv_dim, optional);
    if (w.bq.empty() || w.bk.empty() || w.bv.empty()) {  // all three or none
      w.bq.clear();
      w.bk.clear();
      w.bv.clear();
    }
  }
  if (opt.qk_norm != Presence::Absent) {
    const bool optional = opt.qk_norm == Presence::Optional;
    w.q_norm = L.vec(p + "attn_q_norm.weight", hd, optional);
    w.k_norm = L.vec(p + "attn_k_norm.weight", hd, optional);
    if (w.q_norm.empty() || w.k_norm.empty()) {  // both or none
      w.q_norm.clear();
      w.k_norm.clear();
    }
  }
}

void load_ffn(WeightLoader& L, const HParams& hp, int layer, FfnWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, n_ff = hp.layers[size_t(layer)].n_ff;
  w.gate = L.matrix(p + "ffn_gate.weight", n_ff, E);
  w.up = L.matrix(p + "ffn_up.weight", n_ff, E);
  w.down = L.matrix(p + "ffn_down.weight", E, n_ff);
}

void load_embeddings_and_output(WeightLoader& L, Model::Impl& m, const char* output_norm) {
  HParams& hp = m.hp;
  const int64_t E = hp.n_embd;
  m.tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
  m.output_norm = L.vec(output_norm, E);
  m.output = L.matrix("output.weight", hp.n_vocab, E, /*optional=*/true);
  m.rope_freq_factors = L.vec("rope_freqs.weight", hp.head_dim / 2, /*optional=*/true);
  for (float x : m.rope_freq_factors)
    if (!(x > 0.0f) || !std::isfinite(x)) L.errors.push_back("rope_freqs.weight has a non-positive or non-finite factor");
  if (!m.output.data) {
    hp.tied_output = true;
    m.output = m.tok_embd;
  }
}

void load_prenorm_decoder(WeightLoader& L, Model::Impl& m, const AttentionTensors& opt) {
  const HParams& hp = m.hp;
  load_embeddings_and_output(L, m);
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", hp.n_embd);
    load_attention(L, hp, l, opt, w.attn);
    load_ffn(L, hp, l, w.ffn);
  }
}

}  // namespace picolm
