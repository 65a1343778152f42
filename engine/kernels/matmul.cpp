// matmul: Y[t][r] = W[r] . X[t], split over the pool by row chunks.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "kernels/thread_pool.h"

namespace picolm {

namespace {

// Rows per task: about 4 tasks per thread so the atomic task counter balances uneven progress,
// rounded to a multiple of `align` rows (8: a cache line of row starts for the small types; 32:
// the two 16-row panels of a GEMM tile).
int64_t chunk_rows(int64_t rows, int n_threads, int64_t align) {
  if (n_threads <= 1) return rows;
  int64_t c = (rows + n_threads * 4 - 1) / (n_threads * 4);
  c = (c + align - 1) / align * align;
  return std::max<int64_t>(c, 1);
}

// One target's share of the work: rows [r0, r1) of targets[target].
struct Task {
  int target;
  int64_t r0, r1;
};

// Per target in Quantized mode: where its activations are and which kernel runs.
struct Plan {
  const uint8_t* act = nullptr;  // n_tokens rows of vec_dot_type(wtype), arow bytes apart
  size_t arow = 0;
  size_t wrow = 0;
  const GemmKernel* gemm = nullptr;  // many-token kernel, or nullptr: single / tile dots
  uint8_t* meta = nullptr;           // gemm's per-token table
  size_t meta_row = 0;
};

constexpr size_t kPrefetchAhead = 4096;

void run_dots(const KernelTable& k, GgmlType wtype, const uint8_t* wbase, size_t wrow, int64_t rows, int64_t cols,
              const uint8_t* act, size_t arow, int64_t n_tokens, float* Y, int64_t r0, int64_t r1) {
  const VecDotFn dot = k.vec_dot[static_cast<int>(wtype)];
  // Token blocks keep a block's activations (<= 64 rows) and the task's weight rows in L2 while
  // every weight row of the task meets every token of the block; inside a block, tiles of
  // max_dot_tile tokens share one unpacking of each weight block.
  constexpr int64_t kTokenBlock = 64;
  const VecDotTileFn tile = k.vec_dot_tile[static_cast<int>(wtype)];
  const int64_t max_tile = std::clamp(k.max_dot_tile, 1, kMaxDotTile);
  // ~16 KiB of weight rows per group (half of a 32 KiB L1d, the rest for the activation tile;
  // 32 KiB groups measured the same on a 48 KiB L1d).
  const int64_t group = std::max<int64_t>(1, std::min<int64_t>(16, static_cast<int64_t>((16u << 10) / wrow)));
  for (int64_t tb = 0; tb < n_tokens; tb += kTokenBlock) {
    const int64_t te = std::min(n_tokens, tb + kTokenBlock);
    if (tile == nullptr || te - tb == 1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wr = wbase + static_cast<size_t>(r) * wrow;
        // Decode streams the weights once: prefetch kPrefetchAhead bytes ahead of this row, so
        // the stream does not stall at every 4 KiB page of the file mapping, where the
        // hardware prefetchers stop.
        if (r + 1 < r1) {
          const uint8_t* p = wr + kPrefetchAhead;
          const uint8_t* end = std::min(wr + wrow + kPrefetchAhead, wbase + static_cast<size_t>(r1) * wrow);
          for (; p < end; p += 64) __builtin_prefetch(p, 0, 3);
        }
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
        for (int64_t r = g0; r < g1; ++r) tile(cols, wbase + static_cast<size_t>(r) * wrow, at, arow, nt, Y + t * rows + r, rows);
      }
    }
  }
}

}  // namespace

void matmul(const KernelTable& k, ThreadPool& pool, ActivationMode mode, GgmlType wtype, const void* W,
            int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y) {
  const MatmulTarget t{wtype, W, rows, Y};
  matmul_multi(k, pool, mode, &t, 1, cols, X, n_tokens);
}

void matmul_multi(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulTarget* targets,
                  int n_targets, int64_t cols, const float* X, int64_t n_tokens) {
  PICOLM_KCHECK(n_targets >= 0 && n_tokens >= 0 && cols > 0, "negative or empty matmul shape");
  int64_t total_work = 0;
  for (int i = 0; i < n_targets; ++i) {
    const MatmulTarget& t = targets[i];
    PICOLM_KCHECK(t.rows >= 0, "negative matmul rows");
    PICOLM_KCHECK(static_cast<uint32_t>(t.wtype) < 32 && k.vec_dot[static_cast<int>(t.wtype)] != nullptr,
                  "weight type without kernels");
    (void)row_bytes(t.wtype, cols);  // checks that cols is a whole number of blocks
    total_work += t.rows;
  }
  if (total_work == 0 || n_tokens == 0) return;
  // Below ~128k multiply-adds (a few microseconds) waking the workers costs more than it saves.
  const bool tiny = total_work * cols * n_tokens < (int64_t{1} << 17);
  const int n_threads = tiny ? 1 : pool.size();

  if (mode == ActivationMode::Quantized) {
    std::vector<Plan> plan(static_cast<size_t>(n_targets));
    // Activations: quantized once per distinct vec_dot type (q/k/v or gate/up often share one),
    // then the GEMM tables of the targets that take the many-token path; all in scratch slot 0.
    GgmlType vts[4];
    size_t vt_off[4] = {};
    int n_vt = 0;
    size_t bytes = 0;
    for (int i = 0; i < n_targets; ++i) {
      const GgmlType wt = targets[i].wtype;
      const GgmlType vt = vec_dot_type(wt);
      Plan& p = plan[static_cast<size_t>(i)];
      p.wrow = row_bytes(wt, cols);
      p.arow = row_bytes(vt, cols);
      int j = 0;
      while (j < n_vt && vts[j] != vt) ++j;
      PICOLM_KCHECK(j < 4, "too many activation types in one matmul");
      if (j == n_vt) {
        vts[n_vt++] = vt;
        if (vt != GgmlType::F32) {
          PICOLM_KCHECK(k.quantize_row[static_cast<int>(vt)] != nullptr, "no activation quantizer");
          vt_off[j] = bytes;
          bytes += (p.arow * static_cast<size_t>(n_tokens) + 63) & ~size_t{63};
        }
      }
      const GemmKernel& g = k.gemm[static_cast<int>(wt)];
      if (g.run != nullptr && n_tokens >= k.gemm_min_tokens && targets[i].rows % 16 == 0) {
        p.gemm = &g;
        p.meta_row = g.meta_bytes(cols);
        p.meta = reinterpret_cast<uint8_t*>(bytes);  // offset for now
        bytes += (p.meta_row * static_cast<size_t>(n_tokens) + 63) & ~size_t{63};
      }
    }
    uint8_t* buf = pool.scratch(0, std::max<size_t>(bytes, 64));
    for (int i = 0; i < n_targets; ++i) {
      Plan& p = plan[static_cast<size_t>(i)];
      const GgmlType vt = vec_dot_type(targets[i].wtype);
      int j = 0;
      while (vts[j] != vt) ++j;
      p.act = vt == GgmlType::F32 ? reinterpret_cast<const uint8_t*>(X) : buf + vt_off[j];
      if (p.gemm != nullptr) p.meta = buf + reinterpret_cast<size_t>(p.meta);
    }
    auto prepare_token = [&](int64_t t0, int64_t t1) {
      for (int j = 0; j < n_vt; ++j) {
        if (vts[j] == GgmlType::F32) continue;
        const QuantizeRowFn quant = k.quantize_row[static_cast<int>(vts[j])];
        const size_t arow = row_bytes(vts[j], cols);
        for (int64_t t = t0; t < t1; ++t) quant(X + t * cols, buf + vt_off[j] + static_cast<size_t>(t) * arow, cols);
      }
      for (const Plan& p : plan)
        if (p.gemm != nullptr) p.gemm->prepare(cols, p.act, p.arow, t0, t1, p.meta);
    };
    if (n_threads > 1 && n_tokens >= 2 * n_threads) {
      const int64_t per = (n_tokens + 4 * n_threads - 1) / (4 * n_threads);
      pool.parallel_for(static_cast<int>((n_tokens + per - 1) / per), [&](int task, int) {
        const int64_t t0 = task * per;
        prepare_token(t0, std::min(n_tokens, t0 + per));
      });
    } else {
      prepare_token(0, n_tokens);
    }

    std::vector<Task> tasks;
    size_t gemm_scratch = 0;
    for (int i = 0; i < n_targets; ++i) {
      const Plan& p = plan[static_cast<size_t>(i)];
      const int64_t rows = targets[i].rows;
      const int64_t chunk = n_threads == 1 ? rows : chunk_rows(rows, n_threads, p.gemm ? 32 : 8);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) tasks.push_back({i, r0, std::min(rows, r0 + chunk)});
      if (p.gemm != nullptr) gemm_scratch = std::max(gemm_scratch, p.gemm->scratch_bytes(cols));
    }
    auto run_task = [&](int ti, int worker) {
      const Task& task = tasks[static_cast<size_t>(ti)];
      const MatmulTarget& tg = targets[task.target];
      const Plan& p = plan[static_cast<size_t>(task.target)];
      if (p.gemm != nullptr) {
        p.gemm->run(cols, tg.W, p.wrow, task.r0, task.r1, p.act, p.arow, p.meta, n_tokens, tg.Y, tg.rows,
                    pool.scratch(1 + worker, gemm_scratch));
      } else {
        run_dots(k, tg.wtype, static_cast<const uint8_t*>(tg.W), p.wrow, tg.rows, cols, p.act, p.arow, n_tokens, tg.Y,
                 task.r0, task.r1);
      }
    };
    if (n_threads == 1) {
      for (size_t i = 0; i < tasks.size(); ++i) run_task(static_cast<int>(i), 0);
    } else {
      pool.parallel_for(static_cast<int>(tasks.size()), run_task);
    }
    return;
  }

  // Exact: each weight row is dequantized once (into the worker's scratch) and dotted in F32 with
  // every token row.
  const ExactDotFn dot_f32_exact = k.exact_dot_f32;
  for (int i = 0; i < n_targets; ++i) {
    const MatmulTarget& tg = targets[i];
    if (tg.rows == 0) continue;
    const GgmlType wtype = tg.wtype;
    const DequantizeRowFn deq = k.dequantize_row[static_cast<int>(wtype)];
    PICOLM_KCHECK(deq != nullptr && dot_f32_exact != nullptr, "no dequantizer for Exact mode");
    const size_t wrow = row_bytes(wtype, cols);
    const auto* wbase = static_cast<const uint8_t*>(tg.W);
    const int64_t chunk = tiny ? tg.rows : chunk_rows(tg.rows, pool.size(), 8);
    const int n_tasks = static_cast<int>((tg.rows + chunk - 1) / chunk);
    pool.parallel_for(n_tasks, [&](int task, int worker) {
      float* wf = wtype == GgmlType::F32 ? nullptr
                                         : reinterpret_cast<float*>(pool.scratch(1 + worker, static_cast<size_t>(cols) * 4));
      const int64_t r0 = task * chunk, r1 = std::min(tg.rows, r0 + chunk);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wr = wbase + static_cast<size_t>(r) * wrow;
        const float* wrow_f;
        if (wf == nullptr) {
          wrow_f = reinterpret_cast<const float*>(wr);  // GGUF tensor data is at least 32-byte aligned
        } else {
          deq(wr, wf, cols);
          wrow_f = wf;
        }
        for (int64_t t = 0; t < n_tokens; ++t) tg.Y[t * tg.rows + r] = dot_f32_exact(wrow_f, X + t * cols, cols);
      }
    });
  }
}

}  // namespace picolm
