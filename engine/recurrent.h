// Internal: the blocks of the hybrid architectures (qwen35, lfm2) that engine/layers.h does not
// have (granitehybrid's Mamba-2 is in engine/mamba2.h), and the loaders of their weights. Like the blocks there, each runs one micro-batch of T
// rows (the rows of one or more sequences, layers.h), reads xn and writes y (the workspace's q
// buffer), and treats every row with the same float operations whatever the split of the prompt
// and whatever other sequences share the batch. The recurrent state is carried from micro-batch to
// micro-batch per sequence, in each segment's Session::Impl::rec (recurrent_state.h); the scratch
// is the workspace's (EvalWorkspace::rec).
#pragma once
#include "layers.h"

namespace picolm {

// Gated delta net (Qwen3.5's linear-attention layers): qkv, z, beta, alpha projections of xn; causal
// conv over the qkv channels with the carried history, SiLU; L2-normed q, k (q / sqrt(head_dim));
// per V head the gated delta rule on its state (V head j reads K head j mod k_heads); the output
// RMS-normed per head, times SiLU(z); out projection into y. Clobbers nothing but its scratch.
void delta_net(Forward& f, int layer);
// Gated short convolution (LFM2): B, C, x = in_proj(xn); y = out_proj(C * conv(B * x)), the
// causal depthwise conv over the carried history.
void short_conv(Forward& f, int layer);
// Qwen3.5's full-attention layer: attn_q gives per head the query then its gate (interleaved per
// head); QK-norm, RoPE of the first n_rot dims (NeoX pairs), K/V into the cache, causal attention,
// the output times sigmoid(gate), attn_output into y. Clobbers xn.
void gated_attention(Forward& f, int layer);

// ---- shared by the recurrent blocks (mamba2.cpp too) ----------------------------------------------

// The causal conv of every segment of the micro-batch: src holds the conv inputs of the T rows
// ([T][channels]); each segment runs over its own sequence's history (the layer's state at
// state_off in seq->rec.data), which is then replaced by the segment's last taps - 1 inputs.
void conv_segments(Forward& f, size_t state_off, int taps, int channels, const float* src, const float* w, float* out);
// A convolution kernel: the file's [channels][taps] F32 (ggml ne [taps, channels]) as [taps][channels].
std::vector<float> load_conv_kernel(WeightLoader& L, const std::string& name, int64_t taps, int64_t channels);

// blk.<layer>.attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_norm.
void load_delta_net(WeightLoader& L, const HParams& hp, int layer, DeltaNetWeights& w);
// blk.<layer>.shortconv.in_proj, out_proj, conv.
void load_short_conv(WeightLoader& L, const HParams& hp, int layer, ShortConvWeights& w);
// blk.<layer>.attn_q (2 * n_head * head_dim rows), attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm.
void load_gated_attention(WeightLoader& L, const HParams& hp, int layer, AttnWeights& w);

}  // namespace picolm
