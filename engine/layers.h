// Internal: the layer blocks that architectures compose (engine/arch/*.cpp), and the loaders of
// their weights. A block runs one micro-batch of T rows through the workspace's scratch:
//
//   x   the residual stream, [T][n_embd]
//   xn  the input of the next block (normed x), [T][max(n_embd, n_head * head_dim)]; blocks may
//       clobber it (attention writes its heads' output there before attn_output reads it)
//   y   the output of the last attention or FFN block, [T][n_embd] (in the q buffer)
//
// A micro-batch holds the rows of one or more sequences (eval_batch: parallel slots), each a
// Segment: rows [row0, row0 + n) are one session's tokens at positions pos0, pos0 + 1, ... . The
// matmuls run once over all T rows (the weights are read once per step for every sequence);
// elementwise work runs per row (f.for_rows), with the row's own position (f.pos(t)) and session
// (f.seg_of(t).seq: its RoPE tables and KV cache); attention runs per sequence over its own KV,
// tiling only rows of one segment together. Anything that carries state along a sequence (a
// recurrent mixer's conv window or delta-net state) loops over f.segs and keeps the state in the
// segment's Session::Impl; rows of different segments never mix.
//
// Every block treats each row with the same float operations whatever the batch holds (the
// matmuls' contract, and elementwise work split by row), so logits do not depend on how a prompt
// is split into micro-batches, nor on which other sequences share the batch (where the matmuls
// promise it: batch_invariant() in model.h, ARCHITECTURE.md "Numerics").
#pragma once
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "model_impl.h"
#include "session_impl.h"

namespace picolm {

// One sequence's rows in a micro-batch.
struct Segment {
  Session::Impl* seq = nullptr;
  int64_t row0 = 0, n = 0;  // rows [row0, row0 + n) of the micro-batch
  int32_t pos0 = 0;         // position of row row0 in seq
};

// A row whose logits the micro-batch computes (n_vocab floats to dst).
struct OutputRow {
  int64_t row = 0;
  float* dst = nullptr;
};

// One micro-batch: tokens toks[0..T) of the sequences in segs (in row order, covering [0, T)).
struct Forward {
  const Model::Impl& m;
  ThreadPool& pool;
  EvalWorkspace& w;
  const int32_t* toks;
  int64_t T;
  std::span<const Segment> segs;
  std::span<const OutputRow> out;  // empty: no logits needed (a prefill chunk before the last)
  const HParams& hp() const { return m.hp; }
  const Segment& seg_of(int64_t t) const { return segs[size_t(w.row_seg[size_t(t)])]; }
  int32_t pos(int64_t t) const {
    const Segment& s = seg_of(t);
    return s.pos0 + int32_t(t - s.row0);
  }
  // fn(t) for every row t < n; spread over the pool when there are enough rows. A decode step of a
  // few sequences stays on the calling thread: a row's elementwise work (~n_embd floats) costs less
  // than waking the workers, and a step issues about 4 of these loops per layer.
  template <class Fn>
  void for_rows(int64_t n, const Fn& fn) {
    const int n_workers = pool.size();
    if (n < 16 || n_workers == 1) {
      for (int64_t t = 0; t < n; ++t) fn(t);
      return;
    }
    const int n_tasks = int(std::min<int64_t>(n, int64_t(n_workers) * 4));
    pool.parallel_for(n_tasks, [&](int task, int) {
      for (int64_t t = n * task / n_tasks; t < n * (task + 1) / n_tasks; ++t) fn(t);
    });
  }
};

// out = rms_norm(x) * w over n floats (x == out allowed): the norm every block uses (sum of squares
// in double, as ggml's rms_norm).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);
// gate[i] = GELU_tanh(gate[i]) * up[i], GELU through ggml's F16 table as the GELU-gated FFN.
void gelu_tanh_mul(int n, float* gate, const float* up);

// x = scale * token_embd[toks] (the dequantized rows).
void embed(Forward& f, float scale);
// xn = rms_norm(x) * w.
void norm_input(Forward& f, const std::vector<float>& w);
// y = attention block of `layer` on xn: q/k/v projections (one matmul_multi), optional biases and
// per-head QK-norm, RoPE (the layer's table, none for NoPE layers), K/V into each row's session's
// cache, attention (per sequence; the layer's window and q scale), attn_output. Clobbers xn.
void attention(Forward& f, int layer);
// The attention part of attention(): each row's query heads (the q buffer, RoPE'd) over the K/V
// of its own session's cache up to its position (the layer's window and q scale), written to xn.
// Tiles hold rows of one segment only (gated_attention shares it).
void attend(Forward& f, int layer);
// y = down(act(gate(xn)) * up(xn)) for `layer` (gate and up through matmul_pair).
void ffn(Forward& f, int layer, FfnActivation act);
// x += post_norm ? rms_norm(y) * post_norm : y; then xn = rms_norm(x) * next_norm when given (the
// next block's input, normed while the row is in cache).
void residual(Forward& f, const std::vector<float>* post_norm, const std::vector<float>* next_norm);
// Final norm and output projection of the rows in f.out (one matmul for all of them).
void output(Forward& f);

// The pre-norm decoder of llama, qwen2, qwen3 and smollm3: per layer
//   x += attention(attn_norm(x));  x += ffn(ffn_norm(x))
// then the final norm and the output projection of f.out.
void forward_prenorm_decoder(Forward& f, FfnActivation act);

// ---- loading ------------------------------------------------------------------------------------

// Collects every problem of a model file's tensors so they are reported together.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, const KernelTable& k) : f_(f), k_(k) {}
  std::vector<std::string> errors;

  // A 2-D weight [rows][cols] used through the matmuls.
  WeightView matrix(const std::string& name, int64_t rows, int64_t cols, bool optional = false);
  // A 1-D vector (norm weights, biases), dequantized to F32; empty when optional and absent.
  // any_shape: n elements in any shape (Mamba-2's ssm_a {1, heads}, ssm_norm {d_inner / groups, groups}).
  std::vector<float> vec(const std::string& name, int64_t n, bool optional = false, bool any_shape = false);
  const GgufFile& file() const { return f_; }
  const KernelTable& kernels() const { return k_; }

 private:
  const GgufFile& f_;
  const KernelTable& k_;
};

// Rows [first, first + n) of a matrix: one part of a fused projection (phi3's attn_qkv and ffn_up),
// a view into the same rows of the file (each row is whole blocks, so a row range is contiguous).
// An empty view when w is (a load error was recorded for it).
WeightView row_slice(const WeightView& w, int64_t first, int64_t n);

enum class Presence { Absent, Optional, Required };
struct AttentionTensors {
  Presence qkv_bias = Presence::Absent;  // attn_{q,k,v}.bias (qwen2 has them; llama files may)
  Presence qk_norm = Presence::Absent;   // attn_{q,k}_norm.weight, per head (qwen3, gemma3)
};
// blk.<layer>.attn_{q,k,v,output}.weight (+ the optional parts asked for) with the layer's shapes.
void load_attention(WeightLoader& L, const HParams& hp, int layer, const AttentionTensors& opt, AttnWeights& w);
// blk.<layer>.ffn_{gate,up,down}.weight.
void load_ffn(WeightLoader& L, const HParams& hp, int layer, FfnWeights& w);
// token_embd, output_norm (lfm2: token_embd_norm) and output (tied to token_embd when the file has
// none), rope_freqs.
void load_embeddings_and_output(WeightLoader& L, Model::Impl& m, const char* output_norm = "output_norm.weight");
// Everything the pre-norm decoder reads: the above plus attn_norm and ffn_norm per layer.
void load_prenorm_decoder(WeightLoader& L, Model::Impl& m, const AttentionTensors& opt);

}  // namespace picolm
