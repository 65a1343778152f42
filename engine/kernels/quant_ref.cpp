// Scalar reference kernels: block dequantization (the oracle), activation quantizers with ggml's
// exact rounding, simple round-to-nearest weight quantizers (for synthetic data), and the fused dot
// products with integer inner loops as ggml's generic code does them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace picolm {
namespace kq {
namespace {

// ggml's nearest_int: round half to even via the 1.5*2^23 trick; valid for |f| < 2^22.
inline int nearest_int(float f) {
  const float val = f + 12582912.f;
  int i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline float h2f(uint16_t h) { return half_to_float(h); }
inline uint16_t f2h(float f) { return fp32_to_fp16(f); }

// ---------------------------------------------------------------------------------------------
// Dequantization
// ---------------------------------------------------------------------------------------------

void dequant_f32(const void* src, float* y, int64_t n) { std::memcpy(y, src, static_cast<size_t>(n) * 4); }

void dequant_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = h2f(x[i]);
}

void dequant_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + QK4_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void dequant_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + QK4_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void dequant_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
    const float d = h2f(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
      y[j] = static_cast<float>(x0) * d;
      y[j + QK5_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void dequant_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (x[i].qs[j] & 0x0F) | xh0;
      const int x1 = (x[i].qs[j] >> 4) | xh1;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + QK5_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequant_q8_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / QK8_1; ++i, y += QK8_1) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequant_q8_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    for (int j = 0; j < QK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

void dequant_q2_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int nn = 0; nn < QK_K; nn += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
        sc = x[i].scales[is++];
        dl = d * static_cast<float>(sc & 0xF);
        ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

void dequant_q3_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d_all = h2f(x[i].d);
    int8_t scales[16];
    unpack_q3k_scales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int nn = 0; nn < QK_K; nn += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

void dequant_q4_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
      uint8_t sc, m;
      scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequant_q5_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      uint8_t sc, m;
      scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequant_q6_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int nn = 0; nn < QK_K; nn += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers (rounding exactly as ggml's *_ref functions)
// ---------------------------------------------------------------------------------------------

void quant_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * 4); }

void quant_f16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = f2h(x[i]);
}

void quant_bf16(const float* x, void* y, int64_t n) {
  auto* out = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(x[i]);
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void quantize_row_q8_1_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      const float v0 = x[j] * id, v1 = x[QK8_1 / 2 + j] * id;
      y[i].qs[j] = static_cast<int8_t>(std::roundf(v0));
      y[i].qs[QK8_1 / 2 + j] = static_cast<int8_t>(std::roundf(v1));
      sum += y[i].qs[j] + y[i].qs[QK8_1 / 2 + j];
    }
    y[i].s = f2h(static_cast<float>(sum) * d);
  }
}

void quantize_row_q8_K_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // -127/max (not -128) as ggml: the value of largest magnitude maps to -127 exactly.
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

namespace {

// ---------------------------------------------------------------------------------------------
// Weight quantizers: plain round-to-nearest, only required to produce valid, sensible blocks.
// ---------------------------------------------------------------------------------------------

// Value of largest magnitude (keeping its sign) in x[0..n).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void wquant_q4_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(vy);
  for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    const float d = signed_absmax(x, QK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int xi0 = std::clamp(static_cast<int>(x[j] * id + 8.5f), 0, 15);
      const int xi1 = std::clamp(static_cast<int>(x[QK4_0 / 2 + j] * id + 8.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void wquant_q4_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(vy);
  for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < QK4_1; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(mn);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int xi0 = std::clamp(static_cast<int>((x[j] - mn) * id + 0.5f), 0, 15);
      const int xi1 = std::clamp(static_cast<int>((x[QK4_1 / 2 + j] - mn) * id + 0.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void wquant_q5_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(vy);
  for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
    const float d = signed_absmax(x, QK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int xi0 = std::clamp(static_cast<int>(x[j] * id + 16.5f), 0, 31);
      const int xi1 = std::clamp(static_cast<int>(x[QK5_0 / 2 + j] * id + 16.5f), 0, 31);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0xF) | ((xi1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((xi0 & 0x10) >> 4) << (j + 0);
      qh |= static_cast<uint32_t>((xi1 & 0x10) >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void wquant_q5_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(vy);
  for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < QK5_1; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(mn);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int xi0 = std::clamp(static_cast<int>((x[j] - mn) * id + 0.5f), 0, 31);
      const int xi1 = std::clamp(static_cast<int>((x[QK5_1 / 2 + j] - mn) * id + 0.5f), 0, 31);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0xF) | ((xi1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((xi0 & 0x10) >> 4) << (j + 0);
      qh |= static_cast<uint32_t>((xi1 & 0x10) >> 4) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

// Asymmetric sub-block fit used by Q2_K/Q4_K/Q5_K: x ~= d*ls*q - dmin*lm, q in [0, nmax].
// Fills ls/lm (quantized to [0, smax]) and the super-block scales; L gets the codes.
void fit_affine_subblocks(const float* x, int n_sub, int sub_len, int nmax, int smax, uint16_t* d_out,
                          uint16_t* dmin_out, uint8_t* ls, uint8_t* lm, uint8_t* L) {
  float scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < n_sub; ++s) {
    const float* xs = x + s * sub_len;
    float mn = 0.0f, mx = 0.0f;  // the range always includes 0 so the min term stays >= 0
    for (int j = 0; j < sub_len; ++j) mn = std::min(mn, xs[j]), mx = std::max(mx, xs[j]);
    scales[s] = (mx - mn) / static_cast<float>(nmax);
    mins[s] = -mn;
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const uint16_t dh = f2h(max_scale / static_cast<float>(smax));
  const uint16_t mh = f2h(max_min / static_cast<float>(smax));
  const float d = h2f(dh), dmin = h2f(mh);
  *d_out = dh;
  *dmin_out = mh;
  for (int s = 0; s < n_sub; ++s) {
    ls[s] = static_cast<uint8_t>(d > 0.0f ? std::clamp(nearest_int(scales[s] / d), 0, smax) : 0);
    // Round the min up so the shifted values stay >= 0 after quantization.
    lm[s] = static_cast<uint8_t>(dmin > 0.0f ? std::clamp(static_cast<int>(std::ceil(mins[s] / dmin)), 0, smax) : 0);
    const float step = d * ls[s], off = dmin * lm[s];
    const float* xs = x + s * sub_len;
    for (int j = 0; j < sub_len; ++j) {
      const int q = step > 0.0f ? nearest_int((xs[j] + off) / step) : 0;
      L[s * sub_len + j] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

void pack_k4_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  std::memset(scales, 0, K_SCALE_SIZE);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j - 0] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void wquant_q2_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    uint8_t ls[16], lm[16], L[QK_K];
    fit_affine_subblocks(x, 16, 16, 3, 15, &y[i].d, &y[i].dmin, ls, lm, L);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
    for (int j = 0; j < QK_K; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

void wquant_q4_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    uint8_t ls[8], lm[8], L[QK_K];
    fit_affine_subblocks(x, 8, 32, 15, 63, &y[i].d, &y[i].dmin, ls, lm, L);
    pack_k4_scales(ls, lm, y[i].scales);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void wquant_q5_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    uint8_t ls[8], lm[8], L[QK_K];
    fit_affine_subblocks(x, 8, 32, 31, 63, &y[i].d, &y[i].dmin, ls, lm, L);
    pack_k4_scales(ls, lm, y[i].scales);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < QK_K; nn += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[nn + j], l2 = L[nn + j + 32];
        if (l1 > 15) l1 -= 16, y[i].qh[j] |= m1;
        if (l2 > 15) l2 -= 16, y[i].qh[j] |= m2;
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

// Symmetric sub-blocks of 16 with signed integer scales: x ~= d*ls*q, q in [qmin, qmax].
void fit_symmetric_subblocks(const float* x, int qneg, int smax, float* d_out, int8_t* ls, int* L) {
  float scales[16];
  float max_abs_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scales[s] = signed_absmax(x + 16 * s, 16) / static_cast<float>(-qneg);
    max_abs_scale = std::max(max_abs_scale, std::fabs(scales[s]));
  }
  const float d = h2f(f2h(max_abs_scale / static_cast<float>(smax)));
  *d_out = d;
  for (int s = 0; s < 16; ++s) {
    ls[s] = static_cast<int8_t>(d > 0.0f ? std::clamp(nearest_int(scales[s] / d), -smax - 1, smax) : 0);
    const float step = d * ls[s];
    for (int j = 0; j < 16; ++j) {
      const int q = step != 0.0f ? nearest_int(x[16 * s + j] / step) : 0;
      L[16 * s + j] = std::clamp(q, -qneg, qneg - 1) + qneg;  // stored offset by qneg
    }
  }
}

void wquant_q3_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float d;
    int8_t ls[16];
    int L[QK_K];
    fit_symmetric_subblocks(x, 4, 31, &d, ls, L);
    y[i].d = f2h(d);
    std::memset(y[i].scales, 0, 12);
    for (int j = 0; j < 16; ++j) {
      int l = ls[j] + 32;
      if (j < 8) y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
      else y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      l >>= 4;
      y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] |= hm;
        L[j] -= 4;
      }
      if (++m == QK_K / 8) {
        m = 0;
        hm = static_cast<uint8_t>(hm << 1);
      }
    }
    for (int j = 0; j < QK_K; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

void wquant_q6_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float d;
    int L[QK_K];
    fit_symmetric_subblocks(x, 32, 127, &d, y[i].scales, L);
    y[i].d = f2h(d);
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Fused dot products (weight row x activation row in vec_dot_type). Integer sums per block are
// exact; floats are combined once per block as in ggml's generic code.
// ---------------------------------------------------------------------------------------------

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0.0;  // ggml_float accumulation, as ggml's scalar path
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(h2f(x[i]) * h2f(y[i]));
  return static_cast<float>(sum);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_float(x[i]) * bf16_to_float(y[i]));
  return static_cast<float>(sum);
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      const int v0 = (x[ib].qs[j] & 0x0F) - 8;
      const int v1 = (x[ib].qs[j] >> 4) - 8;
      sumi0 += v0 * y[ib].qs[j];
      sumi1 += v1 * y[ib].qs[j + QK8_0 / 2];
    }
    sumf += static_cast<float>(sumi0 + sumi1) * h2f(x[ib].d) * h2f(y[ib].d);
  }
  return sumf;
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      sumi0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
      sumi1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + QK8_1 / 2];
    }
    sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * static_cast<float>(sumi0 + sumi1) + h2f(x[ib].m) * h2f(y[ib].s);
  }
  return sumf;
}

// Q5_0/Q5_1: sum of (5-bit value - offset) * q8 over a block. The fifth bits are walked with
// constant shifts: per-element variable shifts (and a byte array reread as vectors) are slow.
inline int dot_q5_block(const uint8_t* qs, const uint8_t* qh_bytes, int offset, const int8_t* q8) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  uint32_t lo = qh, hi = qh >> 16;
  int sumi0 = 0, sumi1 = 0;
  for (int j = 0; j < 16; ++j, lo >>= 1, hi >>= 1) {
    sumi0 += ((qs[j] & 0x0F) | static_cast<int>((lo & 1u) << 4)) * q8[j];
    sumi1 += ((qs[j] >> 4) | static_cast<int>((hi & 1u) << 4)) * q8[j + 16];
  }
  if (offset != 0) {
    int s8 = 0;
    for (int j = 0; j < 32; ++j) s8 += q8[j];
    return sumi0 + sumi1 - offset * s8;
  }
  return sumi0 + sumi1;
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    const int sumi = dot_q5_block(x[ib].qs, x[ib].qh, 16, y[ib].qs);
    sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    const int sumi = dot_q5_block(x[ib].qs, x[ib].qh, 0, y[ib].qs);
    sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * static_cast<float>(sumi) + h2f(x[ib].m) * h2f(y[ib].s);
  }
  return sumf;
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(x[ib].d) * h2f(y[ib].d));
  }
  return sumf;
}

float dot_q2_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * h2f(x[i].d);
    const float dmin = y[i].d * h2f(x[i].dmin);
    int isum = 0, is = 0;
    for (int k = 0; k < QK_K / 128; ++k) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        int d = sc[is++] & 0xF, isuml = 0;
        for (int l = 0; l < 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        d = sc[is++] & 0xF;
        isuml = 0;
        for (int l = 16; l < 32; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        shift += 2;
        q8 += 32;
      }
      q2 += 32;
    }
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float dot_q3_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int8_t aux8[QK_K];
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int8_t* av = aux8;
    uint8_t m = 1;
    for (int j = 0; j < QK_K; j += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int l = 0; l < 32; ++l)
          av[l] = static_cast<int8_t>(((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        av += 32;
        m = static_cast<uint8_t>(m << 1);
      }
      q3 += 32;
    }
    int8_t scales[16];
    unpack_q3k_scales(x[i].scales, scales);
    int isum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += y[i].qs[16 * j + l] * aux8[16 * j + l];
      isum += scales[j] * s;
    }
    sumf += (h2f(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// Shared by Q4_K and Q5_K: the 8 (scale, min) pairs.
inline void unpack_k4(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 8; ++j) scale_min_k4(j, packed, &sc[j], &mn[j]);
}

float dot_q4_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    unpack_k4(x[i].scales, sc, mn);
    int summ = 0;
    for (int j = 0; j < QK_K / 16; ++j) summ += y[i].bsums[j] * mn[j / 2];
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    int isum = 0;
    for (int j = 0; j < QK_K / 64; ++j, q4 += 32, q8 += 64) {
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q4[l] & 0xF) * q8[l];
        s1 += (q4[l] >> 4) * q8[l + 32];
      }
      isum += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
    }
    const float d = h2f(x[i].d) * y[i].d;
    const float dmin = h2f(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(isum) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q5_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    unpack_k4(x[i].scales, sc, mn);
    int summ = 0;
    for (int j = 0; j < QK_K / 16; ++j) summ += y[i].bsums[j] * mn[j / 2];
    const uint8_t* q4 = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    int isum = 0;
    for (int j = 0; j < QK_K / 64; ++j, q4 += 32, q8 += 64) {
      const uint8_t m1 = static_cast<uint8_t>(1u << (2 * j)), m2 = static_cast<uint8_t>(2u << (2 * j));
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += ((q4[l] & 0xF) + ((qh[l] & m1) ? 16 : 0)) * q8[l];
        s1 += ((q4[l] >> 4) + ((qh[l] & m2) ? 16 : 0)) * q8[l + 32];
      }
      isum += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
    }
    const float d = h2f(x[i].d) * y[i].d;
    const float dmin = h2f(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(isum) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int8_t aux8[QK_K];
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    int8_t* av = aux8;
    for (int j = 0; j < QK_K; j += 128, av += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        av[l + 0] = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        av[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        av[l + 64] = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        av[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int isum = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += y[i].qs[16 * j + l] * aux8[16 * j + l];
      isum += x[i].scales[j] * s;
    }
    sumf += (h2f(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

constexpr int idx(GgmlType t) { return static_cast<int>(t); }

// The Exact-mode dot (see ExactDotFn): 16 partial sums, fixed order. Error ~ (n/16 + 4) roundings
// of partial-sum size rather than n of a running sum; the SIMD twins reproduce it bit for bit.
float exact_dot_f32_ref(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace

void fill_scalar_table(KernelTable& t) {
  t.name = "scalar";
  t.exact_dot_f32 = exact_dot_f32_ref;
  t.dequantize_row[idx(GgmlType::F32)] = dequant_f32;
  t.dequantize_row[idx(GgmlType::F16)] = dequant_f16;
  t.dequantize_row[idx(GgmlType::BF16)] = dequant_bf16;
  t.dequantize_row[idx(GgmlType::Q4_0)] = dequant_q4_0;
  t.dequantize_row[idx(GgmlType::Q4_1)] = dequant_q4_1;
  t.dequantize_row[idx(GgmlType::Q5_0)] = dequant_q5_0;
  t.dequantize_row[idx(GgmlType::Q5_1)] = dequant_q5_1;
  t.dequantize_row[idx(GgmlType::Q8_0)] = dequant_q8_0;
  t.dequantize_row[idx(GgmlType::Q8_1)] = dequant_q8_1;
  t.dequantize_row[idx(GgmlType::Q2_K)] = dequant_q2_K;
  t.dequantize_row[idx(GgmlType::Q3_K)] = dequant_q3_K;
  t.dequantize_row[idx(GgmlType::Q4_K)] = dequant_q4_K;
  t.dequantize_row[idx(GgmlType::Q5_K)] = dequant_q5_K;
  t.dequantize_row[idx(GgmlType::Q6_K)] = dequant_q6_K;
  t.dequantize_row[idx(GgmlType::Q8_K)] = dequant_q8_K;

  t.quantize_row[idx(GgmlType::F32)] = quant_f32;
  t.quantize_row[idx(GgmlType::F16)] = quant_f16;
  t.quantize_row[idx(GgmlType::BF16)] = quant_bf16;
  t.quantize_row[idx(GgmlType::Q8_0)] = quantize_row_q8_0_ref;
  t.quantize_row[idx(GgmlType::Q8_1)] = quantize_row_q8_1_ref;
  t.quantize_row[idx(GgmlType::Q8_K)] = quantize_row_q8_K_ref;

  t.vec_dot[idx(GgmlType::F32)] = dot_f32;
  t.vec_dot[idx(GgmlType::F16)] = dot_f16;
  t.vec_dot[idx(GgmlType::BF16)] = dot_bf16;
  t.vec_dot[idx(GgmlType::Q4_0)] = dot_q4_0;
  t.vec_dot[idx(GgmlType::Q4_1)] = dot_q4_1;
  t.vec_dot[idx(GgmlType::Q5_0)] = dot_q5_0;
  t.vec_dot[idx(GgmlType::Q5_1)] = dot_q5_1;
  t.vec_dot[idx(GgmlType::Q8_0)] = dot_q8_0;
  t.vec_dot[idx(GgmlType::Q2_K)] = dot_q2_K;
  t.vec_dot[idx(GgmlType::Q3_K)] = dot_q3_K;
  t.vec_dot[idx(GgmlType::Q4_K)] = dot_q4_K;
  t.vec_dot[idx(GgmlType::Q5_K)] = dot_q5_K;
  t.vec_dot[idx(GgmlType::Q6_K)] = dot_q6_K;
}

QuantizeRowFn weight_quantizer(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return quant_f32;
    case GgmlType::F16: return quant_f16;
    case GgmlType::BF16: return quant_bf16;
    case GgmlType::Q4_0: return wquant_q4_0;
    case GgmlType::Q4_1: return wquant_q4_1;
    case GgmlType::Q5_0: return wquant_q5_0;
    case GgmlType::Q5_1: return wquant_q5_1;
    case GgmlType::Q8_0: return quantize_row_q8_0_ref;
    case GgmlType::Q8_1: return quantize_row_q8_1_ref;
    case GgmlType::Q2_K: return wquant_q2_K;
    case GgmlType::Q3_K: return wquant_q3_K;
    case GgmlType::Q4_K: return wquant_q4_K;
    case GgmlType::Q5_K: return wquant_q5_K;
    case GgmlType::Q6_K: return wquant_q6_K;
    case GgmlType::Q8_K: return quantize_row_q8_K_ref;
  }
  return nullptr;
}

}  // namespace kq

void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  PICOLM_KCHECK(tr != nullptr && static_cast<uint32_t>(type) < 32, "unknown tensor type");
  PICOLM_KCHECK(n >= 0 && n % tr->block_elems == 0, std::string("row length not a multiple of the ") + tr->name + " block");
  const auto fn = scalar_kernels().dequantize_row[static_cast<int>(type)];
  PICOLM_KCHECK(fn != nullptr, std::string("no dequantizer for ") + tr->name);
  fn(src, dst, n);
}

void quantize_row_weights_ref(GgmlType type, const float* src, void* dst, int64_t n) {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  PICOLM_KCHECK(tr != nullptr, "unknown tensor type");
  PICOLM_KCHECK(n >= 0 && n % tr->block_elems == 0, std::string("row length not a multiple of the ") + tr->name + " block");
  const auto fn = kq::weight_quantizer(type);
  PICOLM_KCHECK(fn != nullptr, std::string("no quantizer for ") + tr->name);
  fn(src, dst, n);
}

GgmlType vec_dot_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return GgmlType::Q8_K;
    default: return weight;  // F32, F16, BF16 dot against their own type
  }
}

size_t row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  PICOLM_KCHECK(tr != nullptr, "unknown tensor type");
  PICOLM_KCHECK(n >= 0 && n % tr->block_elems == 0, std::string("row length not a multiple of the ") + tr->name + " block");
  return static_cast<size_t>(n / tr->block_elems) * tr->block_bytes;
}

}  // namespace picolm
