// Internal (engine/arch): what the pre-norm hybrid and mixture-of-experts families share, so that a
// dense family and its MoE twin (lfm2 / lfm2moe, qwen35 / qwen35moe, qwen3 / qwen3moe, granitehybrid's
// two forms) differ only in the FFN part of their files: the layer loader and layer loop, which take
// each layer's mixer from LayerHParams::kind and its FFN from LayerHParams::moe, and the hybrid
// families' own keys and layer patterns.
#pragma once
#include "arch/arch.h"
#include "moe.h"

namespace picolm {

// What differs between the families in an otherwise common layer: per layer
//   x += mixer(attn_norm(x));  x += ffn(<ffn_norm>(x))
struct DecoderLayout {
  const char* output_norm = "output_norm.weight";  // the final norm's name (lfm2: token_embd_norm.weight)
  const char* ffn_norm = "ffn_norm.weight";  // the pre-FFN norm's name (qwen35: post_attention_norm.weight)
  AttentionTensors attn{};                    // the attention layers' optional tensors
  bool gated_attention = false;               // attention layers are recurrent.h's gated_attention (qwen35)
  MoeTensors moe{};                           // the routed layers' optional tensors
  FfnActivation act = FfnActivation::SiluGated;  // the dense FFN's
};

// Per layer: blk.N.attn_norm, the layout's pre-FFN norm, the mixer of the layer's kind and its FFN
// (load_moe when LayerHParams::moe, else load_ffn). Embeddings and output are the caller's.
void load_decoder_layers(WeightLoader& L, Model::Impl& m, const DecoderLayout& d);
// load_embeddings_and_output (with the layout's final norm), then the layers.
void load_decoder(WeightLoader& L, Model::Impl& m, const DecoderLayout& d);

// y = the mixer of `layer` (attention, gated attention, short conv, delta net or Mamba-2) on xn.
void mixer(Forward& f, int layer, const DecoderLayout& d);
// y = the FFN of `layer` on xn: routed_ffn when the layer is routed, else ffn(d.act).
void feed_forward(Forward& f, int layer, const DecoderLayout& d);
// The whole pass: unscaled embeddings, the layers above with plain residual adds, output(f).
void forward_decoder(Forward& f, const DecoderLayout& d);

// qwen3moe, qwen35moe, granitehybrid's MoE form: read_moe_hparams, every layer routed, softmax
// router, the top n_expert_used renormalised to sum 1, no scale (llama.cpp's graphs hard-code these
// for the three families; the file's expert_weights_norm is not read).
Status read_softmax_routing(const GgufFile& f, HParams& hp);

// lfm2, lfm2moe: <arch>.shortconv.l_cache; the layers whose head_count_kv entry is 0 are gated short
// convolutions (no RoPE).
Status read_short_conv_pattern(const GgufFile& f, HParams& hp);
// qwen35, qwen35moe: the gated delta net's <arch>.ssm.* keys and the pattern: every
// full_attention_interval-th layer is full attention, the others delta nets. A file without the
// interval key gets default_interval (0: the key is required).
Status read_delta_net_pattern(const GgufFile& f, HParams& hp, int64_t default_interval);

}  // namespace picolm
