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
// rounded to a multiple of `align` rows (8: a cache line of row starts for the small types; 16: a
// packed panel; 32: the two 16-row panels of a GEMM tile), and at least `min_rows`.
int64_t chunk_rows(int64_t rows, int n_threads, int64_t align, int64_t min_rows) {
  if (n_threads <= 1) return rows;
  int64_t c = (rows + n_threads * 4 - 1) / (n_threads * 4);
  c = (std::max(c, min_rows) + align - 1) / align * align;
  return std::max<int64_t>(c, 1);
}

// Decode reads each task's rows as one stream that starts cold (the prefetch has to ramp up):
// tasks of at least 64 rows, so a small matrix (K/V projections of 128-256 rows) is not cut into
// 16-row streams of 10-20 KB. Measured in paired runs: decode +2% (Qwen2.5-0.5B, TinyLlama).
constexpr int64_t kDecodeMinRows = 64;

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
  const PackedKernel* packed = nullptr;  // kernel of the target's packed weights (any n_tokens)
  const GemmKernel* prep = nullptr;  // fills `meta` (the gemm, or the packed kernel's companion)
  uint8_t* meta = nullptr;           // per-token table of gemm / packed
  size_t meta_row = 0;
};

// Rows [r0, r1) of W (wbase = row 0) for every token: Y[t * ldy + r].
void run_dots(const KernelTable& k, GgmlType wtype, const uint8_t* wbase, size_t wrow, int64_t ldy, int64_t cols,
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
        for (int64_t t = tb; t < te; ++t) Y[t * ldy + r] = dot(cols, wr, act + static_cast<size_t>(t) * arow);
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
        for (int64_t r = g0; r < g1; ++r) tile(cols, wbase + static_cast<size_t>(r) * wrow, at, arow, nt, Y + t * ldy + r, ldy);
      }
    }
  }
}


// One group's plan: its Quantized-mode activations (offsets into the shared buffer of scratch slot
// 0), each target's kernel, and what its tasks need of the workers' scratch.
struct GroupPlan {
  std::vector<Plan> plan;
  GgmlType vts[4] = {};
  size_t vt_off[4] = {};
  int n_vt = 0;
  std::vector<size_t> meta_off;
  size_t kernel_scratch = 0;  // per worker, 64-byte multiple
  size_t pair_floats = 0;     // per worker and matrix of a pair: max chunk rows x n_tokens
};

// One task: rows [r0, r1) of target `target` of group `group` (of the pair, once for both).
struct GroupTask {
  int group, target;
  int64_t r0, r1;
};

// The shared implementation: every group's activations are prepared, then all groups' row chunks
// go through one pass of the pool. With `combine` (each group two targets of equal rows), each task
// computes the same row range of both into its scratch and writes combine(a, b) to targets[0].Y;
// targets[1].Y is not used. A group's results do not depend on the others in the call.
void matmul_impl(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulGroup* groups,
                 int n_groups, PairCombineFn combine) {
  PICOLM_KCHECK(n_groups >= 0, "negative matmul group count");
  int64_t total_macs = 0;
  for (int g = 0; g < n_groups; ++g) {
    const MatmulGroup& G = groups[g];
    PICOLM_KCHECK(G.n_targets >= 0 && G.n_tokens >= 0 && G.cols > 0, "negative or empty matmul shape");
    PICOLM_KCHECK(combine == nullptr || G.n_targets == 2, "a paired matmul group has two targets");
    for (int i = 0; i < G.n_targets; ++i) {
      const MatmulTarget& t = G.targets[i];
      PICOLM_KCHECK(t.rows >= 0, "negative matmul rows");
      PICOLM_KCHECK(static_cast<uint32_t>(t.wtype) < 32 && k.vec_dot[static_cast<int>(t.wtype)] != nullptr,
                    "weight type without kernels");
      (void)row_bytes(t.wtype, G.cols);  // checks that cols is a whole number of blocks
      total_macs += t.rows * G.cols * G.n_tokens;
    }
  }
  if (total_macs == 0) return;
  // Below ~128k multiply-adds (a few microseconds) waking the workers costs more than it saves.
  const bool tiny = total_macs < (int64_t{1} << 17);
  const int n_threads = tiny ? 1 : pool.size();

  std::vector<GroupPlan> gp(static_cast<size_t>(n_groups));
  uint8_t* buf = nullptr;
  size_t bytes = 0;  // the activations and GEMM tables of every group, in scratch slot 0
  for (int g = 0; g < n_groups; ++g) {
    const MatmulGroup& G = groups[g];
    GroupPlan& P = gp[static_cast<size_t>(g)];
    P.plan.resize(static_cast<size_t>(G.n_targets));
    for (int i = 0; i < G.n_targets; ++i) P.plan[static_cast<size_t>(i)].wrow = row_bytes(G.targets[i].wtype, G.cols);
    if (mode != ActivationMode::Quantized) continue;
    // Activations: quantized once per distinct vec_dot type (q/k/v or gate/up often share one),
    // then the GEMM tables of the targets that take the many-token path.
    P.meta_off.assign(static_cast<size_t>(G.n_targets), 0);
    for (int i = 0; i < G.n_targets; ++i) {
      const GgmlType wt = G.targets[i].wtype;
      const GgmlType vt = vec_dot_type(wt);
      Plan& p = P.plan[static_cast<size_t>(i)];
      p.arow = row_bytes(vt, G.cols);
      int j = 0;
      while (j < P.n_vt && P.vts[j] != vt) ++j;
      PICOLM_KCHECK(j < 4, "too many activation types in one matmul");
      if (j == P.n_vt) {
        P.vts[P.n_vt++] = vt;
        if (vt != GgmlType::F32) {
          PICOLM_KCHECK(k.quantize_row[static_cast<int>(vt)] != nullptr, "no activation quantizer");
          P.vt_off[j] = bytes;
          bytes += (p.arow * static_cast<size_t>(G.n_tokens) + 63) & ~size_t{63};
        }
      }
      const GemmKernel& gk = k.gemm[static_cast<int>(wt)];
      const PackedKernel& pk = k.packed[static_cast<int>(wt)];
      if (G.targets[i].packed != nullptr) {
        PICOLM_KCHECK(pk.run != nullptr && gk.prepare != nullptr, "packed weights for a type without packed kernels");
        p.packed = &pk;
      } else if (gk.run != nullptr && !G.targets[i].dots_only && G.n_tokens >= k.gemm_min_tokens &&
                 G.targets[i].rows % 16 == 0) {
        p.gemm = &gk;
      }
      if (p.packed != nullptr || p.gemm != nullptr) {
        p.prep = &gk;
        p.meta_row = gk.meta_bytes(G.cols);
        P.meta_off[static_cast<size_t>(i)] = bytes;
        bytes += (p.meta_row * static_cast<size_t>(G.n_tokens) + 63) & ~size_t{63};
      }
    }
  }
  if (mode == ActivationMode::Quantized) {
    buf = pool.scratch(0, std::max<size_t>(bytes, 64));
    for (int g = 0; g < n_groups; ++g) {
      const MatmulGroup& G = groups[g];
      GroupPlan& P = gp[static_cast<size_t>(g)];
      for (int i = 0; i < G.n_targets; ++i) {
        Plan& p = P.plan[static_cast<size_t>(i)];
        const GgmlType vt = vec_dot_type(G.targets[i].wtype);
        int j = 0;
        while (P.vts[j] != vt) ++j;
        p.act = vt == GgmlType::F32 ? reinterpret_cast<const uint8_t*>(G.X) : buf + P.vt_off[j];
        if (p.prep != nullptr) p.meta = buf + P.meta_off[static_cast<size_t>(i)];
      }
      auto prepare_tokens = [&](int64_t t0, int64_t t1) {
        for (int j = 0; j < P.n_vt; ++j) {
          if (P.vts[j] == GgmlType::F32) continue;
          const QuantizeRowFn quant = k.quantize_row[static_cast<int>(P.vts[j])];
          const size_t arow = row_bytes(P.vts[j], G.cols);
          for (int64_t t = t0; t < t1; ++t) quant(G.X + t * G.cols, buf + P.vt_off[j] + static_cast<size_t>(t) * arow, G.cols);
        }
        for (const Plan& p : P.plan)
          if (p.prep != nullptr) p.prep->prepare(G.cols, p.act, p.arow, t0, t1, p.meta);
      };
      // Spread over the pool only when there is enough to quantize: a few decode rows (parallel
      // slots) take a few microseconds, less than a pass of the pool.
      const int64_t n_tokens = G.n_tokens;
      if (n_threads > 1 && n_tokens >= 2 * n_threads && n_tokens * G.cols >= (int64_t{1} << 15)) {
        const int64_t per = (n_tokens + 4 * n_threads - 1) / (4 * n_threads);
        pool.parallel_for(static_cast<int>((n_tokens + per - 1) / per), [&](int task, int) {
          const int64_t t0 = task * per;
          prepare_tokens(t0, std::min(n_tokens, t0 + per));
        });
      } else {
        prepare_tokens(0, n_tokens);
      }
    }
  } else {
    PICOLM_KCHECK(k.exact_dot_f32 != nullptr, "no dequantizer for Exact mode");
    for (int g = 0; g < n_groups; ++g)
      for (int i = 0; i < groups[g].n_targets; ++i)
        PICOLM_KCHECK(k.dequantize_row[static_cast<int>(groups[g].targets[i].wtype)] != nullptr,
                      "no dequantizer for Exact mode");
  }

  // Tasks: row chunks of every target (of the pair, once for both) of every group.
  std::vector<GroupTask> tasks;
  size_t worker_scratch = 0;
  for (int g = 0; g < n_groups; ++g) {
    const MatmulGroup& G = groups[g];
    GroupPlan& P = gp[static_cast<size_t>(g)];
    if (G.n_tokens == 0) continue;  // nothing to compute (its outputs may be null)
    int64_t max_chunk = 0;
    const int n_chunked = combine != nullptr ? 1 : G.n_targets;
    const bool decode = G.n_tokens < 4;  // one token (or a few): each task's rows are a cold stream
    for (int i = 0; i < n_chunked; ++i) {
      const int64_t rows = G.targets[i].rows;
      // Packed weights: whole 16-row panels; per-call GEMM: pairs of panels (its 2-panel tiles).
      auto align = [&](int j) -> int64_t {
        const Plan& p = P.plan[static_cast<size_t>(j)];
        return p.packed != nullptr ? 16 : p.gemm != nullptr ? 32 : 8;
      };
      const int64_t a = combine != nullptr ? std::max(align(0), align(1)) : align(i);
      int64_t chunk = n_threads == 1 ? rows : chunk_rows(rows, n_threads, a, decode ? kDecodeMinRows : 1);
      // A pair's products of a chunk are held in scratch: at most ~128 rows of them for many tokens;
      // decode holds one row of products per matrix, so its tasks may stream 256 rows of each
      // (measured in paired runs: decode +1-3% against 128).
      if (combine != nullptr) chunk = std::min(chunk, decode ? int64_t{256} : int64_t{128});
      if (!decode && a >= 16 && n_threads > 1) {
        // Many tokens over panels: the tiles take two panels at a time, so tasks are cut at panel
        // pairs (a task of an odd number of panels ends in a one-panel tile at half the chains),
        // as evenly as pairs allow: Qwen2.5-0.5B's 896-row matrices made 7-panel tasks and its
        // 128-row K/V projections one-panel tasks.
        const int64_t pairs = (rows + 31) / 32;
        int64_t n = std::min<int64_t>(pairs, int64_t{4} * n_threads);
        n = std::max(n, (rows + chunk - 1) / chunk);  // the pair scratch bound (chunk <= 128 rows)
        n = std::min(n, pairs);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t b0 = std::min(rows, pairs * j / n * 32), b1 = std::min(rows, pairs * (j + 1) / n * 32);
          if (b1 > b0) tasks.push_back({g, i, b0, b1});
          max_chunk = std::max(max_chunk, b1 - b0);
        }
        continue;
      }
      max_chunk = std::max(max_chunk, chunk);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) tasks.push_back({g, i, r0, std::min(rows, r0 + chunk)});
    }
    for (int i = 0; i < G.n_targets; ++i) {
      const Plan& p = P.plan[static_cast<size_t>(i)];
      if (p.prep != nullptr) P.kernel_scratch = std::max(P.kernel_scratch, p.prep->scratch_bytes(G.cols));
      if (mode == ActivationMode::Exact && G.targets[i].wtype != GgmlType::F32)
        P.kernel_scratch = std::max(P.kernel_scratch, static_cast<size_t>(G.cols) * 4);
    }
    P.kernel_scratch = (P.kernel_scratch + 63) & ~size_t{63};
    P.pair_floats = combine != nullptr ? static_cast<size_t>(max_chunk * G.n_tokens) : 0;
    worker_scratch = std::max(worker_scratch, P.kernel_scratch + P.pair_floats * 2 * sizeof(float));
  }

  // Target i of group g, rows [r0, r1) into y[t * ldy + (r - r0)].
  auto compute = [&](int g, int i, int64_t r0, int64_t r1, float* y, int64_t ldy, uint8_t* scratch) {
    const MatmulGroup& G = groups[g];
    const MatmulTarget& tg = G.targets[i];
    const Plan& p = gp[static_cast<size_t>(g)].plan[static_cast<size_t>(i)];
    const int64_t cols = G.cols, n_tokens = G.n_tokens;
    const auto* w = static_cast<const uint8_t*>(tg.W) + static_cast<size_t>(r0) * p.wrow;
    const int64_t n = r1 - r0;
    if (mode == ActivationMode::Quantized) {
      if (p.packed != nullptr) {
        p.packed->run(cols, tg.packed, r0, r1, p.act, p.arow, p.meta, n_tokens, y, ldy, scratch);
      } else if (p.gemm != nullptr) {
        p.gemm->run(cols, w, p.wrow, 0, n, p.act, p.arow, p.meta, n_tokens, y, ldy, scratch);
      } else {
        run_dots(k, tg.wtype, w, p.wrow, ldy, cols, p.act, p.arow, n_tokens, y, 0, n);
      }
      return;
    }
    // Exact: each weight row is dequantized once (into the worker's scratch) and dotted in F32
    // with every token row.
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* wr = w + static_cast<size_t>(r) * p.wrow;
      const float* wf;
      if (tg.wtype == GgmlType::F32) {
        wf = reinterpret_cast<const float*>(wr);  // GGUF tensor data is at least 32-byte aligned
      } else {
        k.dequantize_row[static_cast<int>(tg.wtype)](wr, reinterpret_cast<float*>(scratch), cols);
        wf = reinterpret_cast<const float*>(scratch);
      }
      for (int64_t t = 0; t < n_tokens; ++t) y[t * ldy + r] = k.exact_dot_f32(wf, G.X + t * cols, cols);
    }
  };
  auto run_task = [&](int ti, int worker) {
    const GroupTask& task = tasks[static_cast<size_t>(ti)];
    const GroupPlan& P = gp[static_cast<size_t>(task.group)];
    uint8_t* scratch = pool.scratch(1 + worker, worker_scratch);
    const MatmulGroup& G = groups[task.group];
    const MatmulTarget& tg = G.targets[task.target];
    if (combine == nullptr) {
      compute(task.group, task.target, task.r0, task.r1, tg.Y + task.r0, tg.rows, scratch);
      return;
    }
    // [token][row of the chunk] products of both matrices, then combine(a, b) per token.
    const int64_t n = task.r1 - task.r0;
    auto* ya = reinterpret_cast<float*>(scratch + P.kernel_scratch);
    float* yb = ya + P.pair_floats;
    compute(task.group, 0, task.r0, task.r1, ya, n, scratch);
    compute(task.group, 1, task.r0, task.r1, yb, n, scratch);
    for (int64_t t = 0; t < G.n_tokens; ++t) {
      float* at = ya + t * n;
      combine(static_cast<int>(n), at, yb + t * n);
      std::memcpy(tg.Y + t * tg.rows + task.r0, at, static_cast<size_t>(n) * sizeof(float));
    }
  };
  if (n_threads == 1) {
    for (size_t i = 0; i < tasks.size(); ++i) run_task(static_cast<int>(i), 0);
  } else {
    pool.parallel_for(static_cast<int>(tasks.size()), run_task);
  }
}

}  // namespace

void matmul(const KernelTable& k, ThreadPool& pool, ActivationMode mode, GgmlType wtype, const void* W,
            int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y, const uint8_t* packed) {
  const MatmulTarget t{wtype, W, rows, Y, packed};
  matmul_multi(k, pool, mode, &t, 1, cols, X, n_tokens);
}

void matmul_multi(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulTarget* targets,
                  int n_targets, int64_t cols, const float* X, int64_t n_tokens) {
  const MatmulGroup g{targets, n_targets, cols, X, n_tokens};
  matmul_impl(k, pool, mode, &g, 1, nullptr);
}

void matmul_pair(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulTarget& a,
                 const MatmulTarget& b, int64_t cols, const float* X, int64_t n_tokens, PairCombineFn combine) {
  PICOLM_KCHECK(a.rows == b.rows && combine != nullptr, "matmul_pair needs two matrices of the same shape");
  const MatmulTarget t[2] = {a, b};
  const MatmulGroup g{t, 2, cols, X, n_tokens};
  matmul_impl(k, pool, mode, &g, 1, combine);
}

void matmul_groups(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulGroup* groups,
                   int n_groups, PairCombineFn combine) {
  for (int g = 0; g < n_groups; ++g)
    PICOLM_KCHECK(combine == nullptr || (groups[g].n_targets == 2 && groups[g].targets[0].rows == groups[g].targets[1].rows),
                  "matmul_groups with combine needs pairs of matrices of the same shape");
  matmul_impl(k, pool, mode, groups, n_groups, combine);
}

size_t packed_bytes(const KernelTable& k, GgmlType type, int64_t rows, int64_t cols) {
  if (static_cast<uint32_t>(type) >= 32 || rows <= 0 || cols <= 0) return 0;
  const PackedKernel& p = k.packed[static_cast<int>(type)];
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  if (p.run == nullptr || tr == nullptr || cols % tr->block_elems != 0) return 0;
  return static_cast<size_t>((rows + 15) / 16) * p.panel_bytes(cols);
}

void pack_weights(const KernelTable& k, ThreadPool* pool, GgmlType type, const void* w, int64_t rows, int64_t cols,
                  uint8_t* dst) {
  PICOLM_KCHECK(packed_bytes(k, type, rows, cols) > 0, "no packed form for this type or shape");
  const PackedKernel& p = k.packed[static_cast<int>(type)];
  const size_t wrow = row_bytes(type, cols);
  const int64_t n_panels = (rows + 15) / 16;
  if (pool == nullptr || pool->size() == 1 || n_panels < 8) {
    p.pack(w, wrow, rows, cols, 0, n_panels, dst);
    return;
  }
  const int n_tasks = static_cast<int>(std::min<int64_t>(n_panels, int64_t{4} * pool->size()));
  pool->parallel_for(n_tasks, [&](int task, int) {
    p.pack(w, wrow, rows, cols, n_panels * task / n_tasks, n_panels * (task + 1) / n_tasks, dst);
  });
}

}  // namespace picolm
