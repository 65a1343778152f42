// llama: the pre-norm SwiGLU decoder with rotary embeddings on pairs (2i, 2i+1). Also serves
// Llama 3.x files (rope_freqs.weight) and files that carry q/k/v biases.
#include "arch/arch.h"

namespace picolm {
namespace {

Status read_hparams(const GgufFile&, HParams& hp) {
  hp.arch = Arch::Llama;
  hp.rope_neox = false;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) {
  load_prenorm_decoder(L, m, {.qkv_bias = Presence::Optional, .qk_norm = Presence::Absent});
}

void forward(Forward& f) { forward_prenorm_decoder(f, FfnActivation::SiluGated); }

}  // namespace

const Architecture kArchLlama = {"llama", Arch::Llama, read_hparams, load_weights, forward};

}  // namespace picolm
