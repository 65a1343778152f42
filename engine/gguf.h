// GGUF v2/v3 reader over a read-only memory map.
//
// Every offset, count, string length and tensor extent is checked against the mapped size when the
// file is opened; afterwards all accessors are plain lookups. Tensor data is used in place.
// Thread-safety: a GgufFile is immutable after open() and may be shared by any number of threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ggml_types.h"
#include "result.h"

namespace picolm {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// One metadata value. Scalars are widened; arrays keep their element type and a view of their
// elements (string array elements are pre-split into views of the map).
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  int64_t i = 0;       // all integer types and BOOL (uint64 values above INT64_MAX are stored wrapped)
  uint64_t u = 0;      // the same integer, unsigned
  double f = 0.0;      // FLOAT32 / FLOAT64
  std::string_view s;  // STRING
  // ARRAY
  GgufValueType elem_type = GgufValueType::UINT8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;          // raw little-endian elements (non-string arrays)
  std::vector<std::string_view> strings;   // string arrays
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;  // ne[0] is the row length (contiguous), ne[1] the number of rows, ...
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // from the start of the data section
  const uint8_t* data = nullptr;
  uint64_t n_bytes = 0;
  uint64_t n_elements() const;
  uint64_t row_bytes() const;  // bytes of one row of ne[0] elements
  uint64_t n_rows() const { return ne[0] ? n_elements() / ne[0] : 0; }
};

class GgufFile {
 public:
  // Maps the file read-only. Errors name the file and the problem.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (tests use this for corrupted copies).
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size, std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  const std::string& name() const { return name_; }
  std::span<const uint8_t> bytes() const { return {base_, size_}; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const GgufValue* find(std::string_view key) const;
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  // Typed getters: nullopt when the key is missing or of an incompatible type.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // also accepts integers
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  // Array getters: empty when missing or of another element type.
  std::vector<std::string_view> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;  // any integer element type
  // Integer array elements widened to 64 bits (uint64 above INT64_MAX wrapped, as in GgufValue::i), for
  // values that must be range-checked before they are narrowed. Empty if absent or not integers.
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;

  // madvise hints for the whole map (no-ops for parse()d buffers).
  void advise_sequential() const;
  void advise_willneed() const;
  bool lock_memory() const;  // mlock; false if it failed
  // Drops this process's pages of [p, p + n) (whole pages inside it; a later read faults them back
  // in from the page cache). For data that is no longer read (weights that were repacked).
  void release(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  Status parse_all();

  std::string name_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace picolm
