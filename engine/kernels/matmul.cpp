// matmul: Y[t][r] = W[r] . X[t], split over the pool by row chunks.
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "kernels/thread_pool.h"

namespace picolm {

namespace {

// Rows per task: about 4 tasks per thread so the atomic task counter balances uneven progress,
// rounded to a multiple of 8 rows (a cache line of row starts for the small types).
int64_t chunk_rows(int64_t rows, int n_threads) {
  if (n_threads <= 1) return rows;
  int64_t c = (rows + n_threads * 4 - 1) / (n_threads * 4);
  c = (c + 7) / 8 * 8;
  return std::max<int64_t>(c, 1);
}

}  // namespace

void matmul(const KernelTable& k, ThreadPool& pool, ActivationMode mode, GgmlType wtype, const void* W,
            int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y) {
  PICOLM_KCHECK(rows >= 0 && n_tokens >= 0 && cols > 0, "negative or empty matmul shape");
  if (rows == 0 || n_tokens == 0) return;
  PICOLM_KCHECK(static_cast<uint32_t>(wtype) < 32 && k.vec_dot[static_cast<int>(wtype)] != nullptr,
                "weight type without kernels");
  const size_t wrow = row_bytes(wtype, cols);  // checks that cols is a whole number of blocks
  const auto* wbase = static_cast<const uint8_t*>(W);
  // Below ~128k multiply-adds (a few microseconds) waking the workers costs more than it saves.
  const bool tiny = rows * cols * n_tokens < (int64_t{1} << 17);
  const int64_t chunk = tiny ? rows : chunk_rows(rows, pool.size());
  const int n_tasks = static_cast<int>((rows + chunk - 1) / chunk);

  if (mode == ActivationMode::Quantized) {
    const GgmlType vt = vec_dot_type(wtype);
    const VecDotFn dot = k.vec_dot[static_cast<int>(wtype)];
    const size_t arow = row_bytes(vt, cols);
    const uint8_t* act;
    if (vt == GgmlType::F32) {
      act = reinterpret_cast<const uint8_t*>(X);
    } else {
      const QuantizeRowFn quant = k.quantize_row[static_cast<int>(vt)];
      PICOLM_KCHECK(quant != nullptr, "no activation quantizer");
      uint8_t* buf = pool.scratch(0, arow * static_cast<size_t>(n_tokens));
      if (!tiny && n_tokens >= 2 * pool.size()) {
        pool.parallel_for(static_cast<int>(n_tokens),
                          [&](int t, int) { quant(X + t * cols, buf + static_cast<size_t>(t) * arow, cols); });
      } else {
        for (int64_t t = 0; t < n_tokens; ++t) quant(X + t * cols, buf + static_cast<size_t>(t) * arow, cols);
      }
      act = buf;
    }
    // Token blocks keep a block's activations (<= 64 rows) and the task's weight rows in L2 while
    // every weight row of the task meets every token of the block; inside a block, tiles of
    // max_dot_tile tokens share one unpacking of each weight block.
    constexpr int64_t kTokenBlock = 64;
    const VecDotTileFn tile = k.vec_dot_tile[static_cast<int>(wtype)];
    const int64_t max_tile = std::clamp(k.max_dot_tile, 1, kMaxDotTile);
    // ~16 KiB of weight rows per group (half of a 32 KiB L1d, the rest for the activation tile;
    // 32 KiB groups measured the same on a 48 KiB L1d).
    const int64_t group = std::max<int64_t>(1, std::min<int64_t>(16, static_cast<int64_t>((16u << 10) / wrow)));
    pool.parallel_for(n_tasks, [&](int task, int) {
      const int64_t r0 = task * chunk, r1 = std::min(rows, r0 + chunk);
      for (int64_t tb = 0; tb < n_tokens; tb += kTokenBlock) {
        const int64_t te = std::min(n_tokens, tb + kTokenBlock);
        if (tile == nullptr || te - tb == 1) {
          for (int64_t r = r0; r < r1; ++r) {
            const uint8_t* wr = wbase + static_cast<size_t>(r) * wrow;
            for (int64_t t = tb; t < te; ++t) Y[t * rows + r] = dot(cols, wr, act + static_cast<size_t>(t) * arow);
          }
          continue;
        }
        // Row groups small enough that their weights stay in L1 while every token tile of the
        // block passes over them; each tile's activations (<= max_dot_tile rows) are then read
        // from L1 by all rows of the group instead of from L2 once per row (measured: +30% on
        // 2048-column Q4_K with 8-token AVX-512 tiles).
        for (int64_t g0 = r0; g0 < r1; g0 += group) {
          const int64_t g1 = std::min(r1, g0 + group);
          for (int64_t t = tb; t < te; t += max_tile) {
            const int nt = static_cast<int>(std::min<int64_t>(max_tile, te - t));
            const uint8_t* at = act + static_cast<size_t>(t) * arow;
            for (int64_t r = g0; r < g1; ++r)
              tile(cols, wbase + static_cast<size_t>(r) * wrow, at, arow, nt, Y + t * rows + r, rows);
          }
        }
      }
    });
    return;
  }

  // Exact: each weight row is dequantized once (into the worker's scratch) and dotted in F32 with
  // every token row.
  const DequantizeRowFn deq = k.dequantize_row[static_cast<int>(wtype)];
  const ExactDotFn dot_f32_exact = k.exact_dot_f32;
  PICOLM_KCHECK(deq != nullptr && dot_f32_exact != nullptr, "no dequantizer for Exact mode");
  pool.parallel_for(n_tasks, [&](int task, int worker) {
    float* wf = wtype == GgmlType::F32 ? nullptr
                                       : reinterpret_cast<float*>(pool.scratch(1 + worker, static_cast<size_t>(cols) * 4));
    const int64_t r0 = task * chunk, r1 = std::min(rows, r0 + chunk);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = wbase + static_cast<size_t>(r) * wrow;
      const float* wrow_f;
      if (wf == nullptr) {
        wrow_f = reinterpret_cast<const float*>(wr);  // GGUF tensor data is at least 32-byte aligned
      } else {
        deq(wr, wf, cols);
        wrow_f = wf;
      }
      for (int64_t t = 0; t < n_tokens; ++t) Y[t * rows + r] = dot_f32_exact(wrow_f, X + t * cols, cols);
    }
  });
}

}  // namespace picolm
