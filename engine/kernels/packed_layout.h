// Internal to engine/kernels: byte layout of packed weights (KernelTable::packed), shared by every
// table that has packed kernels, and the portable packer that writes it.
//
// A panel holds 16 rows. Step s is 4 consecutive columns of each of the 16 rows: 64 bytes, row i
// at bytes 4i..4i+3 (so rows 0-7 are the first 32 bytes, rows 8-15 the last 32). Codes are the
// type's unsigned codes (Q4_0 q in [0,15], Q5_0 in [0,31], Q8_0 q + 128, Q4_K/Q5_K q, Q6_K q in
// [0,63]); 4-, 5- and 6-bit types pair steps in one 64-byte vector of nibbles (vector j: step 2j
// in the low nibbles, step 2j+1 in the high ones). The fifth bit of Q5_0/Q5_K codes is a 64-bit
// mask per step (bit 4i+q for row i, column q of the step); the two high bits of Q6_K codes are a
// vector per 4 steps (bits 2e, 2e+1 of byte 4i+q for step 4s+e).
//
//   Q8_0-activation types, units of two blocks of 32 columns (an odd last block is padded with a
//   zero one): the two blocks' codes (Q8_0: 8 step vectors each; Q4_0/Q5_0: 4 nibble vectors),
//   Q5_0 their [2][8] step masks, then their [2][16] fp16 row scales. Units are whole cache lines,
//   so a panel is one sequential stream.
//   K-quants, per super-block of 256 columns: 32 nibble vectors; Q5_K [64] step masks, Q6_K [16]
//   high-bit vectors; the side block; [16] fp16 d; Q4_K/Q5_K [16] fp16 dmin; padded to 64.
//   Q6_K's side block is its signed scales as bytes [16][16] (sub-block s of row i at 16s + i).
//   Q4_K/Q5_K's is 256 bytes of 6-bit values, scales [8][16] (16s + i) then mins [4][16][2]
//   (sub-blocks 2p, 2p+1 of row i at 128 + 32p + 2i), stored in 192 bytes the way Q6_K stores its
//   codes (write_side_k): nibble vector 0 = bytes 0-63 (low nibbles) and 64-127 (high), nibble
//   vector 1 = bytes 128-191 and 192-255, then one vector of their two high bits (bits 2e, 2e+1
//   of byte k: byte 64e + k). So a Q4_K / Q5_K panel has exactly the file's 144 / 176 bytes per
//   row and super-block.
// Rows past the end of the matrix in its last panel are zero (codes, scales), so they add nothing.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace picolm::kq::packed {

constexpr size_t round64(size_t n) { return (n + 63) & ~size_t{63}; }

// Q8_0-activation types (Q4_0, Q5_0, Q8_0).
struct LayoutA {
  size_t codes;  // per block
  bool masks;
  size_t unit;   // two blocks
  constexpr size_t codes_at(int64_t b) const { return static_cast<size_t>(b / 2) * unit + static_cast<size_t>(b % 2) * codes; }
  constexpr size_t masks_at(int64_t b) const { return static_cast<size_t>(b / 2) * unit + 2 * codes + static_cast<size_t>(b % 2) * 64; }
  constexpr size_t d_at(int64_t b) const {
    return static_cast<size_t>(b / 2) * unit + 2 * codes + (masks ? 128 : 0) + static_cast<size_t>(b % 2) * 32;
  }
  constexpr size_t panel_bytes(int64_t cols) const { return static_cast<size_t>((cols / 32 + 1) / 2) * unit; }
};
// Software prefetch in the panel tiles of these types: while on block b, the part of the unit
// `ahead` units further that block b's turn fetches (the first half of the unit's lines for an
// even b, the rest for an odd one), as {offset in the panel, bytes}.
struct Span {
  size_t offset, bytes;
};
constexpr Span prefetch_span_a(const LayoutA& L, int64_t b, int ahead) {
  const size_t first = L.unit / 128 * 64;
  return {static_cast<size_t>(b / 2 + ahead) * L.unit + (b % 2 ? first : 0), b % 2 ? L.unit - first : first};
}
constexpr LayoutA layout_a(GgmlType t) {
  const size_t codes = t == GgmlType::Q8_0 ? 512 : 256;
  const bool masks = t == GgmlType::Q5_0;
  return {codes, masks, 2 * codes + (masks ? 128 : 0) + 64};
}

// K-quants (Q4_K, Q5_K, Q6_K): offsets inside one super-block of a panel.
struct LayoutK {
  int n_sub;
  size_t extra, side, d, dmin, bytes;
  constexpr size_t panel_bytes(int64_t cols) const { return static_cast<size_t>(cols / 256) * bytes; }
};
constexpr LayoutK layout_k(GgmlType t) {
  const bool q6 = t == GgmlType::Q6_K, q5 = t == GgmlType::Q5_K;
  const size_t side = 2048 + (q6 ? 1024 : q5 ? 512 : 0);
  const size_t d = side + (q6 ? 256 : 192);
  return {q6 ? 16 : 8, 2048, side, d, d + 32, round64(d + (q6 ? 32 : 64))};
}
constexpr bool is_k_quant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K; }
// Side block of a K-quant super-block: the writer from the 16 rows' 16 side values each (row i's
// at sm + i * sm_stride: Q6_K its scales, Q4_K/Q5_K 8 scales and 8 mins in scales_mins_k4_all
// order) to out, and the offset of the mins in Q4_K/Q5_K's 256 decoded bytes. Decoders are per
// table: the unpacking of Q6_K nibble vectors j = 0, 1 applied to a Q4_K/Q5_K block gives bytes
// 0-127 and 128-255.
constexpr size_t kSideMins = 128;
void write_side_k(GgmlType t, const uint8_t* sm, size_t sm_stride, uint8_t* out);

// Per-token tables of the panel kernels (GemmKernel::prepare / meta_bytes), one format for the
// AVX-512 and AVX2 tables: Q8_0-activation types {float d; int32 -offset * sum(q)} per block (the
// offset of the type's unsigned codes: 8, 16, 128); K-quants {float d; int32 words[]} per
// super-block, Q4_K/Q5_K 4 words of two 16-bit sub-block sums (sub-blocks 2p, 2p+1 of 32), Q6_K
// -32 * the sum of each 16-element sub-block.
struct MetaA {
  float d;
  int32_t corr;
};
constexpr int code_offset_a(GgmlType t) { return t == GgmlType::Q8_0 ? 128 : t == GgmlType::Q5_0 ? 16 : 8; }
constexpr int meta_words_k(GgmlType t) { return t == GgmlType::Q6_K ? 16 : 4; }
constexpr size_t meta_bytes_k(GgmlType t) { return 4 + 4 * static_cast<size_t>(meta_words_k(t)); }
// Portable fillers of those tables for tokens [t0, t1) (activations: Q8_0 / Q8_K rows arow apart).
void prepare_meta_a(GgmlType t, int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta);
void prepare_meta_k(GgmlType t, int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta);

constexpr bool is_packable(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q8_0 || t == GgmlType::Q4_K ||
         t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}
// Bytes of one 16-row panel of `cols` columns (0 if the type has no packed form).
size_t panel_bytes(GgmlType t, int64_t cols);

// Writes panels [p0, p1) of a rows x cols matrix (rows of native blocks `wrow` bytes apart) to
// dst + p * panel_bytes(t, cols), byte for byte the layout above. Portable scalar code (any CPU);
// tables with a faster packer of their own are tested against it.
void pack_panels_ref(GgmlType t, const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1,
                     uint8_t* dst);

}  // namespace picolm::kq::packed
