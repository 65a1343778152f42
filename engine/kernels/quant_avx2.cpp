// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only called when the CPU has them).
// The kernels themselves live in quant_x86_impl.h, shared with the AVX-512 build of the same code.
#include "kernels/quant_x86_impl.h"

namespace picolm::kq {

void fill_avx2_table(KernelTable& t) {
  t.name = "avx2";
  fill_x86_common(t);
}

}  // namespace picolm::kq
