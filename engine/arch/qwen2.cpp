// qwen2 (Qwen2, Qwen2.5): the llama decoder with biases on q, k and v and NeoX-style rotary
// embeddings (pairs (i, i + head_dim/2)).
#include "arch/arch.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile&, HParams& hp) {
  hp.arch = Arch::Qwen2;
  hp.rope_neox = true;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  load_prenorm_decoder(L, m, {.qkv_bias = Presence::Required, .qk_norm = Presence::Absent});
}

void forward(Forward& f) { forward_prenorm_decoder(f, FfnActivation::SiluGated); }

}  // namespace

const Architecture kArchQwen2 = {"qwen2", Arch::Qwen2, read_hparams, load_weights, forward};

}  // namespace picolm
