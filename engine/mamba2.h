// Internal: the Mamba-2 mixer (Dao & Gu, "Transformers are SSMs", 2024) as Granite-4.0-H and
// llama.cpp's build_mamba2_layer compute it, and the loader of its weights. Like the blocks of
// engine/recurrent.h it runs one micro-batch of T rows (the rows of one or more sequences), reads xn
// and writes y (the workspace's q buffer), and carries its state per sequence in each segment's
// Session::Impl::rec (recurrent_state.h: conv history [conv - 1][conv_channels], then the scan state
// [heads][head_dim][d_state]).
#pragma once
#include "layers.h"

namespace picolm {

// z | xBC | dt = ssm_in(xn); xBC = SiLU(causal conv of xBC over the carried history + conv bias);
// x | B | C = xBC (B and C: groups of d_state, head h reads group h / (heads / groups)); per head
// the selective scan (kernels/recurrent_ops.h, SsmScanHead) with dt = softplus(dt + dt_bias) and
// dA = exp(dt * A); y += x * D; y *= SiLU(z); y = RMS norm of each group of d_inner / groups, times
// ssm_norm; out projection into y.
void mamba2(Forward& f, int layer);

// blk.<layer>.ssm_in, ssm_conv1d (.weight, optional .bias), ssm_dt.bias, ssm_a, ssm_d, ssm_norm, ssm_out.
void load_mamba2(WeightLoader& L, const HParams& hp, int layer, Mamba2Weights& w);

}  // namespace picolm
