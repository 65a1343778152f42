// Quantized kernels: dequantize, quantize activations, fused dot products, matmul.
//
// Every op has a scalar reference (*_ref.cpp). SIMD variants (AVX2, AVX-512, NEON) live in their
// own files with per-file flags; a KernelTable is chosen once at start-up from CPU features.
// Thread-safety: all functions are pure; KernelTable is immutable.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/ggml_types.h"

namespace picolm {

class ThreadPool;

// ---- reference entry points (always scalar) -------------------------------------------------
// n must be a multiple of the type's block size.
void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n);
// The activation format the fused dot of `weight` consumes: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
// Q4_1/Q5_1, Q8_K for the K-quants, F32 for F32, F16 for F16, BF16 for BF16 (as llama.cpp does).
GgmlType vec_dot_type(GgmlType weight);
// Bytes of a row of n elements of `type`.
size_t row_bytes(GgmlType type, int64_t n);
// Plain round-to-nearest quantizer for any type above (weight types included), n a multiple of the
// block size. It only promises valid, sensible blocks (for tests and synthetic models); it is not
// llama.cpp's importance-weighted quantizer. For Q8_0/Q8_1/Q8_K it is the activation quantizer.
void quantize_row_weights_ref(GgmlType type, const float* src, void* dst, int64_t n);

// ---- dispatch table --------------------------------------------------------------------------
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// dot(weight row of type T, activation row already in vec_dot_type(T)), n elements.
using VecDotFn = float (*)(int64_t n, const void* w, const void* act);
// One weight row against n_act (1..KernelTable::max_dot_tile) activation rows `act_stride` bytes apart; writes
// out[t * out_stride]. Reads and unpacks the weight row once for the whole tile, and gives results
// bit-identical to vec_dot on each activation row (same arithmetic, tested), so a matmul does not
// depend on how many tokens it is given.
using VecDotTileFn = void (*)(int64_t n, const void* w, const void* act, size_t act_stride, int n_act, float* out,
                              int64_t out_stride);
constexpr int kMaxDotTile = 8;  // upper bound of KernelTable::max_dot_tile
// F32 dot for ActivationMode::Exact: 16 interleaved partial sums (element i goes to sum i % 16,
// tail included), folded pairwise 8, 4, 2, 1, with separate multiply and add roundings. Every
// table computes exactly this, so Exact results do not depend on the table (tested bit for bit).
using ExactDotFn = float (*)(const float* a, const float* b, int64_t n);

// Many-token matmul kernel for one weight type (optional; prefill). Activations are rows already
// in vec_dot_type(weight), `arow` bytes apart. prepare() fills a small per-token table (scales,
// offset corrections) for tokens [t0, t1); run() computes Y[t * ldy + r] for weight rows
// [r0, r1) (r1 - r0 a multiple of 16) and every token, repacking the weights it reads into
// `scratch` (scratch_bytes(cols)). Results equal vec_dot's up to the order of float roundings
// (integer sums are exact), not bit for bit.
struct GemmKernel {
  void (*prepare)(int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) = nullptr;
  void (*run)(int64_t cols, const void* w, size_t wrow, int64_t r0, int64_t r1, const void* act, size_t arow,
              const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) = nullptr;
  size_t (*meta_bytes)(int64_t cols) = nullptr;  // per token
  size_t (*scratch_bytes)(int64_t cols) = nullptr;
};

// Weights repacked once (at load) into interleaved 16-row panels and kept (optional per table and
// type): run() reads them directly for any number of tokens, 1 included (decode), with the
// activations and per-token table of gemm[type] (gemm[type].prepare / meta_bytes). The packed
// form is about the size of the GGUF rows (at most +3%). Results equal vec_dot's up to the order
// of float roundings, and a token's result does not depend on the other tokens of the call.
struct PackedKernel {
  size_t (*panel_bytes)(int64_t cols) = nullptr;  // one panel of 16 rows, a multiple of 64
  // Writes panels [p0, p1) of a rows x cols matrix (rows of native blocks `wrow` bytes apart) to
  // dst + p * panel_bytes(cols); rows past `rows` in the last panel are zero.
  void (*pack)(const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1, uint8_t* dst) = nullptr;
  // Y[t * ldy + (r - r0)] for rows [r0, r1) (r0 a multiple of 16) and every token; `scratch`
  // holds gemm[type].scratch_bytes(cols) bytes (many-token calls expand panels into it).
  void (*run)(int64_t cols, const uint8_t* packed, int64_t r0, int64_t r1, const void* act, size_t arow,
              const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) = nullptr;
};

struct KernelTable {
  const char* name = "scalar";
  DequantizeRowFn dequantize_row[32] = {};  // indexed by GgmlType
  QuantizeRowFn quantize_row[32] = {};      // for activation types (Q8_0, Q8_1, Q8_K, F16, BF16, F32)
  VecDotFn vec_dot[32] = {};                // indexed by the weight type
  VecDotTileFn vec_dot_tile[32] = {};       // optional (nullptr: matmul calls vec_dot per token)
  // Largest n_act every vec_dot_tile entry of this table accepts (<= kMaxDotTile). Wider tiles
  // unpack each weight block once for more tokens, but need 2-3 accumulators per token: 8 fits
  // the 32 vector registers of AVX-512, 4 the 16 of AVX2.
  int max_dot_tile = 4;
  ExactDotFn exact_dot_f32 = nullptr;
  GemmKernel gemm[32] = {};  // indexed by the weight type; run == nullptr: no many-token kernel
  // matmul uses gemm[] from this many tokens on (repacking weights costs about one token's work).
  int gemm_min_tokens = 1 << 30;
  PackedKernel packed[32] = {};  // indexed by the weight type; run == nullptr: no packed form
};

// Bytes of the packed form of a rows x cols matrix of `type` (0: this table has none).
size_t packed_bytes(const KernelTable& k, GgmlType type, int64_t rows, int64_t cols);
// Packs the whole matrix into dst (packed_bytes() bytes, 64-byte aligned), spread over the pool.
void pack_weights(const KernelTable& k, ThreadPool* pool, GgmlType type, const void* w, int64_t rows, int64_t cols,
                  uint8_t* dst);

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool neon = false, dotprod = false, i8mm = false;
};
CpuFeatures detect_cpu_features();

const KernelTable& scalar_kernels();
// The fastest table the CPU supports (scalar if none). Honours env
// PICOLM_KERNELS=scalar|avx2|avx512|neon|neon_dotprod|neon_i8mm (an unavailable name falls back to the best).
const KernelTable& best_kernels();
// Every table this CPU can run (for tests and benchmarks), scalar first.
int available_kernels(const KernelTable** out, int max_out);

// How activations enter a matmul.
enum class ActivationMode {
  Quantized,  // activations converted once per matmul to vec_dot_type(weight) (fast, llama.cpp-like)
  Exact,      // weights dequantized to F32 block by block, F32 arithmetic (reference accuracy)
};

// Y[t*rows + r] = dot(W row r, X row t) for t < n_tokens, r < rows.
// W: `rows` rows of `cols` elements of `wtype`, contiguous. X: n_tokens x cols floats.
// cols must be a whole number of blocks of wtype; shape or type errors are caller bugs and throw
// std::logic_error (as do row_bytes, dequantize_row_ref and quantize_row_weights_ref).
// Uses pool scratch slots 0 and 1 + worker (see ThreadPool::scratch). From gemm_min_tokens tokens on,
// types with a GemmKernel take the many-token path (equal to the dots up to float rounding order).
// `packed` (optional): W in packed form (pack_weights), used in Quantized mode for any n_tokens.
void matmul(const KernelTable& k, ThreadPool& pool, ActivationMode mode, GgmlType wtype, const void* W,
            int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y, const uint8_t* packed = nullptr);

// Several weights sharing one input X (q/k/v, gate/up): the activations are quantized once per
// activation type and all targets' rows go through one pass of the pool. Target i writes
// Y_i[t * rows_i + r]. Same results as one matmul() per target.
struct MatmulTarget {
  GgmlType wtype;
  const void* W;
  int64_t rows;
  float* Y;
  const uint8_t* packed = nullptr;  // W in packed form, if any
  // Never the many-token GEMM: each row's result is bit-identical to the row alone (vec_dot and
  // its tiles), however many rows the call has. For matrices whose row count per call depends on
  // the batch (routed experts) in a model that promises batch invariance.
  bool dots_only = false;
};
void matmul_multi(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulTarget* targets,
                  int n_targets, int64_t cols, const float* X, int64_t n_tokens);
// Two matrices of the same shape sharing X whose products are only needed combined (FFN gate and
// up): A.Y[t * rows + r] = combine(A row r . X[t], B row r . X[t]), computed chunk of rows by chunk
// of rows in scratch, so neither product is stored whole (B.Y is not used). combine(n, a, b)
// overwrites a[0..n) with the combination of a and b. Same values as two matmuls then combine.
using PairCombineFn = void (*)(int n, float* a, const float* b);
void matmul_pair(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulTarget& a,
                 const MatmulTarget& b, int64_t cols, const float* X, int64_t n_tokens, PairCombineFn combine);

// Independent products in one pass of the pool (one barrier instead of one per product): group g
// multiplies its own targets by its own input X (n_tokens rows of cols). Without combine, each
// group is a matmul_multi; with it, each group is a matmul_pair (two targets of equal rows). Same
// values as one call per group. For many small products whose inputs differ (the experts a decode
// step chose: every expert's gate/up on its rows, then every expert's down on its own products).
struct MatmulGroup {
  const MatmulTarget* targets;
  int n_targets;
  int64_t cols;
  const float* X;
  int64_t n_tokens;
};
void matmul_groups(const KernelTable& k, ThreadPool& pool, ActivationMode mode, const MatmulGroup* groups,
                   int n_groups, PairCombineFn combine);

// fp16 <-> fp32 (IEEE binary16), round-to-nearest-even.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace picolm
