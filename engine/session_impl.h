// Internal: a Session's state (KV cache, RoPE tables, logits) and the forward pass's workspace,
// shared by model.cpp (the Session API, eval_batch) and layers.cpp (the blocks that compute with
// them).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/thread_pool.h"
#include "model.h"
#include "model_impl.h"
#include "moe_state.h"
#include "recurrent_state.h"

namespace picolm {

// cos/sin of one RoPE base for every position of the session: [position][half], half = n_rot / 2
// (the rotated pairs; n_rot < head_dim leaves the other dims of each head as they are).
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;
};

// Scratch of one micro-batch of T rows (the rows of every sequence in it), [row][dim]. Two buffers
// serve twice per layer, since their first use is over when the second begins: xn (normed input of
// q/k/v) also holds the attention output (read by attn_output before the FFN norm rewrites xn); q
// also holds y, the attn_output and ffn_down results (q is dead once attention has run). Both are
// sized for either use. Grows to the largest micro-batch and model it has served, never shrinks.
struct EvalWorkspace {
  std::vector<float> x, xn, q, k, v, gate;  // gate: act(gate) * up, the input of ffn_down
  // gemma4 per-layer embeddings: every layer's input [row][n_layer][n_embd_per_layer], and one
  // layer's gated input of its projection [row][n_embd_per_layer] (sized [row][n_layer *
  // n_embd_per_layer]: it first holds each row's dequantized per-layer token table row).
  std::vector<float> ple, ple_gate;
  std::vector<int32_t> toks;                // [row]: the micro-batch's tokens
  std::vector<int32_t> row_seg;             // [row]: index of the row's Forward::segs entry
  // Logits of output rows that go to several sessions: [n_out][n_vocab], copied out after the
  // output matmul (rows of one session are written in place instead).
  std::vector<float> logits;
  // Attention scratch, one slice per pool worker (VecOps::attention's work area for a tile of at
  // most attn_tile_tokens rows of one sequence x the query heads of one KV head).
  std::vector<uint8_t> attn_work;           // [worker][attn_work_stride] bytes from attn_work_base
  size_t attn_work_base = 0;                // offset of the first 64-byte aligned byte
  size_t attn_work_stride = 0;
  int attn_tile_tokens = 1;
  RecurrentScratch rec;                     // hybrid models: the recurrent blocks' scratch
  MoeScratch moe;                           // mixture-of-experts models: the routed FFN's scratch

  // Sizes every buffer for T rows of a model of shape hp run on n_workers workers.
  void ensure(const HParams& hp, int n_workers, int64_t T);
  size_t bytes() const;
};

struct Session::Impl {
  std::shared_ptr<const Model> model;
  const Model::Impl* m = nullptr;
  ThreadPool* pool = nullptr;
  SessionOptions opts;
  // Where this session's forward passes compute (SessionOptions::workspace, or its own, created
  // empty and grown on first use). eval_batch uses the first item's.
  std::shared_ptr<EvalWorkspace> ws;
  int32_t n_ctx = 0;
  std::vector<int64_t> kv_row;        // [n_layer]: the layer's n_head_kv * head_dim (0: no K/V of its own)
  std::vector<uint16_t> k_cache;      // fp16, [layer][slot][kv_head][head_dim], layer l from kv_off[l]
                                      // (a KV-sharing layer's kv_off is its source's)
  std::vector<uint16_t> v_cache;      // fp16, same layout
  // Layer l has n_ctx slots (kv_ring[l] == 0, position p in slot p) or, on a sliding-window layer,
  // a ring of kv_ring[l] slots (position p in slot p % kv_ring[l]): a multiple of kAttentionBlock
  // and >= window + the largest micro-batch of this session - 1 (n_batch + 1 rows), so every
  // position a query of a micro-batch sees is still there after the batch's K/V are written
  // (AttentionTile::kv_ring).
  std::vector<size_t> kv_off;         // [n_layer], elements
  std::vector<int32_t> kv_ring;       // [n_layer]
  // Oldest position each ring still holds: raised when a batch overwrites slots, and by
  // set_cached_tokens (only the window is restored). truncate() checks it.
  std::vector<int32_t> kv_first;      // [n_layer]
  std::vector<RopeTable> rope;        // one per HParams::rope_bases
  std::vector<int32_t> tokens;
  std::vector<float> logits;          // [n_logit_rows][n_vocab]
  size_t n_logit_rows = 0;
  RecurrentState rec;                 // hybrid models: the recurrent layers' state and scratch

  uint16_t* k_layer(int layer) { return k_cache.data() + kv_off[size_t(layer)]; }
  uint16_t* v_layer(int layer) { return v_cache.data() + kv_off[size_t(layer)]; }
  // Slot of position p in layer l.
  size_t kv_slot(int layer, int32_t p) const {
    const int32_t r = kv_ring[size_t(layer)];
    return size_t(r > 0 ? p % r : p);
  }
};

}  // namespace picolm
