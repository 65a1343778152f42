// lfm2 (Liquid LFM2 / LFM2.5): a hybrid of gated short-convolution layers and attention layers,
// per layer
//   x += mixer(attn_norm(x));  x += ffn(ffn_norm(x))                 (SwiGLU FFN)
// where the mixer is the short conv (recurrent.h) on layers whose head_count_kv entry is 0 and
// QK-normed attention with NeoX RoPE elsewhere. The final norm is token_embd_norm; the output is
// tied to token_embd. The layer pattern, embeddings and layer loop are shared with lfm2moe
// (arch/common_decoder.h).
#include "arch/common_decoder.h"

namespace picolm {
namespace {

// llama.cpp names LFM2's final norm token_embd_norm.
const DecoderLayout kLayout{.output_norm = "token_embd_norm.weight",
                            .attn = {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required}};

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Lfm2;
  hp.rope_neox = true;
  return read_short_conv_pattern(f, hp);
}

void load_weights(WeightLoader& L, Model::Impl& m) { load_decoder(L, m, kLayout); }

void forward(Forward& f) { forward_decoder(f, kLayout); }

}  // namespace

const Architecture kArchLfm2 = {"lfm2", Arch::Lfm2, read_hparams, load_weights, forward};

}  // namespace picolm
