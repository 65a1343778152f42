// qwen35moe (Qwen3.5 MoE, e.g. Qwen3.5-35B-A3B): qwen35's hybrid of gated delta-net and gated
// full-attention layers (engine/arch/qwen35.cpp) with the routed FFN (engine/moe.h) in every
// layer: softmax router, top n_expert_used renormalised to sum 1, plus a shared SwiGLU expert
// (n_ff_shexp) whose output is scaled by sigmoid(ffn_gate_inp_shexp . x) (llama.cpp
// src/models/qwen35moe.cpp). Per layer
//   x += mixer(attn_norm(x));  x += moe(post_attention_norm(x))
// The gate and up experts may be stored merged (ffn_gate_up_exps).
#include "arch/common_decoder.h"

namespace picolm {
namespace {

const DecoderLayout kLayout{.ffn_norm = "post_attention_norm.weight", .gated_attention = true,
                            .moe = {.shared_expert = true}};

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen35Moe;
  hp.rope_neox = true;
  // llama.cpp reads full_attention_interval as optional, default 4.
  if (Status s = read_delta_net_pattern(f, hp, /*default_interval=*/4); !s) return s;
  if (Status s = read_softmax_routing(f, hp); !s) return s;
  if (hp.n_ff_shexp < 1) return Error{"implausible qwen35moe.expert_shared_feed_forward_length"};
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) { load_decoder(L, m, kLayout); }

void forward(Forward& f) { forward_decoder(f, kLayout); }

}  // namespace

const Architecture kArchQwen35Moe = {"qwen35moe", Arch::Qwen35Moe, read_hparams, load_weights, forward};

}  // namespace picolm
