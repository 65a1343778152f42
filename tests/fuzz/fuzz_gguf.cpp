// libFuzzer target: the GGUF reader and the hyper-parameter checks of model loading.
// Any input must give a parsed file or an error: no crash, no read outside the buffer (ASan), no
// undefined behaviour (UBSan), no allocation beyond what the input's size justifies.
#include <cstddef>
#include <cstdint>

#include "gguf.h"
#include "model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = picolm::GgufFile::parse(data, size, "fuzz");
  if (!file.ok()) return 0;
  picolm::GgufFile& f = **file;
  // The accessors the loaders use, on every key present.
  for (const auto& [key, value] : f.metadata()) {
    (void)f.get_int(key);
    (void)f.get_float(key);
    (void)f.get_string(key);
    (void)f.get_bool(key);
    (void)f.get_i32_array(key);
    (void)f.get_int_array(key);
    (void)f.get_string_array(key);
  }
  // Model loading stops at the first inconsistency (metadata, tensor names, shapes); repacking
  // would copy every matrix, which is the kernels' business, not the parser's.
  picolm::ModelOptions mo;
  mo.repack = picolm::Repack::Off;
  (void)picolm::Model::from_gguf(std::move(file.value()), mo);
  return 0;
}
