// Kernels of the recurrent layers (causal conv, gated delta rule): every variant the CPU runs
// against a double-precision oracle written from the definitions, and the scalar reference
// against the same oracle; a state carried over split token ranges equals one pass.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/recurrent_ops.h"

using namespace picolm;

namespace {

struct Rng {
  std::mt19937 g{11};
  std::normal_distribution<float> nd{0.0f, 1.0f};
  std::uniform_real_distribution<float> ud{0.0f, 1.0f};
  std::vector<float> normal(size_t n, float sigma) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(g) * sigma;
    return v;
  }
};

// The gated delta rule in double precision, the textbook form: S = decay * S; S += k (beta (v - S^T k))^T; o = S^T q.
struct DeltaOracle {
  int dk, dv;
  std::vector<double> S;  // [dk][dv]
  DeltaOracle(int dk_, int dv_, const std::vector<float>& s0) : dk(dk_), dv(dv_), S(s0.begin(), s0.end()) {}
  void step(const float* q, const float* k, const float* v, float decay, float beta, double* out) {
    for (double& s : S) s *= decay;
    for (int j = 0; j < dv; ++j) {
      double kv = 0.0;
      for (int i = 0; i < dk; ++i) kv += S[size_t(i) * dv + j] * k[i];
      const double d = beta * (double(v[j]) - kv);
      for (int i = 0; i < dk; ++i) S[size_t(i) * dv + j] += double(k[i]) * d;
    }
    for (int j = 0; j < dv; ++j) {
      double o = 0.0;
      for (int i = 0; i < dk; ++i) o += S[size_t(i) * dv + j] * q[i];
      out[j] = o;
    }
  }
};

}  // namespace

TEST_CASE("recurrent ops: causal conv of every variant matches a double oracle", "[kernels]") {
  const RecurrentOps* list[4];
  const int n_ops = available_recurrent_ops(list, 4);
  REQUIRE(n_ops >= 1);
  CHECK(list[0] == &scalar_recurrent_ops());
  Rng rng;
  for (int v = 0; v < n_ops; ++v) {
    const RecurrentOps& ops = *list[v];
    for (int channels : {1, 7, 8, 17, 64, 259}) {
      for (int taps : {1, 3, 4}) {
        const int n_tok = 5;
        INFO(ops.name << " channels " << channels << " taps " << taps);
        const auto in = rng.normal(size_t(taps - 1 + n_tok) * channels, 1.0f);
        const auto w = rng.normal(size_t(taps) * channels, 0.5f);
        const int stride = channels + 3;  // output rows are not packed: the stride must be honoured
        std::vector<float> out(size_t(n_tok) * stride, -7.0f);
        CausalConv c{channels, taps, n_tok, in.data(), w.data(), out.data(), stride};
        ops.causal_conv(c);
        for (int t = 0; t < n_tok; ++t)
          for (int ch = 0; ch < stride; ++ch) {
            if (ch >= channels) {
              CHECK(out[size_t(t) * stride + ch] == -7.0f);
              continue;
            }
            double want = 0.0, mag = 0.0;
            for (int j = 0; j < taps; ++j) {
              const double p = double(w[size_t(j) * channels + ch]) * in[size_t(t + j) * channels + ch];
              want += p;
              mag += std::fabs(p);
            }
            // taps roundings of at most 2^-24 relative to the running magnitude.
            CHECK(std::fabs(out[size_t(t) * stride + ch] - want) <= 1e-6 * mag + 1e-30);
          }
      }
    }
  }
}

TEST_CASE("recurrent ops: delta rule of every variant matches a double oracle", "[kernels]") {
  const RecurrentOps* list[4];
  const int n_ops = available_recurrent_ops(list, 4);
  Rng rng;
  for (int v = 0; v < n_ops; ++v) {
    const RecurrentOps& ops = *list[v];
    for (auto [dk, dv] : {std::pair{4, 4}, {7, 5}, {32, 32}, {16, 13}, {128, 128}, {32, 72}}) {
      INFO(ops.name << " dk " << dk << " dv " << dv);
      const int n_tok = 9;
      // q, k L2-normalized like the layer's (the rule is stable only for ||k|| <= 1 with beta <= 1).
      auto unit = [&](size_t n) {
        auto x = rng.normal(n, 1.0f);
        double ss = 0;
        for (float e : x) ss += double(e) * e;
        for (float& e : x) e = float(e / std::sqrt(ss));
        return x;
      };
      const int qk_stride = 2 * dk + 1, v_stride = dv + 2, out_stride = dv + 5, gb_stride = 3;
      std::vector<float> q(size_t(n_tok) * qk_stride), k(q.size()), vv(size_t(n_tok) * v_stride);
      std::vector<float> decay(size_t(n_tok) * gb_stride), beta(decay.size());
      for (int t = 0; t < n_tok; ++t) {
        const auto qt = unit(size_t(dk)), kt = unit(size_t(dk)), vt = rng.normal(size_t(dv), 1.0f);
        std::copy(qt.begin(), qt.end(), q.begin() + t * qk_stride);
        std::copy(kt.begin(), kt.end(), k.begin() + t * qk_stride);
        std::copy(vt.begin(), vt.end(), vv.begin() + t * v_stride);
        decay[size_t(t) * gb_stride] = 0.3f + 0.68f * rng.ud(rng.g);
        beta[size_t(t) * gb_stride] = rng.ud(rng.g);
      }
      const auto s0 = rng.normal(size_t(dk) * dv, 0.5f);
      DeltaOracle oracle(dk, dv, s0);
      std::vector<double> want(size_t(n_tok) * dv);
      for (int t = 0; t < n_tok; ++t)
        oracle.step(&q[size_t(t) * qk_stride], &k[size_t(t) * qk_stride], &vv[size_t(t) * v_stride],
                    decay[size_t(t) * gb_stride], beta[size_t(t) * gb_stride], &want[size_t(t) * dv]);

      // One pass over all tokens, and the same tokens in two calls with the state carried.
      for (int split : {n_tok, 4}) {
        INFO("first call of " << split << " tokens");
        std::vector<float> S = s0, out(size_t(n_tok) * out_stride, -7.0f);
        for (int t0 = 0; t0 < n_tok; t0 += split) {
          DeltaRuleHead h;
          h.dk = dk;
          h.dv = dv;
          h.n_tok = std::min(split, n_tok - t0);
          h.state = S.data();
          h.q = q.data() + t0 * qk_stride;
          h.k = k.data() + t0 * qk_stride;
          h.qk_stride = qk_stride;
          h.v = vv.data() + t0 * v_stride;
          h.v_stride = v_stride;
          h.decay = decay.data() + t0 * gb_stride;
          h.beta = beta.data() + t0 * gb_stride;
          h.gb_stride = gb_stride;
          h.out = out.data() + t0 * out_stride;
          h.out_stride = out_stride;
          ops.delta_rule(h);
        }
        double max_err = 0.0;
        for (int t = 0; t < n_tok; ++t)
          for (int j = 0; j < out_stride; ++j) {
            const float got = out[size_t(t) * out_stride + j];
            if (j >= dv) CHECK(got == -7.0f);
            else max_err = std::max(max_err, std::fabs(got - want[size_t(t) * dv + j]));
          }
        double max_state = 0.0;
        for (size_t i = 0; i < S.size(); ++i) max_state = std::max(max_state, std::fabs(S[i] - oracle.S[i]));
        // Outputs are O(1); float sums of dk terms over 9 steps stay within a few 1e-6.
        CHECK(max_err < 2e-5);
        CHECK(max_state < 2e-5);
      }
    }
  }
}

TEST_CASE("recurrent ops: Mamba-2 scan of every variant matches a double oracle", "[kernels]") {
  const RecurrentOps* list[4];
  const int n_ops = available_recurrent_ops(list, 4);
  Rng rng;
  for (int v = 0; v < n_ops; ++v) {
    const RecurrentOps& ops = *list[v];
    REQUIRE(ops.ssm_scan != nullptr);
    // d_state below, at and above one vector, and not a multiple of 8; Granite-4.0-H's 64 x 128.
    for (auto [hd, ds] : {std::pair{1, 1}, {4, 7}, {8, 8}, {5, 16}, {16, 29}, {64, 128}}) {
      INFO(ops.name << " head_dim " << hd << " d_state " << ds);
      const int n_tok = 9;
      const int x_stride = hd + 3, bc_stride = 2 * ds + 1, dt_stride = 2, out_stride = hd + 5;
      const auto x = rng.normal(size_t(n_tok) * x_stride, 1.0f);
      const auto B = rng.normal(size_t(n_tok) * bc_stride, 1.0f), C = rng.normal(size_t(n_tok) * bc_stride, 1.0f);
      std::vector<float> dt(size_t(n_tok) * dt_stride), dA(dt.size());
      for (int t = 0; t < n_tok; ++t) {
        dt[size_t(t) * dt_stride] = 0.01f + 0.5f * rng.ud(rng.g);  // softplus outputs: positive
        dA[size_t(t) * dt_stride] = std::exp(-dt[size_t(t) * dt_stride] * (0.1f + 2.0f * rng.ud(rng.g)));
      }
      const auto s0 = rng.normal(size_t(hd) * ds, 0.5f);
      // The oracle: the definition in double.
      std::vector<double> S(s0.begin(), s0.end()), want(size_t(n_tok) * hd);
      for (int t = 0; t < n_tok; ++t) {
        const double d = dt[size_t(t) * dt_stride], a = dA[size_t(t) * dt_stride];
        for (int i = 0; i < hd; ++i) {
          double o = 0.0;
          for (int j = 0; j < ds; ++j) {
            double& s = S[size_t(i) * ds + j];
            s = s * a + double(B[size_t(t) * bc_stride + j]) * (double(x[size_t(t) * x_stride + i]) * d);
            o += s * C[size_t(t) * bc_stride + j];
          }
          want[size_t(t) * hd + i] = o;
        }
      }
      for (int split : {n_tok, 4, 1}) {
        INFO("calls of " << split << " tokens");
        std::vector<float> st = s0, out(size_t(n_tok) * out_stride, -7.0f);
        for (int t0 = 0; t0 < n_tok; t0 += split) {
          SsmScanHead h;
          h.head_dim = hd;
          h.d_state = ds;
          h.n_tok = std::min(split, n_tok - t0);
          h.state = st.data();
          h.x = x.data() + t0 * x_stride;
          h.x_stride = x_stride;
          h.B = B.data() + t0 * bc_stride;
          h.C = C.data() + t0 * bc_stride;
          h.bc_stride = bc_stride;
          h.dt = dt.data() + t0 * dt_stride;
          h.dA = dA.data() + t0 * dt_stride;
          h.dt_stride = dt_stride;
          h.out = out.data() + t0 * out_stride;
          h.out_stride = out_stride;
          ops.ssm_scan(h);
        }
        double max_err = 0.0, max_state = 0.0, mag = 0.0;
        for (int t = 0; t < n_tok; ++t)
          for (int i = 0; i < out_stride; ++i) {
            const float got = out[size_t(t) * out_stride + i];
            if (i >= hd) {
              CHECK(got == -7.0f);
              continue;
            }
            max_err = std::max(max_err, std::fabs(got - want[size_t(t) * hd + i]));
            mag = std::max(mag, std::fabs(want[size_t(t) * hd + i]));
          }
        for (size_t i = 0; i < st.size(); ++i) max_state = std::max(max_state, std::fabs(st[i] - S[i]));
        // Outputs up to ~sqrt(d_state) * a few; float sums of d_state terms: a few ulps of that.
        CHECK(max_err <= 1e-5 * std::max(1.0, mag));
        CHECK(max_state < 1e-5);
      }
    }
  }
}
