// Many-token matmul for prefill on AVX-512 VNNI: weight panels repacked per call, GEMM tiles of
// VPDPBUSD with broadcast activations.
//
// Layout (the one fast CPU GEMMs use, e.g. ik_llama.cpp's interleaved "_r16" types; own code):
// 16 weight rows are unpacked to bytes and interleaved so that one 64-byte vector holds 4
// consecutive weights of each of the 16 rows ("panel"). A tile keeps R panels x N tokens of
// accumulators in registers; each step loads R weight vectors and broadcasts 4 activation bytes
// per token, so every weight byte loaded feeds N multiply-adds and every activation byte 16 R.
// Outputs of a panel are 16 consecutive rows of one token: one vector store.
//
// Weights are the unsigned operand of VPDPBUSD: each type is unpacked to its natural unsigned
// code (Q4_0 q in [0,15], Q5_0 in [0,31], Q8_0 q + 128, Q4_K/Q5_K q, Q6_K q in [0,63]), and the
// offset it carries (8, 16, 128, 0, 0, 32) comes back as -offset * sum(activations of the block),
// which is per token, not per row: it is the starting value of the block's integer accumulator.
// Activations stay in their Q8_0 / Q8_K rows (read in place); a small per-token table holds their
// float scales and those corrections. All integer sums are exact, so results equal the fused
// single-row dots up to the order of float roundings (tested against them and a double oracle).
//
// Repacking reads every weight once per call (as a decode step does) and costs about as much as
// a few tokens' multiply-adds, amortized over all tokens of the call; the panels live in the
// worker's scratch (2 x 16 rows, a few hundred KB at most) and are never kept.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"

#define PICOLM_GEMM_UNROLL _Pragma("GCC unroll 16")

namespace picolm::kq {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 packed nibbles -> 32 bytes (low nibbles = elements 0..15, high = 16..31).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp), _mm256_set1_epi8(0x0F));
}

// Interleaves 16 rows of 32 bytes (rows[i] = row i) into 8 vectors: out[j] holds bytes 4j..4j+3
// of rows 0..15 (row i in 32-bit lane i). An 8x8 transpose of 32-bit words in each 256-bit half,
// after pairing row i (low half) with row i + 8 (high half).
inline void transpose_16x8(const __m256i (&rows)[16], __m512i (&out)[8]) {
  __m512i z[8], t[8], u[8];
  PICOLM_GEMM_UNROLL for (int i = 0; i < 8; ++i) z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[i]), rows[i + 8], 1);
  PICOLM_GEMM_UNROLL for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  // u[0..3]: words 0,1,2,3 (+4 in the upper 128-bit lane) of rows 0-3; u[4..7]: of rows 4-7.
  PICOLM_GEMM_UNROLL for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  PICOLM_GEMM_UNROLL for (int w = 0; w < 4; ++w) {
    out[w] = _mm512_permutex2var_epi64(u[w], lo, u[4 + w]);
    out[w + 4] = _mm512_permutex2var_epi64(u[w], hi, u[4 + w]);
  }
}

inline void store_transposed(const __m256i (&rows)[16], uint8_t* dst) {
  __m512i v[8];
  transpose_16x8(rows, v);
  PICOLM_GEMM_UNROLL for (int j = 0; j < 8; ++j) _mm512_storeu_si512(dst + 64 * j, v[j]);
}

// ---------------------------------------------------------------------------------------------
// Q8_0-activation types (blocks of 32): Q4_0, Q5_0, Q8_0.
// Panel per block: [8 steps][16 rows][4 bytes] codes, then 16 float row scales: 576 bytes.
// Per-token table per block: {float d, int32 -offset * sum(q)}.
// ---------------------------------------------------------------------------------------------

constexpr size_t kPanelBlockA = 8 * 64 + 64;
using packed::MetaA;

struct TypeQ8_0 {
  static constexpr GgmlType kType = GgmlType::Q8_0;
  using Block = BlockQ8_0;
  static __m256i codes(const Block& b) { return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80))); }
};
struct TypeQ4_0 {
  static constexpr GgmlType kType = GgmlType::Q4_0;
  using Block = BlockQ4_0;
  static __m256i codes(const Block& b) { return nibbles32(b.qs); }
};
struct TypeQ5_0 {
  static constexpr GgmlType kType = GgmlType::Q5_0;
  using Block = BlockQ5_0;
  static __m256i codes(const Block& b) {
    // Bit j of qh is the fifth bit of element j: add 16 where it is set.
    const __m256i nib = nibbles32(b.qs);
    return _mm256_mask_add_epi8(nib, _cvtu32_mask32(static_cast<uint32_t>(load_i32(b.qh))), nib, _mm256_set1_epi8(16));
  }
};

template <class T>
void repack_panel_a(const uint8_t* w, size_t wrow, int64_t nb, uint8_t* panel) {
  using Block = typename T::Block;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i rows[16];
    alignas(64) float d[16];
    PICOLM_GEMM_UNROLL for (int i = 0; i < 16; ++i) {
      const Block* row = reinterpret_cast<const Block*>(w + static_cast<size_t>(i) * wrow);
      if (b + 8 < nb) _mm_prefetch(reinterpret_cast<const char*>(row + b + 8), _MM_HINT_T0);
      const Block& blk = row[b];
      rows[i] = T::codes(blk);
      d[i] = h2f(blk.d);
    }
    uint8_t* dst = panel + static_cast<size_t>(b) * kPanelBlockA;
    store_transposed(rows, dst);
    std::memcpy(dst + 512, d, 64);
  }
}

template <class T>
void prepare_a(int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  const int64_t nb = cols / QK8_0;
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t t = t0; t < t1; ++t) {
    const auto* y = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(act) + static_cast<size_t>(t) * arow);
    auto* m = reinterpret_cast<MetaA*>(meta) + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
      // sum(q) with VPDPBUSD against ones (1 * q summed in groups of 4), then a horizontal add.
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, load256(y[b].qs));
      __m128i r = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4E));
      r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xB1));
      m[b].d = h2f(y[b].d);
      m[b].corr = -packed::code_offset_a(T::kType) * _mm_cvtsi128_si32(r);
    }
  }
}

// The inner loop of every tile: s[r][n] += steps [k0, k0 + kSteps) of 4 bytes, panel r's
// 64-byte vectors (at pb + r * panel_stride + 64 k) against token n's activation bytes (broadcast
// from ab + n * arow + 4 k). Each weight vector feeds N multiply-adds, each broadcast R.
template <int R, int N, int kSteps>
__attribute__((always_inline)) inline void dot_steps(__m512i (&s)[R][N], const uint8_t* pb, size_t panel_stride,
                                                     const uint8_t* ab, size_t arow, int k0) {
  PICOLM_GEMM_UNROLL for (int j = 0; j < kSteps; ++j) {
    const int k4 = k0 + j;
    __m512i wv[R];
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(pb + r * panel_stride + 64 * k4);
    PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
      const __m512i a = _mm512_set1_epi32(load_i32(ab + n * arow + 4 * k4));
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) s[r][n] = _mm512_dpbusd_epi32(s[r][n], wv[r], a);
    }
  }
}

template <int R, int N>
void tile_a(int64_t nb, const uint8_t* panel, size_t panel_stride, const uint8_t* act, size_t arow, const MetaA* meta,
            float* y, int64_t ldy, const __mmask16 (&store)[R]) {
  __m512 acc[R][N];
  PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[R][N];
    PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
      const __m512i c = _mm512_set1_epi32(meta[n * nb + b].corr);
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) s[r][n] = c;
    }
    const uint8_t* pb = panel + static_cast<size_t>(b) * kPanelBlockA;
    const uint8_t* ab = act + static_cast<size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    dot_steps<R, N, 8>(s, pb, panel_stride, ab, arow, 0);
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 dw = _mm512_loadu_ps(pb + r * panel_stride + 512);
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n)
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][n]), _mm512_mul_ps(dw, _mm512_set1_ps(meta[n * nb + b].d)), acc[r][n]);
    }
  }
  PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + n * ldy + 16 * r, store[r], acc[r][n]);
}

// ---------------------------------------------------------------------------------------------
// K-quants (Q8_K activations, super-blocks of 256): Q4_K, Q5_K (8 sub-blocks of 32 with a
// scale and a min), Q6_K (16 sub-blocks of 16 with a signed scale, codes offset by 32).
// Panel per super-block: [64 steps][16 rows][4 bytes] codes (4096 bytes); [n_sub][16] int32
// scales; [16] float d; for Q4_K/Q5_K also [16] float -dmin and [4][16] int32 min pairs
// (16-bit mins of sub-blocks 2p, 2p+1) for VPDPWSSD against the token's sub-block sums.
// Per-token table per super-block: {float d; int32 words[NW]}: Q4_K/Q5_K: 4 pairs of 16-bit
// sub-block sums; Q6_K: -32 * sum of each 16-element sub-block.
// ---------------------------------------------------------------------------------------------

template <int NSUB, bool MINS>
struct KLayout {
  static constexpr int kSub = NSUB;
  static constexpr size_t kScales = 4096;
  static constexpr size_t kD = kScales + static_cast<size_t>(NSUB) * 64;
  static constexpr size_t kNegDmin = kD + 64;
  static constexpr size_t kMins = kNegDmin + 64;
  static constexpr size_t kBytes = MINS ? kMins + 4 * 64 : kD + 64;
  static constexpr int kMetaWords = MINS ? 4 : NSUB;
  static constexpr size_t kMetaBytes = 4 + 4 * static_cast<size_t>(kMetaWords);
};

// One Q4_K/Q5_K super-block of a row: 256 codes in element order to `codes`.
template <bool Q5>
inline void unpack_k45_codes(const uint8_t* qs, const uint8_t* qh, uint8_t* codes) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i hbits = Q5 ? load256(qh) : _mm256_setzero_si256();
  PICOLM_GEMM_UNROLL for (int j = 0; j < 4; ++j) {
    const __m256i q = load256(qs + 32 * j);
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (Q5) {
      // Element 64j + l takes bit 2j of qh[l], element 64j + 32 + l bit 2j + 1.
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), _mm256_set1_epi8(16)));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), _mm256_set1_epi8(16)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 64 * j), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 64 * j + 32), hi);
  }
}

// One Q6_K super-block of a row: 256 codes in [0, 63] in element order.
inline void unpack_q6k_codes(const BlockQ6_K& b, uint8_t* codes) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  PICOLM_GEMM_UNROLL for (int half = 0; half < 2; ++half) {
    const __m256i l0 = load256(b.ql + 64 * half), l1 = load256(b.ql + 64 * half + 32);
    const __m256i h = load256(b.qh + 32 * half);
    // Elements 128 half + [0,32): ql[l] low | qh bits 0-1; [32,64): ql[l+32] low | bits 2-3;
    // [64,96): ql[l] high | bits 4-5; [96,128): ql[l+32] high | bits 6-7.
    const __m256i c0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
    const __m256i c1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
    const __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
    const __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
    uint8_t* o = codes + 128 * half;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), c0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32), c1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64), c2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 96), c3);
  }
}

struct TypeQ4_K {
  static constexpr GgmlType kType = GgmlType::Q4_K;
  using L = KLayout<8, true>;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_K);
};
struct TypeQ5_K {
  static constexpr GgmlType kType = GgmlType::Q5_K;
  using L = KLayout<8, true>;
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_K);
};
struct TypeQ6_K {
  static constexpr GgmlType kType = GgmlType::Q6_K;
  using L = KLayout<16, false>;
  static constexpr size_t kBlockBytes = sizeof(BlockQ6_K);
};

// Rows are unpacked one at a time into a row-major staging area (plain stores), then moved
// into the panel by 16 x 8 word transposes; scales go through a small byte table. The weight
// rows are read here for the first time, from memory: prefetch a few super-blocks ahead on each
// of the 16 row streams.
template <class T>
void repack_panel_k(const uint8_t* w, size_t wrow, int64_t nsb, uint8_t* panel) {
  using L = typename T::L;
  constexpr int kAhead = 4;
  alignas(64) uint8_t codes[16][QK_K];
  alignas(64) uint8_t sm[16][16];  // per row: Q4_K/Q5_K 8 scales + 8 mins; Q6_K 16 signed scales
  alignas(64) float d[16], ndmin[16];
  alignas(64) int32_t sc[L::kSub][16];
  alignas(64) int32_t mins[4][16];
  for (int64_t sb = 0; sb < nsb; ++sb) {
    for (int i = 0; i < 16; ++i) {
      const uint8_t* blk = w + static_cast<size_t>(i) * wrow + static_cast<size_t>(sb) * T::kBlockBytes;
      if (sb + kAhead < nsb) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + kAhead * T::kBlockBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(blk + kAhead * T::kBlockBytes + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(blk + kAhead * T::kBlockBytes + 128), _MM_HINT_T0);
        if constexpr (T::kBlockBytes > 192)
          _mm_prefetch(reinterpret_cast<const char*>(blk + kAhead * T::kBlockBytes + 192), _MM_HINT_T0);
      }
      if constexpr (std::is_same_v<T, TypeQ6_K>) {
        const auto& b = *reinterpret_cast<const BlockQ6_K*>(blk);
        d[i] = h2f(b.d);
        std::memcpy(sm[i], b.scales, 16);
        unpack_q6k_codes(b, codes[i]);
      } else if constexpr (std::is_same_v<T, TypeQ5_K>) {
        const auto& b = *reinterpret_cast<const BlockQ5_K*>(blk);
        d[i] = h2f(b.d);
        ndmin[i] = -h2f(b.dmin);
        scales_mins_k4_all(b.scales, sm[i]);
        unpack_k45_codes<true>(b.qs, b.qh, codes[i]);
      } else {
        const auto& b = *reinterpret_cast<const BlockQ4_K*>(blk);
        d[i] = h2f(b.d);
        ndmin[i] = -h2f(b.dmin);
        scales_mins_k4_all(b.scales, sm[i]);
        unpack_k45_codes<false>(b.qs, nullptr, codes[i]);
      }
    }
    uint8_t* dst = panel + static_cast<size_t>(sb) * L::kBytes;
    for (int c = 0; c < 8; ++c) {
      __m256i rows[16];
      PICOLM_GEMM_UNROLL for (int i = 0; i < 16; ++i) rows[i] = load256(codes[i] + 32 * c);
      store_transposed(rows, dst + 512 * c);
    }
    if constexpr (L::kSub == 8) {
      for (int i = 0; i < 16; ++i) {
        for (int s = 0; s < 8; ++s) sc[s][i] = sm[i][s];
        for (int p = 0; p < 4; ++p) mins[p][i] = sm[i][8 + 2 * p] | (sm[i][9 + 2 * p] << 16);
      }
      std::memcpy(dst + L::kNegDmin, ndmin, 64);
      std::memcpy(dst + L::kMins, mins, sizeof mins);
    } else {
      for (int i = 0; i < 16; ++i)
        for (int s = 0; s < 16; ++s) sc[s][i] = static_cast<int8_t>(sm[i][s]);
    }
    std::memcpy(dst + L::kScales, sc, sizeof sc);
    std::memcpy(dst + L::kD, d, 64);
  }
}

template <class T>
void prepare_k(int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  static_assert(T::L::kMetaBytes == packed::meta_bytes_k(T::kType));
  packed::prepare_meta_k(T::kType, cols, act, arow, t0, t1, meta);
}

template <class T, int R, int N>
void tile_k(int64_t nsb, const uint8_t* panel, size_t panel_stride, const uint8_t* act, size_t arow, const uint8_t* meta,
            size_t meta_stride, float* y, int64_t ldy, const __mmask16 (&store)[R]) {
  using L = typename T::L;
  constexpr int kSteps = 64 / L::kSub;  // 4-byte steps per sub-block
  constexpr bool kMins = L::kSub == 8;
  __m512 acc[R][N];
  PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * L::kBytes;
    const uint8_t* ab = act + static_cast<size_t>(sb) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    const uint8_t* mb = meta + static_cast<size_t>(sb) * L::kMetaBytes;
    __m512i isum[R][N];
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) isum[r][n] = _mm512_setzero_si512();
    for (int s = 0; s < L::kSub; ++s) {
      __m512i p[R][N];
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
        const __m512i c = kMins ? _mm512_setzero_si512() : _mm512_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * s));
        PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) p[r][n] = c;
      }
      dot_steps<R, N, kSteps>(p, pb, panel_stride, ab, arow, s * kSteps);
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
        const __m512i scv = _mm512_loadu_si512(pb + r * panel_stride + L::kScales + 64 * s);
        PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) isum[r][n] = _mm512_add_epi32(isum[r][n], _mm512_mullo_epi32(p[r][n], scv));
      }
    }
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 dv = _mm512_loadu_ps(pb + r * panel_stride + L::kD);
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
        float da;
        std::memcpy(&da, mb + n * meta_stride, 4);
        const __m512 dav = _mm512_set1_ps(da);
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][n]), _mm512_mul_ps(dv, dav), acc[r][n]);
        if constexpr (kMins) {
          __m512i m = _mm512_setzero_si512();
          PICOLM_GEMM_UNROLL for (int q = 0; q < 4; ++q)
            m = _mm512_dpwssd_epi32(m, _mm512_loadu_si512(pb + r * panel_stride + L::kMins + 64 * q),
                                    _mm512_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * q)));
          const __m512 ndm = _mm512_loadu_ps(pb + r * panel_stride + L::kNegDmin);
          acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(ndm, dav), acc[r][n]);
        }
      }
    }
  }
  PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + n * ldy + 16 * r, store[r], acc[r][n]);
}

// ---------------------------------------------------------------------------------------------
// Drivers: panels of 2 x 16 rows (one of 16 at the end), all tokens in tiles of N.
// ---------------------------------------------------------------------------------------------

constexpr int kTileTokensA = 6;  // 2 panels x 6 tokens: 12 integer + 12 float accumulators
constexpr int kTileTokensK = 4;  // 2 x 4: 8 sub-block + 8 super-block + 8 float accumulators
// Byte panels (per-call GEMM, expanded packed panels): 2 x 6. Each sub-block runs one VPDPBUSD
// chain per accumulator; 8 chains do not cover the instruction's latency at 2 per cycle (Zen 5),
// 12 do. 36 accumulators exceed the 32 registers: the float ones, touched once per super-block,
// are the ones that live on the stack.
constexpr int kTileTokensKX = 6;

// Store masks of the R panels from row r when the call's rows end at r1.
template <int R>
inline void store_masks(int64_t r, int64_t r1, __mmask16 (&m)[R]) {
  for (int i = 0; i < R; ++i) {
    const int64_t n = std::clamp<int64_t>(r1 - (r + 16 * i), 0, 16);
    m[i] = static_cast<__mmask16>((1u << n) - 1u);
  }
}

template <int R, int N, class Fn>
inline void dispatch_n(int n, Fn&& fn) {
  if constexpr (N >= 1) {
    if (n == N) {
      fn(std::integral_constant<int, R>{}, std::integral_constant<int, N>{});
      return;
    }
    dispatch_n<R, N - 1>(n, fn);
  }
}

// The loop of every driver: rows [r0, r1) in panels, two at a time where `pairs` allows and more
// than 16 rows remain, tokens in tiles of up to kTile. ready(r, R) prepares the R panels from row
// r; tile(Rc, Nc, r, t, masks) runs one tile (Rc, Nc: integral constants; masks: the panels' store
// masks).
template <int kTile, class Ready, class Tile>
inline void drive_panels(int64_t r0, int64_t r1, int64_t n_tokens, bool pairs, Ready&& ready, Tile&& tile) {
  for (int64_t r = r0; r < r1;) {
    const int R = pairs && r1 - r > 16 ? 2 : 1;
    ready(r, R);
    for (int64_t t = 0; t < n_tokens; t += kTile) {
      const int n = static_cast<int>(std::min<int64_t>(kTile, n_tokens - t));
      auto call = [&](auto Rc, auto Nc) {
        __mmask16 m[decltype(Rc)::value];
        store_masks<decltype(Rc)::value>(r, r1, m);
        tile(Rc, Nc, r, t, m);
      };
      if (R == 2) dispatch_n<2, kTile>(n, call);
      else dispatch_n<1, kTile>(n, call);
    }
    r += 16 * R;
  }
}

size_t panel_bytes_a(int64_t cols) {
  return static_cast<size_t>(cols / QK8_0) * kPanelBlockA;
}
template <class T>
size_t panel_bytes_k(int64_t cols) {
  return static_cast<size_t>(cols / QK_K) * T::L::kBytes;
}

template <class T>
void run_a(int64_t cols, const void* w, size_t wrow, int64_t r0, int64_t r1, const void* act, size_t arow,
           const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  const int64_t nb = cols / QK8_0;
  const size_t pstride = panel_bytes_a(cols);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const auto* mt = reinterpret_cast<const MetaA*>(meta);
  drive_panels<kTileTokensA>(
      r0, r1, n_tokens, true,
      [&](int64_t r, int R) {
        for (int i = 0; i < R; ++i) repack_panel_a<T>(wb + static_cast<size_t>(r + 16 * i) * wrow, wrow, nb, scratch + i * pstride);
      },
      [&](auto Rc, auto Nc, int64_t r, int64_t t, const auto& m) {
        tile_a<decltype(Rc)::value, decltype(Nc)::value>(nb, scratch, pstride, ab + static_cast<size_t>(t) * arow, arow,
                                                         mt + t * nb, y + t * ldy + r, ldy, m);
      });
}

template <class T>
void run_k(int64_t cols, const void* w, size_t wrow, int64_t r0, int64_t r1, const void* act, size_t arow,
           const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  using L = typename T::L;
  const int64_t nsb = cols / QK_K;
  const size_t pstride = panel_bytes_k<T>(cols);
  const size_t mstride = static_cast<size_t>(nsb) * L::kMetaBytes;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  drive_panels<kTileTokensKX>(
      r0, r1, n_tokens, true,
      [&](int64_t r, int R) {
        for (int i = 0; i < R; ++i) repack_panel_k<T>(wb + static_cast<size_t>(r + 16 * i) * wrow, wrow, nsb, scratch + i * pstride);
      },
      [&](auto Rc, auto Nc, int64_t r, int64_t t, const auto& m) {
        tile_k<T, decltype(Rc)::value, decltype(Nc)::value>(nsb, scratch, pstride, ab + static_cast<size_t>(t) * arow, arow,
                                                            meta + static_cast<size_t>(t) * mstride, mstride, y + t * ldy + r,
                                                            ldy, m);
      });
}

size_t meta_bytes_a(int64_t cols) {
  return static_cast<size_t>(cols / QK8_0) * sizeof(MetaA);
}
template <class T>
size_t meta_bytes_k(int64_t cols) {
  return static_cast<size_t>(cols / QK_K) * T::L::kMetaBytes;
}
size_t scratch_bytes_a(int64_t cols) {
  return 2 * panel_bytes_a(cols);
}
template <class T>
size_t scratch_bytes_k(int64_t cols) {
  return 2 * panel_bytes_k<T>(cols);
}

template <class T>
GemmKernel gemm_a() {
  return {prepare_a<T>, run_a<T>, meta_bytes_a, scratch_bytes_a};
}
template <class T>
GemmKernel gemm_k() {
  return {prepare_k<T>, run_k<T>, meta_bytes_k<T>, scratch_bytes_k<T>};
}

// ---------------------------------------------------------------------------------------------
// Packed weights: the same 16-row interleaving, made once (at load) and kept, in a compact form
// that is no larger than the GGUF blocks (Q6_K: +1%, Q4_K/Q5_K: +3% for byte scales), so a
// decode step reads as few bytes as from the original rows. Tiles read it directly for any
// number of tokens, 1 included: with 16 rows in the lanes of a vector, everything outside the
// multiply-adds (scales, offsets, float conversion) is shared by 16 rows instead of done per
// row, which is what makes the single-token case memory-bound instead of compute-bound.
//
// The layout (steps, nibble pairs, masks, units and super-blocks) is in packed_layout.h; this file
// has the AVX-512 packer (tested byte for byte against the portable one) and the tiles.
// ---------------------------------------------------------------------------------------------

inline __m512i nibble_pair(__m512i lo_step, __m512i hi_step) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  return _mm512_or_si512(_mm512_and_si512(lo_step, m4), _mm512_slli_epi16(_mm512_and_si512(hi_step, m4), 4));
}
inline uint64_t bit4_mask(__m512i step) { return _mm512_test_epi8_mask(step, _mm512_set1_epi8(0x10)); }
inline uint64_t load_u64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
template <class T>
struct PackA {
  static constexpr packed::LayoutA L = packed::layout_a(T::kType);
  static constexpr bool kQ8 = T::kType == GgmlType::Q8_0;
  static constexpr bool kMasks = L.masks;
  static constexpr size_t kCodes = L.codes;  // per block
  static size_t codes_at(int64_t b) { return L.codes_at(b); }
  static size_t masks_at(int64_t b) { return L.masks_at(b); }
  static size_t d_at(int64_t b) { return L.d_at(b); }
  static size_t panel_bytes(int64_t cols) { return L.panel_bytes(cols); }
};
static_assert(PackA<TypeQ8_0>::L.unit % 64 == 0 && PackA<TypeQ4_0>::L.unit % 64 == 0 && PackA<TypeQ5_0>::L.unit % 64 == 0);

template <class T>
size_t packed_panel_bytes_a(int64_t cols) {
  return PackA<T>::panel_bytes(cols);
}

template <class T>
void pack_a(const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1, uint8_t* dst) {
  using P = PackA<T>;
  using Block = typename T::Block;
  const int64_t nb = cols / QK8_0;
  const size_t pbytes = P::panel_bytes(cols);
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = dst + static_cast<size_t>(p) * pbytes;
    std::memset(panel, 0, pbytes);
    const int n_valid = static_cast<int>(std::min<int64_t>(16, rows - 16 * p));
    for (int64_t b = 0; b < nb; ++b) {
      __m256i rws[16];
      alignas(32) uint16_t d[16] = {};
      for (int i = 0; i < 16; ++i) {
        if (i >= n_valid) {
          rws[i] = _mm256_setzero_si256();
          continue;
        }
        const Block& blk = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(16 * p + i) * wrow)[b];
        rws[i] = T::codes(blk);
        d[i] = blk.d;
      }
      __m512i v[8];
      transpose_16x8(rws, v);
      uint8_t* cb = panel + P::codes_at(b);
      if constexpr (P::kQ8) {
        for (int s = 0; s < 8; ++s) _mm512_storeu_si512(cb + 64 * s, v[s]);
      } else {
        for (int j = 0; j < 4; ++j) _mm512_storeu_si512(cb + 64 * j, nibble_pair(v[2 * j], v[2 * j + 1]));
      }
      if constexpr (P::kMasks) {
        uint64_t m[8];
        for (int s = 0; s < 8; ++s) m[s] = bit4_mask(v[s]);
        std::memcpy(panel + P::masks_at(b), m, 64);
      }
      std::memcpy(panel + P::d_at(b), d, 32);
    }
  }
}

// Code vectors of steps 2j, 2j+1 of panel row-block `cb` (Q4_0/Q5_0 nibble vector j).
template <class T>
__attribute__((always_inline)) inline void unpack_pair_a(const uint8_t* cb, const uint8_t* masks, int j, __m512i& w0,
                                                         __m512i& w1) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i raw = _mm512_loadu_si512(cb + 64 * j);
  w0 = _mm512_and_si512(raw, m4);
  w1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
  if constexpr (PackA<T>::kMasks) {
    const __m512i b4 = _mm512_set1_epi8(0x10);
    w0 = _mm512_mask_add_epi8(w0, _cvtu64_mask64(load_u64(masks + 16 * j)), w0, b4);
    w1 = _mm512_mask_add_epi8(w1, _cvtu64_mask64(load_u64(masks + 16 * j + 8)), w1, b4);
  }
}

template <class T, int R, int N>
void tile_pa(int64_t nb, const uint8_t* panel, size_t pstride, const uint8_t* act, size_t arow, const MetaA* meta,
             float* y, int64_t ldy, const __mmask16 (&store)[R]) {
  using P = PackA<T>;
  __m512 acc[R][N];
  PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  // Q4_0/Q5_0: software prefetch kAheadUnits two-block units (2-3 KB) ahead, half a unit's lines
  // per block. Measured on decode (2 threads, paired runs): Q5_0 +7-24%, Q4_0 +1-6%; Q8_0 streams
  // faster without it (-8-17% with it, 1-8 units ahead).
  constexpr int kAheadUnits = P::kQ8 ? 0 : 4;
  // Integer sums of block b (with the offset correction as the starting value).
  auto int_sums = [&](int64_t b, __m512i (&s)[R][N]) __attribute__((always_inline)) {
    if constexpr (kAheadUnits > 0) {
      const packed::Span sp = packed::prefetch_span_a(P::L, b, kAheadUnits);
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
        for (size_t l = 0; l < sp.bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(panel + r * pstride + sp.offset + l), _MM_HINT_T0);
    }
    PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
      const __m512i c = _mm512_set1_epi32(meta[n * nb + b].corr);
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) s[r][n] = c;
    }
    const uint8_t* cb = panel + P::codes_at(b);
    const uint8_t* ab = act + static_cast<size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    if constexpr (P::kQ8) {
      dot_steps<R, N, 8>(s, cb, pstride, ab, arow, 0);
    } else {
      PICOLM_GEMM_UNROLL for (int j = 0; j < 4; ++j) {
        __m512i w0[R], w1[R];
        PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
          unpack_pair_a<T>(cb + r * pstride, panel + r * pstride + P::masks_at(b), j, w0[r], w1[r]);
        PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
          const __m512i a0 = _mm512_set1_epi32(load_i32(ab + n * arow + 8 * j));
          const __m512i a1 = _mm512_set1_epi32(load_i32(ab + n * arow + 8 * j + 4));
          PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
            s[r][n] = _mm512_dpbusd_epi32(s[r][n], w0[r], a0);
            s[r][n] = _mm512_dpbusd_epi32(s[r][n], w1[r], a1);
          }
        }
      }
    }
  };
  auto scale_add = [&](int64_t b, const __m512i (&s)[R][N]) __attribute__((always_inline)) {
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 dw = _mm512_cvtph_ps(load256(panel + r * pstride + P::d_at(b)));
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n)
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][n]), _mm512_mul_ps(dw, _mm512_set1_ps(meta[n * nb + b].d)), acc[r][n]);
    }
  };
  if constexpr (R == 1) {
    // One panel (decode): both blocks of a unit before their row scales, which sit at the unit's
    // end, so the panel is read in address order. Measured in paired runs: Q8_0 per kernel from
    // 0.92x to 1.04x the file-row dot's speed; Qwen2.5-0.5B decode +5%.
    for (int64_t b = 0; b < nb; b += 2) {
      __m512i s0[R][N], s1[R][N];
      int_sums(b, s0);
      if (b + 1 < nb) int_sums(b + 1, s1);
      scale_add(b, s0);
      if (b + 1 < nb) scale_add(b + 1, s1);
    }
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      __m512i s0[R][N];
      int_sums(b, s0);
      scale_add(b, s0);
    }
  }
  PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + n * ldy + 16 * r, store[r], acc[r][n]);
}

template <class T>
struct PackK {
  static constexpr packed::LayoutK L = packed::layout_k(T::kType);
  static constexpr bool kQ6 = T::kType == GgmlType::Q6_K;
  static constexpr bool kQ5 = T::kType == GgmlType::Q5_K;
  static constexpr int kSub = L.n_sub;
  static constexpr size_t kExtra = L.extra;  // after the nibble vectors
  static constexpr size_t kSide = L.side;
  static constexpr size_t kD = L.d;
  static constexpr size_t kDmin = L.dmin;
  static constexpr size_t kBytes = L.bytes;
};

// 6-bit values of a nibble vector `raw` and its high-bit vector `hv` (packed_layout.h): fields
// e = 0, 1 (first) or 2, 3 of hv moved to bits 4-5, over the low and the high nibbles.
__attribute__((always_inline)) inline void unpack6(__m512i raw, __m512i hv, bool first, __m512i& w0, __m512i& w1) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), b45 = _mm512_set1_epi8(0x30);
  const __m512i h0 = first ? _mm512_and_si512(_mm512_slli_epi16(hv, 4), b45) : _mm512_and_si512(hv, b45);
  const __m512i h1 = first ? _mm512_and_si512(_mm512_slli_epi16(hv, 2), b45) : _mm512_and_si512(_mm512_srli_epi16(hv, 2), b45);
  w0 = _mm512_ternarylogic_epi32(raw, h0, m4, 0xEC);  // (raw & m4) | h0
  w1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(raw, 4), h1, m4, 0xEC);
}

// The 256 side bytes of a Q4_K/Q5_K super-block (scales [8][16], mins [4][16][2]) from the 192
// of its 6-bit form (packed_layout.h), to `side`.
inline void decode_side6(const uint8_t* src, uint8_t* side) {
  const __m512i hv = _mm512_loadu_si512(src + 128);
  __m512i v[4];
  unpack6(_mm512_loadu_si512(src), hv, true, v[0], v[1]);
  unpack6(_mm512_loadu_si512(src + 64), hv, false, v[2], v[3]);
  for (int e = 0; e < 4; ++e) _mm512_store_si512(side + 64 * e, v[e]);
}

// The side bytes of super-block `pb` of a packed K-quant panel: Q6_K's scales in place, Q4_K/Q5_K's
// scales and mins decoded into `buf`.
template <class T>
inline const uint8_t* side_bytes(const uint8_t* pb, uint8_t* buf) {
  if constexpr (PackK<T>::kQ6) {
    return pb + PackK<T>::kSide;
  } else {
    decode_side6(pb + PackK<T>::kSide, buf);
    return buf;
  }
}

// Codes of steps 2j, 2j+1 (nibble vector j) of one super-block `pb` of a packed K-quant panel.
template <class T>
__attribute__((always_inline)) inline void unpack_pair_k(const uint8_t* pb, int j, __m512i& w0, __m512i& w1) {
  using P = PackK<T>;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i raw = _mm512_loadu_si512(pb + 64 * j);
  if constexpr (P::kQ6) {
    // The sub-block's (j / 2) high-bit vector.
    unpack6(raw, _mm512_loadu_si512(pb + P::kExtra + 64 * (j / 2)), j % 2 == 0, w0, w1);
  } else {
    w0 = _mm512_and_si512(raw, m4);
    w1 = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if constexpr (P::kQ5) {
      const __m512i b4 = _mm512_set1_epi8(0x10);
      w0 = _mm512_mask_add_epi8(w0, _cvtu64_mask64(load_u64(pb + P::kExtra + 16 * j)), w0, b4);
      w1 = _mm512_mask_add_epi8(w1, _cvtu64_mask64(load_u64(pb + P::kExtra + 16 * j + 8)), w1, b4);
    }
  }
}

template <class T>
size_t packed_panel_bytes_k(int64_t cols) {
  return static_cast<size_t>(cols / QK_K) * PackK<T>::kBytes;
}

template <class T>
void pack_k(const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1, uint8_t* dst) {
  using P = PackK<T>;
  const int64_t nsb = cols / QK_K;
  const size_t pbytes = packed_panel_bytes_k<T>(cols);
  alignas(64) uint8_t codes[16][QK_K];
  alignas(64) uint8_t sm[16][16];
  alignas(32) uint16_t d[16], dmin[16];
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = dst + static_cast<size_t>(p) * pbytes;
    std::memset(panel, 0, pbytes);
    const int n_valid = static_cast<int>(std::min<int64_t>(16, rows - 16 * p));
    for (int64_t sb = 0; sb < nsb; ++sb) {
      std::memset(codes, 0, sizeof codes);
      std::memset(sm, 0, sizeof sm);
      std::memset(d, 0, sizeof d);
      std::memset(dmin, 0, sizeof dmin);
      for (int i = 0; i < n_valid; ++i) {
        const uint8_t* blk = static_cast<const uint8_t*>(w) + static_cast<size_t>(16 * p + i) * wrow + static_cast<size_t>(sb) * T::kBlockBytes;
        if constexpr (P::kQ6) {
          const auto& b = *reinterpret_cast<const BlockQ6_K*>(blk);
          d[i] = b.d;
          std::memcpy(sm[i], b.scales, 16);
          unpack_q6k_codes(b, codes[i]);
        } else if constexpr (P::kQ5) {
          const auto& b = *reinterpret_cast<const BlockQ5_K*>(blk);
          d[i] = b.d;
          dmin[i] = b.dmin;
          scales_mins_k4_all(b.scales, sm[i]);
          unpack_k45_codes<true>(b.qs, b.qh, codes[i]);
        } else {
          const auto& b = *reinterpret_cast<const BlockQ4_K*>(blk);
          d[i] = b.d;
          dmin[i] = b.dmin;
          scales_mins_k4_all(b.scales, sm[i]);
          unpack_k45_codes<false>(b.qs, nullptr, codes[i]);
        }
      }
      uint8_t* dsb = panel + static_cast<size_t>(sb) * P::kBytes;
      for (int c = 0; c < 8; ++c) {  // steps 8c .. 8c + 7
        __m256i rws[16];
        PICOLM_GEMM_UNROLL for (int i = 0; i < 16; ++i) rws[i] = load256(codes[i] + 32 * c);
        __m512i v[8];
        transpose_16x8(rws, v);
        for (int jj = 0; jj < 4; ++jj) _mm512_storeu_si512(dsb + 64 * (4 * c + jj), nibble_pair(v[2 * jj], v[2 * jj + 1]));
        if constexpr (P::kQ5) {
          uint64_t m[8];
          for (int s = 0; s < 8; ++s) m[s] = bit4_mask(v[s]);
          std::memcpy(dsb + P::kExtra + 64 * c, m, 64);
        }
        if constexpr (P::kQ6) {
          for (int h = 0; h < 2; ++h) {  // high-bit vector of sub-block 2c + h: steps 8c + 4h + e
            __m512i hv = _mm512_setzero_si512();
            for (int e = 0; e < 4; ++e) {
              const __m512i two = _mm512_and_si512(_mm512_srli_epi16(v[4 * h + e], 4), _mm512_set1_epi8(3));
              hv = _mm512_or_si512(hv, _mm512_slli_epi16(two, 2 * e));
            }
            _mm512_storeu_si512(dsb + P::kExtra + 64 * (2 * c + h), hv);
          }
        }
      }
      packed::write_side_k(T::kType, sm[0], sizeof sm[0], dsb + P::kSide);
      if constexpr (!P::kQ6) std::memcpy(dsb + P::kDmin, dmin, 32);
      std::memcpy(dsb + P::kD, d, 32);
    }
  }
}

template <class T, int R, int N>
void tile_pk(int64_t nsb, const uint8_t* panel, size_t pstride, const uint8_t* act, size_t arow, const uint8_t* meta,
             size_t meta_stride, float* y, int64_t ldy, const __mmask16 (&store)[R]) {
  using P = PackK<T>;
  using L = typename T::L;
  constexpr int kAheadSb = 2;
  constexpr int kLinesPerSub = static_cast<int>((P::kBytes / 64 + P::kSub - 1) / P::kSub);
  __m512 acc[R][N];
  PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * P::kBytes;
    const uint8_t* ab = act + static_cast<size_t>(sb) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    const uint8_t* mb = meta + static_cast<size_t>(sb) * L::kMetaBytes;
    __m512i isum[R][N];
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) isum[r][n] = _mm512_setzero_si512();
    alignas(64) uint8_t side[P::kQ6 ? 1 : R][256];
    const uint8_t* sides[R];
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) sides[r] = side_bytes<T>(pb + r * pstride, side[P::kQ6 ? 0 : r]);
    for (int s = 0; s < P::kSub; ++s) {
      __m512i p[R][N];
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
        const __m512i c = P::kQ6 ? _mm512_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * s)) : _mm512_setzero_si512();
        PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) p[r][n] = c;
      }
      // Software prefetch kAheadSb super-blocks (5-7 KB) ahead, a sub-block's share of the lines at
      // a time: the hardware prefetchers alone leave a decode step latency-bound (measured: 11 ->
      // 22 GB/s for one thread, about the read bandwidth of a plain sequential loop).
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
        const uint8_t* ahead = pb + r * pstride + kAheadSb * P::kBytes + s * kLinesPerSub * 64;
        PICOLM_GEMM_UNROLL for (int l = 0; l < kLinesPerSub; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
      }
      // Steps of this sub-block: 8 (Q4_K/Q5_K) or 4 (Q6_K), two per nibble vector.
      constexpr int kPairs = P::kQ6 ? 2 : 4;
      PICOLM_GEMM_UNROLL for (int jj = 0; jj < kPairs; ++jj) {
        const int j = kPairs * s + jj;  // nibble vector: steps 2j, 2j+1
        __m512i w0[R], w1[R];
        PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) unpack_pair_k<T>(pb + r * pstride, j, w0[r], w1[r]);
        PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
          const __m512i a0 = _mm512_set1_epi32(load_i32(ab + n * arow + 8 * j));
          const __m512i a1 = _mm512_set1_epi32(load_i32(ab + n * arow + 8 * j + 4));
          PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
            p[r][n] = _mm512_dpbusd_epi32(p[r][n], w0[r], a0);
            p[r][n] = _mm512_dpbusd_epi32(p[r][n], w1[r], a1);
          }
        }
      }
      PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sides[r] + 16 * s));
        const __m512i scv = P::kQ6 ? _mm512_cvtepi8_epi32(sc8) : _mm512_cvtepu8_epi32(sc8);
        PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) isum[r][n] = _mm512_add_epi32(isum[r][n], _mm512_mullo_epi32(p[r][n], scv));
      }
    }
    PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      const uint8_t* pr = pb + r * pstride;
      const __m512 dv = _mm512_cvtph_ps(load256(pr + P::kD));
      __m512i mins[4];
      if constexpr (!P::kQ6)
        PICOLM_GEMM_UNROLL for (int q = 0; q < 4; ++q) mins[q] = _mm512_cvtepu8_epi16(load256(sides[r] + packed::kSideMins + 32 * q));
      PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) {
        float da;
        std::memcpy(&da, mb + n * meta_stride, 4);
        const __m512 dav = _mm512_set1_ps(da);
        acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][n]), _mm512_mul_ps(dv, dav), acc[r][n]);
        if constexpr (!P::kQ6) {
          __m512i m = _mm512_setzero_si512();
          PICOLM_GEMM_UNROLL for (int q = 0; q < 4; ++q)
            m = _mm512_dpwssd_epi32(m, mins[q], _mm512_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * q)));
          const __m512 dm = _mm512_cvtph_ps(load256(pr + P::kDmin));
          acc[r][n] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dm, dav), acc[r][n]);
        }
      }
    }
  }
  PICOLM_GEMM_UNROLL for (int n = 0; n < N; ++n) PICOLM_GEMM_UNROLL for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + n * ldy + 16 * r, store[r], acc[r][n]);
}

// Many tokens: each panel is first expanded into the byte panel of the per-call GEMM above (a
// cheap vector pass: no transposes), whose tiles then run with plain loads; the arithmetic is
// that of tile_pa / tile_pk operation for operation (same integer sums, same float operations in
// the same order), so a token's result is the same bits on either path. From 32 tokens on: below
// it the packed tiles read in place are faster (bench_kernels, 2 threads, TinyLlama ffn_up Q4_K,
// fastest owner CPU time: 8 tokens 21.5 vs 12.4 GB/s expanded, 16 tokens 13.9 vs 9.8, 24: 10.8 vs
// 6.4; 64: equal within noise), which matters for decode batches of several sequences.
constexpr int64_t kExpandTokens = 32;

template <class T>
void expand_panel_a(const uint8_t* panel, int64_t nb, uint8_t* out) {
  using P = PackA<T>;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* cb = panel + P::codes_at(b);
    uint8_t* dst = out + static_cast<size_t>(b) * kPanelBlockA;
    if constexpr (P::kQ8) {
      for (int s = 0; s < 8; ++s) _mm512_storeu_si512(dst + 64 * s, _mm512_loadu_si512(cb + 64 * s));
    } else {
      for (int j = 0; j < 4; ++j) {
        __m512i w0, w1;
        unpack_pair_a<T>(cb, panel + P::masks_at(b), j, w0, w1);
        _mm512_storeu_si512(dst + 128 * j, w0);
        _mm512_storeu_si512(dst + 128 * j + 64, w1);
      }
    }
    _mm512_storeu_ps(dst + 512, _mm512_cvtph_ps(load256(panel + P::d_at(b))));
  }
}

template <class T>
void expand_panel_k(const uint8_t* panel, int64_t nsb, uint8_t* out) {
  using P = PackK<T>;
  using L = typename T::L;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * P::kBytes;
    uint8_t* dst = out + static_cast<size_t>(sb) * L::kBytes;
    for (int j = 0; j < 32; ++j) {
      __m512i w0, w1;
      unpack_pair_k<T>(pb, j, w0, w1);
      _mm512_storeu_si512(dst + 128 * j, w0);
      _mm512_storeu_si512(dst + 128 * j + 64, w1);
    }
    alignas(64) uint8_t side[256];
    const uint8_t* sd = side_bytes<T>(pb, side);
    for (int s = 0; s < P::kSub; ++s) {
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 16 * s));
      _mm512_storeu_si512(dst + L::kScales + 64 * s, P::kQ6 ? _mm512_cvtepi8_epi32(sc8) : _mm512_cvtepu8_epi32(sc8));
    }
    _mm512_storeu_ps(dst + L::kD, _mm512_cvtph_ps(load256(pb + P::kD)));
    if constexpr (!P::kQ6) {
      _mm512_storeu_ps(dst + L::kNegDmin, _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(load256(pb + P::kDmin))));
      for (int q = 0; q < 4; ++q)
        _mm512_storeu_si512(dst + L::kMins + 64 * q, _mm512_cvtepu8_epi16(load256(sd + packed::kSideMins + 32 * q)));
    }
  }
}

// Rows [r0, r1) (r0 a multiple of 16) for every token; tokens in tiles of N, panels in pairs
// (R = 2) for several tokens. One token (decode) takes one panel at a time, so the weights are
// read as one sequential stream: two streams measured half the bandwidth (11 vs 22 GB/s).

template <class T>
void run_packed_a(int64_t cols, const uint8_t* packed, int64_t r0, int64_t r1, const void* act, size_t arow,
                  const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  const int64_t nb = cols / QK8_0;
  const size_t pstride = PackA<T>::panel_bytes(cols);
  const size_t xstride = panel_bytes_a(cols);
  const auto* ab = static_cast<const uint8_t*>(act);
  const auto* mt = reinterpret_cast<const MetaA*>(meta);
  const bool expand = n_tokens >= kExpandTokens;
  auto panel = [&](int64_t r) { return packed + static_cast<size_t>(r / 16) * pstride; };
  drive_panels<kTileTokensA>(
      r0, r1, n_tokens, n_tokens > 1,
      [&](int64_t r, int R) {
        if (expand)
          for (int i = 0; i < R; ++i) expand_panel_a<T>(panel(r) + i * pstride, nb, scratch + i * xstride);
      },
      [&](auto Rc, auto Nc, int64_t r, int64_t t, const auto& m) {
        constexpr int kR = decltype(Rc)::value, kN = decltype(Nc)::value;
        const uint8_t* at = ab + static_cast<size_t>(t) * arow;
        float* yt = y + t * ldy + (r - r0);
        if (expand) tile_a<kR, kN>(nb, scratch, xstride, at, arow, mt + t * nb, yt, ldy, m);
        else tile_pa<T, kR, kN>(nb, panel(r), pstride, at, arow, mt + t * nb, yt, ldy, m);
      });
}

template <class T>
void run_packed_k(int64_t cols, const uint8_t* packed, int64_t r0, int64_t r1, const void* act, size_t arow,
                  const uint8_t* meta, int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  using L = typename T::L;
  const int64_t nsb = cols / QK_K;
  const size_t pstride = packed_panel_bytes_k<T>(cols);
  const size_t xstride = panel_bytes_k<T>(cols);
  const size_t mstride = static_cast<size_t>(nsb) * L::kMetaBytes;
  const auto* ab = static_cast<const uint8_t*>(act);
  auto panel = [&](int64_t r) { return packed + static_cast<size_t>(r / 16) * pstride; };
  if (n_tokens >= kExpandTokens) {
    drive_panels<kTileTokensKX>(
        r0, r1, n_tokens, true,
        [&](int64_t r, int R) {
          for (int i = 0; i < R; ++i) expand_panel_k<T>(panel(r) + i * pstride, nsb, scratch + i * xstride);
        },
        [&](auto Rc, auto Nc, int64_t r, int64_t t, const auto& m) {
          tile_k<T, decltype(Rc)::value, decltype(Nc)::value>(nsb, scratch, xstride, ab + static_cast<size_t>(t) * arow, arow,
                                                              meta + static_cast<size_t>(t) * mstride, mstride,
                                                              y + t * ldy + (r - r0), ldy, m);
        });
    return;
  }
  drive_panels<kTileTokensK>(
      r0, r1, n_tokens, n_tokens > 1, [](int64_t, int) {},
      [&](auto Rc, auto Nc, int64_t r, int64_t t, const auto& m) {
        tile_pk<T, decltype(Rc)::value, decltype(Nc)::value>(nsb, panel(r), pstride, ab + static_cast<size_t>(t) * arow, arow,
                                                             meta + static_cast<size_t>(t) * mstride, mstride,
                                                             y + t * ldy + (r - r0), ldy, m);
      });
}

template <class T>
PackedKernel packed_a() {
  return {packed_panel_bytes_a<T>, pack_a<T>, run_packed_a<T>};
}
template <class T>
PackedKernel packed_k() {
  return {packed_panel_bytes_k<T>, pack_k<T>, run_packed_k<T>};
}

}  // namespace

void fill_avx512_gemm(KernelTable& t) {
  t.gemm[static_cast<int>(GgmlType::Q8_0)] = gemm_a<TypeQ8_0>();
  t.gemm[static_cast<int>(GgmlType::Q4_0)] = gemm_a<TypeQ4_0>();
  t.gemm[static_cast<int>(GgmlType::Q5_0)] = gemm_a<TypeQ5_0>();
  t.gemm[static_cast<int>(GgmlType::Q4_K)] = gemm_k<TypeQ4_K>();
  t.gemm[static_cast<int>(GgmlType::Q5_K)] = gemm_k<TypeQ5_K>();
  t.gemm[static_cast<int>(GgmlType::Q6_K)] = gemm_k<TypeQ6_K>();
  t.packed[static_cast<int>(GgmlType::Q8_0)] = packed_a<TypeQ8_0>();
  t.packed[static_cast<int>(GgmlType::Q4_0)] = packed_a<TypeQ4_0>();
  t.packed[static_cast<int>(GgmlType::Q5_0)] = packed_a<TypeQ5_0>();
  t.packed[static_cast<int>(GgmlType::Q4_K)] = packed_k<TypeQ4_K>();
  t.packed[static_cast<int>(GgmlType::Q5_K)] = packed_k<TypeQ5_K>();
  t.packed[static_cast<int>(GgmlType::Q6_K)] = packed_k<TypeQ6_K>();
  // From 2 tokens on, so that every token of a multi-token eval takes the same path whatever the
  // batch split (Session never makes a 1-token micro-batch out of a longer eval): prefill results
  // do not depend on how a prompt was cut (prompt cache restores are bit-exact).
  t.gemm_min_tokens = 2;
}

}  // namespace picolm::kq
