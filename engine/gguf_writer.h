// A small GGUF v3 writer: metadata of every value type (string arrays included) and tensors whose
// data is streamed in declaration order, so a multi-GB model never has to sit in memory.
//
// Use: set metadata and declare all tensors, then begin() (header, metadata and tensor table are
// written; tensor sizes follow from type and shape), then write_tensor_data() in declaration order
// (any chunk sizes), then finish(). A file is written to "<path>.tmp" and renamed into place by
// finish(), so a reader never sees a half-written model. Data offsets are aligned to alignment()
// (32 unless set_alignment() was called, which also records general.alignment).
// Thread-safety: a GgufWriter is used by one thread at a time; there is no shared state.
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf.h"
#include "kernels/ggml_types.h"
#include "result.h"

namespace picolm {

class GgufWriter {
 public:
  GgufWriter() = default;
  ~GgufWriter();  // an unfinished file is removed
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // ---- metadata (before begin()); setting an existing key replaces its value in place ----------
  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  // Array of scalars: `count` little-endian elements of elem_type (not STRING/ARRAY) at data.
  void set_array(std::string_view key, GgufValueType elem_type, const void* data, uint64_t count);
  void set_i32_array(std::string_view key, std::span<const int32_t> v);
  void set_f32_array(std::string_view key, std::span<const float> v);
  void set_string_array(std::string_view key, std::span<const std::string> v);
  void set_string_array(std::string_view key, std::span<const std::string_view> v);
  // Copies a value read by GgufFile (any type) under `key`.
  void set_value(std::string_view key, const GgufValue& v);
  bool has_key(std::string_view key) const;
  // Power of two; also stored as general.alignment (uint32).
  void set_alignment(uint32_t alignment);
  uint32_t alignment() const { return alignment_; }

  // ---- tensors (before begin()) -----------------------------------------------------------------
  // ne[0] is the row length and must be a multiple of the type's block size. Returns the index.
  Result<size_t> add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> ne);
  size_t n_tensors() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t index) const { return tensors_[index].n_bytes; }
  uint64_t total_tensor_bytes() const;

  // ---- output ------------------------------------------------------------------------------------
  // Writes header, metadata and tensor table to "<path>.tmp".
  Status begin(const std::string& path);
  // Same, into an in-memory buffer (tests); finish() leaves the file in buffer().
  Status begin_memory();
  // Appends data of the current tensor; a tensor is complete after exactly tensor_bytes() bytes,
  // and the next call starts the next one (padding is inserted by the writer).
  Status write_tensor_data(const void* data, size_t n);
  // Checks that every tensor was written completely, flushes, renames "<path>.tmp" to path.
  Status finish();
  const std::vector<uint8_t>& buffer() const { return mem_; }

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> value;  // type id (u32) followed by the encoded value
  };
  struct TensorInfo {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    uint64_t n_bytes = 0;
    uint64_t offset = 0;  // from the start of the data section
  };
  void put_kv(std::string_view key, std::vector<uint8_t> value);
  Status start();
  Status emit(const void* data, size_t n);
  Status pad_to(uint64_t multiple);
  void abandon();

  std::vector<Kv> kv_;
  std::vector<TensorInfo> tensors_;
  uint32_t alignment_ = 32;

  enum class State { Declaring, Writing, Finished, Failed } state_ = State::Declaring;
  std::FILE* file_ = nullptr;
  bool to_memory_ = false;
  std::string path_, tmp_path_;
  std::vector<uint8_t> mem_;
  uint64_t pos_ = 0;         // bytes emitted so far
  uint64_t data_start_ = 0;  // file offset of the data section
  size_t cur_tensor_ = 0;    // tensor being written
  uint64_t cur_written_ = 0; // bytes of it written so far
};

}  // namespace picolm
