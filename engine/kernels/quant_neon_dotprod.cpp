// NEON kernels built with -march=armv8.2-a+dotprod: the s8 dots use SDOT. Only called when the CPU
// reports it (HWCAP_ASIMDDP). Same code as quant_neon.cpp (quant_neon_impl.h), other ISA.
#include "kernels/quant_neon_impl.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "quant_neon_dotprod.cpp must be compiled with +dotprod"
#endif

namespace picolm::kq {

void fill_neon_dotprod_table(KernelTable& t) {
  t.name = "neon_dotprod";
  fill_neon_common(t);
}

}  // namespace picolm::kq
