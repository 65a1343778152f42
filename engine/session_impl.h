// Internal: a Session's state (KV cache, RoPE tables, scratch), shared by model.cpp (the Session
// API) and layers.cpp (the blocks that compute with it).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/thread_pool.h"
#include "model.h"
#include "model_impl.h"
#include "recurrent_state.h"

namespace picolm {

// cos/sin of one RoPE base for every position of the session: [position][half], half = n_rot / 2
// (the rotated pairs; n_rot < head_dim leaves the other dims of each head as they are).
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;
};

struct Session::Impl {
  std::shared_ptr<const Model> model;
  const Model::Impl* m = nullptr;
  ThreadPool* pool = nullptr;
  SessionOptions opts;
  int32_t n_ctx = 0;
  int64_t kv_row = 0;                 // n_head_kv * head_dim
  std::vector<uint16_t> k_cache;      // fp16, [layer][slot][kv_head][head_dim], layer l from kv_off[l]
  std::vector<uint16_t> v_cache;      // fp16, same layout
  // Layer l has n_ctx slots (kv_ring[l] == 0, position p in slot p) or, on a sliding-window layer,
  // a ring of kv_ring[l] slots (position p in slot p % kv_ring[l]): a multiple of kAttentionBlock
  // and >= window + the largest micro-batch - 1, so every position a query of a micro-batch sees is
  // still there after the batch's K/V are written (AttentionTile::kv_ring).
  std::vector<size_t> kv_off;         // [n_layer], elements
  std::vector<int32_t> kv_ring;       // [n_layer]
  // Oldest position each ring still holds: raised when a batch overwrites slots, and by
  // set_cached_tokens (only the window is restored). truncate() checks it.
  std::vector<int32_t> kv_first;      // [n_layer]
  std::vector<RopeTable> rope;        // one per HParams::rope_bases
  std::vector<int32_t> tokens;
  // Scratch for n_batch tokens, [token][dim]. Two buffers serve twice per layer, since their first
  // use is over when the second begins: xn (normed input of q/k/v) also holds the attention output
  // (read by attn_output before the FFN norm rewrites xn); q also holds y, the attn_output and
  // ffn_down results (q is dead once attention has run). Both are sized for either use.
  std::vector<float> x, xn, q, k, v, gate;  // gate: act(gate) * up, the input of ffn_down
  std::vector<float> logits;          // [n_out][n_vocab]
  size_t n_logit_rows = 0;
  // Attention scratch, one slice per pool worker (VecOps::attention's work area for a tile of at
  // most attn_tile_tokens tokens x the query heads of one KV head).
  std::vector<uint8_t> attn_work;     // [worker][attn_work_stride] bytes from attn_work_base
  size_t attn_work_base = 0;          // offset of the first 64-byte aligned byte
  size_t attn_work_stride = 0;
  int attn_tile_tokens = 1;
  RecurrentState rec;                 // hybrid models: the recurrent layers' state and scratch

  uint16_t* k_layer(int layer) { return k_cache.data() + kv_off[size_t(layer)]; }
  uint16_t* v_layer(int layer) { return v_cache.data() + kv_off[size_t(layer)]; }
  // Slot of position p in layer l.
  size_t kv_slot(int layer, int32_t p) const {
    const int32_t r = kv_ring[size_t(layer)];
    return size_t(r > 0 ? p % r : p);
  }

  void ensure_scratch(int64_t T);
  // fn(t) for every token of the batch; spread over the pool when the batch is large enough.
  template <class Fn>
  void for_tokens(int64_t T, const Fn& fn) {
    const int n_workers = pool->size();
    if (T < 4 || n_workers == 1) {
      for (int64_t t = 0; t < T; ++t) fn(t);
      return;
    }
    const int n_tasks = int(std::min<int64_t>(T, int64_t(n_workers) * 4));
    pool->parallel_for(n_tasks, [&](int task, int) {
      for (int64_t t = T * task / n_tasks; t < T * (task + 1) / n_tasks; ++t) fn(t);
    });
  }
};

}  // namespace picolm
