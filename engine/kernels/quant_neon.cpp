// NEON kernels for any ARMv8-A core (Advanced SIMD is mandatory on AArch64: no extra flags).
// The kernels live in quant_neon_impl.h, shared with the +dotprod build.
#include "kernels/quant_neon_impl.h"

namespace picolm::kq {

void fill_neon_table(KernelTable& t) {
  t.name = "neon";
  fill_neon_common(t);
}

}  // namespace picolm::kq
