// qwen35 (Qwen3.5, dense): a hybrid of gated delta-net (linear attention) layers and gated full
// attention layers, every full_attention_interval-th layer being full attention; per layer
//   x += mixer(attn_norm(x));  x += ffn(post_attention_norm(x))       (SwiGLU FFN)
// (post_attention_norm is the pre-FFN norm; there is no ffn_norm). Full attention (recurrent.h,
// gated_attention): q and its sigmoid gate interleaved per head in attn_q, QK-norm, RoPE on the first
// rope.dimension_count dims of each head (the file asks for IMROPE with sections; for text every
// section gets the token's position, which is partial NeoX RoPE). Separate output.weight. The keys,
// pattern and layer loop are shared with qwen35moe (arch/common_decoder.h).
#include "arch/common_decoder.h"

namespace picolm {
namespace {

const DecoderLayout kLayout{.ffn_norm = "post_attention_norm.weight", .gated_attention = true};

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Qwen35;
  hp.rope_neox = true;
  return read_delta_net_pattern(f, hp, /*default_interval=*/0);
}

void load_weights(WeightLoader& L, Model::Impl& m) { load_decoder(L, m, kLayout); }

void forward(Forward& f) { forward_decoder(f, kLayout); }

}  // namespace

const Architecture kArchQwen35 = {"qwen35", Arch::Qwen35, read_hparams, load_weights, forward};

}  // namespace picolm
