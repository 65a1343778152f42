#include "moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/vec_ops.h"

namespace picolm {
namespace {

template <class V>
void grow(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

std::string fmt_ne(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

bool can_multiply(const WeightLoader& L, const GgufTensor& t) {
  const KernelTable& k = L.kernels();
  return k.vec_dot[static_cast<uint32_t>(t.type)] && k.dequantize_row[static_cast<uint32_t>(t.type)];
}

// A stacked-experts tensor ne {cols, rows_total, n_expert}; rows [row0, row0 + rows) of each expert.
ExpertStack experts(WeightLoader& L, const GgufTensor* t, const std::string& name, int64_t n_expert,
                    int64_t rows_total, int64_t cols, int64_t row0, int64_t rows) {
  if (!t) {
    L.errors.push_back("missing tensor '" + name + "'");
    return {};
  }
  if (t->ne.size() != 3 || t->ne[0] != uint64_t(cols) || t->ne[1] != uint64_t(rows_total) ||
      t->ne[2] != uint64_t(n_expert)) {
    L.errors.push_back("tensor '" + name + "' has shape " + fmt_ne(t->ne) + ", expected [" + std::to_string(cols) +
                       ", " + std::to_string(rows_total) + ", " + std::to_string(n_expert) + "]");
    return {};
  }
  if (!can_multiply(L, *t)) {
    L.errors.push_back("tensor '" + name + "' has type " + ggml_type_traits(t->type)->name +
                       ", which this engine cannot multiply");
    return {};
  }
  const size_t rb = row_bytes(t->type, cols);
  return {t->data + size_t(row0) * rb, t->type, rows, cols, size_t(rows_total) * rb};
}

size_t matrix_bytes(const WeightView& v) { return v.data ? size_t(v.rows) * row_bytes(v.type, v.cols) : 0; }

// How gate and up combine: SiLU(gate) * up, or GELU-tanh(gate) * up (gemma4).
PairCombineFn combine_of(const Forward& f, FfnActivation act) {
  return act == FfnActivation::SiluGated ? f.m.vec_ops->silu_mul : gelu_tanh_mul;
}

// The gated FFN (SwiGLU or GELU(tanh)-gated) of the rows X [n][cols] through one expert (or the
// shared expert) into Y [n][rows of down]; H [n][ff] is scratch.
void gated_ffn(Forward& f, FfnActivation act, const WeightView& gate, const WeightView& up, const WeightView& down,
               const float* X, int64_t n, float* H, float* Y, bool dots_only) {
  const KernelTable& K = *f.m.kernels;
  const ActivationMode mode = f.m.opts.activations;
  MatmulTarget a{gate.type, gate.data, gate.rows, H, gate.packed};
  MatmulTarget b{up.type, up.data, up.rows, nullptr, up.packed};
  a.dots_only = b.dots_only = dots_only;
  matmul_pair(K, f.pool, mode, a, b, gate.cols, X, n, combine_of(f, act));
  MatmulTarget d{down.type, down.data, down.rows, Y, down.packed};
  d.dots_only = dots_only;
  matmul_multi(K, f.pool, mode, &d, 1, down.cols, H, n);
}

// Up to this many chosen (row, expert) slots in a pass (a decode step: n_expert_used per row), every
// chosen expert's gate/up runs in one pass of the pool and every down in a second, instead of two
// passes per expert (LFM2-8B-A1B: 8 per MoE layer, 176 per token). Each product is the same dots on
// the same rows as alone (dots only), so a row's result does not depend on the path its pass took.
constexpr int64_t kGroupedSlots = 64;

// The routed experts of the pass (S.start / S.slots grouped by expert) in two pool passes: the
// gathered rows of every chosen expert in xg [slot][E], their gated products in hg [slot][ff],
// outputs in yg [slot][E]; then the weighted outputs added to their rows' acc in ascending expert id.
void grouped_experts(Forward& f, const MoeWeights& w, int64_t E, int64_t ff) {
  EvalWorkspace& W = f.w;
  MoeScratch& S = W.moe;
  const HParams& hp = f.hp();
  const KernelTable& K = *f.m.kernels;
  const ActivationMode mode = f.m.opts.activations;
  const int64_t NE = hp.n_expert, k = hp.n_expert_used, n_slots = f.T * k;
  grow(S.xg, size_t(n_slots * E));
  grow(S.hg, size_t(n_slots * ff));
  grow(S.yg, size_t(n_slots * E));
  for (int64_t s = 0; s < n_slots; ++s) {
    const int64_t t = S.slots[size_t(s)] / k;
    std::memcpy(&S.xg[size_t(s * E)], &W.xn[size_t(t * E)], size_t(E) * sizeof(float));
  }
  // Targets: per chosen expert its gate and up, then its down (capacity for every expert: no
  // reallocation while the groups point into them).
  std::vector<MatmulTarget>& tg = S.targets;
  std::vector<MatmulGroup>& up = S.up_groups;
  std::vector<MatmulGroup>& down = S.down_groups;
  tg.clear();
  up.clear();
  down.clear();
  tg.reserve(size_t(3 * NE));
  const int64_t FF = w.gate.rows;
  for (int64_t e = 0; e < NE; ++e) {
    const int64_t s0 = S.start[size_t(e)], n = S.start[size_t(e + 1)] - s0;
    if (n == 0) continue;
    const WeightView g = w.gate.expert(int(e)), u = w.up.expert(int(e)), d = w.down.expert(int(e));
    MatmulTarget a{g.type, g.data, g.rows, &S.hg[size_t(s0 * FF)], g.packed};
    MatmulTarget b{u.type, u.data, u.rows, nullptr, u.packed};
    MatmulTarget c{d.type, d.data, d.rows, &S.yg[size_t(s0 * E)], d.packed};
    a.dots_only = b.dots_only = c.dots_only = true;
    tg.push_back(a);
    tg.push_back(b);
    up.push_back({&tg[tg.size() - 2], 2, g.cols, &S.xg[size_t(s0 * E)], n});
    tg.push_back(c);
    down.push_back({&tg.back(), 1, d.cols, &S.hg[size_t(s0 * FF)], n});
    S.counters.expert_bytes += w.gate.expert_bytes() + w.up.expert_bytes() + w.down.expert_bytes();
    ++S.counters.expert_uses;
  }
  matmul_groups(K, f.pool, mode, up.data(), int(up.size()), combine_of(f, w.act));
  matmul_groups(K, f.pool, mode, down.data(), int(down.size()), nullptr);
  for (int64_t s = 0; s < n_slots; ++s) {  // slots ascend by expert, rows ascend within one
    const int64_t slot = S.slots[size_t(s)], t = slot / k;
    const float wt = S.weight[size_t(slot)];
    float* a = &S.acc[size_t(t * E)];
    const float* y = &S.yg[size_t(s * E)];
    for (int64_t c = 0; c < E; ++c) a[c] += wt * y[c];
  }
}

}  // namespace

size_t MoeScratch::bytes() const {
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return b(probs) + b(select) + b(chosen) + b(weight) + b(start) + b(slots) + b(xg) + b(hg) + b(yg) + b(acc) +
         b(router_in) + b(dense) + b(margin) + b(choice) + b(targets) + b(up_groups) + b(down_groups);
}

void routed_ffn(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  MoeScratch& S = W.moe;
  const HParams& hp = f.hp();
  const MoeWeights& w = f.m.layers[size_t(layer)].moe;
  const KernelTable& K = *f.m.kernels;
  const ActivationMode mode = f.m.opts.activations;
  const int64_t T = f.T, E = hp.n_embd, NE = hp.n_expert, k = hp.n_expert_used;
  const int64_t ff = std::max(w.gate.rows, w.shared.gate.data ? w.shared.gate.rows : 0);
  grow(S.probs, size_t(T * NE));
  grow(S.select, size_t(T * NE));
  grow(S.chosen, size_t(T * k));
  grow(S.weight, size_t(T * k));
  grow(S.start, size_t(NE + 1));
  grow(S.slots, size_t(T * k));
  grow(S.acc, size_t(T * E));
  if (S.margin_rows != T || S.margin.size() != size_t(hp.n_layer * T)) {
    S.margin.assign(size_t(hp.n_layer * T), std::numeric_limits<float>::infinity());
    S.choice.assign(size_t(hp.n_layer * T * k), -1);
    S.margin_rows = T;
  }

  // Router logits of every row (one matmul), then each row's choice.
  const float* router_x = W.xn.data();
  if (!w.router_scale.empty()) {
    // As llama.cpp's gemma4 graph: rms_norm without weight, times 1/sqrt(n_embd), times the scale.
    grow(S.router_in, size_t(T * E));
    const float inv_root = 1.0f / std::sqrt(float(E));
    f.for_rows(T, [&](int64_t t) {
      const float* x = &W.x[size_t(t * E)];
      float* r = &S.router_in[size_t(t * E)];
      double ss = 0.0;  // in double, as rms_norm_row (ggml sums the squares in double too)
      for (int64_t c = 0; c < E; ++c) ss += double(x[c]) * x[c];
      const float inv_rms = float(1.0 / std::sqrt(ss / double(E) + double(hp.rms_eps)));
      for (int64_t c = 0; c < E; ++c) r[c] = x[c] * inv_rms * inv_root * w.router_scale[size_t(c)];
    });
    router_x = S.router_in.data();
  }
  matmul(K, f.pool, mode, w.router.type, w.router.data, NE, E, router_x, T, S.probs.data(), w.router.packed);
  S.counters.router_bytes += matrix_bytes(w.router);
  const ExpertGating gating = hp.expert_gating;
  f.for_rows(T, [&](int64_t t) {
    float* p = &S.probs[size_t(t * NE)];
    float* sel = &S.select[size_t(t * NE)];
    if (gating == ExpertGating::Softmax) {
      float mx = p[0];
      for (int64_t e = 1; e < NE; ++e) mx = std::max(mx, p[e]);
      double sum = 0.0;
      for (int64_t e = 0; e < NE; ++e) {
        p[e] = std::exp(p[e] - mx);
        sum += p[e];
      }
      const float inv = float(1.0 / sum);
      for (int64_t e = 0; e < NE; ++e) p[e] *= inv;
    } else if (gating == ExpertGating::Sigmoid) {
      for (int64_t e = 0; e < NE; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    }
    for (int64_t e = 0; e < NE; ++e) sel[e] = p[e] + (w.select_bias.empty() ? 0.0f : w.select_bias[size_t(e)]);
    // Top k by repeated scans (k is small): the best remaining score, the lower id on ties.
    int32_t* ch = &S.chosen[size_t(t * k)];
    float* wt = &S.weight[size_t(t * k)];
    float kth = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < NE; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j && !taken; ++i) taken = ch[i] == e;
        if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
      }
      ch[j] = int32_t(best);
      kth = sel[best];
    }
    float next = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < NE; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < k && !taken; ++i) taken = ch[i] == e;
      if (!taken) next = std::max(next, sel[e]);
    }
    // In router-logit units where the order is the logits' (softmax without a selection bias: the
    // log of the probability ratio), else in selection-score units.
    const bool log_ratio = gating == ExpertGating::Softmax && w.select_bias.empty();
    S.margin[size_t(layer * T + t)] = k == NE ? std::numeric_limits<float>::infinity()
                                      : log_ratio ? std::log(kth) - std::log(next)
                                                  : kth - next;
    std::copy_n(ch, k, &S.choice[size_t((layer * T + t) * k)]);
    for (int64_t j = 0; j < k; ++j) wt[j] = p[ch[j]];
    if (gating == ExpertGating::SoftmaxWeight) {
      float mx = wt[0];
      for (int64_t j = 1; j < k; ++j) mx = std::max(mx, wt[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        wt[j] = std::exp(wt[j] - mx);
        sum += wt[j];
      }
      for (int64_t j = 0; j < k; ++j) wt[j] *= float(1.0 / sum);
    }
    if (hp.expert_weights_norm) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += wt[j];
      sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal F16
      for (int64_t j = 0; j < k; ++j) wt[j] /= sum;
    }
    if (hp.expert_weights_scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) wt[j] *= hp.expert_weights_scale;
    // llama.cpp scales each expert's down output, then weights it: the same product up to rounding.
    if (!w.expert_scale.empty())
      for (int64_t j = 0; j < k; ++j) wt[j] *= w.expert_scale[size_t(ch[j])];
  });

  // Group the chosen (row, slot) pairs by expert: counting sort, rows ascending within an expert.
  std::fill_n(S.start.begin(), NE + 1, 0);
  for (int64_t s = 0; s < T * k; ++s) ++S.start[size_t(S.chosen[size_t(s)]) + 1];
  for (int64_t e = 0; e < NE; ++e) S.start[size_t(e + 1)] += S.start[size_t(e)];
  std::vector<int32_t> cursor(S.start.begin(), S.start.begin() + NE);
  for (int64_t s = 0; s < T * k; ++s) S.slots[size_t(cursor[size_t(S.chosen[size_t(s)])]++)] = int32_t(s);

  // Each chosen expert once: gather its rows, run its FFN on them, add the weighted outputs to their rows.
  // A row's sum runs over its experts in ascending id (the loop order), whatever the batch holds.
  std::fill_n(S.acc.begin(), T * E, 0.0f);
  if (T * k <= kGroupedSlots) {  // a decode step: two pool passes for all its experts
    grouped_experts(f, w, E, ff);
  } else {
    for (int64_t e = 0; e < NE; ++e) {
      const int64_t s0 = S.start[size_t(e)], n = S.start[size_t(e + 1)] - s0;
      if (n == 0) continue;
      grow(S.xg, size_t(n * E));
      grow(S.hg, size_t(n * ff));
      grow(S.yg, size_t(n * E));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = S.slots[size_t(s0 + i)] / k;
        std::memcpy(&S.xg[size_t(i * E)], &W.xn[size_t(t * E)], size_t(E) * sizeof(float));
      }
      gated_ffn(f, w.act, w.gate.expert(int(e)), w.up.expert(int(e)), w.down.expert(int(e)), S.xg.data(), n,
                S.hg.data(), S.yg.data(), /*dots_only=*/true);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = S.slots[size_t(s0 + i)], t = s / k;
        const float wt = S.weight[size_t(s)];
        float* a = &S.acc[size_t(t * E)];
        const float* y = &S.yg[size_t(i * E)];
        for (int64_t c = 0; c < E; ++c) a[c] += wt * y[c];
      }
      S.counters.expert_bytes += w.gate.expert_bytes() + w.up.expert_bytes() + w.down.expert_bytes();
      ++S.counters.expert_uses;
    }
  }

  float* const y = W.q.data();
  if (!w.shared.gate.data) {
    std::memcpy(y, S.acc.data(), size_t(T * E) * sizeof(float));
    return;
  }
  // Shared expert over every row (a dense FFN: the model's batch invariance is its matrices'), times
  // its sigmoid gate, added to the routed sum.
  grow(S.hg, size_t(T * ff));
  gated_ffn(f, w.act, w.shared.gate, w.shared.up, w.shared.down, W.xn.data(), T, S.hg.data(), y, /*dots_only=*/false);
  S.counters.shared_bytes += matrix_bytes(w.shared.gate) + matrix_bytes(w.shared.up) + matrix_bytes(w.shared.down) +
                             w.shared_gate.size() * sizeof(float);
  f.for_rows(T, [&](int64_t t) {
    float g = 1.0f;
    if (!w.shared_gate.empty()) g = 1.0f / (1.0f + std::exp(-K.exact_dot_f32(w.shared_gate.data(), &W.xn[size_t(t * E)], E)));
    float* yt = y + t * E;
    const float* a = &S.acc[size_t(t * E)];
    for (int64_t c = 0; c < E; ++c) yt[c] = a[c] + yt[c] * g;
  });
}

Status read_moe_hparams(const GgufFile& f, HParams& hp) {
  const std::string a = hp.arch_name + ".";
  std::string missing;
  auto get = [&](const char* key, bool required, int64_t def) -> int64_t {
    auto v = f.get_int(a + key);
    if (!v && required) missing += " " + a + key;
    return v.value_or(def);
  };
  const int64_t n_expert = get("expert_count", true, 0);
  const int64_t n_used = get("expert_used_count", true, 0);
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (n_expert < 1 || n_expert > 4096) return Error{"implausible " + a + "expert_count"};
  if (n_used < 1 || n_used > n_expert || n_used > 64) return Error{"implausible " + a + "expert_used_count"};
  const int64_t n_ff = hp.layers.empty() ? 0 : hp.layers[0].n_ff;
  const int64_t ff_exp = get("expert_feed_forward_length", false, n_ff / n_used);
  const int64_t ff_sh = get("expert_shared_feed_forward_length", false, n_ff);
  if (ff_exp < 1 || ff_exp > (1 << 20)) return Error{"implausible " + a + "expert_feed_forward_length"};
  if (ff_sh < 0 || ff_sh > (1 << 20)) return Error{"implausible " + a + "expert_shared_feed_forward_length"};
  hp.n_expert = int32_t(n_expert);
  hp.n_expert_used = int32_t(n_used);
  hp.n_ff_exp = int32_t(ff_exp);
  hp.n_ff_shexp = int32_t(ff_sh);
  return Ok{};
}

void load_moe(WeightLoader& L, const HParams& hp, int layer, const MoeTensors& opt, MoeWeights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, NE = hp.n_expert, FF = hp.n_ff_exp;
  const GgufFile& f = L.file();
  w.router = L.matrix(p + "ffn_gate_inp.weight", NE, E);
  if (const GgufTensor* gu = f.tensor(p + "ffn_gate_up_exps.weight")) {  // merged: gate rows, then up rows
    w.gate = experts(L, gu, gu->name, NE, 2 * FF, E, 0, FF);
    w.up = experts(L, gu, gu->name, NE, 2 * FF, E, FF, FF);
  } else {
    w.gate = experts(L, f.tensor(p + "ffn_gate_exps.weight"), p + "ffn_gate_exps.weight", NE, FF, E, 0, FF);
    w.up = experts(L, f.tensor(p + "ffn_up_exps.weight"), p + "ffn_up_exps.weight", NE, FF, E, 0, FF);
  }
  w.down = experts(L, f.tensor(p + "ffn_down_exps.weight"), p + "ffn_down_exps.weight", NE, E, FF, 0, E);
  if (opt.select_bias) w.select_bias = L.vec(p + "exp_probs_b.bias", NE);
  if (opt.shared_expert) {
    const int64_t SF = hp.n_ff_shexp;
    w.shared.gate = L.matrix(p + "ffn_gate_shexp.weight", SF, E);
    w.shared.up = L.matrix(p + "ffn_up_shexp.weight", SF, E);
    w.shared.down = L.matrix(p + "ffn_down_shexp.weight", E, SF);
    if (opt.shared_expert_gate) w.shared_gate = L.vec(p + "ffn_gate_inp_shexp.weight", E);
  }
  if (opt.router_scale) w.router_scale = L.vec(p + "ffn_gate_inp.scale", E);
  if (opt.expert_scale) w.expert_scale = L.vec(p + "ffn_down_exps.scale", NE, /*optional=*/true);
  for (float s : w.expert_scale)
    if (!std::isfinite(s)) {
      L.errors.push_back("tensor '" + p + "ffn_down_exps.scale' is not finite");
      break;
    }
  w.act = opt.act;
}

size_t expert_bytes(const Model::Impl& m) {
  size_t n = 0;
  for (const LayerWeights& w : m.layers)
    n += size_t(m.hp.n_expert) * (w.moe.gate.expert_bytes() + w.moe.up.expert_bytes() + w.moe.down.expert_bytes());
  return n;
}

size_t expert_bytes_per_token(const Model::Impl& m) {
  size_t n = 0;
  for (const LayerWeights& w : m.layers)
    n += size_t(m.hp.n_expert_used) * (w.moe.gate.expert_bytes() + w.moe.up.expert_bytes() + w.moe.down.expert_bytes());
  return n;
}

}  // namespace picolm
