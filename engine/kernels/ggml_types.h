// Tensor element types as numbered by GGUF/ggml, and their block geometry.
// Pure data; thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>

namespace picolm {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;
  uint32_t block_elems;  // elements per block (1 for F32/F16/BF16)
  uint32_t block_bytes;  // bytes per block
};

// Returns nullptr for a type id this engine does not know (unsupported or invalid).
const GgmlTypeTraits* ggml_type_traits(uint32_t type_id);
inline const GgmlTypeTraits* ggml_type_traits(GgmlType t) { return ggml_type_traits(static_cast<uint32_t>(t)); }

}  // namespace picolm
