// Packed-weight tiles built with -march=armv8.2-a+dotprod: the 4-wide row dots are one SDOT.
// Only used when the CPU reports it (HWCAP_ASIMDDP). Same code as packed_neon.cpp, other ISA.
#include "kernels/packed_neon_impl.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "packed_neon_dotprod.cpp must be compiled with +dotprod"
#endif

namespace picolm::kq {

void fill_neon_dotprod_packed(KernelTable& t) { fill_neon_packed_common(t); }

}  // namespace picolm::kq
