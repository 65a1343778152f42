// Internal: the routed feed-forward block of the mixture-of-experts architectures (qwen3moe,
// lfm2moe, qwen35moe, gemma4's 26B-A4B; reusable by any family whose FFN is llama.cpp's build_moe_ffn
// with SwiGLU or GELU(tanh)-gated experts), and the loader of its weights.
//
// Per row t of the micro-batch, on its normed input x (the workspace's xn):
//   logits = router . x                                   [n_expert]
//            (gemma4: router . (rms_norm(h) / sqrt(n_embd) * router_scale), h the residual stream)
//   p      = softmax(logits) | sigmoid(logits) | logits   (HParams::expert_gating)
//   chosen = the n_expert_used largest p + select_bias     (ties: the lower id)
//   w_j    = p[chosen_j] (SoftmaxWeight: softmax over the chosen logits); / sum_j w_j when
//            expert_weights_norm (sum clamped to >= 2^-14 as llama.cpp); * expert_weights_scale
//            (gemma4: then * expert_scale[chosen_j], the per-expert output scale)
//   y      = sum_j w_j * down_e(act(gate_e . x) * up_e . x)  +  sigmoid(shared_gate . x) * shared(x)
//            (act: SiLU, or GELU(tanh) through ggml's F16 table as the dense GELU FFN; MoeWeights::act)
// written to y (the workspace's q buffer), as ffn() does.
//
// Sparse reading: the rows of the micro-batch are grouped by expert, and each chosen expert's three
// matrices are read once for all its rows (one matmul_pair and one matmul over the gathered rows;
// in a decode step, at most 64 chosen (row, expert) slots, every chosen expert's gate/up in one
// matmul_groups pass of the pool and every down in a second, instead of two passes per expert);
// experts nobody chose are not touched. The experts stay in the file's mapping (never repacked:
// their pages are faulted in when first chosen, so a model larger than RAM pages only what it
// uses). Their matmuls never take the many-token GEMM (MatmulTarget::dots_only): a row's result
// does not depend on how many rows share its expert, so batch invariance holds as for the dense
// blocks, and the sum over a row's experts runs in ascending expert id, which depends on the row
// alone.
#pragma once
#include "layers.h"

namespace picolm {

// y = routed FFN of `layer` on xn (see above). Counts the weight bytes it reads in
// f.w.moe.counters and records the router margins in f.w.moe.margin.
void routed_ffn(Forward& f, int layer);

// The MoE keys every family shares: <arch>.expert_count, expert_used_count (required),
// expert_feed_forward_length (default n_ff / n_expert_used, as llama.cpp),
// expert_shared_feed_forward_length (default n_ff, only used where the family has a shared expert).
// Gating, normalisation and scale are the family's (set them after this). Errors name the key.
Status read_moe_hparams(const GgufFile& f, HParams& hp);

struct MoeTensors {
  bool select_bias = false;        // blk.N.exp_probs_b.bias (lfm2moe)
  bool shared_expert = false;      // blk.N.ffn_{gate,up,down}_shexp (qwen35moe; granite's MoE layers)
  bool shared_expert_gate = true;  // with it, blk.N.ffn_gate_inp_shexp (qwen35moe; granite has none)
  bool router_scale = false;       // blk.N.ffn_gate_inp.scale (gemma4): the router's own input (see above)
  bool expert_scale = false;       // blk.N.ffn_down_exps.scale if the file has it (gemma4; optional as in llama.cpp)
  FfnActivation act = FfnActivation::SiluGated;  // the experts' activation (gemma4: GELU(tanh))
};
// blk.<layer>.ffn_gate_inp, ffn_gate_exps + ffn_up_exps (or the merged ffn_gate_up_exps),
// ffn_down_exps, and the parts asked for, with the shapes of hp.
void load_moe(WeightLoader& L, const HParams& hp, int layer, const MoeTensors& opt, MoeWeights& w);

// Bytes of the stacked experts of the whole model (they stay in the file's pages), and of one
// token's share of them (n_expert_used of n_expert per MoE layer).
size_t expert_bytes(const Model::Impl& m);
size_t expert_bytes_per_token(const Model::Impl& m);

}  // namespace picolm
