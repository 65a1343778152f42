// qwen3 (Qwen3 dense): qwen2 without the q/k/v biases and with a per-head RMS norm of q and k
// (attn_q_norm, attn_k_norm) before the NeoX rotation. head_dim comes from
// qwen3.attention.key_length (128 in the real models, not n_embd / n_head).
#include "arch/arch.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile&, HParams& hp) {
  hp.arch = Arch::Qwen3;
  hp.rope_neox = true;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  load_prenorm_decoder(L, m, {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required});
}

void forward(Forward& f) { forward_prenorm_decoder(f, FfnActivation::SiluGated); }

}  // namespace

const Architecture kArchQwen3 = {"qwen3", Arch::Qwen3, read_hparams, load_weights, forward};

}  // namespace picolm
