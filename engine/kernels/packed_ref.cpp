// Portable packer of the packed-weight layout (packed_layout.h): unpacks each row's codes and
// scales with plain integer code, then places bytes. Used by tables whose packer is not
// vectorized, and as the reference the vectorized packers are tested against.
#include <cstddef>
#include <cstring>

#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"

namespace picolm::kq::packed {
namespace {

// One block of a row: its codes (block_elems of them) and, for the K-quants, the per-row side data.
struct RowBlock {
  uint8_t codes[QK_K];
  uint8_t sm[16];  // Q4_K/Q5_K: 8 scales, 8 mins; Q6_K: 16 signed scales (as bytes)
  uint16_t d = 0, dmin = 0;
};

void unpack_block(GgmlType t, const uint8_t* blk, RowBlock& o) {
  switch (t) {
    case GgmlType::Q8_0: {
      const auto& b = *reinterpret_cast<const BlockQ8_0*>(blk);
      for (int j = 0; j < 32; ++j) o.codes[j] = static_cast<uint8_t>(static_cast<uint8_t>(b.qs[j]) ^ 0x80);
      o.d = b.d;
      break;
    }
    case GgmlType::Q4_0: {
      const auto& b = *reinterpret_cast<const BlockQ4_0*>(blk);
      for (int j = 0; j < 16; ++j) {
        o.codes[j] = b.qs[j] & 0x0F;
        o.codes[j + 16] = b.qs[j] >> 4;
      }
      o.d = b.d;
      break;
    }
    case GgmlType::Q5_0: {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(blk);
      uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      for (int j = 0; j < 16; ++j) {
        o.codes[j] = static_cast<uint8_t>((b.qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
        o.codes[j + 16] = static_cast<uint8_t>((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      }
      o.d = b.d;
      break;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = t == GgmlType::Q5_K;
      const uint8_t* qs = q5 ? reinterpret_cast<const BlockQ5_K*>(blk)->qs : reinterpret_cast<const BlockQ4_K*>(blk)->qs;
      const uint8_t* qh = q5 ? reinterpret_cast<const BlockQ5_K*>(blk)->qh : nullptr;
      const uint8_t* scales = q5 ? reinterpret_cast<const BlockQ5_K*>(blk)->scales : reinterpret_cast<const BlockQ4_K*>(blk)->scales;
      // Element 64c + l: low nibble of qs[32c + l] (+ bit 2c of qh[l]); 64c + 32 + l: high nibble
      // (+ bit 2c + 1).
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const uint8_t q = qs[32 * c + l];
          o.codes[64 * c + l] = static_cast<uint8_t>((q & 0x0F) | (q5 ? ((qh[l] >> (2 * c)) & 1) << 4 : 0));
          o.codes[64 * c + 32 + l] = static_cast<uint8_t>((q >> 4) | (q5 ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0));
        }
      scales_mins_k4_all(scales, o.sm);
      std::memcpy(&o.d, blk, 2);
      std::memcpy(&o.dmin, blk + 2, 2);
      break;
    }
    case GgmlType::Q6_K: {
      const auto& b = *reinterpret_cast<const BlockQ6_K*>(blk);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        uint8_t* c = o.codes + 128 * h;
        for (int l = 0; l < 32; ++l) {
          c[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
          c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
          c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      std::memcpy(o.sm, b.scales, 16);
      o.d = b.d;
      break;
    }
    default: break;
  }
}

// Code of row i at column 4 * step + q, from the unpacked rows.
inline uint8_t code(const RowBlock* r, int i, int step, int q) { return r[i].codes[4 * step + q]; }

}  // namespace

void write_side_k(GgmlType t, const uint8_t* sm, size_t sm_stride, uint8_t* out) {
  if (t == GgmlType::Q6_K) {
    for (int s = 0; s < 16; ++s)
      for (int i = 0; i < 16; ++i) out[16 * s + i] = sm[static_cast<size_t>(i) * sm_stride + static_cast<size_t>(s)];
    return;
  }
  uint8_t v[256];
  for (int i = 0; i < 16; ++i) {
    const uint8_t* r = sm + static_cast<size_t>(i) * sm_stride;
    for (int s = 0; s < 8; ++s) v[16 * s + i] = r[s];
    for (int q = 0; q < 4; ++q) {
      v[kSideMins + 32 * q + 2 * i] = r[8 + 2 * q];
      v[kSideMins + 32 * q + 2 * i + 1] = r[9 + 2 * q];
    }
  }
  std::memset(out, 0, 192);
  for (int e = 0; e < 4; ++e)
    for (int k = 0; k < 64; ++k) {
      const uint8_t x = v[64 * e + k];
      out[64 * (e / 2) + k] = static_cast<uint8_t>(out[64 * (e / 2) + k] | (x & 0x0F) << (e % 2 ? 4 : 0));
      out[128 + k] = static_cast<uint8_t>(out[128 + k] | ((x >> 4) & 3) << (2 * e));
    }
}

void prepare_meta_a(GgmlType t, int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  const int64_t nb = cols / QK8_0;
  for (int64_t tok = t0; tok < t1; ++tok) {
    const auto* y = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(act) + static_cast<size_t>(tok) * arow);
    auto* m = reinterpret_cast<MetaA*>(meta) + tok * nb;
    for (int64_t b = 0; b < nb; ++b) {
      int s = 0;
      for (int j = 0; j < QK8_0; ++j) s += y[b].qs[j];
      m[b].d = fp16_to_fp32(y[b].d);
      m[b].corr = -code_offset_a(t) * s;
    }
  }
}

void prepare_meta_k(GgmlType t, int64_t cols, const void* act, size_t arow, int64_t t0, int64_t t1, uint8_t* meta) {
  const int64_t nsb = cols / QK_K;
  const size_t mb = meta_bytes_k(t);
  for (int64_t tok = t0; tok < t1; ++tok) {
    const auto* y = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(act) + static_cast<size_t>(tok) * arow);
    uint8_t* m = meta + static_cast<size_t>(tok * nsb) * mb;
    for (int64_t sb = 0; sb < nsb; ++sb, m += mb) {
      std::memcpy(m, &y[sb].d, 4);
      int32_t words[16];
      if (t == GgmlType::Q6_K) {
        for (int s = 0; s < 16; ++s) words[s] = -32 * y[sb].bsums[s];
      } else {
        for (int p = 0; p < 4; ++p) {
          const int b0 = y[sb].bsums[4 * p] + y[sb].bsums[4 * p + 1];
          const int b1 = y[sb].bsums[4 * p + 2] + y[sb].bsums[4 * p + 3];
          words[p] = static_cast<int32_t>((static_cast<uint32_t>(b0) & 0xFFFFu) | (static_cast<uint32_t>(b1) << 16));
        }
      }
      std::memcpy(m + 4, words, 4 * static_cast<size_t>(meta_words_k(t)));
    }
  }
}

size_t panel_bytes(GgmlType t, int64_t cols) {
  if (!is_packable(t)) return 0;
  if (is_k_quant(t)) return layout_k(t).panel_bytes(cols);
  return layout_a(t).panel_bytes(cols);
}

void pack_panels_ref(GgmlType t, const void* w, size_t wrow, int64_t rows, int64_t cols, int64_t p0, int64_t p1,
                     uint8_t* dst) {
  const bool kq = is_k_quant(t);
  const int be = kq ? QK_K : 32;
  const size_t bb = ggml_type_traits(t)->block_bytes;
  const int64_t nb = cols / be;
  const size_t pbytes = panel_bytes(t, cols);
  RowBlock r[16];
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = dst + static_cast<size_t>(p) * pbytes;
    std::memset(panel, 0, pbytes);
    const int n_valid = static_cast<int>(rows - 16 * p < 16 ? rows - 16 * p : 16);
    for (int64_t b = 0; b < nb; ++b) {
      for (int i = 0; i < 16; ++i) {
        r[i] = RowBlock{};
        if (i < n_valid) unpack_block(t, static_cast<const uint8_t*>(w) + static_cast<size_t>(16 * p + i) * wrow + static_cast<size_t>(b) * bb, r[i]);
      }
      const int n_steps = be / 4;
      const bool nib = t != GgmlType::Q8_0;
      const bool m5 = t == GgmlType::Q5_0 || t == GgmlType::Q5_K;
      uint8_t* codes;
      uint8_t* masks = nullptr;
      if (kq) {
        const LayoutK L = layout_k(t);
        uint8_t* sb = panel + static_cast<size_t>(b) * L.bytes;
        codes = sb;
        if (m5) masks = sb + L.extra;
        if (t == GgmlType::Q6_K) {
          for (int s = 0; s < 16; ++s)
            for (int i = 0; i < 16; ++i)
              for (int q = 0; q < 4; ++q) {
                uint8_t v = 0;
                for (int e = 0; e < 4; ++e) v = static_cast<uint8_t>(v | ((code(r, i, 4 * s + e, q) >> 4) & 3) << (2 * e));
                sb[L.extra + 64 * s + 4 * i + q] = v;
              }
        }
        write_side_k(t, reinterpret_cast<const uint8_t*>(r) + offsetof(RowBlock, sm), sizeof(RowBlock), sb + L.side);
        if (t != GgmlType::Q6_K)
          for (int i = 0; i < 16; ++i) std::memcpy(sb + L.dmin + 2 * i, &r[i].dmin, 2);
        for (int i = 0; i < 16; ++i) std::memcpy(sb + L.d + 2 * i, &r[i].d, 2);
      } else {
        const LayoutA L = layout_a(t);
        codes = panel + L.codes_at(b);
        if (m5) masks = panel + L.masks_at(b);
        for (int i = 0; i < 16; ++i) std::memcpy(panel + L.d_at(b) + 2 * i, &r[i].d, 2);
      }
      // Codes: step vectors (Q8_0) or nibble pairs; fifth bits as step masks.
      for (int s = 0; s < n_steps; ++s)
        for (int i = 0; i < 16; ++i)
          for (int q = 0; q < 4; ++q) {
            const uint8_t c = code(r, i, s, q);
            if (!nib) {
              codes[64 * s + 4 * i + q] = c;
            } else {
              uint8_t& v = codes[64 * (s / 2) + 4 * i + q];
              v = static_cast<uint8_t>(v | (c & 0x0F) << (s % 2 ? 4 : 0));
            }
            if (masks != nullptr && ((c >> 4) & 1)) masks[8 * s + (4 * i + q) / 8] |= static_cast<uint8_t>(1u << ((4 * i + q) % 8));
          }
    }
  }
}

}  // namespace picolm::kq::packed
