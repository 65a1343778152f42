// Mixture-of-experts architectures (issue 32: qwen3moe, lfm2moe, qwen35moe, granitehybrid's MoE form) and the routed FFN block
// (engine/moe.h): goldens from llama.cpp 66d65ec on tiny random-weight models committed in
// tests/models and tests/golden (made by tools/golden/make_moe_set.py; granitehybrid-moe by
// make_phi3_granite_set.py), and the sparse reading of
// the experts (an instrumentation counter of the block, not timing).
//
// Near-ties of the routing. Where a row's k-th and (k+1)-th best router scores are almost equal, any
// difference in the arithmetic before the router (llama.cpp's F32 KV cache against our F16 one, the
// rounding of the activation quantizer) can swap the expert that row uses, and its logits then differ
// by far more than rounding (a different expert is a different function). The goldens hold the
// router logits of every llama.cpp run (make_golden's "router_logits"), so those rows are found from
// the margin of the run we compare with: the gap between its k-th and (k+1)-th selection score in any
// MoE layer (router logits for softmax gating; sigmoid + selection bias for lfm2moe's). Only rows
// under kNearTie are left out of the logit comparison. The threshold is checked, not assumed: at every
// other row and layer our own router's margin must be within kNearTie / 2 of llama.cpp's (the
// perturbation that decides a swap is smaller than half the threshold), and at most 5% of the
// positions may be left out. Top-1 agreement with the exact reference must be within 3% of the
// positions of llama.cpp's own quantized run (no rows left out).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include "golden.h"
#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "model.h"
#include "moe.h"
#include "session_impl.h"

using namespace picolm;

namespace {

std::string repo(const std::string& rel) { return std::string(PICOLM_SOURCE_DIR) + "/tests/" + rel; }

struct Tolerance {
  float exact;      // Exact mode vs the reference run
  float quantized;  // Quantized mode vs llama.cpp's quantized run
};

Tolerance tolerance_for(const std::string& stem) {
  static const std::map<std::string, Tolerance> t = {
      // Measured (outside near-ties): exact 0.0013-0.0036; quantized F16 0.003-0.006, Q4_K_M 0.09-0.19
      // (llama.cpp's own Q4_K_M run is 1.8-2.5 from exact math, most of it at routing swaps).
      {"qwen3moe-tiny-f16", {0.02f, 0.03f}},  {"qwen3moe-tiny-q4km", {0.02f, 0.3f}},
      {"lfm2moe-tiny-f16", {0.02f, 0.03f}},   {"lfm2moe-tiny-q4km", {0.02f, 0.3f}},
      {"qwen35moe-tiny-f16", {0.02f, 0.03f}}, {"qwen35moe-tiny-q4km", {0.02f, 0.3f}},
      // gemma4's 26B-A4B layout (issue 33, llama.cpp 3f545be). Measured: exact 0.007-0.009, quantized
      // F16 0.013-0.015, Q4_K_M 0.60 (AVX2 0.62). As for the dense goldens (gemma3-tiny-q4km: 0.7,
      // gemma4-tiny-q4km: 0.5), the Q4_K_M quantized run is about as far from llama.cpp's as
      // llama.cpp's is from exact math, here with the same routing: per position, llama.cpp's Q4_K_M
      // run is 0.08-0.69 from the F32 twin (median 0.15) outside its routing swaps, ours 0.08-0.37;
      // the two roundings of the activation quantizer meet only within their sum. Hence gemma3's 0.7
      // (this file's 0.3 would fail 4 of 88 story positions, 0.31-0.60, at each of which ours is the
      // closer to exact math).
      {"gemma4-moe-tiny-f16", {0.02f, 0.03f}}, {"gemma4-moe-tiny-q4km", {0.02f, 0.7f}},
      // Granite-4.0-H-Tiny's form (Mamba-2 + NoPE attention, routed FFN + ungated shared expert, Granite's
      // multipliers). Measured: exact 0.0013-0.0016; quantized F16 0.0047, Q4_K_M 0.11 (llama.cpp's own
      // Q4_K_M run is 1.6 from exact math).
      {"granitehybrid-moe-tiny-f16", {0.02f, 0.03f}}, {"granitehybrid-moe-tiny-q4km", {0.02f, 0.3f}},
  };
  auto it = t.find(stem);
  REQUIRE(it != t.end());
  return it->second;
}

// Smallest router margin of each row of the last forward pass, over the MoE layers.
std::vector<float> row_margins(const EvalWorkspace& W, int n_layer) {
  const MoeScratch& S = W.moe;
  std::vector<float> m(size_t(S.margin_rows), std::numeric_limits<float>::infinity());
  for (int l = 0; l < n_layer; ++l)
    for (int64_t t = 0; t < S.margin_rows; ++t) m[size_t(t)] = std::min(m[size_t(t)], S.margin[size_t(l * S.margin_rows + t)]);
  return m;
}

int argmax(std::span<const float> l) {
  int best = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[size_t(best)]) best = int(i);
  return best;
}

float row_diff(std::span<const float> ours, const std::vector<float>& ref) {
  float d = 0.0f;
  for (size_t i = 0; i < ref.size(); ++i) d = std::max(d, std::fabs(ours[i] - ref[i]));
  return d;
}

// Near-tie threshold of a router margin, in the margin's units (router logits for softmax; sigmoid
// probability + bias for sigmoid gating, whose slope is at most 1/4, hence a quarter). Exact mode and
// F16 files meet only our F16 KV rounding: our margins were measured within 0.0022 of llama.cpp's
// (0.0006 in sigmoid units), threshold 0.005. Quantized K-quant files also meet the activation
// quantizer's rounding boundaries: the one swap seen was at a margin of 0.0054, threshold 0.008. Both
// are checked by the test itself: every position where our experts differ from llama.cpp's must be
// under the threshold.
float near_tie(const HParams& hp, bool exact) {
  const float logit = exact ? 0.005f : 0.008f;
  return hp.expert_gating == ExpertGating::Sigmoid ? logit / 4 : logit;
}

// The reference run's router margin per (MoE layer, position), in the units of MoeScratch::margin,
// and its chosen experts per (MoE layer, position) as a bit set.
std::vector<std::vector<float>> golden_margins(const golden::PromptRun& run, const Model& m, size_t n_pos,
                                               std::vector<std::vector<uint64_t>>& chosen) {
  const HParams& hp = m.hparams();
  REQUIRE(hp.n_expert <= 64);
  std::vector<std::vector<float>> out;
  chosen.assign(run.router_layers.size(), std::vector<uint64_t>(n_pos, 0));
  REQUIRE(run.n_expert == hp.n_expert);
  for (size_t i = 0; i < run.router_layers.size(); ++i) {
    const MoeWeights& w = m.impl().layers[size_t(run.router_layers[i])].moe;
    const std::vector<float>& lg = run.router_logits[i];
    REQUIRE(lg.size() == n_pos * size_t(hp.n_expert));
    std::vector<float> mg(n_pos);
    for (size_t p = 0; p < n_pos; ++p) {
      std::vector<float> sel(lg.begin() + ptrdiff_t(p * hp.n_expert), lg.begin() + ptrdiff_t((p + 1) * hp.n_expert));
      if (hp.expert_gating == ExpertGating::Sigmoid)
        for (size_t e = 0; e < sel.size(); ++e) sel[e] = 1.0f / (1.0f + std::exp(-sel[e])) + (w.select_bias.empty() ? 0.0f : w.select_bias[e]);
      std::vector<int> order(sel.size());
      for (size_t e = 0; e < order.size(); ++e) order[e] = int(e);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[size_t(a)] > sel[size_t(b)]; });
      for (int j = 0; j < hp.n_expert_used; ++j) chosen[i][p] |= uint64_t(1) << order[size_t(j)];
      mg[p] = sel[size_t(order[size_t(hp.n_expert_used) - 1])] - sel[size_t(order[size_t(hp.n_expert_used)])];
    }
    out.push_back(std::move(mg));
  }
  return out;
}

struct Stats {
  int positions = 0, excluded = 0, top1_ours = 0, top1_llama = 0, greedy_compared = 0, greedy_total = 0;
  int swapped = 0, reached = 0;
  float max_prefill = 0, max_sequential = 0, max_excluded = 0, max_margin_delta = 0, max_swap_margin = 0;
};

// Runs one golden file in both modes; adds its near-tie count and positions to *excluded, *positions.
void golden_moe(const std::string& stem, int* excluded, int* positions) {
  const golden::File g = golden::load(repo("golden/" + stem + ".json"));
  REQUIRE(g.full);
  const Tolerance tol = tolerance_for(stem);
  const auto* ref_runs = g.run("reference");
  const auto* q_runs = g.run("quantized");
  REQUIRE(ref_runs);
  REQUIRE(q_runs);
  ThreadPool pool(2);
  for (ActivationMode mode : {ActivationMode::Exact, ActivationMode::Quantized}) {
    const bool exact = mode == ActivationMode::Exact;
    const auto& runs = exact ? *ref_runs : *q_runs;
    ModelOptions mo;
    mo.activations = mode;
    auto loaded = Model::load(repo("models/" + g.model_file), mo);
    REQUIRE(loaded.ok());
    std::shared_ptr<const Model> m = loaded.value();
    const HParams& hp = m->hparams();
    REQUIRE(hp.n_expert > 0);
    const float t = exact ? tol.exact : tol.quantized;
    // An F16 file in Quantized mode multiplies F16 activations: rounding at the level of Exact mode.
    const bool fine = exact || stem.find("-f16") != std::string::npos;
    const float thr = near_tie(hp, fine);
    INFO(stem << " mode " << (exact ? "exact" : "quantized"));
    Stats st;
    for (size_t pi = 0; pi < g.prompts.size(); ++pi) {
      const auto& pr = g.prompts[pi];
      INFO("prompt " << pi << ": " << pr.text);
      CHECK(m->tokenizer().encode(pr.text, true, true) == pr.tokens);
      SessionOptions so{256, 256};
      so.workspace = make_eval_workspace();
      const std::shared_ptr<EvalWorkspace> ws = so.workspace;
      Session s(m, pool, so);
      REQUIRE(s.eval(pr.tokens, /*all_logits=*/true).ok());
      // The compared run's margins (min over layers per position), and ours against them.
      std::vector<std::vector<uint64_t>> gchosen;
      const auto gm = golden_margins(runs[pi], *m, pr.tokens.size(), gchosen);
      REQUIRE(gm.size() == size_t(std::count_if(hp.layers.begin(), hp.layers.end(), [](const LayerHParams& lp) { return lp.moe; })));
      std::vector<float> margin(pr.tokens.size(), std::numeric_limits<float>::infinity());
      const MoeScratch& MS = ws->moe;
      REQUIRE(MS.margin_rows == int64_t(pr.tokens.size()));
      for (size_t i = 0; i < gm.size(); ++i)
        for (size_t p = 0; p < margin.size(); ++p) margin[p] = std::min(margin[p], gm[i][p]);
      // Where our choice of experts differs from llama.cpp's (any layer), its margin must be a near-tie.
      // A swap at position p also reaches the next positions through a later short-convolution layer's
      // window (lfm2moe: sc_taps - 1 of them, at full strength): those are left out too, and counted.
      const int k = hp.n_expert_used;
      std::vector<char> reached(margin.size(), 0);
      for (size_t i = 0; i < gm.size(); ++i)
        for (size_t p = 0; p < margin.size(); ++p) {
          const size_t l = size_t(runs[pi].router_layers[i]);
          const float ours = MS.margin[l * margin.size() + p];
          uint64_t set = 0;
          for (int j = 0; j < k; ++j) set |= uint64_t(1) << MS.choice[(l * margin.size() + p) * size_t(k) + size_t(j)];
          if (set != gchosen[i][p]) {
            ++st.swapped;
            st.max_swap_margin = std::max(st.max_swap_margin, gm[i][p]);
            INFO("experts swapped at layer " << l << " position " << p << ", llama.cpp's margin " << gm[i][p]);
            CHECK(margin[p] < thr);
            bool conv_after = false;
            for (size_t ll = l + 1; ll < hp.layers.size(); ++ll) conv_after |= hp.layers[ll].kind == LayerKind::ShortConv;
            if (conv_after)
              for (size_t q = p + 1; q < std::min(margin.size(), p + size_t(hp.sc_taps)); ++q) reached[q] = 1;
          }
          if (margin[p] >= thr) st.max_margin_delta = std::max(st.max_margin_delta, std::fabs(ours - gm[i][p]));
        }
      for (size_t p = 0; p < margin.size(); ++p) st.reached += reached[p] && margin[p] >= thr;
      for (size_t p = 0; p < pr.tokens.size(); ++p) {
        const float d = row_diff(s.logits_at(p), runs[pi].prefill_full[p]);
        ++st.positions;
        st.top1_ours += argmax(s.logits_at(p)) == argmax((*ref_runs)[pi].prefill_full[p]);
        st.top1_llama += argmax((*q_runs)[pi].prefill_full[p]) == argmax((*ref_runs)[pi].prefill_full[p]);
        if (margin[p] < thr || reached[p]) {
          st.excluded += margin[p] < thr;
          st.max_excluded = std::max(st.max_excluded, d);
          continue;
        }
        INFO("position " << p << " router margin " << margin[p]);
        CHECK(d <= t);
        st.max_prefill = std::max(st.max_prefill, d);
      }
      // Greedy continuation while llama.cpp's margin and our router's allow.
      for (size_t step = 0; step < runs[pi].greedy_tokens.size(); ++step) {
        ++st.greedy_total;
        const int next = argmax(s.logits());
        if (runs[pi].greedy_margin[step] <= 2 * t) break;
        // The row that gave these logits (the prompt's last, then each decoded token) routed on a
        // near-tie by our router's margin (the goldens hold no router logits for greedy steps).
        if (row_margins(*ws, hp.n_layer).back() < thr) break;
        CHECK(next == runs[pi].greedy_tokens[step]);
        if (next != runs[pi].greedy_tokens[step]) break;
        ++st.greedy_compared;
        const int32_t one[1] = {next};
        REQUIRE(s.eval(one).ok());
      }
      // Sequential: one token per eval on a fresh session (decode rows: one row per expert).
      SessionOptions so1{256, 256};
      so1.workspace = make_eval_workspace();
      Session q(m, pool, so1);
      for (size_t p = 0; p < pr.tokens.size(); ++p) {
        const int32_t one[1] = {pr.tokens[p]};
        REQUIRE(q.eval(one).ok());
        if (margin[p] < thr || reached[p]) continue;  // the sequential run routes as the prefill (same inputs)
        const float d = row_diff(q.logits(), runs[pi].sequential_full[p]);
        INFO("sequential position " << p);
        CHECK(d <= t);
        st.max_sequential = std::max(st.max_sequential, d);
      }
    }
    std::printf("golden %-20s %-9s max|diff| prefill %.5f sequential %.5f (tol %.3f); near-ties %d/%d positions "
                "(margin < %g; %d (layer, position) swaps, at margins <= %.4f, reaching %d more through a conv window; "
                "our margins within %.4f of llama.cpp's elsewhere; max|diff| left out %.3f); top-1 = reference: ours %d, "
                "llama.cpp's %d; greedy %d/%d\n",
                stem.c_str(), exact ? "exact" : "quantized", double(st.max_prefill), double(st.max_sequential),
                double(t), st.excluded, st.positions, double(thr), st.swapped, double(st.max_swap_margin), st.reached,
                double(st.max_margin_delta), double(st.max_excluded), st.top1_ours, st.top1_llama, st.greedy_compared,
                st.greedy_total);
    *excluded += st.excluded;
    *positions += st.positions;
    if (!exact) CHECK(st.top1_ours * 100 >= st.top1_llama * 100 - 3 * st.positions);
    else CHECK(st.top1_ours * 100 >= st.positions * 97);
  }
}

// Each architecture's goldens (F16 and Q4_K_M, each in Exact and Quantized mode): at most 5% of all
// their positions are near-ties left out.
void golden_arch(const std::string& arch) {
  int excluded = 0, positions = 0;
  for (const char* type : {"f16", "q4km"}) golden_moe(arch + "-tiny-" + type, &excluded, &positions);
  std::printf("golden %s: %d of %d positions left out as near-ties (%.1f%%)\n", arch.c_str(), excluded, positions,
              100.0 * excluded / std::max(positions, 1));
  CHECK(excluded * 20 <= positions);
}

}  // namespace

TEST_CASE("golden: qwen3moe-tiny (f16, q4km)", "[golden][moe]") { golden_arch("qwen3moe"); }
TEST_CASE("golden: lfm2moe-tiny (f16, q4km)", "[golden][moe][hybrid]") { golden_arch("lfm2moe"); }
TEST_CASE("golden: qwen35moe-tiny (f16, q4km)", "[golden][moe][hybrid]") { golden_arch("qwen35moe"); }
TEST_CASE("golden: gemma4-moe-tiny (f16, q4km)", "[golden][moe][gemma4]") { golden_arch("gemma4-moe"); }
TEST_CASE("golden: granitehybrid-moe-tiny (f16, q4km)", "[golden][moe][hybrid]") { golden_arch("granitehybrid-moe"); }

// Sparse reading: a decode step reads the weights of the chosen experts only. The block counts the
// expert bytes it reads (MoeCounters); a step of one row must read exactly n_expert_used experts'
// gate, up and down per MoE layer (n_expert_used / n_expert of the layer's expert bytes), and a
// step of several rows (parallel slots) or a prefill micro-batch each distinct chosen expert once.
TEST_CASE("moe: a decode step reads only the chosen experts' weights", "[moe]") {
  ThreadPool pool(2);
  for (const char* file : {"qwen3moe-tiny-q4km.gguf", "lfm2moe-tiny-q4km.gguf", "qwen35moe-tiny-f16.gguf",
                           "gemma4-moe-tiny-q4km.gguf", "granitehybrid-moe-tiny-q4km.gguf"}) {
    INFO(file);
    auto loaded = Model::load(repo(std::string("models/") + file));
    REQUIRE(loaded.ok());
    std::shared_ptr<const Model> m = loaded.value();
    const HParams& hp = m->hparams();
    const Model::Impl& I = m->impl();
    size_t layer_expert_bytes = 0, router = 0, shared = 0, one_row = 0;
    std::vector<size_t> per_expert(size_t(hp.n_layer), 0);  // one expert's gate + up + down (types vary by layer)
    int n_moe = 0;
    for (int l = 0; l < hp.n_layer; ++l) {
      if (!hp.layers[size_t(l)].moe) continue;
      const MoeWeights& w = I.layers[size_t(l)].moe;
      ++n_moe;
      per_expert[size_t(l)] = w.gate.expert_bytes() + w.up.expert_bytes() + w.down.expert_bytes();
      layer_expert_bytes += size_t(hp.n_expert) * per_expert[size_t(l)];
      one_row += size_t(hp.n_expert_used) * per_expert[size_t(l)];
      router += size_t(w.router.rows) * row_bytes(w.router.type, w.router.cols);
      if (w.shared.gate.data)
        for (const WeightView* v : {&w.shared.gate, &w.shared.up, &w.shared.down})
          shared += size_t(v->rows) * row_bytes(v->type, v->cols);
      shared += w.shared_gate.size() * sizeof(float);
    }
    REQUIRE(n_moe > 0);
    CHECK(layer_expert_bytes == expert_bytes(I));

    SessionOptions so{128, 32};
    so.workspace = make_eval_workspace();
    Session a(m, pool, so), b(m, pool, so);
    const std::vector<int32_t> pa = {1, 45, 120, 7, 300, 22, 9, 87, 411, 5, 63, 200};
    const std::vector<int32_t> pb = {1, 99, 3, 250, 17, 480, 61};
    REQUIRE(a.eval(pa).ok());
    REQUIRE(b.eval(pb).ok());
    MoeCounters& C = so.workspace->moe.counters;
    const MoeScratch& S = so.workspace->moe;

    // One decode row.
    C = {};
    const int32_t t1[1] = {42};
    REQUIRE(a.eval(t1).ok());
    std::printf("moe bytes %-24s one decode row: experts %llu B of %zu B (%.1f%%), router %llu B, shared %llu B\n",
                file, (unsigned long long)C.expert_bytes, layer_expert_bytes,
                100.0 * double(C.expert_bytes) / double(layer_expert_bytes), (unsigned long long)C.router_bytes,
                (unsigned long long)C.shared_bytes);
    CHECK(C.expert_bytes == one_row);
    CHECK(C.expert_bytes * size_t(hp.n_expert) == layer_expert_bytes * size_t(hp.n_expert_used));
    CHECK(C.router_bytes == router);
    CHECK(C.shared_bytes == shared);

    // Two decode rows in one step: each distinct expert of their choices once per layer.
    // Distinct experts chosen per layer by the last pass's rows: their count and their bytes.
    auto distinct = [&](int64_t rows, size_t* bytes) {
      size_t n = 0;
      *bytes = 0;
      for (int l = 0; l < hp.n_layer; ++l) {
        if (!hp.layers[size_t(l)].moe) continue;
        uint64_t set = 0;
        for (int64_t t = 0; t < rows; ++t)
          for (int j = 0; j < hp.n_expert_used; ++j)
            set |= uint64_t(1) << S.choice[size_t((l * rows + t) * hp.n_expert_used + j)];
        n += size_t(__builtin_popcountll(set));
        *bytes += size_t(__builtin_popcountll(set)) * per_expert[size_t(l)];
      }
      return n;
    };
    C = {};
    const int32_t t2[1] = {77};
    std::vector<SeqBatch> items = {{&a, std::span(t2, 1), false}, {&b, std::span(t1, 1), false}};
    REQUIRE(eval_batch(items).ok());
    REQUIRE(S.margin_rows == 2);
    size_t b2 = 0;
    const size_t d2 = distinct(2, &b2);
    CHECK(C.expert_uses == d2);
    CHECK(C.expert_bytes == b2);
    CHECK(d2 <= size_t(n_moe) * 2 * size_t(hp.n_expert_used));

    // A prefill micro-batch of 20 rows: still each chosen expert once per layer.
    Session c(m, pool, so);
    C = {};
    std::vector<int32_t> pc(20);
    for (size_t i = 0; i < pc.size(); ++i) pc[i] = int32_t(1 + (i * 37) % 500);
    REQUIRE(c.eval(pc).ok());
    REQUIRE(S.margin_rows == 20);
    size_t b20 = 0;
    CHECK(C.expert_uses == distinct(20, &b20));
    CHECK(C.expert_bytes == b20);
    CHECK(C.expert_bytes <= layer_expert_bytes);
  }
}

// The start-up description says how the experts are held.
TEST_CASE("moe: description and loader errors", "[moe]") {
  auto m = Model::load(repo("models/qwen3moe-tiny-q4km.gguf"));
  REQUIRE(m.ok());
  const std::string d = m.value()->description();
  INFO(d);
  CHECK(d.find("2 of 8 experts per token") != std::string::npos);
  CHECK(d.find("mapped, not repacked") != std::string::npos);
  CHECK(m.value()->hparams().arch == Arch::Qwen3Moe);
  CHECK(m.value()->hparams().expert_gating == ExpertGating::Softmax);
  auto l = Model::load(repo("models/lfm2moe-tiny-q4km.gguf"));
  REQUIRE(l.ok());
  CHECK(l.value()->hparams().expert_gating == ExpertGating::Sigmoid);
  CHECK(!l.value()->hparams().layers[0].moe);
  CHECK(l.value()->hparams().layers[1].moe);
  // granitehybrid's MoE form: experts of feed_forward_length (no expert_feed_forward_length key), a
  // shared expert of expert_shared_feed_forward_length without a gate, every layer routed.
  auto g = Model::load(repo("models/granitehybrid-moe-tiny-q4km.gguf"));
  REQUIRE(g.ok());
  const HParams& gh = g.value()->hparams();
  CHECK(gh.arch == Arch::GraniteHybrid);
  CHECK(gh.expert_gating == ExpertGating::Softmax);
  CHECK(gh.expert_weights_norm);
  CHECK(gh.n_expert == 8);
  CHECK(gh.n_expert_used == 2);
  CHECK(gh.n_ff_exp == 64);
  CHECK(gh.n_ff_shexp == 128);
  for (int l = 0; l < gh.n_layer; ++l) {
    CHECK(gh.layers[size_t(l)].moe);
    const MoeWeights& w = g.value()->impl().layers[size_t(l)].moe;
    CHECK(w.shared.down.data != nullptr);
    CHECK(w.shared_gate.empty());
  }
  CHECK(gh.layers[0].kind == LayerKind::Mamba2);
  CHECK(gh.layers[1].kind == LayerKind::Attention);
}

namespace {
// The tiny qwen3moe file with one metadata key renamed in place (same length: the file stays valid).
Result<std::shared_ptr<Model>> load_renamed(std::vector<uint8_t>& bytes, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  const auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  REQUIRE(it != bytes.end());
  std::copy(to.begin(), to.end(), it);
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "renamed");
  REQUIRE(f.ok());
  return Model::from_gguf(std::move(f.value()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<uint8_t> b;
  uint8_t buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) b.insert(b.end(), buf, buf + n);
  std::fclose(f);
  return b;
}
}  // namespace

// Real MoE files may lack the dense feed_forward_length (every layer routed): the expert width
// stands in. A file without expert_count is refused, naming the key.
TEST_CASE("moe: hyper-parameter keys", "[moe]") {
  const std::string path = repo("models/qwen3moe-tiny-q4km.gguf");
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "qwen3moe.feed_forward_length", "qwen3moe.feed_forward_lengtX");
    REQUIRE(m.ok());
    CHECK(m.value()->hparams().layers[0].n_ff == 128);
    CHECK(m.value()->hparams().n_ff_exp == 128);
  }
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "qwen3moe.expert_count", "qwen3moe.expert_counX");
    REQUIRE(!m.ok());
    CHECK(m.error().find("qwen3moe.expert_count") != std::string::npos);
  }
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "blk.1.ffn_down_exps.weight", "blk.1.ffn_down_expX.weight");
    REQUIRE(!m.ok());
    CHECK(m.error().find("missing tensor 'blk.1.ffn_down_exps.weight'") != std::string::npos);
  }
}

// ---- gemma4's MoE layers (26B-A4B; tests/models/gemma4-moe-tiny-*) ------------------------------

namespace {

double gelu_tanh_ref(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x))); }

// ggml's GELU as the engine and llama.cpp's CPU backend compute it: the input rounded to F16, the
// result of the exact formula rounded to F16 (ggml's table), passed through above 10 and 0 below -10.
double gelu_f16_ref(float x) {
  if (x >= 10.0f) return x;
  if (x <= -10.0f) return 0.0;
  return fp16_to_fp32(fp32_to_fp16(float(gelu_tanh_ref(fp16_to_fp32(fp32_to_fp16(x))))));
}

std::vector<float> dequant_rows(const void* data, GgmlType type, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  const size_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row_ref(type, static_cast<const uint8_t*>(data) + size_t(r) * rb, &out[size_t(r * cols)], cols);
  return out;
}

// The routed block of one gemma4 MoE layer on rows (x, xn), in double from the dequantized weights:
// router on rms_norm(x) / sqrt(n_embd) * router_scale, softmax, top k (lower id on ties), weights
// renormalised and times the expert's scale (per_expert_scale: 1 when `expert_scales` is false),
// GELU(tanh)-gated experts. Returns y [T][n_embd]; chosen [T][k] and the margins (k-th minus
// (k+1)-th router logit) per row.
std::vector<double> routed_ref(const Model::Impl& I, int layer, const std::vector<float>& x, const std::vector<float>& xn,
                               int64_t T, bool expert_scales, std::vector<int>& chosen, std::vector<double>& margin) {
  const HParams& hp = I.hp;
  const MoeWeights& w = I.layers[size_t(layer)].moe;
  const int64_t E = hp.n_embd, NE = hp.n_expert, k = hp.n_expert_used, FF = hp.n_ff_exp;
  const std::vector<float> router = dequant_rows(w.router.data, w.router.type, NE, E);
  std::vector<double> y(size_t(T * E), 0.0);
  chosen.assign(size_t(T * k), -1);
  margin.assign(size_t(T), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = &x[size_t(t * E)];
    double ss = 0.0;
    for (int64_t c = 0; c < E; ++c) ss += double(xt[c]) * xt[c];
    const double inv = 1.0 / std::sqrt(ss / double(E) + double(hp.rms_eps)) / std::sqrt(double(E));
    std::vector<double> logit(size_t(NE), 0.0);
    for (int64_t e = 0; e < NE; ++e)
      for (int64_t c = 0; c < E; ++c) logit[size_t(e)] += double(router[size_t(e * E + c)]) * xt[c] * inv * w.router_scale[size_t(c)];
    std::vector<int> order(static_cast<size_t>(NE));
    for (int64_t e = 0; e < NE; ++e) order[size_t(e)] = int(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logit[size_t(a)] > logit[size_t(b)]; });
    margin[size_t(t)] = logit[size_t(order[size_t(k - 1)])] - logit[size_t(order[size_t(k)])];
    // Softmax then renormalisation over the chosen: the chosen logits' own softmax.
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(logit[size_t(order[size_t(j)])] - logit[size_t(order[0])]);
    const float* xnt = &xn[size_t(t * E)];
    for (int64_t j = 0; j < k; ++j) {
      const int e = order[size_t(j)];
      chosen[size_t(t * k + j)] = e;
      double wt = std::exp(logit[size_t(e)] - logit[size_t(order[0])]) / sum;
      if (expert_scales) wt *= w.expert_scale[size_t(e)];
      const WeightView g = w.gate.expert(e), u = w.up.expert(e), d = w.down.expert(e);
      const std::vector<float> G = dequant_rows(g.data, g.type, FF, E), U = dequant_rows(u.data, u.type, FF, E),
                               D = dequant_rows(d.data, d.type, E, FF);
      std::vector<double> h(static_cast<size_t>(FF));
      for (int64_t i = 0; i < FF; ++i) {
        double gi = 0.0, ui = 0.0;
        for (int64_t c = 0; c < E; ++c) {
          gi += double(G[size_t(i * E + c)]) * xnt[c];
          ui += double(U[size_t(i * E + c)]) * xnt[c];
        }
        h[size_t(i)] = gelu_f16_ref(float(gi)) * ui;
      }
      for (int64_t c = 0; c < E; ++c) {
        double o = 0.0;
        for (int64_t i = 0; i < FF; ++i) o += double(D[size_t(c * FF + i)]) * h[size_t(i)];
        y[size_t(t * E + c)] += wt * o;
      }
    }
  }
  return y;
}

}  // namespace

// The routed block with gemma4's options (router input transform, per-expert output scales,
// GELU(tanh) experts) against the double-precision scalar reference above, in Exact mode on the F16
// file, on random rows of every MoE layer; without the expert scales the reference is far off (so
// they are exercised), and the chosen experts are the reference's wherever its margin is clear.
TEST_CASE("moe: gemma4's routed block equals its scalar reference", "[moe][gemma4]") {
  ModelOptions mo;
  mo.activations = ActivationMode::Exact;
  auto loaded = Model::load(repo("models/gemma4-moe-tiny-f16.gguf"), mo);
  REQUIRE(loaded.ok());
  std::shared_ptr<const Model> m = loaded.value();
  const Model::Impl& I = m->impl();
  const HParams& hp = I.hp;
  REQUIRE(hp.n_expert == 8);
  REQUIRE(hp.n_expert_used == 2);
  ThreadPool pool(2);
  const int64_t T = 24, E = hp.n_embd, k = hp.n_expert_used;
  EvalWorkspace W;
  W.ensure(hp, pool.size(), T);
  std::vector<int32_t> toks(size_t(T), 1);
  Forward f{I, pool, W, toks.data(), T, {}, {}};
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&] {  // [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(state >> 11) - (int64_t(1) << 52)) / float(int64_t(1) << 52);
  };
  for (int l = 0; l < hp.n_layer; ++l) {
    INFO("layer " << l);
    REQUIRE(hp.layers[size_t(l)].moe);
    const MoeWeights& w = I.layers[size_t(l)].moe;
    REQUIRE(w.router_scale.size() == size_t(E));
    REQUIRE(w.expert_scale.size() == size_t(hp.n_expert));
    REQUIRE(w.act == FfnActivation::GeluTanhGated);
    // Residual rows of varied scale (the router input is normalised) and normed-looking inputs.
    std::vector<float> x(size_t(T * E)), xn(size_t(T * E));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < E; ++c) {
        x[size_t(t * E + c)] = uniform() * float(1 + t % 5) * 3.0f;
        xn[size_t(t * E + c)] = uniform() * 1.7f;
      }
    std::copy(x.begin(), x.end(), W.x.begin());
    std::copy(xn.begin(), xn.end(), W.xn.begin());
    routed_ffn(f, l);
    std::vector<int> chosen, chosen_unscaled;
    std::vector<double> margin, margin_unscaled;
    const std::vector<double> ref = routed_ref(I, l, x, xn, T, true, chosen, margin);
    const std::vector<double> unscaled = routed_ref(I, l, x, xn, T, false, chosen_unscaled, margin_unscaled);
    double max_diff = 0.0, max_ref = 0.0, max_unscaled = 0.0;
    int compared = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (margin[size_t(t)] < 1e-4) continue;  // a tie the float router may break the other way
      ++compared;
      std::vector<int> ours(W.moe.choice.begin() + ptrdiff_t((l * T + t) * k), W.moe.choice.begin() + ptrdiff_t((l * T + t + 1) * k));
      CHECK(ours == std::vector<int>(chosen.begin() + ptrdiff_t(t * k), chosen.begin() + ptrdiff_t((t + 1) * k)));
      CHECK(std::fabs(double(W.moe.margin[size_t(l * T + t)]) - margin[size_t(t)]) < 1e-4);
      for (int64_t c = 0; c < E; ++c) {
        const double r = ref[size_t(t * E + c)];
        max_diff = std::max(max_diff, std::fabs(double(W.q[size_t(t * E + c)]) - r));
        max_ref = std::max(max_ref, std::fabs(r));
        max_unscaled = std::max(max_unscaled, std::fabs(unscaled[size_t(t * E + c)] - r));
      }
    }
    std::printf("moe gemma4 layer %d: routed block vs scalar reference max|diff| %.2e (outputs up to %.3f; without "
                "the expert scales %.3f), %d of %lld rows\n",
                l, max_diff, max_ref, max_unscaled, compared, (long long)T);
    CHECK(compared >= T - 2);
    CHECK(max_diff <= 1e-4 * std::max(1.0, max_ref));
    CHECK(max_unscaled > 100 * 1e-4 * std::max(1.0, max_ref));
  }
}

// gemma4 26B-A4B's keys and tensors: every layer with a router is a MoE layer beside its dense FFN;
// the router's input scale is required, a missing one is refused naming it (the per-expert scales
// are optional, as in llama.cpp).
TEST_CASE("moe: gemma4's MoE hyper-parameters and tensors", "[moe][gemma4]") {
  const std::string path = repo("models/gemma4-moe-tiny-q4km.gguf");
  {
    auto m = Model::load(path);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Gemma4);
    CHECK(hp.n_expert == 8);
    CHECK(hp.n_expert_used == 2);
    CHECK(hp.n_ff_exp == 32);
    CHECK(hp.expert_gating == ExpertGating::Softmax);
    CHECK(hp.expert_weights_norm);
    REQUIRE(hp.n_layer == 3);
    for (int l = 0; l < 3; ++l) {
      CHECK(hp.layers[size_t(l)].moe);
      CHECK(hp.layers[size_t(l)].n_ff == (l == 2 ? 96 : 64));  // the dense FFN's per-layer widths
      CHECK(hp.layers[size_t(l)].kv_source == -1);
    }
    CHECK(hp.n_embd_per_layer == 0);
    const std::string d = m.value()->description();
    INFO(d);
    CHECK(d.find("2 of 8 experts per token") != std::string::npos);
  }
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "blk.1.ffn_gate_inp.scale", "blk.1.ffn_gate_inp.scalX");
    REQUIRE(!m.ok());
    CHECK(m.error().find("blk.1.ffn_gate_inp.scale") != std::string::npos);
  }
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "blk.2.post_ffw_norm_2.weight", "blk.2.post_ffw_norm_2.weighX");
    REQUIRE(!m.ok());
    CHECK(m.error().find("blk.2.post_ffw_norm_2.weight") != std::string::npos);
  }
  {
    std::vector<uint8_t> b = read_bytes(path);
    auto m = load_renamed(b, "blk.0.ffn_down_exps.scale", "blk.0.ffn_down_exps.scalX");
    REQUIRE(m.ok());
    CHECK(m.value()->impl().layers[0].moe.expert_scale.empty());
    CHECK(m.value()->impl().layers[1].moe.expert_scale.size() == 8);
  }
}
