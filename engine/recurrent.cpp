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
  matmul(*f.m.kernels, f.pool, f.m.opts.activations, w.type, w.data, w.rows, w.cols, x, f.T, y, w.packed);
}

}  // namespace

// The causal conv of every segment of the micro-batch: src holds the conv inputs of the T rows
// ([T][channels]); each segment runs over its own sequence's history (the layer's state at
// state_off in seq->rec.data), which is then replaced by the segment's last taps - 1 inputs (the
// batch may be shorter than the history). conv_in holds per segment its history then its rows, so a
// row is convolved exactly as when its sequence runs alone.
void conv_segments(Forward& f, size_t state_off, int taps, int channels, const float* src, const float* w, float* out) {
  RecurrentScratch& r = f.w.rec;
  const size_t hist = size_t(taps - 1) * channels;
  const size_t n_seg = f.segs.size();
  grow(r.conv_in, hist * n_seg + size_t(f.T) * channels);
  for (size_t si = 0; si < n_seg; ++si) {
    const Segment& sg = f.segs[si];
    float* in = r.conv_in.data() + (size_t(sg.row0) + si * size_t(taps - 1)) * channels;
    std::memcpy(in, sg.seq->rec.data.data() + state_off, hist * sizeof(float));
    std::memcpy(in + hist, src + size_t(sg.row0) * channels, size_t(sg.n) * channels * sizeof(float));
  }
  const RecurrentOps& ops = best_recurrent_ops();
  f.for_rows(f.T, [&](int64_t t) {
    const size_t si = size_t(f.w.row_seg[size_t(t)]);
    CausalConv c;
    c.channels = channels;
    c.taps = taps;
    c.n_tok = 1;
    c.in = r.conv_in.data() + (size_t(t) + si * size_t(taps - 1)) * channels;
    c.w = w;
    c.out = out + size_t(t) * channels;
    c.out_stride = channels;
    ops.causal_conv(c);
  });
  for (size_t si = 0; si < n_seg; ++si) {
    const Segment& sg = f.segs[si];
    const float* in = r.conv_in.data() + (size_t(sg.row0) + si * size_t(taps - 1)) * channels;
    std::memcpy(sg.seq->rec.data.data() + state_off, in + size_t(sg.n) * channels, hist * sizeof(float));
  }
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
      case LayerKind::Mamba2: {
        const size_t d_inner = size_t(hp.m2_heads) * size_t(hp.m2_head_dim);
        const size_t channels = d_inner + 2 * size_t(hp.m2_groups) * size_t(hp.m2_state);
        n += size_t(hp.m2_conv - 1) * channels + d_inner * size_t(hp.m2_state);
        break;
      }
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
  return b(data) + snaps;
}

size_t RecurrentScratch::bytes() const {
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return b(proj) + b(conv_in) + b(conv_out) + b(gate) + b(qg) + b(beta) + b(decay) + b(o);
}

// ---- blocks ---------------------------------------------------------------------------------------

void delta_net(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  RecurrentScratch& r = W.rec;
  const HParams& hp = f.hp();
  const DeltaNetWeights& w = f.m.layers[size_t(layer)].dn;
  const int hd = hp.dn_head_dim, nk = hp.dn_k_heads, nv = hp.dn_v_heads, taps = hp.dn_conv;
  const int channels = (2 * nk + nv) * hd, dv_all = nv * hd;
  const int64_t T = f.T;
  // The layer's state in each sequence's RecurrentState::data: conv history, then the delta rule's.
  const size_t hist_off = size_t(f.segs[0].seq->rec.off[size_t(layer)]);
  const size_t state_off = hist_off + size_t(taps - 1) * channels;

  // The four projections share their input: one activation quantization, one pass of the pool,
  // for the rows of every sequence.
  grow(r.proj, size_t(T) * channels);
  grow(r.gate, size_t(T) * dv_all);
  grow(r.beta, size_t(T) * nv);
  grow(r.decay, size_t(T) * nv);
  const MatmulTarget targets[4] = {target(w.qkv, r.proj.data()), target(w.z, r.gate.data()),
                                   target(w.beta, r.beta.data()), target(w.alpha, r.decay.data())};
  matmul_multi(*f.m.kernels, f.pool, f.m.opts.activations, targets, 4, w.qkv.cols, W.xn.data(), T);

  grow(r.conv_out, size_t(T) * channels);
  conv_segments(f, hist_off, taps, channels, r.proj.data(), w.conv.data(), r.conv_out.data());

  const float q_scale = 1.0f / std::sqrt(float(hd));
  f.for_rows(T, [&](int64_t t) {
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

  // The recurrence: sequential over a segment's rows, one task per (segment, V head): each its own
  // sequence's state, so sequences never mix and a sequence computes as when it runs alone.
  grow(r.o, size_t(T) * dv_all);
  const RecurrentOps& ops = best_recurrent_ops();
  const int n_seg = int(f.segs.size());
  f.pool.parallel_for(n_seg * nv, [&](int task, int) {
    const Segment& sg = f.segs[size_t(task / nv)];
    const int h = task % nv;
    const float* rows = r.conv_out.data() + size_t(sg.row0) * channels;
    DeltaRuleHead d;
    d.dk = hd;
    d.dv = hd;
    d.n_tok = int(sg.n);
    d.state = sg.seq->rec.data.data() + state_off + size_t(h) * hd * hd;
    d.q = rows + (h % nk) * hd;
    d.k = rows + (nk + h % nk) * hd;
    d.qk_stride = channels;
    d.v = rows + (2 * nk + h) * hd;
    d.v_stride = channels;
    d.decay = r.decay.data() + size_t(sg.row0) * nv + h;
    d.beta = r.beta.data() + size_t(sg.row0) * nv + h;
    d.gb_stride = nv;
    d.out = r.o.data() + size_t(sg.row0) * dv_all + h * hd;
    d.out_stride = dv_all;
    ops.delta_rule(d);
  });

  f.for_rows(T, [&](int64_t t) {
    float* o = &r.o[size_t(t) * dv_all];
    const float* z = &r.gate[size_t(t) * dv_all];
    for (int h = 0; h < nv; ++h) rms_norm(o + h * hd, w.norm.data(), o + h * hd, hd, hp.rms_eps);
    for (int i = 0; i < dv_all; ++i) o[i] *= silu(z[i]);
  });
  project(f, w.out, r.o.data(), W.q.data());
}

void short_conv(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  RecurrentScratch& r = W.rec;
  const HParams& hp = f.hp();
  const ShortConvWeights& w = f.m.layers[size_t(layer)].sc;
  const int E = hp.n_embd, taps = hp.sc_taps;
  const int64_t T = f.T;
  const size_t hist_off = size_t(f.segs[0].seq->rec.off[size_t(layer)]);

  grow(r.gate, size_t(T) * 3 * E);
  project(f, w.in_proj, W.xn.data(), r.gate.data());  // [T][B | C | x]
  grow(r.proj, size_t(T) * E);
  f.for_rows(T, [&](int64_t t) {
    const float* bcx = &r.gate[size_t(t) * 3 * E];
    float* out = &r.proj[size_t(t) * E];
    for (int i = 0; i < E; ++i) out[i] = bcx[i] * bcx[2 * E + i];
  });
  grow(r.conv_out, size_t(T) * E);
  conv_segments(f, hist_off, taps, E, r.proj.data(), w.conv.data(), r.conv_out.data());
  grow(r.o, size_t(T) * E);
  f.for_rows(T, [&](int64_t t) {
    const float* c = &r.gate[size_t(t) * 3 * E + E];
    const float* conv = &r.conv_out[size_t(t) * E];
    float* o = &r.o[size_t(t) * E];
    for (int i = 0; i < E; ++i) o[i] = c[i] * conv[i];
  });
  project(f, w.out_proj, r.o.data(), W.q.data());
}

void gated_attention(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  RecurrentScratch& r = W.rec;
  const HParams& hp = f.hp();
  const LayerHParams& lp = hp.layers[size_t(layer)];
  const AttnWeights& w = f.m.layers[size_t(layer)].attn;
  const VecOps& ops = *f.m.vec_ops;
  const int hd = hp.head_dim;
  const int64_t q_dim = int64_t(hp.n_head) * hd, kv_row = int64_t(hp.n_head_kv) * hd;  // the cache's row
  const int64_t T = f.T;

  grow(r.qg, size_t(T) * 2 * q_dim);
  grow(r.gate, size_t(T) * q_dim);
  const MatmulTarget qkv[3] = {target(w.wq, r.qg.data()), target(w.wk, W.k.data()), target(w.wv, W.v.data())};
  matmul_multi(*f.m.kernels, f.pool, f.m.opts.activations, qkv, 3, w.wq.cols, W.xn.data(), T);

  // Per row with its own session (RoPE table, cache) and position, as attention() does.
  f.for_rows(T, [&](int64_t t) {
    Session::Impl& S = *f.seg_of(t).seq;
    const float* qg = &r.qg[size_t(t) * 2 * q_dim];
    float* qt = &W.q[size_t(t) * q_dim];
    float* gt = &r.gate[size_t(t) * q_dim];
    for (int h = 0; h < hp.n_head; ++h) {  // per head: hd query rows, then hd gate rows
      std::memcpy(qt + h * hd, qg + 2 * h * hd, size_t(hd) * sizeof(float));
      std::memcpy(gt + h * hd, qg + (2 * h + 1) * hd, size_t(hd) * sizeof(float));
    }
    float* kt = &W.k[size_t(t) * kv_row];
    float* vt = &W.v[size_t(t) * kv_row];
    for (int h = 0; h < hp.n_head; ++h) rms_norm(qt + h * hd, w.q_norm.data(), qt + h * hd, hd, hp.rms_eps);
    for (int h = 0; h < lp.n_head_kv; ++h) rms_norm(kt + h * hd, w.k_norm.data(), kt + h * hd, hd, hp.rms_eps);
    const int32_t pos = f.pos(t);
    const RopeTable& tab = S.rope[size_t(lp.rope)];
    rope_neox(qt, hp.n_head, hd, tab, pos);
    rope_neox(kt, lp.n_head_kv, hd, tab, pos);
    const size_t slot = S.kv_slot(layer, pos);
    ops.f32_to_f16(int(kv_row), kt, S.k_layer(layer) + slot * size_t(kv_row));
    ops.f32_to_f16(int(kv_row), vt, S.v_layer(layer) + slot * size_t(kv_row));
  });

  attend(f, layer);  // into xn
  float* const att = W.xn.data();
  f.for_rows(T, [&](int64_t t) {
    float* at = att + t * q_dim;
    const float* gt = &r.gate[size_t(t) * q_dim];
    for (int64_t i = 0; i < q_dim; ++i) at[i] *= sigmoid(gt[i]);
  });
  project(f, w.wo, att, W.q.data());
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
