#include "gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace picolm {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kGgufVersion = 3;

// GGUF is little-endian; so is every host this project builds for (x86-64, aarch64), which lets
// the encoder copy scalars byte for byte.
static_assert(std::endian::native == std::endian::little, "GgufWriter assumes a little-endian host");

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

std::vector<uint8_t> typed(GgufValueType t) {
  std::vector<uint8_t> v;
  put<uint32_t>(v, static_cast<uint32_t>(t));
  return v;
}

size_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    default: return 0;
  }
}

}  // namespace

GgufWriter::~GgufWriter() {
  if (state_ == State::Writing || state_ == State::Failed) abandon();
}

void GgufWriter::put_kv(std::string_view key, std::vector<uint8_t> value) {
  for (Kv& kv : kv_)
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  kv_.push_back(Kv{std::string(key), std::move(value)});
}

#define PICOLM_SCALAR_SETTER(fn, T, gtype)            \
  void GgufWriter::fn(std::string_view key, T v) {    \
    std::vector<uint8_t> b = typed(GgufValueType::gtype); \
    put<T>(b, v);                                     \
    put_kv(key, std::move(b));                        \
  }
PICOLM_SCALAR_SETTER(set_u8, uint8_t, UINT8)
PICOLM_SCALAR_SETTER(set_i8, int8_t, INT8)
PICOLM_SCALAR_SETTER(set_u16, uint16_t, UINT16)
PICOLM_SCALAR_SETTER(set_i16, int16_t, INT16)
PICOLM_SCALAR_SETTER(set_u32, uint32_t, UINT32)
PICOLM_SCALAR_SETTER(set_i32, int32_t, INT32)
PICOLM_SCALAR_SETTER(set_u64, uint64_t, UINT64)
PICOLM_SCALAR_SETTER(set_i64, int64_t, INT64)
PICOLM_SCALAR_SETTER(set_f32, float, FLOAT32)
PICOLM_SCALAR_SETTER(set_f64, double, FLOAT64)
#undef PICOLM_SCALAR_SETTER

void GgufWriter::set_bool(std::string_view key, bool v) {
  std::vector<uint8_t> b = typed(GgufValueType::BOOL);
  put<uint8_t>(b, v ? 1 : 0);
  put_kv(key, std::move(b));
}

void GgufWriter::set_string(std::string_view key, std::string_view v) {
  std::vector<uint8_t> b = typed(GgufValueType::STRING);
  put_str(b, v);
  put_kv(key, std::move(b));
}

void GgufWriter::set_array(std::string_view key, GgufValueType elem_type, const void* data, uint64_t count) {
  const size_t es = scalar_bytes(elem_type);
  // A STRING/ARRAY element type here is a caller bug; record an empty uint8 array rather than
  // writing bytes a reader would misparse.
  if (es == 0) {
    elem_type = GgufValueType::UINT8;
    count = 0;
  }
  std::vector<uint8_t> b = typed(GgufValueType::ARRAY);
  put<uint32_t>(b, static_cast<uint32_t>(elem_type));
  put<uint64_t>(b, count);
  const auto* p = static_cast<const uint8_t*>(data);
  if (count) b.insert(b.end(), p, p + count * es);
  put_kv(key, std::move(b));
}

void GgufWriter::set_i32_array(std::string_view key, std::span<const int32_t> v) {
  set_array(key, GgufValueType::INT32, v.data(), v.size());
}

void GgufWriter::set_f32_array(std::string_view key, std::span<const float> v) {
  set_array(key, GgufValueType::FLOAT32, v.data(), v.size());
}

void GgufWriter::set_string_array(std::string_view key, std::span<const std::string> v) {
  std::vector<uint8_t> b = typed(GgufValueType::ARRAY);
  put<uint32_t>(b, static_cast<uint32_t>(GgufValueType::STRING));
  put<uint64_t>(b, v.size());
  for (const std::string& s : v) put_str(b, s);
  put_kv(key, std::move(b));
}

void GgufWriter::set_string_array(std::string_view key, std::span<const std::string_view> v) {
  std::vector<uint8_t> b = typed(GgufValueType::ARRAY);
  put<uint32_t>(b, static_cast<uint32_t>(GgufValueType::STRING));
  put<uint64_t>(b, v.size());
  for (std::string_view s : v) put_str(b, s);
  put_kv(key, std::move(b));
}

void GgufWriter::set_value(std::string_view key, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8: set_u8(key, static_cast<uint8_t>(v.u)); return;
    case GgufValueType::INT8: set_i8(key, static_cast<int8_t>(v.i)); return;
    case GgufValueType::UINT16: set_u16(key, static_cast<uint16_t>(v.u)); return;
    case GgufValueType::INT16: set_i16(key, static_cast<int16_t>(v.i)); return;
    case GgufValueType::UINT32: set_u32(key, static_cast<uint32_t>(v.u)); return;
    case GgufValueType::INT32: set_i32(key, static_cast<int32_t>(v.i)); return;
    case GgufValueType::UINT64: set_u64(key, v.u); return;
    case GgufValueType::INT64: set_i64(key, v.i); return;
    case GgufValueType::FLOAT32: set_f32(key, static_cast<float>(v.f)); return;
    case GgufValueType::FLOAT64: set_f64(key, v.f); return;
    case GgufValueType::BOOL: set_bool(key, v.i != 0); return;
    case GgufValueType::STRING: set_string(key, v.s); return;
    case GgufValueType::ARRAY:
      if (v.elem_type == GgufValueType::STRING)
        set_string_array(key, std::span<const std::string_view>(v.strings));
      else
        set_array(key, v.elem_type, v.elems, v.count);
      return;
  }
}

bool GgufWriter::has_key(std::string_view key) const {
  for (const Kv& kv : kv_)
    if (kv.key == key) return true;
  return false;
}

void GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return;  // not a power of two: keep the old one
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
}

Result<size_t> GgufWriter::add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> ne) {
  if (state_ != State::Declaring) return Error{"GgufWriter: tensor '" + std::string(name) + "' declared after begin()"};
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  if (!tr) return Error{"tensor '" + std::string(name) + "': unknown type"};
  if (ne.empty() || ne.size() > 4) return Error{"tensor '" + std::string(name) + "': needs 1 to 4 dimensions"};
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0) return Error{"tensor '" + std::string(name) + "': zero dimension"};
    n *= d;
  }
  if (ne[0] % tr->block_elems != 0)
    return Error{"tensor '" + std::string(name) + "': row length " + std::to_string(ne[0]) +
                 " is not a multiple of the " + tr->name + " block size " + std::to_string(tr->block_elems)};
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return Error{"tensor '" + std::string(name) + "' declared twice"};
  TensorInfo t;
  t.name = std::string(name);
  t.type = type;
  t.ne = std::move(ne);
  t.n_bytes = n / tr->block_elems * tr->block_bytes;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

uint64_t GgufWriter::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const TensorInfo& t : tensors_) total = (total + alignment_ - 1) / alignment_ * alignment_ + t.n_bytes;
  return total;
}

Status GgufWriter::emit(const void* data, size_t n) {
  if (n == 0) return Ok{};
  if (to_memory_) {
    const auto* p = static_cast<const uint8_t*>(data);
    mem_.insert(mem_.end(), p, p + n);
  } else if (std::fwrite(data, 1, n, file_) != n) {
    state_ = State::Failed;
    return Error{tmp_path_ + ": write failed: " + std::strerror(errno)};
  }
  pos_ += n;
  return Ok{};
}

Status GgufWriter::pad_to(uint64_t multiple) {
  static const uint8_t zeros[64] = {};
  uint64_t pad = (multiple - pos_ % multiple) % multiple;
  while (pad > 0) {
    const size_t n = pad < sizeof zeros ? static_cast<size_t>(pad) : sizeof zeros;
    if (Status s = emit(zeros, n); !s) return s;
    pad -= n;
  }
  return Ok{};
}

Status GgufWriter::begin(const std::string& path) {
  if (state_ != State::Declaring) return Error{"GgufWriter: begin() called twice"};
  path_ = path;
  tmp_path_ = path + ".tmp";
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) return Error{tmp_path_ + ": cannot create: " + std::strerror(errno)};
  // Large writes dominate; a 4 MiB buffer keeps the syscall count low for the small header items.
  std::setvbuf(file_, nullptr, _IOFBF, 4 << 20);
  return start();
}

Status GgufWriter::begin_memory() {
  if (state_ != State::Declaring) return Error{"GgufWriter: begin() called twice"};
  to_memory_ = true;
  mem_.clear();
  return start();
}

Status GgufWriter::start() {
  state_ = State::Writing;
  std::vector<uint8_t> head;
  put<uint32_t>(head, kGgufMagic);
  put<uint32_t>(head, kGgufVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const Kv& kv : kv_) {
    put_str(head, kv.key);
    head.insert(head.end(), kv.value.begin(), kv.value.end());
  }
  uint64_t offset = 0;
  for (TensorInfo& t : tensors_) {
    offset = (offset + alignment_ - 1) / alignment_ * alignment_;
    t.offset = offset;
    offset += t.n_bytes;
    put_str(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(head, d);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  if (Status s = emit(head.data(), head.size()); !s) return s;
  if (Status s = pad_to(alignment_); !s) return s;
  data_start_ = pos_;
  cur_tensor_ = 0;
  cur_written_ = 0;
  return Ok{};
}

Status GgufWriter::write_tensor_data(const void* data, size_t n) {
  if (state_ != State::Writing) return Error{"GgufWriter: write_tensor_data() outside begin()/finish()"};
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (cur_tensor_ >= tensors_.size()) {
      state_ = State::Failed;
      return Error{"GgufWriter: more tensor data than declared"};
    }
    const TensorInfo& t = tensors_[cur_tensor_];
    if (cur_written_ == 0) {
      if (Status s = pad_to(alignment_); !s) return s;
      if (pos_ - data_start_ != t.offset) {  // broken invariant: the table promised this offset
        state_ = State::Failed;
        return Error{"GgufWriter: internal offset mismatch for tensor '" + t.name + "'"};
      }
    }
    const uint64_t room = t.n_bytes - cur_written_;
    const size_t take = n < room ? n : static_cast<size_t>(room);
    if (Status s = emit(p, take); !s) return s;
    p += take;
    n -= take;
    cur_written_ += take;
    if (cur_written_ == t.n_bytes) {
      ++cur_tensor_;
      cur_written_ = 0;
    }
  }
  return Ok{};
}

Status GgufWriter::finish() {
  if (state_ != State::Writing) return Error{"GgufWriter: finish() without a successful begin()"};
  if (cur_tensor_ != tensors_.size()) {
    const std::string missing = tensors_[cur_tensor_].name;
    abandon();
    return Error{"GgufWriter: tensor '" + missing + "' was not (completely) written"};
  }
  if (to_memory_) {
    state_ = State::Finished;
    return Ok{};
  }
  const bool flushed = std::fflush(file_) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed || !closed) {
    abandon();
    return Error{tmp_path_ + ": write failed (disk full?)"};
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    abandon();
    return Error{"cannot rename " + tmp_path_ + " to " + path_ + ": " + e};
  }
  state_ = State::Finished;
  return Ok{};
}

void GgufWriter::abandon() {
  if (file_) {
    std::fclose(file_);
    file_ = nullptr;
  }
  if (!to_memory_ && !tmp_path_.empty()) std::remove(tmp_path_.c_str());
  state_ = State::Failed;
}

}  // namespace picolm
