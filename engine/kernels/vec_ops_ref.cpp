#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"

namespace picolm {
namespace {

float dot_ref(int n, const uint16_t* x, const float* y) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += fp16_to_fp32(x[i]) * y[i];
  return s;
}
void axpy_ref(int n, float a, const uint16_t* x, float* y) {
  for (int i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}
void to_f16_ref(int n, const float* x, uint16_t* y) {
  for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

struct Tables {
  VecOps scalar{"scalar", dot_ref, axpy_ref, to_f16_ref};
  VecOps avx2 = scalar;
  const VecOps* list[2] = {&scalar, nullptr};
  int count = 1;
  const VecOps* best = &scalar;
  Tables() {
#if defined(__x86_64__)
    const CpuFeatures f = detect_cpu_features();
    if (f.avx2 && f.fma && f.f16c) {
      vecops_detail::fill_avx2(avx2);
      list[count++] = &avx2;
      best = &avx2;
    }
#endif
    const char* env = std::getenv("PICOLM_KERNELS");
    if (env && std::strcmp(env, "scalar") == 0) best = &scalar;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const VecOps& scalar_vec_ops() { return tables().scalar; }
const VecOps& best_vec_ops() { return *tables().best; }
int available_vec_ops(const VecOps** out, int max_out) {
  int n = 0;
  for (int i = 0; i < tables().count && n < max_out; ++i) out[n++] = tables().list[i];
  return n;
}

}  // namespace picolm
