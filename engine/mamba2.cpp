#include "mamba2.h"

#include <cmath>
#include <string>

#include "kernels/recurrent_ops.h"
#include "recurrent.h"

namespace picolm {
namespace {

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
// ggml's softplus (ggml-impl.h), the form llama.cpp's scan applies to dt.
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// x / sqrt(mean(x^2) + eps) * w in place, the sum in double as layers.cpp's.
void rms_norm(float* x, const float* w, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale * w[i];
}

MatmulTarget target(const WeightView& w, float* y) { return {w.type, w.data, w.rows, y, w.packed}; }

}  // namespace

void mamba2(Forward& f, int layer) {
  EvalWorkspace& W = f.w;
  RecurrentScratch& r = W.rec;
  const HParams& hp = f.hp();
  const Mamba2Weights& w = f.m.layers[size_t(layer)].m2;
  const int nh = hp.m2_heads, hd = hp.m2_head_dim, ds = hp.m2_state, ng = hp.m2_groups, taps = hp.m2_conv;
  const int d_inner = nh * hd, channels = d_inner + 2 * ng * ds, heads_per_group = nh / ng;
  const int64_t T = f.T;
  // The layer's state in each sequence's RecurrentState::data: conv history, then the scan state.
  const size_t hist_off = f.segs[0].seq->rec.off[size_t(layer)];
  const size_t state_off = hist_off + size_t(taps - 1) * channels;

  // z, xBC and dt are row slices of ssm_in: one activation quantization, one pass of the pool, each
  // part into its own buffer.
  grow(r.gate, size_t(T) * d_inner);   // z
  grow(r.proj, size_t(T) * channels);  // xBC, the conv's input
  grow(r.beta, size_t(T) * nh);        // dt, then softplus(dt + dt_bias)
  grow(r.decay, size_t(T) * nh);       // dA = exp(dt * A)
  const MatmulTarget targets[3] = {target(w.z, r.gate.data()), target(w.xbc, r.proj.data()),
                                   target(w.dt, r.beta.data())};
  matmul_multi(*f.m.kernels, f.pool, f.m.opts.activations, targets, 3, w.z.cols, W.xn.data(), T);

  grow(r.conv_out, size_t(T) * channels);
  conv_segments(f, hist_off, taps, channels, r.proj.data(), w.conv.data(), r.conv_out.data());

  f.for_rows(T, [&](int64_t t) {
    float* c = &r.conv_out[size_t(t) * channels];
    if (!w.conv_bias.empty())
      for (int i = 0; i < channels; ++i) c[i] += w.conv_bias[size_t(i)];
    for (int i = 0; i < channels; ++i) c[i] = silu(c[i]);
    float* dt = &r.beta[size_t(t) * nh];
    float* dA = &r.decay[size_t(t) * nh];
    for (int h = 0; h < nh; ++h) {
      dt[h] = softplus(dt[h] + w.dt_bias[size_t(h)]);
      dA[h] = std::exp(dt[h] * w.a[size_t(h)]);
    }
  });

  // The scan: sequential over a segment's rows, one task per (segment, head), each on its own
  // sequence's state, so sequences never mix and a sequence computes as when it runs alone.
  grow(r.o, size_t(T) * d_inner);
  const RecurrentOps& ops = best_recurrent_ops();
  const int n_seg = int(f.segs.size());
  f.pool.parallel_for(n_seg * nh, [&](int task, int) {
    const Segment& sg = f.segs[size_t(task / nh)];
    const int h = task % nh, g = h / heads_per_group;
    const float* rows = r.conv_out.data() + size_t(sg.row0) * channels;
    SsmScanHead s;
    s.head_dim = hd;
    s.d_state = ds;
    s.n_tok = int(sg.n);
    s.state = sg.seq->rec.data.data() + state_off + size_t(h) * hd * ds;
    s.x = rows + h * hd;
    s.x_stride = channels;
    s.B = rows + d_inner + g * ds;
    s.C = rows + d_inner + (ng + g) * ds;
    s.bc_stride = channels;
    s.dt = r.beta.data() + size_t(sg.row0) * nh + h;
    s.dA = r.decay.data() + size_t(sg.row0) * nh + h;
    s.dt_stride = nh;
    s.out = r.o.data() + size_t(sg.row0) * d_inner + h * hd;
    s.out_stride = d_inner;
    ops.ssm_scan(s);
  });

  const int group_len = d_inner / ng;
  f.for_rows(T, [&](int64_t t) {
    float* y = &r.o[size_t(t) * d_inner];
    const float* x = &r.conv_out[size_t(t) * channels];
    const float* z = &r.gate[size_t(t) * d_inner];
    for (int i = 0; i < d_inner; ++i) y[i] = (y[i] + x[i] * w.d[size_t(i / hd)]) * silu(z[i]);
    for (int g = 0; g < ng; ++g) rms_norm(y + g * group_len, w.norm.data() + g * group_len, group_len, hp.rms_eps);
  });
  matmul(*f.m.kernels, f.pool, f.m.opts.activations, w.out.type, w.out.data, w.out.rows, w.out.cols, r.o.data(), T,
         W.q.data(), w.out.packed);
}

void load_mamba2(WeightLoader& L, const HParams& hp, int layer, Mamba2Weights& w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t E = hp.n_embd, nh = hp.m2_heads, d_inner = nh * hp.m2_head_dim;
  const int64_t channels = d_inner + 2 * int64_t(hp.m2_groups) * hp.m2_state;
  const WeightView in = L.matrix(p + "ssm_in.weight", d_inner + channels + nh, E);
  w.z = row_slice(in, 0, d_inner);
  w.xbc = row_slice(in, d_inner, channels);
  w.dt = row_slice(in, d_inner + channels, nh);
  w.out = L.matrix(p + "ssm_out.weight", E, d_inner);
  w.conv = load_conv_kernel(L, p + "ssm_conv1d.weight", hp.m2_conv, channels);
  w.conv_bias = L.vec(p + "ssm_conv1d.bias", channels, /*optional=*/true);
  w.dt_bias = L.vec(p + "ssm_dt.bias", nh);
  w.a = L.vec(p + "ssm_a", nh, false, /*any_shape=*/true);  // ggml {1, heads}
  w.d = L.vec(p + "ssm_d", nh, false, true);                  // ggml {1, heads}
  w.norm = L.vec(p + "ssm_norm.weight", d_inner, false, true);  // ggml {d_inner / groups, groups}
}

}  // namespace picolm
