// Internal: one Architecture per `general.architecture` value. Each lives in its own small file
// (engine/arch/<name>.cpp) that reads its hyper-parameters in one place, names its weights, and
// composes the shared layer blocks of engine/layers.h into its forward pass. See ARCHITECTURE.md,
// "Adding an architecture".
#pragma once
#include <string>
#include <string_view>

#include "layers.h"

namespace picolm {

struct Architecture {
  const char* name;  // general.architecture
  Arch id;
  // After read_common_hparams: the architecture's own keys and rules (per-layer windows, RoPE
  // tables, NoPE layers, q scale). Errors name the key.
  Status (*read_hparams)(const GgufFile& f, HParams& hp);
  // Every tensor the forward pass reads (problems go to L.errors).
  void (*load_weights)(WeightLoader& L, Model::Impl& m);
  // One micro-batch (the rows of one or more sequences, layers.h), ending with output(f).
  void (*forward)(Forward& f);
};

// nullptr when unsupported.
const Architecture* find_architecture(std::string_view name);
// "llama, qwen2, ..." for error messages.
std::string supported_architectures();

// The keys every architecture shares (<arch>.embedding_length, block_count, attention.head_count,
// head_count_kv and feed_forward_length (scalars or per-layer arrays), context_length,
// layer_norm_rms_epsilon, rope.freq_base, attention.key_length), with one full-attention RoPE'd
// layer description per layer. Validated again (validate_hparams) once the architecture is done.
Status read_common_hparams(const GgufFile& f, HParams& hp);
Status validate_hparams(HParams& hp);  // also sets the summary fields n_head_kv, n_ff

extern const Architecture kArchLlama;
extern const Architecture kArchQwen2;
extern const Architecture kArchQwen3;
extern const Architecture kArchGemma3;
extern const Architecture kArchSmollm3;
extern const Architecture kArchQwen35;
extern const Architecture kArchLfm2;
extern const Architecture kArchQwen3Moe;
extern const Architecture kArchLfm2Moe;
extern const Architecture kArchQwen35Moe;
extern const Architecture kArchPhi3;
extern const Architecture kArchGraniteHybrid;
extern const Architecture kArchGemma4;

}  // namespace picolm
