// FP16 vector ops used by attention: every variant the CPU runs vs the scalar reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"

using namespace picolm;

TEST_CASE("vec_ops: SIMD variants match the scalar reference", "[kernels]") {
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  REQUIRE(n_ops >= 1);
  const VecOps& ref = scalar_vec_ops();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int v = 0; v < n_ops; ++v) {
    const VecOps& ops = *list[v];
    INFO("variant " << ops.name);
    for (int n : {1, 7, 8, 15, 16, 17, 31, 64, 100, 128, 257}) {
      INFO("n = " << n);
      const size_t un = static_cast<size_t>(n);
      std::vector<float> x(un), y(un), acc_ref(un), acc(un);
      std::vector<uint16_t> xh(un), xh_ref(un);
      for (int i = 0; i < n; ++i) {
        x[size_t(i)] = nd(rng) * 3.0f;
        y[size_t(i)] = nd(rng);
        acc_ref[size_t(i)] = acc[size_t(i)] = nd(rng);
      }
      // f32 -> f16 must round exactly like the reference (round to nearest even).
      ref.f32_to_f16(n, x.data(), xh_ref.data());
      ops.f32_to_f16(n, x.data(), xh.data());
      CHECK(xh == xh_ref);
      // dot: compare with a double-precision oracle; the bound is float rounding of the sum.
      double oracle = 0.0, mag = 0.0;
      for (int i = 0; i < n; ++i) {
        oracle += double(fp16_to_fp32(xh[size_t(i)])) * y[size_t(i)];
        mag += std::fabs(double(fp16_to_fp32(xh[size_t(i)])) * y[size_t(i)]);
      }
      CHECK(std::fabs(ops.dot_f16_f32(n, xh.data(), y.data()) - oracle) <= 1e-6 * mag + 1e-6);
      // axpy: each element is one fused or unfused multiply-add, so at most 1 ulp apart.
      ref.axpy_f16(n, 0.37f, xh.data(), acc_ref.data());
      ops.axpy_f16(n, 0.37f, xh.data(), acc.data());
      for (int i = 0; i < n; ++i)
        CHECK(std::fabs(acc[size_t(i)] - acc_ref[size_t(i)]) <= 1e-6f * (1.0f + std::fabs(acc_ref[size_t(i)])));
    }
  }
}
