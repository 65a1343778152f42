// Internal to engine/kernels: packed-weight tiles for AArch64 NEON, included by packed_neon.cpp
// (plain ARMv8-A), packed_neon_dotprod.cpp (+dotprod) and packed_neon_i8mm.cpp (+dotprod+i8mm:
// SMMLA prefill tiles, below), each getting its own copy for its ISA (anonymous namespace). The
// layout is packed_layout.h's, written by the portable packer.
//
// A 64-byte step vector is four 128-bit registers, each holding 4 rows x 4 consecutive codes, so
// one 32-bit lane is one row: a 4-wide dot of the lane's codes with 4 activation bytes broadcast
// to every lane gives each row's partial sum in its own lane. With +dotprod that is one SDOT; the
// plain build uses SMULL + ADDP + SADALP, which gives the same integers (every code fits in a signed
// byte once Q8_0's +128 offset is removed, and two products of 8-bit values never overflow 16 bits
// for activations in [-127, 127]). Q8_0 codes are turned back into signed weights, so its per-token
// offset correction is not applied (as in the AVX2 tiles).
// A token's operations never depend on the other tokens of a call or on how many row groups a tile
// covers, so a token alone (decode) and the same token in a batch give the same bits.
#pragma once
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"

namespace picolm::kq {
namespace {

using packed::LayoutA;
using packed::LayoutK;
using packed::MetaA;
using packed::meta_bytes_k;

constexpr int kPackedTileTokens = 4;

template <GgmlType T>
void pk_prepare(int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  if constexpr (packed::is_k_quant(T))
    packed::prepare_meta_k(T, cols, act, arow, t0, t1, meta);
  else
    packed::prepare_meta_a(T, cols, act, arow, t0, t1, meta);
}

template <GgmlType T>
size_t pk_meta_bytes(int64_t cols) {
  if constexpr (packed::is_k_quant(T))
    return static_cast<size_t>(cols / QK_K) * meta_bytes_k(T);
  else
    return static_cast<size_t>(cols / QK8_0) * sizeof(MetaA);
}
[[maybe_unused]] size_t pk_no_scratch(int64_t) { return 0; }

inline int32_t pk_load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Four activation bytes at p in every 32-bit lane.
inline int8x16_t pk_bcast4(const int8_t* p) { return vreinterpretq_s8_s32(vdupq_n_s32(pk_load_i32(p))); }

// acc + per lane the sum of the 4 products of w and a in that lane.
inline int32x4_t pk_dot4(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, a);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
  const int16x8_t hi = vmull_high_s8(w, a);
  return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

// Fifth bits of rows 4g..4g+3 of a step (16 bits of its 64-bit mask) as 0x10 bytes.
inline uint8x16_t pk_fifth(const uint8_t* mask, int g) {
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t b = vcombine_u8(vdup_n_u8(mask[2 * g]), vdup_n_u8(mask[2 * g + 1]));
  return vandq_u8(vtstq_u8(b, vld1q_u8(kBit)), vdupq_n_u8(0x10));
}

inline float32x4_t pk_halves(const uint8_t* p) {
  uint16_t h[4];
  std::memcpy(h, p, 8);
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

// Rows 4g..4g+3 of a panel, n_valid of them real: stores only those.
inline void pk_store(float* y, float32x4_t v, int n_valid) {
  if (n_valid >= 4) {
    vst1q_f32(y, v);
    return;
  }
  float tmp[4];
  vst1q_f32(tmp, v);
  for (int i = 0; i < n_valid; ++i) y[i] = tmp[i];
}

// Row groups g0 .. g0 + G - 1 of one panel (group g: rows 4g..4g+3), N tokens.
template <GgmlType T, int N, int G>
void pk_tile_a(int64_t nb, const uint8_t* panel, int g0, const uint8_t* act, size_t arow, const MetaA* meta, float* y,
               int64_t ldy, const int (&n_valid)[4]) {
  constexpr LayoutA L = packed::layout_a(T);
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t acc[G][N];
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) acc[gg][n] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* ab = reinterpret_cast<const int8_t*>(act + static_cast<size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs));
    for (int gg = 0; gg < G; ++gg) {
      const int g = g0 + gg;
      int32x4_t s[N];
      for (int n = 0; n < N; ++n) s[n] = vdupq_n_s32(T == GgmlType::Q8_0 ? 0 : meta[n * nb + b].corr);
      const uint8_t* cb = panel + L.codes_at(b) + 16 * g;
      if constexpr (T == GgmlType::Q8_0) {
        for (int st = 0; st < 8; ++st) {
          const int8x16_t q = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(cb + 64 * st), vdupq_n_u8(0x80)));
          for (int n = 0; n < N; ++n) s[n] = pk_dot4(s[n], q, pk_bcast4(ab + n * arow + 4 * st));
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const uint8x16_t raw = vld1q_u8(cb + 64 * j);
          uint8x16_t w0 = vandq_u8(raw, m4), w1 = vshrq_n_u8(raw, 4);
          if constexpr (L.masks) {
            const uint8_t* mk = panel + L.masks_at(b);
            w0 = vorrq_u8(w0, pk_fifth(mk + 16 * j, g));
            w1 = vorrq_u8(w1, pk_fifth(mk + 16 * j + 8, g));
          }
          for (int n = 0; n < N; ++n) {
            s[n] = pk_dot4(s[n], vreinterpretq_s8_u8(w0), pk_bcast4(ab + n * arow + 8 * j));
            s[n] = pk_dot4(s[n], vreinterpretq_s8_u8(w1), pk_bcast4(ab + n * arow + 8 * j + 4));
          }
        }
      }
      const float32x4_t dw = pk_halves(panel + L.d_at(b) + 8 * g);
      for (int n = 0; n < N; ++n) acc[gg][n] = vfmaq_f32(acc[gg][n], vcvtq_f32_s32(s[n]), vmulq_n_f32(dw, meta[n * nb + b].d));
    }
  }
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) pk_store(y + n * ldy + 4 * (g0 + gg), acc[gg][n], n_valid[g0 + gg]);
}

// The 256 side bytes of a Q4_K/Q5_K super-block (scales [8][16], mins [4][16][2]) from their
// 192-byte 6-bit form.
inline void pk_decode_side6(const uint8_t* src, uint8_t* side) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b45 = vdupq_n_u8(0x30);
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t r0 = vld1q_u8(src + 16 * c), r1 = vld1q_u8(src + 64 + 16 * c), hv = vld1q_u8(src + 128 + 16 * c);
    vst1q_u8(side + 16 * c, vorrq_u8(vandq_u8(r0, m4), vandq_u8(vshlq_n_u8(hv, 4), b45)));
    vst1q_u8(side + 64 + 16 * c, vorrq_u8(vshrq_n_u8(r0, 4), vandq_u8(vshlq_n_u8(hv, 2), b45)));
    vst1q_u8(side + 128 + 16 * c, vorrq_u8(vandq_u8(r1, m4), vandq_u8(hv, b45)));
    vst1q_u8(side + 192 + 16 * c, vorrq_u8(vshrq_n_u8(r1, 4), vandq_u8(vshrq_n_u8(hv, 2), b45)));
  }
}

template <GgmlType T, int N, int G>
void pk_tile_k(int64_t nsb, const uint8_t* panel, int g0, const uint8_t* act, size_t arow, const uint8_t* meta,
               size_t meta_stride, float* y, int64_t ldy, const int (&n_valid)[4]) {
  constexpr LayoutK L = packed::layout_k(T);
  constexpr bool kQ6 = T == GgmlType::Q6_K, kQ5 = T == GgmlType::Q5_K;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b45 = vdupq_n_u8(0x30);
  float32x4_t acc[G][N];
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) acc[gg][n] = vdupq_n_f32(0.0f);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * L.bytes;
    const int8_t* ab = reinterpret_cast<const int8_t*>(act + static_cast<size_t>(sb) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, qs));
    const uint8_t* mb = meta + static_cast<size_t>(sb) * meta_bytes_k(T);
    // Scales (and mins): Q6_K's bytes in place, Q4_K/Q5_K's decoded from 6 bits to bytes here.
    alignas(16) uint8_t side[kQ6 ? 1 : 256];
    const uint8_t* sd = pb + L.side;
    if constexpr (!kQ6) {
      pk_decode_side6(sd, side);
      sd = side;
    }
    for (int gg = 0; gg < G; ++gg) {
      const int g = g0 + gg;
      int32x4_t isum[N];
      for (int n = 0; n < N; ++n) isum[n] = vdupq_n_s32(0);
      for (int s = 0; s < L.n_sub; ++s) {
        int32x4_t p[N];
        for (int n = 0; n < N; ++n) p[n] = vdupq_n_s32(kQ6 ? pk_load_i32(mb + n * meta_stride + 4 + 4 * s) : 0);
        constexpr int kPairs = kQ6 ? 2 : 4;
        for (int jj = 0; jj < kPairs; ++jj) {
          const int j = kPairs * s + jj;
          const uint8x16_t raw = vld1q_u8(pb + 64 * j + 16 * g);
          uint8x16_t w0 = vandq_u8(raw, m4), w1 = vshrq_n_u8(raw, 4);
          if constexpr (kQ6) {
            const uint8x16_t hv = vld1q_u8(pb + L.extra + 64 * s + 16 * g);
            if (jj == 0) {
              w0 = vorrq_u8(w0, vandq_u8(vshlq_n_u8(hv, 4), b45));
              w1 = vorrq_u8(w1, vandq_u8(vshlq_n_u8(hv, 2), b45));
            } else {
              w0 = vorrq_u8(w0, vandq_u8(hv, b45));
              w1 = vorrq_u8(w1, vandq_u8(vshrq_n_u8(hv, 2), b45));
            }
          }
          if constexpr (kQ5) {
            w0 = vorrq_u8(w0, pk_fifth(pb + L.extra + 16 * j, g));
            w1 = vorrq_u8(w1, pk_fifth(pb + L.extra + 16 * j + 8, g));
          }
          for (int n = 0; n < N; ++n) {
            p[n] = pk_dot4(p[n], vreinterpretq_s8_u8(w0), pk_bcast4(ab + n * arow + 8 * j));
            p[n] = pk_dot4(p[n], vreinterpretq_s8_u8(w1), pk_bcast4(ab + n * arow + 8 * j + 4));
          }
        }
        // Scales of rows 4g..4g+3 for sub-block s, widened to 32 bits.
        uint8_t sc4[4];
        std::memcpy(sc4, sd + 16 * s + 4 * g, 4);
        int32x4_t scv;
        if constexpr (kQ6) {
          const int32_t v[4] = {static_cast<int8_t>(sc4[0]), static_cast<int8_t>(sc4[1]), static_cast<int8_t>(sc4[2]),
                                static_cast<int8_t>(sc4[3])};
          scv = vld1q_s32(v);
        } else {
          const int32_t v[4] = {sc4[0], sc4[1], sc4[2], sc4[3]};
          scv = vld1q_s32(v);
        }
        for (int n = 0; n < N; ++n) isum[n] = vmlaq_s32(isum[n], p[n], scv);
      }
      const float32x4_t dv = pk_halves(pb + L.d + 8 * g);
      for (int n = 0; n < N; ++n) {
        float da;
        std::memcpy(&da, mb + n * meta_stride, 4);
        acc[gg][n] = vfmaq_f32(acc[gg][n], vcvtq_f32_s32(isum[n]), vmulq_n_f32(dv, da));
        if constexpr (!kQ6) {
          int32x4_t m = vdupq_n_s32(0);
          for (int q = 0; q < 4; ++q) {
            // mins of sub-blocks 2q, 2q+1 of rows 4g..4g+3 times the token's two 32-element sums.
            const int16x8_t mv = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sd + packed::kSideMins + 32 * q + 8 * g)));
            const int16x8_t bs = vreinterpretq_s16_s32(vdupq_n_s32(pk_load_i32(mb + n * meta_stride + 4 + 4 * q)));
            m = vaddq_s32(m, vpaddq_s32(vmull_s16(vget_low_s16(mv), vget_low_s16(bs)), vmull_high_s16(mv, bs)));
          }
          const float32x4_t dm = pk_halves(pb + L.dmin + 8 * g);
          acc[gg][n] = vfmsq_f32(acc[gg][n], vcvtq_f32_s32(m), vmulq_n_f32(dm, da));
        }
      }
    }
  }
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) pk_store(y + n * ldy + 4 * (g0 + gg), acc[gg][n], n_valid[g0 + gg]);
}

template <int N, class Fn>
inline void pk_with_n(int n, Fn&& fn) {
  if constexpr (N >= 1) {
    if (n == N) {
      fn(std::integral_constant<int, N>{});
      return;
    }
    pk_with_n<N - 1>(n, fn);
  }
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
// ---- i8mm tiles (packed_neon_i8mm.cpp only) -------------------------------------------------
// SMMLA multiplies a 2x8 int8 block (two rows' 8 consecutive codes) by the transpose of another
// (two tokens' 8 activations) into a 2x2 int32 block [r0t0, r0t1, r1t0, r1t1]: 32 multiply-adds
// per instruction where SDOT does 16. The panels need no new layout: w0, w1 (steps 2j, 2j+1 of
// rows 4g..4g+3, 4 codes per lane) zipped lane by lane give rows (4g, 4g+1) and (4g+2, 4g+3) with
// 8 consecutive codes each, i.e. the SMMLA operand. Integer sums of a block (K-quants: of a
// sub-block, times its scale) are exact in any order; unzipped back to the SDOT tile's lanes (one
// row per lane, one vector per token) the float arithmetic is the SDOT tile's, operation for
// operation, so a token's result is bit-identical to decode's (1 token keeps the SDOT tile) and
// to the neon / neon_dotprod tables' (tested).
// Tile: kMmGroups row groups (4 rows each) x 2 * kMmPairs tokens. The tile's activations are
// first interleaved into scratch (mm_interleave), chunk c of 8 columns as kMmPairs right-hand
// operands [t0 8 bytes, t1 8 bytes] in 64 consecutive bytes, so one load brings a chunk's 4 pairs.
// A token pair whose second token is missing (odd count) repeats the first; the copy's lanes are
// computed and not stored.
constexpr int kMmGroups = 1;
constexpr int kMmPairs = 4;
constexpr int kMmTokens = 2 * kMmPairs;

// Token pair p of chunk c of the interleaved activations.
inline int8x16_t mm_act(const int8_t* il, int64_t c, int p) { return vld1q_s8(il + (c * kMmPairs + p) * 16); }

// The qs bytes of kMmTokens tokens (rows at tok[n]) as mm_act reads them; `per_block` chunks of 8
// per activation block of `block_bytes` bytes whose codes start at `qs_offset`.
inline void mm_interleave(int64_t n_chunks, int per_block, size_t block_bytes, size_t qs_offset,
                          const uint8_t* const* tok, int8_t* il) {
  for (int64_t c = 0; c < n_chunks; ++c) {
    const size_t off = static_cast<size_t>(c / per_block) * block_bytes + qs_offset + static_cast<size_t>(c % per_block) * 8;
    for (int p = 0; p < kMmPairs; ++p)
      vst1q_u8(reinterpret_cast<uint8_t*>(il) + (c * kMmPairs + p) * 16, vcombine_u8(vld1_u8(tok[2 * p] + off), vld1_u8(tok[2 * p + 1] + off)));
  }
}
// Scratch: the interleaved activations (8 * cols bytes), then for the Q8_0-activation types each
// block's offset corrections of the token pairs as SMMLA accumulators ([c0, c1, c0, c1], 2 * cols
// bytes), so a tile starts each block's sums from them instead of adding them per token.
size_t mm_scratch_bytes(int64_t cols) { return static_cast<size_t>(cols / 8) * kMmPairs * 16 + static_cast<size_t>(cols / 32) * kMmPairs * 16; }
// Rows (4g, 4g+1) and (4g+2, 4g+3) x 8 codes from the two step vectors of rows 4g..4g+3.
inline void mm_rows(uint8x16_t w0, uint8x16_t w1, int8x16_t& z0, int8x16_t& z1) {
  z0 = vreinterpretq_s8_u32(vzip1q_u32(vreinterpretq_u32_u8(w0), vreinterpretq_u32_u8(w1)));
  z1 = vreinterpretq_s8_u32(vzip2q_u32(vreinterpretq_u32_u8(w0), vreinterpretq_u32_u8(w1)));
}
// Token 2p + h of the 2x2 blocks of rows (0,1) and (2,3): the SDOT lanes (rows 0-3).
template <int H>
inline int32x4_t mm_token(int32x4_t r01, int32x4_t r23) {
  return H == 0 ? vuzp1q_s32(r01, r23) : vuzp2q_s32(r01, r23);
}

// Q8_0-activation types: row groups g0 .. g0 + G - 1 x the 2 * NP tokens whose interleaved
// activations are at il and per-token tables at mt[n].
template <GgmlType T, int G, int NP>
void mm_tile_a(int64_t nb, const uint8_t* panel, int g0, const int8_t* il, const int32_t* cv, const MetaA* const* mt,
               float* y, int64_t ldy, int n_tok, const int (&n_valid)[4]) {
  constexpr LayoutA L = packed::layout_a(T);
  constexpr int N = 2 * NP;
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t acc[G][N];
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) acc[gg][n] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    for (int gg = 0; gg < G; ++gg) {
      const int g = g0 + gg;
      int32x4_t s[2][NP];
      for (int p = 0; p < NP; ++p)
        s[0][p] = s[1][p] = T == GgmlType::Q8_0 ? vdupq_n_s32(0) : vld1q_s32(cv + (b * kMmPairs + p) * 4);
      const uint8_t* cb = panel + L.codes_at(b) + 16 * g;
      for (int j = 0; j < 4; ++j) {
        uint8x16_t w0, w1;
        if constexpr (T == GgmlType::Q8_0) {
          w0 = veorq_u8(vld1q_u8(cb + 128 * j), vdupq_n_u8(0x80));
          w1 = veorq_u8(vld1q_u8(cb + 128 * j + 64), vdupq_n_u8(0x80));
        } else {
          const uint8x16_t raw = vld1q_u8(cb + 64 * j);
          w0 = vandq_u8(raw, m4);
          w1 = vshrq_n_u8(raw, 4);
          if constexpr (L.masks) {
            const uint8_t* mk = panel + L.masks_at(b);
            w0 = vorrq_u8(w0, pk_fifth(mk + 16 * j, g));
            w1 = vorrq_u8(w1, pk_fifth(mk + 16 * j + 8, g));
          }
        }
        int8x16_t z0, z1;
        mm_rows(w0, w1, z0, z1);
        for (int p = 0; p < NP; ++p) {
          const int8x16_t a = mm_act(il, 4 * b + j, p);
          s[0][p] = vmmlaq_s32(s[0][p], z0, a);
          s[1][p] = vmmlaq_s32(s[1][p], z1, a);
        }
      }
      const float32x4_t dw = pk_halves(panel + L.d_at(b) + 8 * g);
      auto finish = [&](int n, int32x4_t si) {
        acc[gg][n] = vfmaq_f32(acc[gg][n], vcvtq_f32_s32(si), vmulq_n_f32(dw, mt[n][b].d));
      };
      for (int p = 0; p < NP; ++p) {
        finish(2 * p, mm_token<0>(s[0][p], s[1][p]));
        finish(2 * p + 1, mm_token<1>(s[0][p], s[1][p]));
      }
    }
  }
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N && n < n_tok; ++n) pk_store(y + n * ldy + 4 * (g0 + gg), acc[gg][n], n_valid[g0 + gg]);
}

// K-quants, same tile; mt[n]: the token's per-token table (meta_bytes_k per super-block).
template <GgmlType T, int G, int NP>
void mm_tile_k(int64_t nsb, const uint8_t* panel, int g0, const int8_t* il, const uint8_t* const* mt, float* y,
               int64_t ldy, int n_tok, const int (&n_valid)[4]) {
  constexpr LayoutK L = packed::layout_k(T);
  constexpr bool kQ6 = T == GgmlType::Q6_K, kQ5 = T == GgmlType::Q5_K;
  constexpr int N = 2 * NP;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b45 = vdupq_n_u8(0x30);
  float32x4_t acc[G][N];
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N; ++n) acc[gg][n] = vdupq_n_f32(0.0f);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* pb = panel + static_cast<size_t>(sb) * L.bytes;
    const size_t mo = static_cast<size_t>(sb) * meta_bytes_k(T);
    alignas(16) uint8_t side[kQ6 ? 1 : 256];
    const uint8_t* sd = pb + L.side;
    if constexpr (!kQ6) {
      pk_decode_side6(sd, side);
      sd = side;
    }
    // Q6_K: each sub-block's -32 * sum of the pair's activations, in the 2x2 block's lanes
    // [t0, t1, t0, t1] (the SDOT tile starts each sub-block's sum from it).
    int32x4_t corr[kQ6 ? 16 : 1][NP];
    if constexpr (kQ6)
      for (int s = 0; s < 16; ++s)
        for (int p = 0; p < NP; ++p) {
          const int32x2_t c = vset_lane_s32(pk_load_i32(mt[2 * p + 1] + mo + 4 + 4 * s),
                                            vdup_n_s32(pk_load_i32(mt[2 * p] + mo + 4 + 4 * s)), 1);
          corr[s][p] = vcombine_s32(c, c);
        }
    for (int gg = 0; gg < G; ++gg) {
      const int g = g0 + gg;
      int32x4_t is[2][NP];
      for (int p = 0; p < NP; ++p) is[0][p] = is[1][p] = vdupq_n_s32(0);
      for (int s = 0; s < L.n_sub; ++s) {
        int32x4_t ps[2][NP];
        for (int p = 0; p < NP; ++p) {
          if constexpr (kQ6)
            ps[0][p] = ps[1][p] = corr[s][p];
          else
            ps[0][p] = ps[1][p] = vdupq_n_s32(0);
        }
        constexpr int kPairs = kQ6 ? 2 : 4;
        for (int jj = 0; jj < kPairs; ++jj) {
          const int j = kPairs * s + jj;
          const uint8x16_t raw = vld1q_u8(pb + 64 * j + 16 * g);
          uint8x16_t w0 = vandq_u8(raw, m4), w1 = vshrq_n_u8(raw, 4);
          if constexpr (kQ6) {
            const uint8x16_t hv = vld1q_u8(pb + L.extra + 64 * s + 16 * g);
            if (jj == 0) {
              w0 = vorrq_u8(w0, vandq_u8(vshlq_n_u8(hv, 4), b45));
              w1 = vorrq_u8(w1, vandq_u8(vshlq_n_u8(hv, 2), b45));
            } else {
              w0 = vorrq_u8(w0, vandq_u8(hv, b45));
              w1 = vorrq_u8(w1, vandq_u8(vshrq_n_u8(hv, 2), b45));
            }
          }
          if constexpr (kQ5) {
            w0 = vorrq_u8(w0, pk_fifth(pb + L.extra + 16 * j, g));
            w1 = vorrq_u8(w1, pk_fifth(pb + L.extra + 16 * j + 8, g));
          }
          int8x16_t z0, z1;
          mm_rows(w0, w1, z0, z1);
          for (int p = 0; p < NP; ++p) {
            const int8x16_t a = mm_act(il, 32 * sb + j, p);
            ps[0][p] = vmmlaq_s32(ps[0][p], z0, a);
            ps[1][p] = vmmlaq_s32(ps[1][p], z1, a);
          }
        }
        // Scales of rows 4g..4g+3 for sub-block s (Q6_K signed, widened by SXTL; 8 bytes are read,
        // still inside the super-block) as [sc0, sc0, sc1, sc1] and [sc2, sc2, sc3, sc3].
        int32x4_t scv;
        if constexpr (kQ6)
          scv = vmovl_s16(vget_low_s16(vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(sd + 16 * s + 4 * g)))));
        else
          scv = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(sd + 16 * s + 4 * g)))));
        const int32x4_t sc01 = vzip1q_s32(scv, scv), sc23 = vzip2q_s32(scv, scv);
        for (int p = 0; p < NP; ++p) {
          is[0][p] = vmlaq_s32(is[0][p], ps[0][p], sc01);
          is[1][p] = vmlaq_s32(is[1][p], ps[1][p], sc23);
        }
      }
      const float32x4_t dv = pk_halves(pb + L.d + 8 * g);
      // Q4_K/Q5_K: the 8 mins of rows 4g..4g+3 as mk[k] = [min k of each row] (the side block holds
      // them as [row][2q, 2q+1] per q), so a token's min term is 8 multiply-adds by lane of its
      // 8 sub-block-pair sums; the same integers as the SDOT tile's pairwise form.
      int16x4_t mk[8];
      if constexpr (!kQ6)
        for (int q = 0; q < 4; ++q) {
          const int16x8_t mv = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sd + packed::kSideMins + 32 * q + 8 * g)));
          mk[2 * q] = vget_low_s16(vuzp1q_s16(mv, mv));
          mk[2 * q + 1] = vget_low_s16(vuzp2q_s16(mv, mv));
        }
      auto finish = [&](int n, int32x4_t isum) {
        const uint8_t* mb = mt[n] + mo;
        float da;
        std::memcpy(&da, mb, 4);
        acc[gg][n] = vfmaq_f32(acc[gg][n], vcvtq_f32_s32(isum), vmulq_n_f32(dv, da));
        if constexpr (!kQ6) {
          const int16x8_t bs = vld1q_s16(reinterpret_cast<const int16_t*>(mb + 4));  // sums of sub-block pairs 0..7
          int32x4_t m = vmull_laneq_s16(mk[0], bs, 0);
          m = vmlal_laneq_s16(m, mk[1], bs, 1);
          m = vmlal_laneq_s16(m, mk[2], bs, 2);
          m = vmlal_laneq_s16(m, mk[3], bs, 3);
          m = vmlal_laneq_s16(m, mk[4], bs, 4);
          m = vmlal_laneq_s16(m, mk[5], bs, 5);
          m = vmlal_laneq_s16(m, mk[6], bs, 6);
          m = vmlal_laneq_s16(m, mk[7], bs, 7);
          const float32x4_t dm = pk_halves(pb + L.dmin + 8 * g);
          acc[gg][n] = vfmsq_f32(acc[gg][n], vcvtq_f32_s32(m), vmulq_n_f32(dm, da));
        }
      };
      for (int p = 0; p < NP; ++p) {
        finish(2 * p, mm_token<0>(is[0][p], is[1][p]));
        finish(2 * p + 1, mm_token<1>(is[0][p], is[1][p]));
      }
    }
  }
  for (int gg = 0; gg < G; ++gg)
    for (int n = 0; n < N && n < n_tok; ++n) pk_store(y + n * ldy + 4 * (g0 + gg), acc[gg][n], n_valid[g0 + gg]);
}

// A many-token call (rows [r0, r1), every token) through the i8mm tiles. Blocks of 4 panels: each
// token tile's activations are interleaved once per block (about 2% of the block's work) and read
// by its 64 rows, while the block's panels stay in L1/L2 across the token tiles.
template <GgmlType T>
void mm_run(int64_t cols, const uint8_t* pw, int64_t r0, int64_t r1, const uint8_t* act, size_t arow, const uint8_t* meta,
            int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  constexpr bool kq = packed::is_k_quant(T);
  constexpr int64_t kBlockRows = 64;
  const size_t pstride = packed::panel_bytes(T, cols);
  const int64_t nblk = kq ? cols / QK_K : cols / QK8_0;
  const size_t mstride = kq ? static_cast<size_t>(nblk) * meta_bytes_k(T) : 0;
  auto* il = reinterpret_cast<int8_t*>(scratch);
  auto* cv = reinterpret_cast<int32_t*>(scratch + static_cast<size_t>(cols / 8) * kMmPairs * 16);
  for (int64_t rb = r0; rb < r1; rb += kBlockRows) {
    const int64_t re = std::min(r1, rb + kBlockRows);
    for (int64_t t = 0; t < n_tokens; t += kMmTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kMmTokens, n_tokens - t));
      const uint8_t* tok[kMmTokens];
      const uint8_t* mtk[kMmTokens];
      const MetaA* mta[kMmTokens];
      for (int i = 0; i < kMmTokens; ++i) {
        const int64_t ti = t + std::min(i, n - 1);
        tok[i] = act + static_cast<size_t>(ti) * arow;
        mtk[i] = meta + static_cast<size_t>(ti) * mstride;
        mta[i] = reinterpret_cast<const MetaA*>(meta) + ti * nblk;
      }
      if constexpr (kq) {
        mm_interleave(cols / 8, QK_K / 8, sizeof(BlockQ8_K), offsetof(BlockQ8_K, qs), tok, il);
      } else {
        mm_interleave(cols / 8, QK8_0 / 8, sizeof(BlockQ8_0), offsetof(BlockQ8_0, qs), tok, il);
        if constexpr (T != GgmlType::Q8_0)
          for (int64_t b = 0; b < nblk; ++b)
            for (int p = 0; p < kMmPairs; ++p) {
              const int32x2_t c = vset_lane_s32(mta[2 * p + 1][b].corr, vdup_n_s32(mta[2 * p][b].corr), 1);
              vst1q_s32(cv + (b * kMmPairs + p) * 4, vcombine_s32(c, c));
            }
      }
      for (int64_t r = rb; r < re; r += 16) {
        const uint8_t* panel = pw + static_cast<size_t>(r / 16) * pstride;
        int n_valid[4];
        for (int g = 0; g < 4; ++g) n_valid[g] = static_cast<int>(std::min<int64_t>(4, std::max<int64_t>(0, r1 - (r + 4 * g))));
        float* yt = y + t * ldy + (r - r0);
        pk_with_n<kMmPairs>((n + 1) / 2, [&](auto NPc) {
          constexpr int NP = decltype(NPc)::value;
          for (int g = 0; g < 4 && n_valid[g] > 0; g += kMmGroups) {
            if constexpr (kq)
              mm_tile_k<T, kMmGroups, NP>(nblk, panel, g, il, mtk, yt, ldy, n, n_valid);
            else
              mm_tile_a<T, kMmGroups, NP>(nblk, panel, g, il, cv, mta, yt, ldy, n, n_valid);
          }
        });
      }
    }
  }
}
#endif  // __ARM_FEATURE_MATMUL_INT8

template <GgmlType T>
void pk_run(int64_t cols, const uint8_t* pw, int64_t r0, int64_t r1, const void* act, size_t arow, const uint8_t* meta,
            int64_t n_tokens, float* y, int64_t ldy, [[maybe_unused]] uint8_t* scratch) {
  constexpr bool kq = packed::is_k_quant(T);
  const size_t pstride = packed::panel_bytes(T, cols);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t nblk = kq ? cols / QK_K : cols / QK8_0;
  const size_t mstride = kq ? static_cast<size_t>(nblk) * meta_bytes_k(T) : 0;
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (n_tokens > 1) {  // prefill: SMMLA tiles (decode keeps the SDOT tile below)
    mm_run<T>(cols, pw, r0, r1, ab, arow, meta, n_tokens, y, ldy, scratch);
    return;
  }
#endif
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* panel = pw + static_cast<size_t>(r / 16) * pstride;
    int n_valid[4];
    for (int g = 0; g < 4; ++g) n_valid[g] = static_cast<int>(std::min<int64_t>(4, std::max<int64_t>(0, r1 - (r + 4 * g))));
    if (n_tokens == 1) {  // all 16 rows in one pass: each line of the panel is read once
      if constexpr (kq)
        pk_tile_k<T, 1, 4>(nblk, panel, 0, ab, arow, meta, mstride, y + (r - r0), ldy, n_valid);
      else
        pk_tile_a<T, 1, 4>(nblk, panel, 0, ab, arow, reinterpret_cast<const MetaA*>(meta), y + (r - r0), ldy, n_valid);
      continue;
    }
    // Several tokens: two row groups (8 rows) x up to 4 tokens per tile, 16 accumulators.
    for (int g = 0; g < 4 && n_valid[g] > 0; g += 2) {
      for (int64_t t = 0; t < n_tokens; t += kPackedTileTokens) {
        const int n = static_cast<int>(std::min<int64_t>(kPackedTileTokens, n_tokens - t));
        float* yt = y + t * ldy + (r - r0);
        pk_with_n<kPackedTileTokens>(n, [&](auto Nc) {
          if constexpr (kq)
            pk_tile_k<T, decltype(Nc)::value, 2>(nblk, panel, g, ab + static_cast<size_t>(t) * arow, arow,
                                                 meta + static_cast<size_t>(t) * mstride, mstride, yt, ldy, n_valid);
          else
            pk_tile_a<T, decltype(Nc)::value, 2>(nblk, panel, g, ab + static_cast<size_t>(t) * arow, arow,
                                                 reinterpret_cast<const MetaA*>(meta) + t * nblk, yt, ldy, n_valid);
        });
      }
    }
  }
}

template <GgmlType T>
void pk_set(KernelTable& k) {
  GemmKernel& g = k.gemm[static_cast<int>(T)];
  g.prepare = pk_prepare<T>;
  g.meta_bytes = pk_meta_bytes<T>;
#if defined(__ARM_FEATURE_MATMUL_INT8)
  g.scratch_bytes = mm_scratch_bytes;  // a token tile's interleaved activations
#else
  g.scratch_bytes = pk_no_scratch;
#endif
  g.run = nullptr;  // no per-call GEMM on NEON: prefill runs the packed tiles (or the dot tiles)
  PackedKernel& p = k.packed[static_cast<int>(T)];
  p.panel_bytes = [](int64_t cols) { return packed::panel_bytes(T, cols); };
  p.pack = [](const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1, uint8_t* dst) {
    packed::pack_panels_ref(T, w, wrow, rows, cols, p0, p1, dst);
  };
  p.run = pk_run<T>;
}

inline void fill_neon_packed_common(KernelTable& t) {
  pk_set<GgmlType::Q8_0>(t);
  pk_set<GgmlType::Q4_0>(t);
  pk_set<GgmlType::Q5_0>(t);
  pk_set<GgmlType::Q4_K>(t);
  pk_set<GgmlType::Q5_K>(t);
  pk_set<GgmlType::Q6_K>(t);
}

}  // namespace
}  // namespace picolm::kq
