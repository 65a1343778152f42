// smollm3 (SmolLM3): the llama decoder (normal RoPE pairs, optional biases) in which every
// fourth layer (il % 4 == 3) uses no rotary embedding at all (NoPE).
#include "arch/arch.h"

namespace picolm {
namespace {

// llama.cpp's n_no_rope_layer_step for smollm3: fixed, not stored in the files.
constexpr int kNoRopeStep = 4;

Status read_hparams(const GgufFile&, HParams& hp) {
  hp.arch = Arch::Smollm3;
  hp.rope_neox = false;
  for (int l = 0; l < hp.n_layer; ++l)
    if ((l + 1) % kNoRopeStep == 0) hp.layers[size_t(l)].rope = -1;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  load_prenorm_decoder(L, m, {.qkv_bias = Presence::Optional, .qk_norm = Presence::Absent});
}

void forward(Forward& f) { forward_prenorm_decoder(f, FfnActivation::SiluGated); }

}  // namespace

const Architecture kArchSmollm3 = {"smollm3", Arch::Smollm3, read_hparams, load_weights, forward};

}  // namespace picolm
