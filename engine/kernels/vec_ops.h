// Small vector ops on the FP16 KV cache used by attention: dot(fp16, f32), y += a * x(fp16),
// f32 -> fp16 rows. Scalar reference + SIMD twins, chosen once from CPU features.
// Thread-safety: pure functions; the tables are immutable.
#pragma once
#include <cstdint>

namespace picolm {

struct VecOps {
  const char* name = "scalar";
  float (*dot_f16_f32)(int n, const uint16_t* x, const float* y) = nullptr;
  void (*axpy_f16)(int n, float a, const uint16_t* x, float* y) = nullptr;  // y += a * x
  void (*f32_to_f16)(int n, const float* x, uint16_t* y) = nullptr;
};

const VecOps& scalar_vec_ops();
const VecOps& best_vec_ops();  // honours PICOLM_KERNELS=scalar
// Every variant this CPU can run (scalar first); returns the count.
int available_vec_ops(const VecOps** out, int max_out);

namespace vecops_detail {
void fill_avx2(VecOps& v);  // defined in vec_ops_avx2.cpp (x86-64 builds only)
}

}  // namespace picolm
