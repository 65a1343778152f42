// Internal: the scratch layout of VecOps::attention, shared by the reference and the SIMD twins.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/vec_ops.h"

namespace picolm::vecops_detail {

// Rows are padded to a multiple of kAttentionLanes (two vectors of the widest variant) so that
// every SIMD row group is whole; padded rows carry position -1 and are masked everywhere.
constexpr int kAttentionLanes = 32;

// Two layouts use this area: rows in lanes (tiles of many rows) and positions in lanes (a few
// rows, e.g. decoding one token); the second reads kb as K transposed and acc as [row][hd_padded].
struct AttentionWork {
  int rows_padded = 0;
  int hd_padded = 0;        // head_dim rounded up to kAttentionLanes / 2
  float* qt = nullptr;      // [head_dim][rows_padded]: q * scale, transposed (rows in lanes)
  float* acc = nullptr;     // [head_dim][rows_padded] (rows in lanes) or [n_rows][hd_padded]
  float* m = nullptr;       // [rows_padded]: running max of the scores
  float* l = nullptr;       // [rows_padded]: running sum of exp(score - m)
  int32_t* pos = nullptr;   // [rows_padded]: position of each row (-1 for padding)
  int32_t* lo = nullptr;    // [rows_padded]: first position each row sees (window_first(pos, W))
  float* kb = nullptr;      // [kAttentionBlock][head_dim] or [head_dim][kAttentionBlock]: one K block in f32
  float* vb = nullptr;      // [kAttentionBlock][head_dim] or [kAttentionBlock][hd_padded]: one V block in f32
  float* s = nullptr;       // [kAttentionBlock][kAttentionLanes]: scores, then weights, of one row group
  size_t bytes = 0;         // total size (carve() with base == nullptr only measures)
};

// First position a row at position p sees: p - window + 1, or 0 (window 0 = unlimited). Written
// without p - window so that no window up to INT32_MAX overflows.
inline int32_t window_first(int32_t p, int32_t window) { return window > 0 && p >= window ? p - (window - 1) : 0; }

// Cache slot of position p (AttentionTile::kv_ring).
inline int64_t kv_slot(int32_t p, int32_t ring) { return ring > 0 ? p % ring : p; }

inline AttentionWork carve_attention_work(int head_dim, int n_rows, uint8_t* base) {
  AttentionWork w;
  w.rows_padded = (n_rows + kAttentionLanes - 1) / kAttentionLanes * kAttentionLanes;
  constexpr int kHalf = kAttentionLanes / 2;
  w.hd_padded = (head_dim + kHalf - 1) / kHalf * kHalf;
  const size_t hd = size_t(head_dim), rp = size_t(w.rows_padded), hdp = size_t(w.hd_padded);
  size_t off = 0;
  auto take = [&](size_t n_bytes) {
    uint8_t* p = base ? base + off : nullptr;
    off += (n_bytes + 63) / 64 * 64;  // keep every array 64-byte aligned
    return p;
  };
  w.qt = reinterpret_cast<float*>(take(hd * rp * sizeof(float)));
  w.acc = reinterpret_cast<float*>(take(std::max(hd * rp, size_t(n_rows) * hdp) * sizeof(float)));
  w.m = reinterpret_cast<float*>(take(rp * sizeof(float)));
  w.l = reinterpret_cast<float*>(take(rp * sizeof(float)));
  w.pos = reinterpret_cast<int32_t*>(take(rp * sizeof(int32_t)));
  w.lo = reinterpret_cast<int32_t*>(take(rp * sizeof(int32_t)));
  w.kb = reinterpret_cast<float*>(take(size_t(kAttentionBlock) * hd * sizeof(float)));
  w.vb = reinterpret_cast<float*>(take(size_t(kAttentionBlock) * hdp * sizeof(float)));
  w.s = reinterpret_cast<float*>(take(size_t(kAttentionBlock) * kAttentionLanes * sizeof(float)));
  w.bytes = off;
  return w;
}

}  // namespace picolm::vecops_detail
