// qwen3moe (Qwen3 MoE, e.g. Qwen3-30B-A3B): qwen3's attention (QK-norm, NeoX RoPE, no biases) with
// the routed FFN (engine/moe.h) in every layer: softmax router, top n_expert_used, the chosen
// probabilities renormalised to sum 1 (llama.cpp's graph hard-codes norm_w for this family; the
// file's expert_weights_norm is not read), no scale, no shared expert. Per layer
//   x += attention(attn_norm(x));  x += moe(ffn_norm(x))
#include "arch/common_decoder.h"

namespace picolm {
namespace {

const DecoderLayout kLayout{.attn = {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required}};

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen3Moe;
  hp.rope_neox = true;
  if (Status s = read_softmax_routing(f, hp); !s) return s;
  hp.n_ff_shexp = 0;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) { load_decoder(L, m, kLayout); }

void forward(Forward& f) { forward_decoder(f, kLayout); }

}  // namespace

const Architecture kArchQwen3Moe = {"qwen3moe", Arch::Qwen3Moe, read_hparams, load_weights, forward};

}  // namespace picolm
