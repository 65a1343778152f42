// Internal: the layer blocks that architectures compose (engine/arch/*.cpp), and the loaders of
// their weights. A block runs one micro-batch of T tokens through the session's scratch:
//
//   x   the residual stream, [T][n_embd]
//   xn  the input of the next block (normed x), [T][max(n_embd, n_head * head_dim)]; blocks may
//       clobber it (attention writes its heads' output there before attn_output reads it)
//   y   the output of the last attention or FFN block, [T][n_embd]
//
// Every block treats each token with the same float operations whatever the batch holds (the
// matmuls' contract, and elementwise work split by token), so logits do not depend on how a
// prompt is split into micro-batches.
#pragma once
#include <string>
#include <vector>

#include "model_impl.h"
#include "session_impl.h"

namespace picolm {

// One micro-batch: tokens toks[0..T) at positions pos0.. .
struct Forward {
  Session::Impl& s;
  const Model::Impl& m;
  const int32_t* toks;
  int64_t T;
  int32_t pos0;
  const HParams& hp() const { return m.hp; }
};

// x = scale * token_embd[toks] (the dequantized rows).
void embed(Forward& f, float scale);
// xn = rms_norm(x) * w.
void norm_input(Forward& f, const std::vector<float>& w);
// y = attention block of `layer` on xn: q/k/v projections (one matmul_multi), optional biases and
// per-head QK-norm, RoPE (the layer's table, none for NoPE layers), K/V into the cache, attention
// (the layer's window and q scale), attn_output. Clobbers xn.
void attention(Forward& f, int layer);
// y = down(act(gate(xn)) * up(xn)) for `layer` (gate and up through matmul_pair).
void ffn(Forward& f, int layer, FfnActivation act);
// x += post_norm ? rms_norm(y) * post_norm : y; then xn = rms_norm(x) * next_norm when given (the
// next block's input, normed while the row is in cache).
void residual(Forward& f, const std::vector<float>* post_norm, const std::vector<float>* next_norm);
// Final norm and output projection of every position (all_logits) or the last one, into logits.
void output(Forward& f, bool all_logits, float* logits);

// The pre-norm decoder of llama, qwen2, qwen3 and smollm3: per layer
//   x += attention(attn_norm(x));  x += ffn(ffn_norm(x))
// then the final norm and the output projection.
void forward_prenorm_decoder(Forward& f, FfnActivation act, bool need_logits, bool all_logits, float* logits);

// ---- loading ------------------------------------------------------------------------------------

// Collects every problem of a model file's tensors so they are reported together.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, const KernelTable& k) : f_(f), k_(k) {}
  std::vector<std::string> errors;

  // A 2-D weight [rows][cols] used through the matmuls.
  WeightView matrix(const std::string& name, int64_t rows, int64_t cols, bool optional = false);
  // A 1-D vector (norm weights, biases), dequantized to F32; empty when optional and absent.
  std::vector<float> vec(const std::string& name, int64_t n, bool optional = false);
  const GgufFile& file() const { return f_; }

 private:
  const GgufFile& f_;
  const KernelTable& k_;
};

enum class Presence { Absent, Optional, Required };
struct AttentionTensors {
  Presence qkv_bias = Presence::Absent;  // attn_{q,k,v}.bias (qwen2 has them; llama files may)
  Presence qk_norm = Presence::Absent;   // attn_{q,k}_norm.weight, per head (qwen3, gemma3)
};
// blk.<layer>.attn_{q,k,v,output}.weight (+ the optional parts asked for) with the layer's shapes.
void load_attention(WeightLoader& L, const HParams& hp, int layer, const AttentionTensors& opt, AttnWeights& w);
// blk.<layer>.ffn_{gate,up,down}.weight.
void load_ffn(WeightLoader& L, const HParams& hp, int layer, FfnWeights& w);
// token_embd, output_norm and output (tied to token_embd when the file has none), rope_freqs.
void load_embeddings_and_output(WeightLoader& L, Model::Impl& m);
// Everything the pre-norm decoder reads: the above plus attn_norm and ffn_norm per layer.
void load_prenorm_decoder(WeightLoader& L, Model::Impl& m, const AttentionTensors& opt);

}  // namespace picolm
