// Packed-weight tiles for any ARMv8-A core (plain NEON: SMULL/SADALP dots); the code is in
// packed_neon_impl.h, shared with the +dotprod build.
#include "kernels/packed_neon_impl.h"

namespace picolm::kq {

void fill_neon_packed(KernelTable& t) { fill_neon_packed_common(t); }

}  // namespace picolm::kq
