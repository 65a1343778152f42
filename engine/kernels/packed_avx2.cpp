// Packed-weight kernels for AVX2 CPUs without AVX-512 (e.g. Intel N100-class mini-PCs): the layout
// of packed_layout.h, written by the portable packer, read as two 256-bit halves of each 64-byte
// step vector (rows 0-7, rows 8-15). A tile covers one half-panel (8 rows in the lanes) and up to
// kTileTokens tokens; everything outside the multiply-adds (scales, offsets, float work) is shared
// by the 8 rows, as in the AVX-512 tiles. u8 x s8 products go through VPMADDUBSW + VPMADDWD (codes
// of at most 6 bits cannot saturate the 16-bit pair sums); Q8_0 codes are turned back into signed
// weights and use the sign trick instead, so its per-token offset correction is not applied.
// A token's operations do not depend on the other tokens of a tile, so one token alone (decode)
// and the same token in a batch give the same bits.
#include "kernels/packed_layout.h"
#include "kernels/quant_x86_impl.h"

namespace picolm::kq {
namespace {

using packed::LayoutA;
using packed::LayoutK;

constexpr int kTileTokens = 4;

using packed::MetaA;
using packed::meta_bytes_k;

template <GgmlType T>
void prepare(int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  if constexpr (packed::is_k_quant(T))
    packed::prepare_meta_k(T, cols, act, arow, t0, t1, meta);
  else
    packed::prepare_meta_a(T, cols, act, arow, t0, t1, meta);
}

template <GgmlType T>
size_t meta_bytes(int64_t cols) {
  if constexpr (packed::is_k_quant(T))
    return static_cast<size_t>(cols / QK_K) * meta_bytes_k(T);
  else
    return static_cast<size_t>(cols / QK8_0) * sizeof(MetaA);
}
size_t no_scratch(int64_t) { return 0; }

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc + sum of 4 u8 x s8 products per 32-bit lane (w in [0, 63]).
inline __m256i dot4(__m256i acc, __m256i w, __m256i a) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
}

// The fifth bits of 32 codes (bits 32h..32h+31 of a step mask) as 0x10 bytes.
inline __m256i fifth_bits(const uint8_t* mask, int h) {
  return _mm256_and_si256(bits_to_bytes(mask + 4 * h), _mm256_set1_epi8(0x10));
}

// 6-bit values of a nibble vector `raw` and its high-bit vector `hv` (packed_layout.h): fields
// e = 0, 1 (first) or 2, 3 of hv moved to bits 4-5, over the low and the high nibbles.
inline void unpack6(__m256i raw, __m256i hv, bool first, __m256i& w0, __m256i& w1) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), b45 = _mm256_set1_epi8(0x30);
  w0 = _mm256_or_si256(_mm256_and_si256(raw, m4),
                       first ? _mm256_and_si256(_mm256_slli_epi16(hv, 4), b45) : _mm256_and_si256(hv, b45));
  w1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                       first ? _mm256_and_si256(_mm256_slli_epi16(hv, 2), b45) : _mm256_and_si256(_mm256_srli_epi16(hv, 2), b45));
}

// The 256 side bytes of a Q4_K/Q5_K super-block (scales [8][16], mins [4][16][2]) from the 192
// of its 6-bit form, to `side`.
inline void decode_side6(const uint8_t* src, uint8_t* side) {
  for (int h = 0; h < 2; ++h) {
    const __m256i hv = load256(src + 128 + 32 * h);
    __m256i v[4];
    unpack6(load256(src + 32 * h), hv, true, v[0], v[1]);
    unpack6(load256(src + 64 + 32 * h), hv, false, v[2], v[3]);
    for (int e = 0; e < 4; ++e) _mm256_store_si256(reinterpret_cast<__m256i*>(side + 64 * e + 32 * h), v[e]);
  }
}

inline __m256i store_mask(int n_valid) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Halves h0 .. h0 + H - 1 (half h: rows 8h..8h+7) of one panel, N tokens. H = 2 reads every line
// of the panel once (decode: memory-bound); H = 1 keeps more tokens in registers (prefill).
template <GgmlType T, int N, int H>
void tile_a(int64_t nb, const uint8_t* panel, int h0, const uint8_t* act, size_t arow, const MetaA* meta, float* y,
            int64_t ldy, const int (&n_valid)[2]) {
  constexpr LayoutA L = packed::layout_a(T);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[H][N];
  for (int hh = 0; hh < H; ++hh)
    for (int n = 0; n < N; ++n) acc[hh][n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s[H][N];
    for (int n = 0; n < N; ++n)
      for (int hh = 0; hh < H; ++hh) s[hh][n] = T == GgmlType::Q8_0 ? _mm256_setzero_si256() : _mm256_set1_epi32(meta[n * nb + b].corr);
    const uint8_t* ab = act + static_cast<size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    // The pass over the first half brings the panel in: software prefetch 4 two-block units ahead,
    // half a unit's lines per block (measured on decode, 2 threads, paired runs: Q5_0 +9-18%,
    // Q4_0 +3-9%, Q8_0 +4-5%).
    if (h0 == 0) {
      const packed::Span sp = packed::prefetch_span_a(L, b, 4);
      for (size_t l = 0; l < sp.bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(panel + sp.offset + l), _MM_HINT_T0);
    }
    for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      const uint8_t* cb = panel + L.codes_at(b) + 32 * h;
      if constexpr (T == GgmlType::Q8_0) {
        for (int st = 0; st < 8; ++st) {
          const __m256i q = _mm256_xor_si256(load256(cb + 64 * st), _mm256_set1_epi8(static_cast<char>(0x80)));
          const __m256i aq = _mm256_sign_epi8(q, q);
          for (int n = 0; n < N; ++n) {
            const __m256i a = _mm256_set1_epi32(load_i32(ab + n * arow + 4 * st));
            s[hh][n] = dot4(s[hh][n], aq, _mm256_sign_epi8(a, q));
          }
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const __m256i raw = load256(cb + 64 * j);
          __m256i w0 = _mm256_and_si256(raw, m4), w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
          if constexpr (L.masks) {
            const uint8_t* mk = panel + L.masks_at(b);
            w0 = _mm256_or_si256(w0, fifth_bits(mk + 16 * j, h));
            w1 = _mm256_or_si256(w1, fifth_bits(mk + 16 * j + 8, h));
          }
          for (int n = 0; n < N; ++n) {
            s[hh][n] = dot4(s[hh][n], w0, _mm256_set1_epi32(load_i32(ab + n * arow + 8 * j)));
            s[hh][n] = dot4(s[hh][n], w1, _mm256_set1_epi32(load_i32(ab + n * arow + 8 * j + 4)));
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + L.d_at(b) + 16 * h)));
      for (int n = 0; n < N; ++n)
        acc[hh][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[hh][n]), _mm256_mul_ps(dw, _mm256_set1_ps(meta[n * nb + b].d)), acc[hh][n]);
    }
  }
  for (int hh = 0; hh < H; ++hh) {
    const __m256i sm = store_mask(n_valid[h0 + hh]);
    for (int n = 0; n < N; ++n) _mm256_maskstore_ps(y + n * ldy + 8 * (h0 + hh), sm, acc[hh][n]);
  }
}

template <GgmlType T, int N, int H>
void tile_k(int64_t nsb, const uint8_t* panel, int h0, const uint8_t* act, size_t arow, const uint8_t* meta,
            size_t meta_stride, float* y, int64_t ldy, const int (&n_valid)[2]) {
  constexpr LayoutK L = packed::layout_k(T);
  constexpr bool kQ6 = T == GgmlType::Q6_K, kQ5 = T == GgmlType::Q5_K;
  constexpr int kLinesPerSub = static_cast<int>((L.bytes / 64 + L.n_sub - 1) / L.n_sub);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[H][N];
  for (int hh = 0; hh < H; ++hh)
    for (int n = 0; n < N; ++n) acc[hh][n] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * L.bytes;
    const uint8_t* ab = act + static_cast<size_t>(sb) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs);
    const uint8_t* mb = meta + static_cast<size_t>(sb) * meta_bytes_k(T);
    __m256i isum[H][N];
    for (int hh = 0; hh < H; ++hh)
      for (int n = 0; n < N; ++n) isum[hh][n] = _mm256_setzero_si256();
    // Scales (and mins): Q6_K's bytes in place, Q4_K/Q5_K's decoded from 6 bits to bytes here.
    alignas(32) uint8_t side[kQ6 ? 1 : 256];
    const uint8_t* sd = pb + L.side;
    if constexpr (!kQ6) {
      decode_side6(sd, side);
      sd = side;
    }
    for (int s = 0; s < L.n_sub; ++s) {
      // The pass over the first half brings the panel in: software prefetch 2 super-blocks ahead,
      // a sub-block's share of the lines at a time (as the AVX-512 tiles).
      if (h0 == 0)
        for (int l = 0; l < kLinesPerSub; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(pb + 2 * L.bytes + (s * kLinesPerSub + l) * 64), _MM_HINT_T0);
      for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      __m256i p[N];
      for (int n = 0; n < N; ++n) p[n] = kQ6 ? _mm256_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * s)) : _mm256_setzero_si256();
      constexpr int kPairs = kQ6 ? 2 : 4;
      for (int jj = 0; jj < kPairs; ++jj) {
        const int j = kPairs * s + jj;
        const __m256i raw = load256(pb + 64 * j + 32 * h);
        __m256i w0, w1;
        if constexpr (kQ6) {
          unpack6(raw, load256(pb + L.extra + 64 * s + 32 * h), jj == 0, w0, w1);
        } else {
          w0 = _mm256_and_si256(raw, m4);
          w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        }
        if constexpr (kQ5) {
          w0 = _mm256_or_si256(w0, fifth_bits(pb + L.extra + 16 * j, h));
          w1 = _mm256_or_si256(w1, fifth_bits(pb + L.extra + 16 * j + 8, h));
        }
        for (int n = 0; n < N; ++n) {
          p[n] = dot4(p[n], w0, _mm256_set1_epi32(load_i32(ab + n * arow + 8 * j)));
          p[n] = dot4(p[n], w1, _mm256_set1_epi32(load_i32(ab + n * arow + 8 * j + 4)));
        }
      }
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sd + 16 * s + 8 * h));
      const __m256i scv = kQ6 ? _mm256_cvtepi8_epi32(sc8) : _mm256_cvtepu8_epi32(sc8);
      for (int n = 0; n < N; ++n) isum[hh][n] = _mm256_add_epi32(isum[hh][n], _mm256_mullo_epi32(p[n], scv));
      }
    }
    for (int hh = 0; hh < H; ++hh) {
      const int h = h0 + hh;
      const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + L.d + 16 * h)));
      for (int n = 0; n < N; ++n) {
        float da;
        std::memcpy(&da, mb + n * meta_stride, 4);
        const __m256 dav = _mm256_set1_ps(da);
        acc[hh][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[hh][n]), _mm256_mul_ps(dv, dav), acc[hh][n]);
        if constexpr (!kQ6) {
          __m256i m = _mm256_setzero_si256();
          for (int q = 0; q < 4; ++q) {
            const __m256i mv = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + packed::kSideMins + 32 * q + 16 * h)));
            m = _mm256_add_epi32(m, _mm256_madd_epi16(mv, _mm256_set1_epi32(load_i32(mb + n * meta_stride + 4 + 4 * q))));
          }
          const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + L.dmin + 16 * h)));
          acc[hh][n] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dm, dav), acc[hh][n]);
        }
      }
    }
  }
  for (int hh = 0; hh < H; ++hh) {
    const __m256i sm = store_mask(n_valid[h0 + hh]);
    for (int n = 0; n < N; ++n) _mm256_maskstore_ps(y + n * ldy + 8 * (h0 + hh), sm, acc[hh][n]);
  }
}

template <int N, class Fn>
inline void with_n(int n, Fn&& fn) {
  if constexpr (N >= 1) {
    if (n == N) {
      fn(std::integral_constant<int, N>{});
      return;
    }
    with_n<N - 1>(n, fn);
  }
}

template <GgmlType T>
void run(int64_t cols, const uint8_t* packed, int64_t r0, int64_t r1, const void* act, size_t arow, const uint8_t* meta,
         int64_t n_tokens, float* y, int64_t ldy, uint8_t*) {
  constexpr bool kq = packed::is_k_quant(T);
  const size_t pstride = packed::panel_bytes(T, cols);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t nblk = kq ? cols / QK_K : cols / QK8_0;
  const size_t mstride = kq ? static_cast<size_t>(nblk) * meta_bytes_k(T) : 0;
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* panel = packed + static_cast<size_t>(r / 16) * pstride;
    int n_valid[2];
    for (int h = 0; h < 2; ++h) n_valid[h] = static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(0, r1 - (r + 8 * h))));
    if (n_tokens == 1) {  // both halves in one pass: each line of the panel is read once
      if constexpr (kq)
        tile_k<T, 1, 2>(nblk, panel, 0, ab, arow, meta, mstride, y + (r - r0), ldy, n_valid);
      else
        tile_a<T, 1, 2>(nblk, panel, 0, ab, arow, reinterpret_cast<const MetaA*>(meta), y + (r - r0), ldy, n_valid);
      continue;
    }
    for (int h = 0; h < 2 && n_valid[h] > 0; ++h) {
      for (int64_t t = 0; t < n_tokens; t += kTileTokens) {
        const int n = static_cast<int>(std::min<int64_t>(kTileTokens, n_tokens - t));
        float* yt = y + t * ldy + (r - r0);
        with_n<kTileTokens>(n, [&](auto Nc) {
          if constexpr (kq)
            tile_k<T, decltype(Nc)::value, 1>(nblk, panel, h, ab + static_cast<size_t>(t) * arow, arow,
                                              meta + static_cast<size_t>(t) * mstride, mstride, yt, ldy, n_valid);
          else
            tile_a<T, decltype(Nc)::value, 1>(nblk, panel, h, ab + static_cast<size_t>(t) * arow, arow,
                                              reinterpret_cast<const MetaA*>(meta) + t * nblk, yt, ldy, n_valid);
        });
      }
    }
  }
}

size_t panel_bytes_of(GgmlType t, int64_t cols) { return packed::panel_bytes(t, cols); }

template <GgmlType T>
void set(KernelTable& k) {
  GemmKernel& g = k.gemm[static_cast<int>(T)];
  g.prepare = prepare<T>;
  g.meta_bytes = meta_bytes<T>;
  g.scratch_bytes = no_scratch;
  g.run = nullptr;  // no per-call GEMM on AVX2: prefill runs the packed tiles (or the dot tiles)
  PackedKernel& p = k.packed[static_cast<int>(T)];
  p.panel_bytes = [](int64_t cols) { return panel_bytes_of(T, cols); };
  p.pack = [](const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1, uint8_t* dst) {
    packed::pack_panels_ref(T, w, wrow, rows, cols, p0, p1, dst);
  };
  p.run = run<T>;
}

}  // namespace

void fill_avx2_packed(KernelTable& t) {
  set<GgmlType::Q8_0>(t);
  set<GgmlType::Q4_0>(t);
  set<GgmlType::Q5_0>(t);
  set<GgmlType::Q4_K>(t);
  set<GgmlType::Q5_K>(t);
  set<GgmlType::Q6_K>(t);
}

}  // namespace picolm::kq
