// lfm2moe (Liquid LFM2 MoE, e.g. LFM2-8B-A1B): lfm2's hybrid of gated short-convolution and
// attention layers (engine/arch/lfm2.cpp) whose FFN is dense in the first
// leading_dense_block_count layers and the routed FFN (engine/moe.h) after them: the file's gating
// (expert_gating_func: sigmoid in the released models), experts chosen by probability + the
// per-layer exp_probs_b bias, weighted by the unbiased probabilities renormalised to sum 1, no
// scale, no shared expert (llama.cpp src/models/lfm2.cpp, build_moe_ffn). Final norm
// token_embd_norm, output tied to token_embd.
#include "arch/common_decoder.h"

namespace picolm {
namespace {

const DecoderLayout kLayout{.output_norm = "token_embd_norm.weight",
                            .attn = {.qkv_bias = Presence::Absent, .qk_norm = Presence::Required},
                            .moe = {.select_bias = true}};

Status read_hparams(const GgufFile& f, HParams& hp) {
  hp.arch = Arch::Lfm2Moe;
  hp.rope_neox = true;
  if (Status s = read_short_conv_pattern(f, hp); !s) return s;
  std::string missing;
  auto need = [&](const char* key) -> int64_t {
    auto v = f.get_int(std::string("lfm2moe.") + key);
    if (!v) missing += std::string(" lfm2moe.") + key;
    return v.value_or(0);
  };
  const int64_t n_dense = need("leading_dense_block_count");
  const int64_t gating = need("expert_gating_func");
  need("expert_feed_forward_length");
  if (!missing.empty()) return Error{"missing metadata:" + missing};
  if (n_dense < 0 || n_dense > hp.n_layer) return Error{"implausible lfm2moe.leading_dense_block_count"};
  if (gating < 1 || gating > 3) return Error{"unsupported lfm2moe.expert_gating_func " + std::to_string(gating)};
  if (Status s = read_moe_hparams(f, hp); !s) return s;
  hp.expert_gating = gating == 1 ? ExpertGating::Softmax : gating == 2 ? ExpertGating::Sigmoid : ExpertGating::SoftmaxWeight;
  hp.expert_weights_norm = true;
  hp.n_ff_shexp = 0;
  for (int l = 0; l < hp.n_layer; ++l) hp.layers[size_t(l)].moe = l >= n_dense;
  return Ok{};
}

void load_weights(WeightLoader& L, Model::Impl& m) { load_decoder(L, m, kLayout); }

void forward(Forward& f) { forward_decoder(f, kLayout); }

}  // namespace

const Architecture kArchLfm2Moe = {"lfm2moe", Arch::Lfm2Moe, read_hparams, load_weights, forward};

}  // namespace picolm
