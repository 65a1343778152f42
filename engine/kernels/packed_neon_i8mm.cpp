// Packed-weight tiles built with -march=armv8.2-a+dotprod+i8mm: many-token calls (prefill) run
// SMMLA tiles of 4 rows x 8 tokens over the same panels, decode keeps the SDOT tile. Only used
// when the CPU reports both (HWCAP_ASIMDDP, HWCAP2_I8MM). Code in packed_neon_impl.h.
#include "kernels/packed_neon_impl.h"

#if !defined(__ARM_FEATURE_DOTPROD) || !defined(__ARM_FEATURE_MATMUL_INT8)
#error "packed_neon_i8mm.cpp must be compiled with +dotprod+i8mm"
#endif

namespace picolm::kq {

void fill_neon_i8mm_packed(KernelTable& t) { fill_neon_packed_common(t); }

}  // namespace picolm::kq
