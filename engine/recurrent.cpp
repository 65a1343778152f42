#include "recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/recurrent_ops.h"
#include "kernels/vec_ops.h"

namespace picolm {
namespace {

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// x / sqrt(mean(x^2) + eps) * w, as layers.cpp's (double sum: the norm of a row does not depend on
// its length's rounding).
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

// x / max(||x||, eps) * extra (ggml_l2_norm, then the query's 1/sqrt(d) folded in).
void l2_norm(float* x, int n, float eps, float extra) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::max(std::sqrt(ss), double(eps))) * extra;
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
// ggml's softplus: log(1 + e^x), x itself beyond 20 (where they agree in float).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// NeoX rotation of the first 2 * tab.half dims of each of n_heads heads.
void rope_neox(float* vec, int n_heads, int hd, const RopeTable& tab, int32_t pos) {
  const int half = tab.half;
  const float* c = &tab.cos[size_t(pos) * half];
  const float* s = &tab.sin[size_t(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + size_t(h) * hd;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = a * s[i] + b * c[i];
    }
  }
}

MatmulTarget target(const WeightView& w, float* y) { return {w.type, w.data, w.rows, y, w.packed}; }

void project(Forward& f, const WeightView& w, const float* x, float* y) {
  Session::Impl& S = f.s;
  matmul(*f.m.kernels, *S.pool, f.m.opts.activations, w.type, w.data, w.rows, w.cols, x, f.T, y, w.packed);
}

// Runs the causal conv of the batch: conv_in holds the history rows then the batch's T rows; the
// history is replaced by the last taps - 1 rows (the batch may be shorter than the history).
void conv_batch(Forward& f, float* history, int taps, int channels, const float* w, float* out) {
  Session::Impl& S = f.s;
  const RecurrentOps& ops = best_recurrent_ops();
  const float* in = S.rec.conv_in.data();
  S.for_tokens(f.T, [&](int64_t t) {
    CausalConv c;
    c.channels = channels;
    c.taps = taps;
    c.n_tok = 1;
    c.in = in + size_t(t) * channels;
    c.w = w;
    c.out = out + size_t(t) * channels;
    c.out_stride = channels;
    ops.causal_conv(c);
  });
  const size_t hist = size_t(taps - 1) * channels;
  std::memcpy(history, in + size_t(f.T) * channels, hist * sizeof(float));
}

// The history rows at the front of conv_in (the batch's rows follow).
float* start_conv(Forward& f, const float* history, int taps, int channels) {
  RecurrentState& r = f.s.rec;
  const size_t hist = size_t(taps - 1) * channels;
  grow(r.conv_in, hist + size_t(f.T) * channels);
  std::memcpy(r.conv_in.data(), history, hist * sizeof(float));
  return r.conv_in.data() + hist;
}

// A convolution kernel: the file's [channels][taps] F32 (ggml ne [taps, channels]) as [taps][channels].
std::vector<float> load_conv_kernel(WeightLoader& L, const std::string& name, int64_t taps, int64_t channels) {
  const GgufTensor* t = L.file().tensor(name);
  if (!t) {
    L.errors.push_back("missing tensor '" + name + "'");
    return {};
  }
  if (t->ne.size() != 2 || t->ne[0] != uint64_t(taps) || t->ne[1] != uint64_t(channels)) {
    L.errors.push_back("tensor '" + name + "' has an unexpected shape, expected [" + std::to_string(taps) + ", " +
                       std::to_string(channels) + "]");
    return {};
  }
  if (t->type != GgmlType::F32) {
    L.errors.push_back("tensor '" + name + "' is not F32");
    return {};
  }
  std::vector<float> file(size_t(taps * channels)), out(size_t(taps * channels));
  std::memcpy(file.data(), t->data, file.size() * sizeof(float));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t j = 0; j < taps; ++j) out[size_t(j * channels + c)] = file[size_t(c * taps + j)];
  return out;
}

}  // namespace

// ---- state ----------------------------------------------------------------------------------------

void init_recurrent_state(RecurrentState& r, const HParams& hp) {
  r.off.assign(size_t(hp.n_layer), 0);
  size_t n = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    r.off[size_t(l)] = n;
    switch (hp.layers[size_t(l)].kind) {
      case LayerKind::DeltaNet: {
        const size_t hd = size_t(hp.dn_head_dim);
        const size_t channels = (2 * size_t(hp.dn_k_heads) + size_t(hp.dn_v_heads)) * hd;
        n += size_t(hp.dn_conv - 1) * channels + size_t(hp.dn_v_heads) * hd * hd;
        break;
      }
      case LayerKind::ShortConv: n += size_t(hp.sc_taps - 1) * size_t(hp.n_embd); break;
      case LayerKind::Attention: break;
    }
  }
  r.data.assign(n, 0.0f);
  r.snapshots.clear();
}

size_t RecurrentState::bytes() const {
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  size_t snaps = 0;
  for (const StateSnapshot& s : snapshots) snaps += b(s.bytes);
  return b(data) + b(conv_in) + b(conv_out) + b(gate) + b(qg) + b(beta) + b(decay) + b(o) + snaps;
}

// ---- blocks ---------------------------------------------------------------------------------------

void delta_net(Forward& f, int layer) {
  Session::Impl& S = f.s;
  RecurrentState& r = S.rec;
  const HParams& hp = f.hp();
  const DeltaNetWeights& w = f.m.layers[size_t(layer)].dn;
  const int hd = hp.dn_head_dim, nk = hp.dn_k_heads, nv = hp.dn_v_heads, taps = hp.dn_conv;
  const int channels = (2 * nk + nv) * hd, dv_all = nv * hd;
  const int64_t T = f.T;
  float* const history = r.data.data() + r.off[size_t(layer)];
  float* const state = history + size_t(taps - 1) * channels;

  // The four projections share their input: one activation quantization, one pass of the pool.
  float* qkv = start_conv(f, history, taps, channels);
  grow(r.gate, size_t(T) * dv_all);
  grow(r.beta, size_t(T) * nv);
  grow(r.decay, size_t(T) * nv);
  const MatmulTarget targets[4] = {target(w.qkv, qkv), target(w.z, r.gate.data()), target(w.beta, r.beta.data()),
                                   target(w.alpha, r.decay.data())};
  matmul_multi(*f.m.kernels, *S.pool, f.m.opts.activations, targets, 4, w.qkv.cols, S.xn.data(), T);

  grow(r.conv_out, size_t(T) * channels);
  conv_batch(f, history, taps, channels, w.conv.data(), r.conv_out.data());

  const float q_scale = 1.0f / std::sqrt(float(hd));
  S.for_tokens(T, [&](int64_t t) {
    float* c = &r.conv_out[size_t(t) * channels];
    for (int i = 0; i < channels; ++i) c[i] = silu(c[i]);
    for (int h = 0; h < nk; ++h) {
      l2_norm(c + h * hd, hd, hp.rms_eps, q_scale);
      l2_norm(c + (nk + h) * hd, hd, hp.rms_eps, 1.0f);
    }
    float* b = &r.beta[size_t(t) * nv];
    float* g = &r.decay[size_t(t) * nv];  // alpha in, exp(g) out
    for (int h = 0; h < nv; ++h) {
      b[h] = sigmoid(b[h]);
      g[h] = std::exp(softplus(g[h] + w.dt_bias[size_t(h)]) * w.a[size_t(h)]);
    }
  });

  // The recurrence: sequential over the batch's tokens, one task per V head (its own state).
  grow(r.o, size_t(T) * dv_all);
  const RecurrentOps& ops = best_recurrent_ops();
  S.pool->parallel_for(nv, [&](int h, int) {
    DeltaRuleHead d;
    d.dk = hd;
    d.dv = hd;
    d.n_tok = int(T);
    d.state = state + size_t(h) * hd * hd;
    d.q = r.conv_out.data() + (h % nk) * hd;
    d.k = r.conv_out.data() + (nk + h % nk) * hd;
    d.qk_stride = channels;
    d.v = r.conv_out.data() + (2 * nk + h) * hd;
    d.v_stride = channels;
    d.decay = r.decay.data() + h;
    d.beta = r.beta.data() + h;
    d.gb_stride = nv;
    d.out = r.o.data() + h * hd;
    d.out_stride = dv_all;
    ops.delta_rule(d);
  });

  S.for_tokens(T, [&](int64_t t) {
    float* o = &r.o[size_t(t) * dv_all];
    const float* z = &r.gate[size_t(t) * dv_all];
    for (int h = 0; h < nv; ++h) rms_norm(o + h * hd, w.norm.data(), o + h * hd, hd, hp.rms_eps);
    for (int i = 0; i < dv_all; ++i) o[i] *= silu(z[i]);
  });
  project(f, w.out, r.o.data(), S.q.data());
}

void short_conv(Forward& f, int layer) {
  Session::Impl& S = f.s;
  RecurrentState& r = S.rec;
  const HParams& hp = f.hp();
  const ShortConvWeights& w = f.m.layers[size_t(layer)].sc;
  const int E = hp.n_embd, taps = hp.sc_taps;
  const int64_t T = f.T;
  float* const history = r.data.data() + r.off[size_t(layer)];

  grow(r.gate, size_t(T) * 3 * E);
  project(f, w.in_proj, S.xn.data(), r.gate.data());  // [T][B | C | x]
  float* bx = start_conv(f, history, taps, E);
  S.for_tokens(T, [&](int64_t t) {
    const float* bcx = &r.gate[size_t(t) * 3 * E];
    float* out = bx + size_t(t) * E;
    for (int i = 0; i < E; ++i) out[i] = bcx[i] * bcx[2 * E + i];
  });
  grow(r.conv_out, size_t(T) * E);
  conv_batch(f, history, taps, E, w.conv.data(), r.conv_out.data());
  grow(r.o, size_t(T) * E);
  S.for_tokens(T, [&](int64_t t) {
    const float* c = &r.gate[size_t(t) * 3 * E + E];
    const float* conv = &r.conv_out[size_t(t) * E];
    float* o = &r.o[size_t(t) * E];
    for (int i = 0; i < E; ++i) o[i] = c[i] * conv[i];
  });
  project(f, w.out_proj, r.o.data(), S.q.data());
}

void gated_attention(Forward& f, int layer) {
  Session::Impl& S = f.s;
  RecurrentState& r = S.rec;
  const HParams& hp = f.hp();
  const LayerHParams& lp = hp.layers[size_t(layer)];
  const AttnWeights& w = f.m.layers[size_t(layer)].attn;
  const VecOps& ops = *f.m.vec_ops;
  const int hd = hp.head_dim;
  const int64_t q_dim = int64_t(hp.n_head) * hd, kv_row = S.kv_row;
  const int64_t T = f.T;
  const int32_t pos0 = f.pos0;

  grow(r.qg, size_t(T) * 2 * q_dim);
  grow(r.gate, size_t(T) * q_dim);
  const MatmulTarget qkv[3] = {target(w.wq, r.qg.data()), target(w.wk, S.k.data()), target(w.wv, S.v.data())};
  matmul_multi(*f.m.kernels, *S.pool, f.m.opts.activations, qkv, 3, w.wq.cols, S.xn.data(), T);

  const RopeTable& tab = S.rope[size_t(lp.rope)];
  uint16_t* const kc_layer = S.k_layer(layer);
  uint16_t* const vc_layer = S.v_layer(layer);
  S.for_tokens(T, [&](int64_t t) {
    const float* qg = &r.qg[size_t(t) * 2 * q_dim];
    float* qt = &S.q[t * q_dim];
    float* gt = &r.gate[size_t(t) * q_dim];
    for (int h = 0; h < hp.n_head; ++h) {  // per head: hd query rows, then hd gate rows
      std::memcpy(qt + h * hd, qg + 2 * h * hd, size_t(hd) * sizeof(float));
      std::memcpy(gt + h * hd, qg + (2 * h + 1) * hd, size_t(hd) * sizeof(float));
    }
    float* kt = &S.k[t * kv_row];
    float* vt = &S.v[t * kv_row];
    for (int h = 0; h < hp.n_head; ++h) rms_norm(qt + h * hd, w.q_norm.data(), qt + h * hd, hd, hp.rms_eps);
    for (int h = 0; h < lp.n_head_kv; ++h) rms_norm(kt + h * hd, w.k_norm.data(), kt + h * hd, hd, hp.rms_eps);
    const int32_t pos = pos0 + int32_t(t);
    rope_neox(qt, hp.n_head, hd, tab, pos);
    rope_neox(kt, lp.n_head_kv, hd, tab, pos);
    ops.f32_to_f16(int(kv_row), kt, kc_layer + S.kv_slot(layer, pos) * kv_row);
    ops.f32_to_f16(int(kv_row), vt, vc_layer + S.kv_slot(layer, pos) * kv_row);
  });

  // Tiles as in layers.cpp's attention(): (token tile, KV head[, slice of its query heads]).
  const int group = hp.n_head / lp.n_head_kv;
  const int tile_tokens = S.attn_tile_tokens;
  const int n_tiles = int((T + tile_tokens - 1) / tile_tokens);
  const int n_workers = S.pool->size();
  int n_split = 1;
  if (n_tiles * lp.n_head_kv < n_workers)
    n_split = std::min(group, (n_workers + n_tiles * lp.n_head_kv - 1) / (n_tiles * lp.n_head_kv));
  const int per_tile = lp.n_head_kv * n_split;
  float* const att = S.xn.data();
  S.pool->parallel_for(n_tiles * per_tile, [&](int task, int worker) {
    const int tile = n_tiles - 1 - task / per_tile;
    const int kvh = task % per_tile / n_split, part = task % n_split;
    const int g0 = group * part / n_split, g1 = group * (part + 1) / n_split;
    const int64_t t0 = int64_t(tile) * tile_tokens;
    AttentionTile a;
    a.head_dim = hd;
    a.n_tok = int(std::min<int64_t>(tile_tokens, T - t0));
    a.n_grp = g1 - g0;
    a.pos0 = pos0 + int32_t(t0);
    a.window = lp.window;
    a.scale = hp.attn_scale;
    a.q = S.q.data() + t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.out = att + t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.row_stride = q_dim;
    a.k = kc_layer + int64_t(kvh) * hd;
    a.v = vc_layer + int64_t(kvh) * hd;
    a.kv_stride = kv_row;
    a.kv_ring = S.kv_ring[size_t(layer)];
    a.work = S.attn_work.data() + S.attn_work_base + size_t(worker) * S.attn_work_stride;
    ops.attention(a);
  });
  S.for_tokens(T, [&](int64_t t) {
    float* at = att + t * q_dim;
    const float* gt = &r.gate[size_t(t) * q_dim];
    for (int64_t i = 0; i < q_dim; ++i) at[i] *= sigmoid(gt[i]);
  });
  project(f, w.wo, att, S.q.data());
}

// ---- loading --------------------------------------------------------------------------------------

void load_delta_net(WeightLoader& L, const HParams& hp, int layer, DeltaNetWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, hd = hp.dn_head_dim, nk = hp.dn_k_heads, nv = hp.dn_v_heads;
  const int64_t channels = (2 * nk + nv) * hd;
  w.qkv = L.matrix(p + "attn_qkv.weight", channels, E);
  w.z = L.matrix(p + "attn_gate.weight", nv * hd, E);
  w.beta = L.matrix(p + "ssm_beta.weight", nv, E);
  w.alpha = L.matrix(p + "ssm_alpha.weight", nv, E);
  w.out = L.matrix(p + "ssm_out.weight", E, nv * hd);
  w.conv = load_conv_kernel(L, p + "ssm_conv1d.weight", hp.dn_conv, channels);
  w.dt_bias = L.vec(p + "ssm_dt.bias", nv);
  w.a = L.vec(p + "ssm_a", nv);
  w.norm = L.vec(p + "ssm_norm.weight", hd);
}

void load_short_conv(WeightLoader& L, const HParams& hp, int layer, ShortConvWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".shortconv.";
  const int64_t E = hp.n_embd;
  w.in_proj = L.matrix(p + "in_proj.weight", 3 * E, E);
  w.out_proj = L.matrix(p + "out_proj.weight", E, E);
  w.conv = load_conv_kernel(L, p + "conv.weight", hp.sc_taps, E);
}

void load_gated_attention(WeightLoader& L, const HParams& hp, int layer, AttnWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, hd = hp.head_dim, q_dim = int64_t(hp.n_head) * hd;
  const int64_t kv_dim = int64_t(hp.layers[size_t(layer)].n_head_kv) * hd;
  w.wq = L.matrix(p + "attn_q.weight", 2 * q_dim, E);
  w.wk = L.matrix(p + "attn_k.weight", kv_dim, E);
  w.wv = L.matrix(p + "attn_v.weight", kv_dim, E);
  w.wo = L.matrix(p + "attn_output.weight", E, q_dim);
  w.q_norm = L.vec(p + "attn_q_norm.weight", hd);
  w.k_norm = L.vec(p + "attn_k_norm.weight", hd);
}

}  // namespace picolm
