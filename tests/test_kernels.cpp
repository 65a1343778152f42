// Kernel tests: fp16/bf16 conversion, block layouts, activation quantizers, every fused dot product
// of every available KernelTable against a double-precision oracle built on dequantize_row, matmul
// against naive loops, and the thread pool.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"
#include "kernels/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace picolm;

namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                 GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

int ti(GgmlType t) { return static_cast<int>(t); }
const char* tname(GgmlType t) { return ggml_type_traits(t)->name; }
int64_t block_of(GgmlType t) { return ggml_type_traits(t)->block_elems; }
// Row length granule used in tests: the block, or 32 for the plain float types so odd
// multiples still exercise SIMD tails.
int64_t granule(GgmlType t) { return block_of(t) == 1 ? 37 : block_of(t); }

std::vector<const KernelTable*> all_tables() {
  const KernelTable* out[8];
  const int n = available_kernels(out, 8);
  return {out, out + n};
}

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

uint16_t h(float f) { return fp32_to_fp16(f); }

// Random but valid weight data: every quant bit pattern is random, scales are finite and modest so
// that sums stay well inside float range. For float types, random normal values.
std::vector<uint8_t> random_weights(std::mt19937& rng, GgmlType t, int64_t n) {
  std::vector<uint8_t> buf(row_bytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : buf) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> sc(0.002f, 0.02f);
  std::uniform_real_distribution<float> mn(-0.1f, 0.1f);
  const int64_t nb = n / block_of(t);
  using namespace picolm::kq;
  switch (t) {
    case GgmlType::F32: {
      auto v = random_floats(rng, n);
      std::memcpy(buf.data(), v.data(), buf.size());
      break;
    }
    case GgmlType::F16:
    case GgmlType::BF16: {
      auto v = random_floats(rng, n);
      auto* o = reinterpret_cast<uint16_t*>(buf.data());
      for (int64_t i = 0; i < n; ++i) o[i] = t == GgmlType::F16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
      break;
    }
    case GgmlType::Q4_0: for (int64_t i = 0; i < nb; ++i) reinterpret_cast<BlockQ4_0*>(buf.data())[i].d = h(sc(rng)); break;
    case GgmlType::Q5_0: for (int64_t i = 0; i < nb; ++i) reinterpret_cast<BlockQ5_0*>(buf.data())[i].d = h(sc(rng)); break;
    case GgmlType::Q8_0: for (int64_t i = 0; i < nb; ++i) reinterpret_cast<BlockQ8_0*>(buf.data())[i].d = h(sc(rng)); break;
    case GgmlType::Q4_1:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_1*>(buf.data())[i];
        b.d = h(sc(rng));
        b.m = h(mn(rng));
      }
      break;
    case GgmlType::Q5_1:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ5_1*>(buf.data())[i];
        b.d = h(sc(rng));
        b.m = h(mn(rng));
      }
      break;
    case GgmlType::Q2_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ2_K*>(buf.data())[i];
        b.d = h(sc(rng));
        b.dmin = h(sc(rng));
      }
      break;
    case GgmlType::Q3_K: for (int64_t i = 0; i < nb; ++i) reinterpret_cast<BlockQ3_K*>(buf.data())[i].d = h(sc(rng)); break;
    case GgmlType::Q4_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_K*>(buf.data())[i];
        b.d = h(sc(rng));
        b.dmin = h(sc(rng));
      }
      break;
    case GgmlType::Q5_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ5_K*>(buf.data())[i];
        b.d = h(sc(rng));
        b.dmin = h(sc(rng));
      }
      break;
    case GgmlType::Q6_K: for (int64_t i = 0; i < nb; ++i) reinterpret_cast<BlockQ6_K*>(buf.data())[i].d = h(sc(rng)); break;
    default: FAIL("no random generator for type");
  }
  return buf;
}

// Extra absolute error the activation format carries beyond its dequantized values: Q8_1 keeps
// s = fp16(d * sum(qs)), so the m*s term of Q4_1/Q5_1 is off by up to |m*s| * 2^-11 per block.
double q8_1_sum_slack(GgmlType wt, const uint8_t* w, const uint8_t* act, int64_t n) {
  if (wt != GgmlType::Q4_1 && wt != GgmlType::Q5_1) return 0.0;
  using namespace picolm::kq;
  double slack = 0.0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint16_t m = wt == GgmlType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(w)[b].m
                                            : reinterpret_cast<const BlockQ5_1*>(w)[b].m;
    const float s = fp16_to_fp32(reinterpret_cast<const BlockQ8_1*>(act)[b].s);
    slack += std::fabs(static_cast<double>(fp16_to_fp32(m)) * s) * (1.0 / 2048.0) * 1.01;
  }
  return slack;
}

// Whether matmul takes the table's many-token GEMM path for this shape (see matmul_multi).
bool uses_gemm(const KernelTable& k, GgmlType wt, int64_t rows, int64_t n_tok) {
  return k.gemm[ti(wt)].run != nullptr && n_tok >= k.gemm_min_tokens && rows % 16 == 0;
}

struct DotOracle {
  double exact;    // sum of dequant(w)_i * dequant(a)_i in double
  double abs_sum;  // sum of |dequant(w)_i * dequant(a)_i|
};

DotOracle oracle(GgmlType wt, const void* w, GgmlType at, const void* a, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
  dequantize_row_ref(wt, w, wf.data(), n);
  dequantize_row_ref(at, a, af.data(), n);
  DotOracle o{0.0, 0.0};
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(wf[i]) * af[i];
    o.exact += p;
    o.abs_sum += std::fabs(p);
  }
  return o;
}

#if defined(__x86_64__)
// x86 tables with packed kernels on this CPU (AVX2, AVX-512 VNNI): each packs all 6 types.
int x86_packed_tables() {
  const CpuFeatures f = detect_cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  return (avx2 ? 1 : 0) + (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni ? 1 : 0);
}
#endif
#if defined(__aarch64__)
// NEON tables with packed kernels on this CPU (neon always, neon_dotprod with SDOT, neon_i8mm
// with SDOT and SMMLA): each packs all 6 types.
int arm_packed_tables() {
  const CpuFeatures f = detect_cpu_features();
  return 1 + (f.dotprod ? 1 : 0) + (f.dotprod && f.i8mm ? 1 : 0);
}
#endif

}  // namespace

// ------------------------------------------------------------------------------------------------

TEST_CASE("fp16 round trip is exact for all 65536 halves", "[kernels][fp16]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t hv = static_cast<uint16_t>(i);
    const float f = fp16_to_fp32(hv);
    const uint16_t back = fp32_to_fp16(f);
    const bool is_nan = (hv & 0x7c00) == 0x7c00 && (hv & 0x3ff) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(f));
      REQUIRE(back == (hv | 0x200));  // quieted, payload kept
    } else {
      if (back != hv) FAIL("half " << i << " -> " << f << " -> " << back);
    }
  }
}

TEST_CASE("fp32_to_fp16 rounds to nearest even, overflows to inf, underflows gradually", "[kernels][fp16]") {
  CHECK(fp32_to_fp16(1.0f) == 0x3c00);
  CHECK(fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);         // tie -> even
  CHECK(fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);     // tie -> even (up)
  CHECK(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
  CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(fp32_to_fp16(65519.99f) == 0x7bff);
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);  // tie between max and 2^16 rounds to even = inf
  CHECK(fp32_to_fp16(-1e10f) == 0xfc00);
  CHECK(fp32_to_fp16(0x1p-24f) == 0x0001);
  CHECK(fp32_to_fp16(0x1p-25f) == 0x0000);                  // tie -> even (0)
  CHECK(fp32_to_fp16(0x1p-25f + 0x1p-40f) == 0x0001);
  CHECK(fp32_to_fp16(3 * 0x1p-25f) == 0x0002);              // tie -> even (2)
  CHECK(fp32_to_fp16(0x1p-14f - 0x1p-30f) == 0x0400);       // rounds up into the normals
  CHECK(fp32_to_fp16(-0.0f) == 0x8000);
  CHECK(fp32_to_fp16(1e-30f) == 0x0000);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_fp32_to_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}
__attribute__((target("f16c"))) static float hw_fp16_to_fp32(uint16_t x) { return _cvtsh_ss(x); }

TEST_CASE("fp16 conversion matches F16C hardware", "[kernels][fp16]") {
  if (!detect_cpu_features().f16c) {
    WARN("no F16C on this CPU; hardware comparison not run");
    return;
  }
  for (uint32_t i = 0; i < 65536; ++i) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(i)), b = hw_fp16_to_fp32(static_cast<uint16_t>(i));
    REQUIRE(std::memcmp(&a, &b, 4) == 0);
  }
  // Every float whose exponent is near the half range, low mantissa bits random (covers ties, the
  // subnormal range and overflow), plus random bit patterns everywhere.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 400000; ++i) {
    uint32_t bits = any(rng);
    if (i % 2 == 0) bits = (bits & 0x80000000u) | ((100u + (bits % 45u)) << 23) | (bits & 0x7fe000u) | ((i % 3 == 0) ? 0x1000u : (bits & 0x1fffu));
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const uint16_t ours = fp32_to_fp16(f), hw = hw_fp32_to_fp16(f);
    if (ours != hw) FAIL("bits 0x" << std::hex << bits << " ours 0x" << ours << " hw 0x" << hw);
  }
}
#endif

TEST_CASE("bf16 conversion", "[kernels][fp16]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(i));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
    } else {
      REQUIRE(fp32_to_bf16(f) == i);
    }
  }
  CHECK(fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);             // tie -> even
  CHECK(fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);         // tie -> even (up)
  CHECK(fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
}

TEST_CASE("row_bytes and block geometry", "[kernels]") {
  CHECK(row_bytes(GgmlType::Q4_K, 4096) == 16 * 144);
  CHECK(row_bytes(GgmlType::Q8_0, 64) == 68);
  CHECK(row_bytes(GgmlType::F16, 3) == 6);
  CHECK(row_bytes(GgmlType::Q8_K, 256) == 292);
  CHECK(vec_dot_type(GgmlType::Q4_1) == GgmlType::Q8_1);
  CHECK(vec_dot_type(GgmlType::Q6_K) == GgmlType::Q8_K);
  CHECK(vec_dot_type(GgmlType::BF16) == GgmlType::BF16);
}

TEST_CASE("Q8_0 quantizer: ggml rounding and bounds", "[kernels][quant]") {
  // A block whose max is 127 gives d = 1 exactly, so qs = roundf(x): ties away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = -126.5f;
  kq::BlockQ8_0 b;
  quantize_row_weights_ref(GgmlType::Q8_0, x.data(), &b, 32);
  CHECK(fp16_to_fp32(b.d) == 1.0f);
  CHECK(b.qs[0] == 127);
  CHECK(b.qs[1] == 3);
  CHECK(b.qs[2] == -3);
  CHECK(b.qs[3] == 0);
  CHECK(b.qs[4] == -127);
  // Zero block.
  std::vector<float> z(32, 0.0f);
  quantize_row_weights_ref(GgmlType::Q8_0, z.data(), &b, 32);
  CHECK(b.d == 0);
  for (int j = 0; j < 32; ++j) CHECK(b.qs[j] == 0);
  // Random: the largest magnitude maps to +-127 and every code is within half a step.
  std::mt19937 rng(1);
  for (const KernelTable* k : all_tables()) {
    INFO("table " << k->name);
    for (int rep = 0; rep < 50; ++rep) {
      auto v = random_floats(rng, 32 * 7, rep % 2 ? 3.0f : 0.01f);
      std::vector<kq::BlockQ8_0> q(7), ref(7);
      k->quantize_row[ti(GgmlType::Q8_0)](v.data(), q.data(), 7 * 32);
      kq::quantize_row_q8_0_ref(v.data(), ref.data(), 7 * 32);
      REQUIRE(std::memcmp(q.data(), ref.data(), sizeof(kq::BlockQ8_0) * 7) == 0);
      for (int bi = 0; bi < 7; ++bi) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[bi * 32 + j]));
        const float id = 127.0f / amax;
        int maxq = 0;
        for (int j = 0; j < 32; ++j) {
          maxq = std::max(maxq, std::abs(static_cast<int>(q[bi].qs[j])));
          REQUIRE(std::fabs(v[bi * 32 + j] * id - q[bi].qs[j]) <= 0.5f + 1e-4f);
        }
        REQUIRE(maxq == 127);
      }
    }
  }
}

TEST_CASE("Q8_1 quantizer keeps s = d * sum(qs)", "[kernels][quant]") {
  std::mt19937 rng(2);
  for (const KernelTable* k : all_tables()) {
    INFO("table " << k->name);
    auto v = random_floats(rng, 32 * 5);
    std::vector<kq::BlockQ8_1> q(5), ref(5);
    k->quantize_row[ti(GgmlType::Q8_1)](v.data(), q.data(), 5 * 32);
    kq::quantize_row_q8_1_ref(v.data(), ref.data(), 5 * 32);
    REQUIRE(std::memcmp(q.data(), ref.data(), sizeof(kq::BlockQ8_1) * 5) == 0);
    for (int b = 0; b < 5; ++b) {
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[b].qs[j];
      // s is computed from the unrounded d (amax/127), as ggml does.
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
      CHECK(q[b].s == fp32_to_fp16(static_cast<float>(sum) * (amax / 127.0f)));
    }
  }
}

TEST_CASE("Q8_K quantizer: -127/max scale, round half to even, bsums", "[kernels][quant]") {
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;  // max by magnitude is negative: iscale = 1, d = 1
  x[1] = 2.5f;     // tie -> 2 (even)
  x[2] = 3.5f;     // tie -> 4
  x[3] = -0.5f;    // tie -> 0
  kq::BlockQ8_K b;
  kq::quantize_row_q8_K_ref(x.data(), &b, 256);
  CHECK(b.d == 1.0f);
  CHECK(b.qs[0] == -127);
  CHECK(b.qs[1] == 2);
  CHECK(b.qs[2] == 4);
  CHECK(b.qs[3] == 0);
  std::mt19937 rng(3);
  for (const KernelTable* k : all_tables()) {
    INFO("table " << k->name);
    for (int rep = 0; rep < 20; ++rep) {
      auto v = random_floats(rng, 256 * 3, rep % 2 ? 5.0f : 0.02f);
      std::vector<kq::BlockQ8_K> q(3), ref(3);
      k->quantize_row[ti(GgmlType::Q8_K)](v.data(), q.data(), 3 * 256);
      kq::quantize_row_q8_K_ref(v.data(), ref.data(), 3 * 256);
      REQUIRE(std::memcmp(q.data(), ref.data(), sizeof(kq::BlockQ8_K) * 3) == 0);
      for (int bi = 0; bi < 3; ++bi) {
        int maxq = 0;
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += q[bi].qs[s * 16 + j];
          REQUIRE(q[bi].bsums[s] == sum);
        }
        for (int j = 0; j < 256; ++j) {
          maxq = std::max(maxq, std::abs(static_cast<int>(q[bi].qs[j])));
          REQUIRE(std::fabs(v[bi * 256 + j] / q[bi].d - q[bi].qs[j]) <= 0.5f + 1e-3f);
        }
        REQUIRE(maxq == 127);
      }
    }
  }
  // Equal magnitudes of opposite sign: the first one (here negative, in the second 8-lane group)
  // sets the sign of the scale, in every table.
  std::vector<float> t2(256, 0.25f);
  t2[13] = -3.0f;
  t2[200] = 3.0f;
  for (const KernelTable* k : all_tables()) {
    INFO("table " << k->name);
    kq::BlockQ8_K q;
    k->quantize_row[ti(GgmlType::Q8_K)](t2.data(), &q, 256);
    CHECK(q.qs[13] == -127);
    CHECK(q.qs[200] == 127);
    CHECK(q.d > 0.0f);  // iscale = -127 / max with max = -3
  }
  // Zero block.
  std::vector<float> z(256, 0.0f);
  kq::quantize_row_q8_K_ref(z.data(), &b, 256);
  CHECK(b.d == 0.0f);
}

TEST_CASE("weight quantizers produce blocks that dequantize close to the input", "[kernels][quant]") {
  // Relative RMS error bounds for plain round-to-nearest on Gaussian data (bits per weight: Q2_K
  // ~2.6, Q3_K ~3.4, Q4 ~4.5, Q5 ~5.5, Q6_K ~6.6, Q8 ~8.5). They are loose upper limits that a
  // layout bug (a misplaced bit or scale) would exceed by far.
  struct Bound {
    GgmlType t;
    double rel_rms;
  };
  const Bound bounds[] = {{GgmlType::Q4_0, 0.15}, {GgmlType::Q4_1, 0.12}, {GgmlType::Q5_0, 0.07},
                          {GgmlType::Q5_1, 0.06}, {GgmlType::Q8_0, 0.01}, {GgmlType::Q2_K, 0.45},
                          {GgmlType::Q3_K, 0.25}, {GgmlType::Q4_K, 0.12}, {GgmlType::Q5_K, 0.06},
                          {GgmlType::Q6_K, 0.03}, {GgmlType::F16, 1e-3},  {GgmlType::BF16, 8e-3},
                          {GgmlType::F32, 0.0}};
  std::mt19937 rng(4);
  for (const Bound& bd : bounds) {
    INFO("type " << tname(bd.t));
    const int64_t n = 256 * 4;
    auto x = random_floats(rng, n, 0.05f);
    std::vector<uint8_t> q(row_bytes(bd.t, n));
    quantize_row_weights_ref(bd.t, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row_ref(bd.t, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
      ref += x[i] * static_cast<double>(x[i]);
    }
    const double rel = std::sqrt(err / ref);
    INFO("relative rms error " << rel);
    CHECK(rel <= bd.rel_rms);
  }
}

TEST_CASE("Q4_K dequantization of a hand-built block", "[kernels][quant]") {
  // Sub-block 0: scale 1, min 2 (packed in bytes 0 and 4); sub-block 5: scale 0x2a, min 0x31
  // (low nibbles in byte 9, high bits in bits 6-7 of bytes 1 and 5).
  kq::BlockQ4_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  b.scales[0] = 1;
  b.scales[4] = 2;
  b.scales[9] = static_cast<uint8_t>((0x2a & 0xF) | ((0x31 & 0xF) << 4));
  b.scales[1] |= static_cast<uint8_t>((0x2a >> 4) << 6);
  b.scales[5] |= static_cast<uint8_t>((0x31 >> 4) << 6);
  b.qs[0] = 0x3 | (0x7 << 4);   // element 0 (low nibble, sub-block 0) and element 32 (sub-block 1)
  b.qs[64 + 5] = 0x9 << 4;      // element 128+32+5 = 165: high nibble of the third 32-byte group = sub-block 5
  std::vector<float> y(256);
  dequantize_row_ref(GgmlType::Q4_K, &b, y.data(), 256);
  CHECK(y[0] == 0.5f * 1 * 3 - 0.25f * 2);
  CHECK(y[32] == 0.0f * 7);  // sub-block 1 has scale 0 and min 0
  CHECK(y[165] == 0.5f * 0x2a * 9 - 0.25f * 0x31);
}

TEST_CASE("fused dot products match the double-precision oracle, every table", "[kernels][dot]") {
  // Tolerance: the oracle is sum(dequant(w)_i * dequant(act)_i) in double. Integer block sums are
  // exact in every kernel, so the only error is float rounding of per-block scale products and of
  // the running sum (or SIMD lane sums): bounded by 2e-6 * sum|w_i a_i| for these lengths
  // (<= 7 blocks / 259 floats, a few roundings each at 2^-24). Q4_1/Q5_1 add the fp16 rounding of
  // Q8_1's s field (see q8_1_sum_slack). F16/BF16 products of two halves are exact in float.
  std::mt19937 rng(5);
  const auto tables = all_tables();
  for (GgmlType wt : kWeightTypes) {
    const GgmlType at = vec_dot_type(wt);
    for (int nblk : {1, 3, 7}) {
      const int64_t n = granule(wt) * nblk;
      for (int rep = 0; rep < 8; ++rep) {
        auto w = random_weights(rng, wt, n);
        auto x = random_floats(rng, n, rep % 2 ? 1.0f : 30.0f);
        std::vector<uint8_t> a(row_bytes(at, n));
        scalar_kernels().quantize_row[ti(at)](x.data(), a.data(), n);
        const DotOracle o = oracle(wt, w.data(), at, a.data(), n);
        const double tol = 2e-6 * o.abs_sum + q8_1_sum_slack(wt, w.data(), a.data(), n) + 1e-30;
        const float ref_scalar = scalar_kernels().vec_dot[ti(wt)](n, w.data(), a.data());
        for (const KernelTable* k : tables) {
          INFO("type " << tname(wt) << " table " << k->name << " n " << n);
          REQUIRE(k->vec_dot[ti(wt)] != nullptr);
          const float got = k->vec_dot[ti(wt)](n, w.data(), a.data());
          INFO("got " << got << " oracle " << o.exact << " tol " << tol << " scalar " << ref_scalar);
          REQUIRE(std::fabs(got - o.exact) <= tol);
          // Twins against the scalar reference: both within tol of the oracle.
          REQUIRE(std::fabs(got - ref_scalar) <= 2 * tol);
        }
      }
    }
  }
}

TEST_CASE("Exact-mode F32 dot is the same in every table", "[kernels][dot]") {
  std::mt19937 rng(11);
  for (int64_t n : {1, 15, 16, 17, 100, 256, 1000, 4099}) {
    auto a = random_floats(rng, n), b = random_floats(rng, n, 3.0f);
    const float ref = scalar_kernels().exact_dot_f32(a.data(), b.data(), n);
    double ex = 0, ab = 0;
    for (int64_t i = 0; i < n; ++i) ex += static_cast<double>(a[i]) * b[i], ab += std::fabs(static_cast<double>(a[i]) * b[i]);
    INFO("n " << n);
    // Each partial sum has n/16 + 1 terms, then 4 folds: relative error below (n/16 + 6) * 2^-24.
    REQUIRE(std::fabs(ref - ex) <= (static_cast<double>(n) / 16 + 6) * 0x1p-24 * ab + 1e-30);
    for (const KernelTable* k : all_tables()) {
      INFO("table " << k->name);
      const float got = k->exact_dot_f32(a.data(), b.data(), n);
      REQUIRE(std::memcmp(&got, &ref, 4) == 0);
    }
  }
}

TEST_CASE("tile dots are bit-identical to single dots", "[kernels][dot]") {
  std::mt19937 rng(10);
  for (const KernelTable* k : all_tables()) {
    for (GgmlType wt : kWeightTypes) {
      if (k->vec_dot_tile[ti(wt)] == nullptr) continue;
      const GgmlType at = vec_dot_type(wt);
      for (int nblk : {1, 3, 7, 8}) {  // 7 and 8: the 4-, 2- and 1-block steps of the AVX-512 Q8_0-activation tiles
        const int64_t n = granule(wt) * nblk;
        const size_t arow = row_bytes(at, n) + 40;  // a stride that is not the row size
        auto w = random_weights(rng, wt, n);
        std::vector<uint8_t> acts(arow * kMaxDotTile);
        for (int t = 0; t < kMaxDotTile; ++t) {
          auto x = random_floats(rng, n);
          k->quantize_row[ti(at)](x.data(), acts.data() + t * arow, n);
        }
        REQUIRE(k->max_dot_tile >= 1);
        REQUIRE(k->max_dot_tile <= kMaxDotTile);
        for (int n_act = 1; n_act <= k->max_dot_tile; ++n_act) {
          INFO("type " << tname(wt) << " table " << k->name << " n " << n << " n_act " << n_act);
          std::vector<float> out(static_cast<size_t>(3 * kMaxDotTile), -7.0f);
          k->vec_dot_tile[ti(wt)](n, w.data(), acts.data(), arow, n_act, out.data(), 3);
          for (int t = 0; t < kMaxDotTile; ++t) {
            if (t < n_act) {
              REQUIRE(out[3 * t] == k->vec_dot[ti(wt)](n, w.data(), acts.data() + t * arow));
            } else {
              REQUIRE(out[3 * t] == -7.0f);
            }
            REQUIRE(out[3 * t + 1] == -7.0f);  // nothing written between strided outputs
          }
        }
      }
    }
  }
}

TEST_CASE("every table's dequantize and quantize agree with scalar", "[kernels][dot]") {
  std::mt19937 rng(6);
  const KernelTable& s = scalar_kernels();
  for (const KernelTable* k : all_tables()) {
    for (GgmlType wt : kWeightTypes) {
      INFO("type " << tname(wt) << " table " << k->name);
      const int64_t n = granule(wt) * 3;
      auto w = random_weights(rng, wt, n);
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      REQUIRE(k->dequantize_row[ti(wt)] != nullptr);
      k->dequantize_row[ti(wt)](w.data(), a.data(), n);
      s.dequantize_row[ti(wt)](w.data(), b.data(), n);
      // Twins round exactly as the reference (same products, no fused multiply-add).
      for (int64_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&a[i], &b[i], 4) == 0);
    }
    for (GgmlType at : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
      INFO("activation type " << tname(at) << " table " << k->name);
      const int64_t n = granule(at) * 5;
      auto x = random_floats(rng, n);
      std::vector<uint8_t> qa(row_bytes(at, n)), qb(row_bytes(at, n));
      REQUIRE(k->quantize_row[ti(at)] != nullptr);
      k->quantize_row[ti(at)](x.data(), qa.data(), n);
      s.quantize_row[ti(at)](x.data(), qb.data(), n);
      REQUIRE(qa == qb);  // activation quantization is bit-exact across tables
    }
  }
}

TEST_CASE("GEMM kernels match the fused dots and the oracle, every table", "[kernels][gemm]") {
  // Each GEMM computes the integer block sums of the fused dot exactly (unsigned codes, offsets
  // folded back through per-token sums), so it may differ from the scalar dot only in float
  // rounding order: tolerance 4e-6 * sum|w_i a_i| (a few more roundings than a dot's 2e-6). Shapes:
  // 16 and 48 rows (one and three panels: the 2-panel tile and the 1-panel tail), token counts that
  // cover every tile width and its remainders, 1 to 5 blocks, rows sub-ranges as matmul's tasks.
  std::mt19937 rng(21);
  int tested = 0;
  for (const KernelTable* k : all_tables()) {
    for (GgmlType wt : kWeightTypes) {
      const GemmKernel& g = k->gemm[ti(wt)];
      if (g.run == nullptr) continue;
      REQUIRE(g.prepare != nullptr);
      REQUIRE(g.meta_bytes != nullptr);
      REQUIRE(g.scratch_bytes != nullptr);
      const GgmlType at = vec_dot_type(wt);
      for (int64_t rows : {16, 48}) {
        for (int64_t n_tok : {1, 4, 5, 6, 7, 13, 25}) {
          for (int nblk : {1, 2, 5}) {
            const int64_t cols = block_of(wt) * nblk;
            INFO("type " << tname(wt) << " table " << k->name << " rows " << rows << " tokens " << n_tok << " cols " << cols);
            const size_t wrow = row_bytes(wt, cols), arow = row_bytes(at, cols);
            std::vector<uint8_t> W;
            for (int64_t r = 0; r < rows; ++r) {
              auto wr = random_weights(rng, wt, cols);
              W.insert(W.end(), wr.begin(), wr.end());
            }
            std::vector<uint8_t> act(arow * static_cast<size_t>(n_tok));
            for (int64_t t = 0; t < n_tok; ++t) {
              auto x = random_floats(rng, cols, t % 2 ? 1.0f : 30.0f);
              if (t == 2) std::fill(x.begin(), x.end(), 0.0f);  // an all-zero activation row
              scalar_kernels().quantize_row[ti(at)](x.data(), act.data() + t * arow, cols);
            }
            std::vector<uint8_t> meta(g.meta_bytes(cols) * static_cast<size_t>(n_tok));
            g.prepare(cols, act.data(), arow, 0, n_tok, meta.data());
            std::vector<uint8_t> scratch(g.scratch_bytes(cols) + 64);
            std::vector<float> Y(static_cast<size_t>(rows * n_tok), NAN);
            // Two calls over row ranges, as matmul's tasks split the rows.
            const int64_t split = rows > 16 ? 16 : rows;
            g.run(cols, W.data(), wrow, 0, split, act.data(), arow, meta.data(), n_tok, Y.data(), rows, scratch.data());
            if (split < rows)
              g.run(cols, W.data(), wrow, split, rows, act.data(), arow, meta.data(), n_tok, Y.data(), rows, scratch.data());
            for (int64_t t = 0; t < n_tok; ++t) {
              for (int64_t r = 0; r < rows; ++r) {
                const uint8_t* wr = W.data() + r * wrow;
                const uint8_t* ar = act.data() + t * arow;
                const DotOracle o = oracle(wt, wr, at, ar, cols);
                const float ref = scalar_kernels().vec_dot[ti(wt)](cols, wr, ar);
                const float got = Y[t * rows + r];
                INFO("token " << t << " row " << r << " got " << got << " oracle " << o.exact << " scalar dot " << ref);
                REQUIRE(std::fabs(got - o.exact) <= 4e-6 * o.abs_sum + 1e-30);
                REQUIRE(std::fabs(got - ref) <= 6e-6 * o.abs_sum + 1e-30);
              }
            }
            ++tested;
          }
        }
      }
    }
  }
  INFO("GEMM kernels tested: " << tested);
#if defined(__x86_64__)
  // The AVX-512 table has GEMM kernels for Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K: on a CPU that runs
  // it, all of them must have been exercised.
  const CpuFeatures f = detect_cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.avx2 && f.fma && f.f16c) CHECK(tested == 6 * 2 * 7 * 3);
#endif
}

TEST_CASE("packed weights match the fused dots and the oracle; a token's result does not depend on its batch", "[kernels][packed]") {
  // Packed panels hold the same integer codes as the GEMM panels (compact form), so results may
  // differ from the scalar dot only in float rounding order (same tolerances as the GEMM test).
  // Shapes: 16, 40 (a last panel with 8 zero rows) and 48 rows; 1 to 13 tokens (every tile width
  // and remainder); 1, 2 and 5 blocks; 1 and 2 threads (row ranges split into tasks). A token's
  // row of a many-token call is bit-identical to the same token alone (decode and prefill agree).
  std::mt19937 rng(57);
  int tested = 0;
  for (int nt : {1, 2}) {
    ThreadPool pool(nt);
    for (const KernelTable* k : all_tables()) {
      for (GgmlType wt : kWeightTypes) {
        if (k->packed[ti(wt)].run == nullptr) continue;
        REQUIRE(k->gemm[ti(wt)].prepare != nullptr);
        const GgmlType at = vec_dot_type(wt);
        for (int64_t rows : {16, 40, 48}) {
          for (int nblk : {1, 2, 5}) {
            const int64_t cols = block_of(wt) * nblk;
            const size_t wrow = row_bytes(wt, cols), arow = row_bytes(at, cols);
            std::vector<uint8_t> W;
            for (int64_t r = 0; r < rows; ++r) {
              auto wr = random_weights(rng, wt, cols);
              W.insert(W.end(), wr.begin(), wr.end());
            }
            const size_t pbytes = packed_bytes(*k, wt, rows, cols);
            REQUIRE(pbytes == static_cast<size_t>((rows + 15) / 16) * k->packed[ti(wt)].panel_bytes(cols));
            REQUIRE(pbytes % 64 == 0);
            // Exactly the GGUF rows' bytes, counting the padding rows of the last panel and, for the
            // 32-column types (packed in pairs of blocks), the padding block of an odd count;
            // Q6_K's super-blocks are padded from 16 x 210 bytes to whole cache lines (+0.95%).
            const int64_t n_panels = (rows + 15) / 16;
            const size_t wrow_padded = block_of(wt) == 32 ? row_bytes(wt, (cols + 63) / 64 * 64) : wrow;
            const size_t file_bytes = wrow_padded * static_cast<size_t>(16 * n_panels);
            REQUIRE(pbytes == (wt == GgmlType::Q6_K ? file_bytes / 3360 * 3392 : file_bytes));
            std::vector<uint8_t> P(pbytes + 128, 0xA5);
            uint8_t* packed = P.data() + (64 - reinterpret_cast<uintptr_t>(P.data()) % 64) % 64;
            pack_weights(*k, &pool, wt, W.data(), rows, cols, packed);
            for (size_t i = pbytes; packed + i < P.data() + P.size(); ++i) REQUIRE(packed[i] == 0xA5);  // no overrun
            for (int64_t n_tok : {1, 4, 5, 6, 7, 13, 33}) {  // 33: AVX-512 expands the panels
              INFO("type " << tname(wt) << " table " << k->name << " threads " << nt << " rows " << rows << " tokens "
                           << n_tok << " cols " << cols);
              auto X = random_floats(rng, cols * n_tok, n_tok % 2 ? 1.0f : 30.0f);
              if (n_tok > 2) std::fill(X.begin() + 2 * cols, X.begin() + 3 * cols, 0.0f);  // an all-zero row
              std::vector<float> Y(static_cast<size_t>(rows * n_tok), NAN);
              matmul(*k, pool, ActivationMode::Quantized, wt, W.data(), rows, cols, X.data(), n_tok, Y.data(), packed);
              std::vector<uint8_t> act(arow);
              for (int64_t t = 0; t < n_tok; ++t) {
                k->quantize_row[ti(at)](X.data() + t * cols, act.data(), cols);
                std::vector<float> y1(static_cast<size_t>(rows), NAN);
                matmul(*k, pool, ActivationMode::Quantized, wt, W.data(), rows, cols, X.data() + t * cols, 1, y1.data(), packed);
                REQUIRE(std::memcmp(y1.data(), Y.data() + t * rows, static_cast<size_t>(rows) * sizeof(float)) == 0);
                for (int64_t r = 0; r < rows; ++r) {
                  const uint8_t* wr = W.data() + r * wrow;
                  const DotOracle o = oracle(wt, wr, at, act.data(), cols);
                  const float ref = scalar_kernels().vec_dot[ti(wt)](cols, wr, act.data());
                  const float got = Y[t * rows + r];
                  INFO("token " << t << " row " << r << " got " << got << " oracle " << o.exact << " scalar dot " << ref);
                  REQUIRE(std::fabs(got - o.exact) <= 4e-6 * o.abs_sum + 1e-30);
                  REQUIRE(std::fabs(got - ref) <= 6e-6 * o.abs_sum + 1e-30);
                }
              }
              ++tested;
            }
          }
        }
      }
    }
  }
  INFO("packed cases tested: " << tested);
#if defined(__x86_64__)
  // The AVX2 and AVX-512 tables pack Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K: all must have been exercised.
  CHECK(tested == x86_packed_tables() * 2 * 6 * 3 * 3 * 7);
#endif
#if defined(__aarch64__)
  // So do the NEON tables (plain and, where the CPU has SDOT, dotprod).
  CHECK(tested == arm_packed_tables() * 2 * 6 * 3 * 3 * 7);
#endif
  // A table or type without a packed form reports 0 bytes.
  CHECK(packed_bytes(scalar_kernels(), GgmlType::Q4_K, 16, 256) == 0);
  CHECK(packed_bytes(best_kernels(), GgmlType::F32, 16, 256) == 0);
}

TEST_CASE("every table's packer writes the portable packer's bytes", "[kernels][packed]") {
  // One layout for all tables (packed_layout.h): a vectorized packer must agree with the portable
  // one byte for byte (codes, masks, high bits, scales, mins, padding rows and blocks).
  std::mt19937 rng(59);
  int compared = 0;
  for (const KernelTable* k : all_tables()) {
    for (GgmlType wt : kWeightTypes) {
      if (k->packed[ti(wt)].run == nullptr) continue;
      REQUIRE(kq::packed::is_packable(wt));
      for (int64_t rows : {16, 21}) {
        for (int nblk : {1, 3}) {
          const int64_t cols = block_of(wt) * nblk;
          INFO("type " << tname(wt) << " table " << k->name << " rows " << rows << " cols " << cols);
          std::vector<uint8_t> W;
          for (int64_t r = 0; r < rows; ++r) {
            auto wr = random_weights(rng, wt, cols);
            W.insert(W.end(), wr.begin(), wr.end());
          }
          const int64_t n_panels = (rows + 15) / 16;
          const size_t pb = kq::packed::panel_bytes(wt, cols);
          REQUIRE(pb == k->packed[ti(wt)].panel_bytes(cols));
          std::vector<uint8_t> a(pb * n_panels, 0x11), b(pb * n_panels, 0x22);
          k->packed[ti(wt)].pack(W.data(), row_bytes(wt, cols), rows, cols, 0, n_panels, a.data());
          kq::packed::pack_panels_ref(wt, W.data(), row_bytes(wt, cols), rows, cols, 0, n_panels, b.data());
          REQUIRE(a == b);
          ++compared;
        }
      }
    }
  }
  CHECK(kq::packed::panel_bytes(GgmlType::Q4_1, 256) == 0);
  INFO("packers compared: " << compared);
#if defined(__x86_64__)
  CHECK(compared == x86_packed_tables() * 6 * 2 * 2);
#endif
#if defined(__aarch64__)
  CHECK(compared == arm_packed_tables() * 6 * 2 * 2);
#endif
}

TEST_CASE("packed tiles: every token count 1-33 gives each token decode's bits; NEON tables agree bit for bit", "[kernels][packed]") {
  // Many-token calls run wide tiles (NEON: SDOT 8 rows x 4 tokens, i8mm: SMMLA 4 rows x 8 tokens,
  // a token pair padded for odd counts) and decode another tile; every count from 1 to 33 covers
  // each tile width with each remainder. A token's row must be bit-identical to the same token
  // alone (what batch_invariant() promises for packed weights), the decode rows must match the
  // double-precision oracle, and on aarch64 every NEON table must give the same bits as the plain
  // one: their integer sums are exact and their float steps the same, so the i8mm table is checked
  // against the SDOT and SMULL tiles too. Rows 42: a last panel with a partial row group.
  std::mt19937 rng(61);
  ThreadPool pool(2);
  constexpr int64_t kTok = 33;
  int tested = 0, compared = 0;
  for (GgmlType wt : kWeightTypes) {
    if (!kq::packed::is_packable(wt)) continue;
    const GgmlType at = vec_dot_type(wt);
    for (int64_t rows : {16, 42}) {
      for (int nblk : {1, 3}) {
        const int64_t cols = block_of(wt) * nblk;
        const size_t wrow = row_bytes(wt, cols), arow = row_bytes(at, cols);
        std::vector<uint8_t> W;
        for (int64_t r = 0; r < rows; ++r) {
          auto wr = random_weights(rng, wt, cols);
          W.insert(W.end(), wr.begin(), wr.end());
        }
        auto X = random_floats(rng, cols * kTok, 4.0f);
        std::fill(X.begin() + 5 * cols, X.begin() + 6 * cols, 0.0f);  // an all-zero token
#if defined(__aarch64__)
        const KernelTable* first_neon = nullptr;
        std::vector<float> neon_dec;
#endif
        for (const KernelTable* k : all_tables()) {
          if (k->packed[ti(wt)].run == nullptr) continue;
          INFO("type " << tname(wt) << " table " << k->name << " rows " << rows << " cols " << cols);
          std::vector<uint8_t> P(packed_bytes(*k, wt, rows, cols) + 64);
          uint8_t* packed = P.data() + (64 - reinterpret_cast<uintptr_t>(P.data()) % 64) % 64;
          pack_weights(*k, &pool, wt, W.data(), rows, cols, packed);
          // Decode: each token alone.
          std::vector<float> dec(static_cast<size_t>(rows * kTok), NAN);
          for (int64_t t = 0; t < kTok; ++t)
            matmul(*k, pool, ActivationMode::Quantized, wt, W.data(), rows, cols, X.data() + t * cols, 1,
                   dec.data() + t * rows, packed);
          std::vector<uint8_t> act(arow);
          for (int64_t t = 0; t < kTok; ++t) {
            k->quantize_row[ti(at)](X.data() + t * cols, act.data(), cols);
            for (int64_t r = 0; r < rows; ++r) {
              const DotOracle o = oracle(wt, W.data() + r * wrow, at, act.data(), cols);
              INFO("token " << t << " row " << r);
              REQUIRE(std::fabs(dec[t * rows + r] - o.exact) <= 4e-6 * o.abs_sum + 1e-30);
            }
          }
          for (int64_t n_tok = 1; n_tok <= kTok; ++n_tok) {
            std::vector<float> Y(static_cast<size_t>(rows * n_tok), NAN);
            matmul(*k, pool, ActivationMode::Quantized, wt, W.data(), rows, cols, X.data(), n_tok, Y.data(), packed);
            INFO("tokens " << n_tok);
            REQUIRE(std::memcmp(Y.data(), dec.data(), Y.size() * sizeof(float)) == 0);
            ++tested;
          }
#if defined(__aarch64__)
          if (std::string(k->name).rfind("neon", 0) == 0) {
            if (first_neon == nullptr) {
              first_neon = k;
              neon_dec = dec;
            } else {
              INFO("against " << first_neon->name);
              REQUIRE(std::memcmp(dec.data(), neon_dec.data(), dec.size() * sizeof(float)) == 0);
              ++compared;
            }
          }
#endif
        }
      }
    }
  }
  INFO("token counts tested: " << tested << ", NEON tables compared: " << compared);
#if defined(__aarch64__)
  CHECK(tested == arm_packed_tables() * 6 * 2 * 2 * static_cast<int>(kTok));
  CHECK(compared == (arm_packed_tables() - 1) * 6 * 2 * 2);
#elif defined(__x86_64__)
  CHECK(tested == x86_packed_tables() * 6 * 2 * 2 * static_cast<int>(kTok));
#endif
}

TEST_CASE("matmul_pair and matmul_multi with packed weights equal packed matmuls", "[kernels][packed]") {
  std::mt19937 rng(58);
  auto combine = [](int n, float* a, const float* b) {
    for (int i = 0; i < n; ++i) a[i] = a[i] * 0.5f - b[i];
  };
  ThreadPool pool(3);
  const KernelTable& k = best_kernels();
  for (GgmlType wt : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q6_K}) {
    if (k.packed[ti(wt)].run == nullptr) continue;
    for (int64_t n_tok : {1, 9}) {
      const int64_t rows = 336, cols = block_of(wt) * 2;
      INFO("type " << tname(wt) << " tokens " << n_tok);
      std::vector<uint8_t> A, B;
      for (int64_t r = 0; r < rows; ++r) {
        auto a = random_weights(rng, wt, cols), b = random_weights(rng, wt, cols);
        A.insert(A.end(), a.begin(), a.end());
        B.insert(B.end(), b.begin(), b.end());
      }
      std::vector<uint8_t> PA(packed_bytes(k, wt, rows, cols) + 64), PB(PA.size());
      uint8_t* pa = PA.data() + (64 - reinterpret_cast<uintptr_t>(PA.data()) % 64) % 64;
      uint8_t* pb = PB.data() + (64 - reinterpret_cast<uintptr_t>(PB.data()) % 64) % 64;
      pack_weights(k, nullptr, wt, A.data(), rows, cols, pa);
      pack_weights(k, &pool, wt, B.data(), rows, cols, pb);
      auto X = random_floats(rng, cols * n_tok);
      const size_t ny = static_cast<size_t>(rows * n_tok);
      std::vector<float> ya(ny), yb(ny), yp(ny, NAN), ym(ny, NAN), ym2(ny, NAN);
      matmul(k, pool, ActivationMode::Quantized, wt, A.data(), rows, cols, X.data(), n_tok, ya.data(), pa);
      matmul(k, pool, ActivationMode::Quantized, wt, B.data(), rows, cols, X.data(), n_tok, yb.data(), pb);
      const MatmulTarget ta{wt, A.data(), rows, yp.data(), pa}, tb{wt, B.data(), rows, nullptr, pb};
      matmul_pair(k, pool, ActivationMode::Quantized, ta, tb, cols, X.data(), n_tok, combine);
      const MatmulTarget tm[2] = {{wt, A.data(), rows, ym.data(), pa}, {wt, B.data(), rows, ym2.data(), pb}};
      matmul_multi(k, pool, ActivationMode::Quantized, tm, 2, cols, X.data(), n_tok);
      REQUIRE(std::memcmp(ym.data(), ya.data(), ny * sizeof(float)) == 0);
      REQUIRE(std::memcmp(ym2.data(), yb.data(), ny * sizeof(float)) == 0);
      for (int64_t t = 0; t < n_tok; ++t) combine(static_cast<int>(rows), ya.data() + t * rows, yb.data() + t * rows);
      REQUIRE(std::memcmp(yp.data(), ya.data(), ny * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("matmul matches naive loops, both modes, 1-3 threads", "[kernels][matmul]") {
  std::mt19937 rng(8);
  for (int nt = 1; nt <= 3; ++nt) {
    ThreadPool pool(nt);
    for (const KernelTable* k : all_tables()) {
      for (GgmlType wt : kWeightTypes) {
        const GgmlType at = vec_dot_type(wt);
        for (int64_t rows : {1, 7, 33, 48}) {
          for (int64_t n_tok : {1, 3, 9, 70}) {
            const int64_t cols = granule(wt) * (rows == 7 ? 3 : 1);
            INFO("type " << tname(wt) << " table " << k->name << " threads " << nt << " rows " << rows << " tokens "
                         << n_tok << " cols " << cols);
            std::vector<uint8_t> W;
            for (int64_t r = 0; r < rows; ++r) {
              auto wr = random_weights(rng, wt, cols);
              W.insert(W.end(), wr.begin(), wr.end());
            }
            auto X = random_floats(rng, cols * n_tok);
            std::vector<float> Yq(static_cast<size_t>(rows * n_tok), -1.0f), Ye(Yq.size(), -1.0f);
            matmul(*k, pool, ActivationMode::Quantized, wt, W.data(), rows, cols, X.data(), n_tok, Yq.data());
            matmul(*k, pool, ActivationMode::Exact, wt, W.data(), rows, cols, X.data(), n_tok, Ye.data());
            const size_t wrow = row_bytes(wt, cols), arow = row_bytes(at, cols);
            std::vector<uint8_t> act(arow);
            std::vector<float> wf(static_cast<size_t>(cols));
            for (int64_t t = 0; t < n_tok; ++t) {
              k->quantize_row[ti(at)](X.data() + t * cols, act.data(), cols);
              for (int64_t r = 0; r < rows; ++r) {
                const uint8_t* wr = W.data() + r * wrow;
                // Quantized mode is exactly the table's own fused dot on the quantized activation,
                // or, where the many-token GEMM runs, the same integers with the float roundings
                // in another order.
                const float expect = k->vec_dot[ti(wt)](cols, wr, act.data());
                if (uses_gemm(*k, wt, rows, n_tok)) {
                  const DotOracle o = oracle(wt, wr, at, act.data(), cols);
                  REQUIRE(std::fabs(Yq[t * rows + r] - expect) <= 4e-6 * o.abs_sum + 1e-30);
                } else {
                  REQUIRE(Yq[t * rows + r] == expect);
                }
                // Exact mode: dequantized weights times F32 activations; float sum vs double.
                dequantize_row_ref(wt, wr, wf.data(), cols);
                double ex = 0, ab = 0;
                for (int64_t c = 0; c < cols; ++c) {
                  ex += static_cast<double>(wf[c]) * X[t * cols + c];
                  ab += std::fabs(static_cast<double>(wf[c]) * X[t * cols + c]);
                }
                REQUIRE(std::fabs(Ye[t * rows + r] - ex) <= 1e-5 * ab + 1e-30);
                // ... and exactly the reference's Exact-mode arithmetic, whatever the table.
                REQUIRE(Ye[t * rows + r] == scalar_kernels().exact_dot_f32(wf.data(), X.data() + t * cols, cols));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matmul_pair equals two matmuls and the combine, and matmul_multi equals matmul", "[kernels][matmul]") {
  // Row chunks of a pair (or of several targets) go through the same kernels per row and token,
  // so the results are bit-identical to separate calls.
  std::mt19937 rng(31);
  auto combine = [](int n, float* a, const float* b) {
    for (int i = 0; i < n; ++i) a[i] = a[i] * 0.5f - b[i];
  };
  for (int nt = 1; nt <= 3; nt += 2) {
    ThreadPool pool(nt);
    for (const KernelTable* k : all_tables()) {
      for (GgmlType wt : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::F16}) {
        for (ActivationMode mode : {ActivationMode::Quantized, ActivationMode::Exact}) {
          for (int64_t rows : {48, 320}) {
            for (int64_t n_tok : {1, 2, 19}) {
              const int64_t cols = block_of(wt) == 1 ? 64 : block_of(wt) * 2;
              INFO("type " << tname(wt) << " table " << k->name << " threads " << nt << " rows " << rows << " tokens " << n_tok);
              std::vector<uint8_t> A, B;
              for (int64_t r = 0; r < rows; ++r) {
                auto a = random_weights(rng, wt, cols), b = random_weights(rng, wt, cols);
                A.insert(A.end(), a.begin(), a.end());
                B.insert(B.end(), b.begin(), b.end());
              }
              auto X = random_floats(rng, cols * n_tok);
              const size_t ny = static_cast<size_t>(rows * n_tok);
              std::vector<float> ya(ny), yb(ny), yp(ny, NAN), ym(ny, NAN), ym2(ny, NAN);
              matmul(*k, pool, mode, wt, A.data(), rows, cols, X.data(), n_tok, ya.data());
              matmul(*k, pool, mode, wt, B.data(), rows, cols, X.data(), n_tok, yb.data());
              const MatmulTarget ta{wt, A.data(), rows, yp.data()}, tb{wt, B.data(), rows, nullptr};
              matmul_pair(*k, pool, mode, ta, tb, cols, X.data(), n_tok, combine);
              const MatmulTarget tm[2] = {{wt, A.data(), rows, ym.data()}, {wt, B.data(), rows, ym2.data()}};
              matmul_multi(*k, pool, mode, tm, 2, cols, X.data(), n_tok);
              REQUIRE(std::memcmp(ym.data(), ya.data(), ny * sizeof(float)) == 0);
              REQUIRE(std::memcmp(ym2.data(), yb.data(), ny * sizeof(float)) == 0);
              for (int64_t t = 0; t < n_tok; ++t) combine(static_cast<int>(rows), ya.data() + t * rows, yb.data() + t * rows);
              REQUIRE(std::memcmp(yp.data(), ya.data(), ny * sizeof(float)) == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matmul and row helpers reject bad shapes", "[kernels][matmul]") {
  ThreadPool pool(1);
  std::vector<uint8_t> w(1024);
  std::vector<float> x(256), y(4);
  REQUIRE_THROWS_AS(matmul(best_kernels(), pool, ActivationMode::Quantized, GgmlType::Q4_K, w.data(), 1, 100, x.data(), 1,
                           y.data()),
                    std::logic_error);
  REQUIRE_THROWS_AS(row_bytes(GgmlType::Q8_0, 33), std::logic_error);
  REQUIRE_THROWS_AS(matmul(best_kernels(), pool, ActivationMode::Exact, GgmlType::Q8_1, w.data(), 1, 32, x.data(), 1,
                           y.data()),
                    std::logic_error);  // Q8_1 is an activation format, not a weight type
  REQUIRE_NOTHROW(matmul(best_kernels(), pool, ActivationMode::Exact, GgmlType::Q8_0, w.data(), 0, 32, x.data(), 1,
                         y.data()));
}

TEST_CASE("thread pool runs every task exactly once", "[kernels][threads]") {
  for (int nt = 1; nt <= 4; ++nt) {
    ThreadPool pool(nt);
    REQUIRE(pool.size() == nt);
    for (int rep = 0; rep < 200; ++rep) {
      const int n_tasks = (rep * 37) % 97;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
      std::atomic<bool> bad_worker{false};
      pool.parallel_for(n_tasks, [&](int task, int worker) {
        if (worker < 0 || worker >= nt) bad_worker = true;
        hits[static_cast<size_t>(task)].fetch_add(1);
      });
      REQUIRE_FALSE(bad_worker.load());
      for (int t = 0; t < n_tasks; ++t) REQUIRE(hits[static_cast<size_t>(t)].load() == 1);
    }
  }
  REQUIRE(ThreadPool::default_threads() >= 1);
}

TEST_CASE("thread pool propagates an exception and stays usable", "[kernels][threads]") {
  ThreadPool pool(3);
  REQUIRE_THROWS_AS(pool.parallel_for(50,
                                      [&](int task, int) {
                                        if (task == 17) throw std::runtime_error("boom");
                                      }),
                    std::runtime_error);
  std::atomic<int> count{0};
  pool.parallel_for(50, [&](int, int) { count.fetch_add(1); });
  REQUIRE(count.load() == 50);
}

TEST_CASE("dispatch: scalar first, best honours PICOLM_KERNELS", "[kernels]") {
  const auto tables = all_tables();
  REQUIRE(!tables.empty());
  REQUIRE(std::string(tables.front()->name) == "scalar");
  // The best table is the last one, unless PICOLM_KERNELS names another available one.
  const char* env = std::getenv("PICOLM_KERNELS");
  const KernelTable* want = tables.back();
  for (const KernelTable* k : tables)
    if (env != nullptr && std::string(k->name) == env) want = k;
  REQUIRE(&best_kernels() == want);
  const CpuFeatures f = detect_cpu_features();
  INFO("avx2 " << f.avx2 << " avx512f " << f.avx512f << " vnni " << f.avx512vnni);
#if defined(__aarch64__)
  // Exactly the NEON tables the CPU's features allow, in order, the best (widest) last.
  std::vector<std::string> names, want_names = {"scalar", "neon"};
  for (const KernelTable* k : tables) names.emplace_back(k->name);
  if (f.dotprod) want_names.emplace_back("neon_dotprod");
  if (f.dotprod && f.i8mm) want_names.emplace_back("neon_i8mm");
  INFO("dotprod " << f.dotprod << " i8mm " << f.i8mm);
  CHECK(names == want_names);
#endif
  for (const KernelTable* k : tables) {
    for (GgmlType wt : kWeightTypes) {
      CHECK(k->vec_dot[ti(wt)] != nullptr);
      CHECK(k->dequantize_row[ti(wt)] != nullptr);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Real data: the zoo models were all quantized by llama-quantize from one F32 master, so every
// type's dequantized tensors must be close to the F16 file's. This checks our block layouts against
// ggml's own quantizer output, independently of our quantizers.

#include <fstream>
#include <map>

namespace {

struct MiniTensor {
  uint32_t type;
  std::vector<uint64_t> dims;
  uint64_t offset;
};

struct MiniGguf {
  std::vector<uint8_t> bytes;
  std::map<std::string, MiniTensor> tensors;
  size_t data_start = 0;
};

// Just enough GGUF v3 parsing for this test (the engine's reader is separate and not a dependency
// of the kernels).
MiniGguf read_gguf(const std::string& path) {
  MiniGguf g;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  g.bytes.assign(std::istreambuf_iterator<char>(f), {});
  size_t pos = 0;
  auto need = [&](size_t n) {
    if (pos + n > g.bytes.size()) throw std::runtime_error("truncated gguf " + path);
  };
  auto rd = [&](auto& v) {
    need(sizeof(v));
    std::memcpy(&v, g.bytes.data() + pos, sizeof(v));
    pos += sizeof(v);
  };
  auto rd_str = [&]() {
    uint64_t len;
    rd(len);
    need(len);
    std::string s(reinterpret_cast<const char*>(g.bytes.data() + pos), len);
    pos += len;
    return s;
  };
  uint32_t magic, version;
  uint64_t n_tensors, n_kv;
  rd(magic);
  rd(version);
  rd(n_tensors);
  rd(n_kv);
  if (magic != 0x46554747u) throw std::runtime_error("not gguf " + path);
  uint64_t alignment = 32;
  const size_t scalar_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = rd_str();
    uint32_t type;
    rd(type);
    if (type == 8) {
      rd_str();
    } else if (type == 9) {
      uint32_t et;
      uint64_t cnt;
      rd(et);
      rd(cnt);
      for (uint64_t j = 0; j < cnt; ++j) {
        if (et == 8) rd_str();
        else if (et < 13 && scalar_size[et] > 0) need(scalar_size[et]), pos += scalar_size[et];
        else throw std::runtime_error("unsupported nested array");
      }
    } else if (type < 13) {
      if (key == "general.alignment" && type == 4) {
        uint32_t a;
        rd(a);
        alignment = a;
      } else {
        need(scalar_size[type]);
        pos += scalar_size[type];
      }
    } else {
      throw std::runtime_error("bad kv type");
    }
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    MiniTensor t;
    const std::string name = rd_str();
    uint32_t nd;
    rd(nd);
    t.dims.resize(nd);
    for (auto& d : t.dims) rd(d);
    rd(t.type);
    rd(t.offset);
    g.tensors[name] = t;
  }
  g.data_start = (pos + alignment - 1) / alignment * alignment;
  return g;
}

}  // namespace

TEST_CASE("zoo models: every type dequantizes close to the F16 master, and dots agree", "[kernels][zoo]") {
  const std::string dir = std::string(PICOLM_SHARED_DIR) + "/models/";
  const MiniGguf f16 = read_gguf(dir + "zoo-F16.gguf");
  // Relative RMS error of llama-quantize's output vs the master (plus F16 rounding of the master).
  // Measured (max over tensors): BF16 0.0017, Q8_0 0.0054, Q4_0 0.086, Q4_1 0.079, Q5_0 0.043,
  // Q5_1 0.038, Q2_K 0.30, Q3_K 0.152, Q4_K 0.072, Q5_K 0.036, Q6_K 0.018; bounds are ~1.3x that.
  // A misread bit or scale gives errors of order 1.
  const std::pair<const char*, double> files[] = {
      {"BF16", 3e-3}, {"Q8_0", 0.008}, {"Q4_0", 0.11}, {"Q4_1", 0.10}, {"Q5_0", 0.055}, {"Q5_1", 0.05},
      {"Q2_K", 0.38}, {"Q3_K", 0.2},   {"Q4_K", 0.095}, {"Q5_K", 0.048}, {"Q6_K", 0.024}};
  std::mt19937 rng(9);
  const auto tables = all_tables();
  for (const auto& [tn, bound] : files) {
    const MiniGguf q = read_gguf(dir + "zoo-" + tn + ".gguf");
    int checked = 0;
    for (const auto& [name, tq] : q.tensors) {
      if (tq.dims.size() != 2) continue;
      const MiniTensor& tf = f16.tensors.at(name);
      REQUIRE(tf.type == static_cast<uint32_t>(GgmlType::F16));
      const GgmlType wt = static_cast<GgmlType>(tq.type);
      REQUIRE(std::string(tname(wt)) == tn);
      const int64_t cols = static_cast<int64_t>(tq.dims[0]), rows = static_cast<int64_t>(tq.dims[1]);
      const uint8_t* qdata = q.bytes.data() + q.data_start + tq.offset;
      const uint8_t* fdata = f16.bytes.data() + f16.data_start + tf.offset;
      REQUIRE(q.data_start + tq.offset + row_bytes(wt, cols) * rows <= q.bytes.size());
      std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
      double err = 0, ref = 0;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row_ref(wt, qdata + r * row_bytes(wt, cols), a.data(), cols);
        dequantize_row_ref(GgmlType::F16, fdata + r * row_bytes(GgmlType::F16, cols), b.data(), cols);
        for (int64_t c = 0; c < cols; ++c) {
          err += (a[c] - b[c]) * static_cast<double>(a[c] - b[c]);
          ref += b[c] * static_cast<double>(b[c]);
        }
      }
      const double rel = std::sqrt(err / ref);
      INFO("file zoo-" << tn << " tensor " << name << " relative rms " << rel);
      CHECK(rel <= bound);
      // Fused dots on real blocks, a few rows, every table, against the oracle.
      const GgmlType at = vec_dot_type(wt);
      auto x = random_floats(rng, cols);
      std::vector<uint8_t> act(row_bytes(at, cols));
      scalar_kernels().quantize_row[ti(at)](x.data(), act.data(), cols);
      for (int64_t r = 0; r < std::min<int64_t>(rows, 4); ++r) {
        const uint8_t* wr = qdata + r * row_bytes(wt, cols);
        const DotOracle o = oracle(wt, wr, at, act.data(), cols);
        const double tol = 2e-6 * o.abs_sum + q8_1_sum_slack(wt, wr, act.data(), cols) + 1e-30;
        for (const KernelTable* k : tables) {
          INFO("table " << k->name << " row " << r);
          REQUIRE(std::fabs(k->vec_dot[ti(wt)](cols, wr, act.data()) - o.exact) <= tol);
        }
      }
      ++checked;
    }
    INFO("zoo-" << tn);
    CHECK(checked >= 15);  // 2 layers x 7 + token_embd + output
  }
}

// MatmulTarget::dots_only (the routed experts of MoE models, issue 32): however many rows a call
// has, each row's result is the same bits as that row multiplied alone, on every table (the
// many-row GEMM, whose float order differs, is never taken).
TEST_CASE("matmul: dots_only rows equal the rows alone, bit for bit", "[kernels][moe]") {
  const KernelTable* tables[8];
  const int n_tables = available_kernels(tables, 8);
  std::mt19937 rng(32);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 64, cols = 512, n_tok = 13;
  ThreadPool pool(2);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::Q5_0}) {
    std::vector<float> wf(size_t(rows * cols)), x(size_t(n_tok * cols));
    for (float& v : wf) v = nd(rng);
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> w(size_t(rows) * row_bytes(t, cols));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row_weights_ref(t, &wf[size_t(r * cols)], w.data() + size_t(r) * row_bytes(t, cols), cols);
    for (int ti = 0; ti < n_tables; ++ti) {
      const KernelTable& k = *tables[ti];
      if (!k.vec_dot[static_cast<int>(t)]) continue;
      INFO(k.name << " type " << ggml_type_traits(t)->name);
      std::vector<float> many(static_cast<size_t>(n_tok * rows)), alone(static_cast<size_t>(rows));
      MatmulTarget tg{t, w.data(), rows, many.data()};
      tg.dots_only = true;
      matmul_multi(k, pool, ActivationMode::Quantized, &tg, 1, cols, x.data(), n_tok);
      for (int64_t i = 0; i < n_tok; ++i) {
        matmul(k, pool, ActivationMode::Quantized, t, w.data(), rows, cols, &x[size_t(i * cols)], 1, alone.data());
        CHECK(std::memcmp(alone.data(), &many[size_t(i * rows)], size_t(rows) * sizeof(float)) == 0);
      }
    }
  }
}

// matmul_groups (a decode step's experts in two passes of the pool): groups of different shapes,
// weight types, inputs and token counts (one group with no tokens) in one call give each group the
// bits of its own matmul_pair / matmul_multi call, on every table, both modes, 1 and 3 threads.
TEST_CASE("matmul_groups equals one matmul_pair or matmul_multi per group", "[kernels][matmul][moe]") {
  std::mt19937 rng(33);
  auto combine = [](int n, float* a, const float* b) {
    for (int i = 0; i < n; ++i) a[i] = a[i] * 0.5f - b[i];
  };
  struct Shape {
    GgmlType wt;
    int64_t rows, cols, n_tok;
  };
  const Shape shapes[] = {{GgmlType::Q4_K, 320, 512, 1}, {GgmlType::Q8_0, 48, 64, 3},
                          {GgmlType::F16, 136, 128, 2},  {GgmlType::Q5_0, 64, 96, 0},
                          {GgmlType::Q4_K, 96, 256, 19}};
  const int n = int(std::size(shapes));
  for (int nt = 1; nt <= 3; nt += 2) {
    ThreadPool pool(nt);
    for (const KernelTable* k : all_tables()) {
      for (ActivationMode mode : {ActivationMode::Quantized, ActivationMode::Exact}) {
        INFO("table " << k->name << " threads " << nt << (mode == ActivationMode::Exact ? " exact" : " quantized"));
        std::vector<std::vector<uint8_t>> A(n), B(n);
        std::vector<std::vector<float>> X(n), pair_want(n), pair_got(n), multi_want(n), multi_got(n), b_want(n), b_got(n);
        std::vector<MatmulTarget> pairs(2 * size_t(n)), multis(2 * size_t(n));
        std::vector<MatmulGroup> pg(n), mg(n);
        for (int g = 0; g < n; ++g) {
          const Shape& s = shapes[g];
          for (int64_t r = 0; r < s.rows; ++r) {
            auto a = random_weights(rng, s.wt, s.cols), b = random_weights(rng, s.wt, s.cols);
            A[g].insert(A[g].end(), a.begin(), a.end());
            B[g].insert(B[g].end(), b.begin(), b.end());
          }
          X[g] = random_floats(rng, s.cols * std::max<int64_t>(s.n_tok, 1));
          const size_t ny = size_t(s.rows * s.n_tok);
          pair_want[g].assign(ny, NAN);
          pair_got[g].assign(ny, NAN);
          multi_want[g].assign(ny, NAN);
          multi_got[g].assign(ny, NAN);
          b_want[g].assign(ny, NAN);
          b_got[g].assign(ny, NAN);
          const MatmulTarget ta{s.wt, A[g].data(), s.rows, pair_want[g].data()}, tb{s.wt, B[g].data(), s.rows, nullptr};
          if (s.n_tok > 0) matmul_pair(*k, pool, mode, ta, tb, s.cols, X[g].data(), s.n_tok, combine);
          const MatmulTarget tm[2] = {{s.wt, A[g].data(), s.rows, multi_want[g].data()},
                                      {s.wt, B[g].data(), s.rows, b_want[g].data()}};
          if (s.n_tok > 0) matmul_multi(*k, pool, mode, tm, 2, s.cols, X[g].data(), s.n_tok);
          pairs[2 * size_t(g)] = {s.wt, A[g].data(), s.rows, pair_got[g].data()};
          pairs[2 * size_t(g) + 1] = {s.wt, B[g].data(), s.rows, nullptr};
          multis[2 * size_t(g)] = {s.wt, A[g].data(), s.rows, multi_got[g].data()};
          multis[2 * size_t(g) + 1] = {s.wt, B[g].data(), s.rows, b_got[g].data()};
          pg[size_t(g)] = {&pairs[2 * size_t(g)], 2, s.cols, X[g].data(), s.n_tok};
          mg[size_t(g)] = {&multis[2 * size_t(g)], 2, s.cols, X[g].data(), s.n_tok};
        }
        matmul_groups(*k, pool, mode, pg.data(), n, combine);
        matmul_groups(*k, pool, mode, mg.data(), n, nullptr);
        for (int g = 0; g < n; ++g) {
          INFO("group " << g);
          const size_t bytes = pair_want[g].size() * sizeof(float);
          if (bytes == 0) continue;  // the group without tokens (memcmp of empty vectors' null data is undefined)
          CHECK(std::memcmp(pair_got[g].data(), pair_want[g].data(), bytes) == 0);
          CHECK(std::memcmp(multi_got[g].data(), multi_want[g].data(), bytes) == 0);
          CHECK(std::memcmp(b_got[g].data(), b_want[g].data(), bytes) == 0);
        }
      }
    }
  }
  // A paired group of two different row counts is a caller bug.
  ThreadPool pool(1);
  std::vector<float> x(64), y(64);
  std::vector<uint8_t> w(size_t(2) * row_bytes(GgmlType::Q8_0, 64));
  const MatmulTarget bad[2] = {{GgmlType::Q8_0, w.data(), 2, y.data()}, {GgmlType::Q8_0, w.data(), 1, nullptr}};
  const MatmulGroup g{bad, 2, 64, x.data(), 1};
  CHECK_THROWS(matmul_groups(scalar_kernels(), pool, ActivationMode::Quantized, &g, 1, combine));
}
