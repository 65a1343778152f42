#include "kernels/ggml_types.h"

namespace picolm {

const GgmlTypeTraits* ggml_type_traits(uint32_t type_id) {
  // Block sizes from the GGUF specification (ggml-common.h layouts).
  static constexpr GgmlTypeTraits kF32{"F32", 1, 4};
  static constexpr GgmlTypeTraits kF16{"F16", 1, 2};
  static constexpr GgmlTypeTraits kBF16{"BF16", 1, 2};
  static constexpr GgmlTypeTraits kQ4_0{"Q4_0", 32, 18};
  static constexpr GgmlTypeTraits kQ4_1{"Q4_1", 32, 20};
  static constexpr GgmlTypeTraits kQ5_0{"Q5_0", 32, 22};
  static constexpr GgmlTypeTraits kQ5_1{"Q5_1", 32, 24};
  static constexpr GgmlTypeTraits kQ8_0{"Q8_0", 32, 34};
  static constexpr GgmlTypeTraits kQ8_1{"Q8_1", 32, 36};
  static constexpr GgmlTypeTraits kQ2_K{"Q2_K", 256, 84};
  static constexpr GgmlTypeTraits kQ3_K{"Q3_K", 256, 110};
  static constexpr GgmlTypeTraits kQ4_K{"Q4_K", 256, 144};
  static constexpr GgmlTypeTraits kQ5_K{"Q5_K", 256, 176};
  static constexpr GgmlTypeTraits kQ6_K{"Q6_K", 256, 210};
  static constexpr GgmlTypeTraits kQ8_K{"Q8_K", 256, 292};
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16;
    case GgmlType::BF16: return &kBF16;
    case GgmlType::Q4_0: return &kQ4_0;
    case GgmlType::Q4_1: return &kQ4_1;
    case GgmlType::Q5_0: return &kQ5_0;
    case GgmlType::Q5_1: return &kQ5_1;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::Q8_1: return &kQ8_1;
    case GgmlType::Q2_K: return &kQ2_K;
    case GgmlType::Q3_K: return &kQ3_K;
    case GgmlType::Q4_K: return &kQ4_K;
    case GgmlType::Q5_K: return &kQ5_K;
    case GgmlType::Q6_K: return &kQ6_K;
    case GgmlType::Q8_K: return &kQ8_K;
  }
  return nullptr;
}

}  // namespace picolm
