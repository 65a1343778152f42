// Small vector ops used around the matmuls: FP16 KV-cache rows (dot, axpy, f32 -> fp16), batched
// causal attention over the FP16 cache, and SiLU(gate) * up. Scalar reference + SIMD twins, chosen
// once from CPU features.
// Thread-safety: pure functions; the tables are immutable.
#pragma once
#include <cstddef>
#include <cstdint>

namespace picolm {

// Causal attention of a tile of query rows against one KV head of the FP16 cache.
// Rows are (t, g) for tokens t in [0, n_tok) and query heads g in [0, n_grp) that share the KV head;
// token t sits at position p = pos0 + t and attends to positions [0, p], or with a sliding window W
// to [max(0, p - W + 1), p] (Gemma 3's local layers: key j is seen when p - W < j <= p).
//
// Every row is computed with the same sequence of float operations whatever else is in the tile
// (softmax blocks of kAttentionBlock positions aligned to position 0, one fixed accumulation order;
// positions outside a row's window are masked like those above it), so a token's result does not
// depend on how a prompt was split into batches or tiles. Blocks wholly outside every row's window
// are never read: a token on a sliding layer costs O(W), not O(p).
struct AttentionTile {
  int head_dim = 0;
  int n_tok = 0, n_grp = 0;
  int32_t pos0 = 0;
  int32_t window = 0;            // sliding window W >= 1, or 0: unlimited (causal only)
  float scale = 0.0f;            // applied to q before the dot products
  const float* q = nullptr;      // row (t, g) at q + t * row_stride + g * head_dim
  float* out = nullptr;          // row (t, g) at out + t * row_stride + g * head_dim
  int64_t row_stride = 0;
  const uint16_t* k = nullptr;   // fp16, position p at k + slot(p) * kv_stride ([head_dim] each)
  const uint16_t* v = nullptr;   // fp16, position p at v + slot(p) * kv_stride
  int64_t kv_stride = 0;
  // 0: slot(p) = p. Else the cache is a ring of kv_ring slots, slot(p) = p % kv_ring: kv_ring is a
  // multiple of kAttentionBlock (a block of positions stays contiguous) and, with a window W, at
  // least W + n - 1 when the K/V of n new positions are written before their attention runs (every
  // position a row sees is then still in the ring; older ones in its blocks are masked).
  int32_t kv_ring = 0;
  uint8_t* work = nullptr;       // attention_work_bytes(head_dim, n_tok * n_grp) bytes, 64-byte aligned
};
constexpr int kAttentionBlock = 64;
// Scratch needed by attention() for n_rows query rows, for every variant.
size_t attention_work_bytes(int head_dim, int n_rows);

struct VecOps {
  const char* name = "scalar";
  void (*f32_to_f16)(int n, const float* x, uint16_t* y) = nullptr;
  void (*attention)(const AttentionTile& tile) = nullptr;
  // gate[i] = SiLU(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. Elementwise: each
  // element's result does not depend on n or its index.
  void (*silu_mul)(int n, float* gate, const float* up) = nullptr;
};

const VecOps& scalar_vec_ops();
const VecOps& best_vec_ops();  // honours PICOLM_KERNELS=scalar|avx2
// Every variant this CPU can run (scalar first); returns the count.
int available_vec_ops(const VecOps** out, int max_out);

namespace vecops_detail {
void fill_avx2(VecOps& v);    // defined in vec_ops_avx2.cpp (x86-64 builds only)
void fill_avx512(VecOps& v);  // defined in vec_ops_avx512.cpp (x86-64 builds only)
}

}  // namespace picolm
