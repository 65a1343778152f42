#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace picolm {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
// Sanity limits: far above any real model, low enough that a corrupt count cannot make us allocate
// gigabytes before the bounds checks catch it.
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKv = 1u << 20;
constexpr uint32_t kMaxDims = 4;

// A bounds-checked little-endian cursor over [p, end).
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size) : base_(base), size_(size) {}
  size_t pos() const { return pos_; }
  bool read_bytes(void* out, size_t n) {
    if (n > size_ - pos_) return false;
    std::memcpy(out, base_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <class T>
  bool read(T& v) { return read_bytes(&v, sizeof(T)); }
  bool skip(uint64_t n) {
    if (n > size_ - pos_) return false;
    pos_ += n;
    return true;
  }
  bool read_string(std::string_view& s) {
    uint64_t len = 0;
    if (!read(len)) return false;
    if (len > size_ - pos_) return false;
    s = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return true;
  }
  const uint8_t* here() const { return base_ + pos_; }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    default: return 0;
  }
}

bool read_scalar(Cursor& c, GgufValueType t, GgufValue& v) {
  v.type = t;
  switch (t) {
    case GgufValueType::UINT8: { uint8_t x; if (!c.read(x)) return false; v.u = x; v.i = x; return true; }
    case GgufValueType::INT8: { int8_t x; if (!c.read(x)) return false; v.i = x; v.u = static_cast<uint64_t>(v.i); return true; }
    case GgufValueType::UINT16: { uint16_t x; if (!c.read(x)) return false; v.u = x; v.i = x; return true; }
    case GgufValueType::INT16: { int16_t x; if (!c.read(x)) return false; v.i = x; v.u = static_cast<uint64_t>(v.i); return true; }
    case GgufValueType::UINT32: { uint32_t x; if (!c.read(x)) return false; v.u = x; v.i = x; return true; }
    case GgufValueType::INT32: { int32_t x; if (!c.read(x)) return false; v.i = x; v.u = static_cast<uint64_t>(v.i); return true; }
    case GgufValueType::UINT64: { uint64_t x; if (!c.read(x)) return false; v.u = x; v.i = static_cast<int64_t>(x); return true; }
    case GgufValueType::INT64: { int64_t x; if (!c.read(x)) return false; v.i = x; v.u = static_cast<uint64_t>(x); return true; }
    case GgufValueType::FLOAT32: { float x; if (!c.read(x)) return false; v.f = x; return true; }
    case GgufValueType::FLOAT64: { double x; if (!c.read(x)) return false; v.f = x; return true; }
    case GgufValueType::BOOL: { uint8_t x; if (!c.read(x)) return false; if (x > 1) return false; v.i = x; v.u = x; return true; }
    default: return false;
  }
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16: case GgufValueType::INT16:
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::UINT64: case GgufValueType::INT64:
      return true;
    default: return false;
  }
}

std::string hex_offset(size_t off) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%zx", off);
  return buf;
}

}  // namespace

uint64_t GgufTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

uint64_t GgufTensor::row_bytes() const {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  return tr ? ne[0] / tr->block_elems * tr->block_bytes : 0;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Error{path + ": cannot stat: " + std::strerror(e)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": not a regular file"};
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    return Error{path + ": file too small to be GGUF (" + std::to_string(size) + " bytes)"};
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Error{path + ": mmap failed: " + std::strerror(e)};
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->mapped_ = true;
  Status s = f->parse_all();
  if (!s) return Error{s.error()};
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = std::move(name);
  f->base_ = data;
  f->size_ = size;
  Status s = f->parse_all();
  if (!s) return Error{s.error()};
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_ && base_) munmap(const_cast<uint8_t*>(base_), size_);
}

Status GgufFile::parse_all() {
  auto fail = [&](const std::string& what, size_t at) -> Status {
    return Error{name_ + ": " + what + " (at offset " + hex_offset(at) + ")"};
  };
  Cursor c(base_, size_);
  uint32_t magic = 0;
  if (!c.read(magic)) return fail("truncated header", 0);
  if (magic != kGgufMagic) return fail("not a GGUF file (bad magic)", 0);
  if (!c.read(version_)) return fail("truncated header", c.pos());
  if (version_ != 2 && version_ != 3) return fail("unsupported GGUF version " + std::to_string(version_), 4);
  uint64_t n_tensors = 0, n_kv = 0;
  if (!c.read(n_tensors) || !c.read(n_kv)) return fail("truncated header", c.pos());
  if (n_tensors > kMaxTensors) return fail("implausible tensor count " + std::to_string(n_tensors), 8);
  if (n_kv > kMaxKv) return fail("implausible metadata count " + std::to_string(n_kv), 16);

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    size_t at = c.pos();
    std::string_view key;
    if (!c.read_string(key)) return fail("truncated metadata key #" + std::to_string(k), at);
    uint32_t t = 0;
    if (!c.read(t)) return fail("truncated type of metadata '" + std::string(key) + "'", c.pos());
    GgufValue v;
    auto vt = static_cast<GgufValueType>(t);
    if (vt == GgufValueType::STRING) {
      v.type = vt;
      if (!c.read_string(v.s)) return fail("truncated string value of '" + std::string(key) + "'", c.pos());
    } else if (vt == GgufValueType::ARRAY) {
      v.type = vt;
      uint32_t et = 0;
      if (!c.read(et) || !c.read(v.count)) return fail("truncated array header of '" + std::string(key) + "'", c.pos());
      v.elem_type = static_cast<GgufValueType>(et);
      if (v.elem_type == GgufValueType::STRING) {
        // Each string takes at least 8 bytes: a quick bound before reserving.
        if (v.count > c.remaining() / 8) return fail("array '" + std::string(key) + "' runs past the end of the file", c.pos());
        v.strings.reserve(v.count);
        for (uint64_t i = 0; i < v.count; ++i) {
          std::string_view s;
          if (!c.read_string(s)) return fail("truncated string #" + std::to_string(i) + " of array '" + std::string(key) + "'", c.pos());
          v.strings.push_back(s);
        }
      } else {
        size_t es = scalar_size(v.elem_type);
        if (es == 0) return fail("bad element type " + std::to_string(et) + " of array '" + std::string(key) + "'", c.pos());
        if (v.count > c.remaining() / es) return fail("array '" + std::string(key) + "' runs past the end of the file", c.pos());
        v.elems = c.here();
        c.skip(v.count * es);
      }
    } else {
      if (scalar_size(vt) == 0) return fail("bad value type " + std::to_string(t) + " of '" + std::string(key) + "'", c.pos());
      if (!read_scalar(c, vt, v)) return fail("truncated or invalid value of '" + std::string(key) + "'", c.pos());
    }
    kv_.emplace_back(std::string(key), std::move(v));
  }

  if (auto a = get_int("general.alignment")) {
    if (*a <= 0 || *a > (1 << 20) || (*a & (*a - 1)) != 0) return fail("general.alignment is not a power of two", 0);
    alignment_ = static_cast<uint64_t>(*a);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    size_t at = c.pos();
    std::string_view name;
    if (!c.read_string(name)) return fail("truncated name of tensor #" + std::to_string(t), at);
    GgufTensor ti;
    ti.name = std::string(name);
    uint32_t n_dims = 0;
    if (!c.read(n_dims)) return fail("truncated tensor info of '" + ti.name + "'", c.pos());
    if (n_dims == 0 || n_dims > kMaxDims) return fail("tensor '" + ti.name + "' has " + std::to_string(n_dims) + " dimensions", c.pos());
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!c.read(ne)) return fail("truncated shape of tensor '" + ti.name + "'", c.pos());
      if (ne == 0 || ne > (uint64_t(1) << 40) || n_el > (uint64_t(1) << 42) / ne)
        return fail("tensor '" + ti.name + "' has an invalid shape", c.pos());
      n_el *= ne;
      ti.ne.push_back(ne);
    }
    uint32_t type = 0;
    if (!c.read(type) || !c.read(ti.offset)) return fail("truncated tensor info of '" + ti.name + "'", c.pos());
    const GgmlTypeTraits* tr = ggml_type_traits(type);
    if (!tr) return fail("tensor '" + ti.name + "' has unsupported type id " + std::to_string(type), c.pos());
    ti.type = static_cast<GgmlType>(type);
    if (ti.ne[0] % tr->block_elems != 0)
      return fail("tensor '" + ti.name + "' row length " + std::to_string(ti.ne[0]) + " is not a multiple of the " +
                      tr->name + " block size",
                  c.pos());
    ti.n_bytes = n_el / tr->block_elems * tr->block_bytes;
    tensors_.push_back(std::move(ti));
  }

  uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  // Vocabulary-only files (no tensors) may end right after the metadata, without alignment padding.
  if (tensors_.empty() && data_start > size_) data_start = size_;
  if (data_start > size_) return fail("data section starts past the end of the file", c.pos());
  data_offset_ = data_start;
  uint64_t data_size = size_ - data_start;
  for (GgufTensor& ti : tensors_) {
    if (ti.offset % alignment_ != 0) return fail("tensor '" + ti.name + "' data offset is not aligned", data_start);
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
      return fail("tensor '" + ti.name + "' data (" + std::to_string(ti.n_bytes) + " bytes at data offset " +
                      std::to_string(ti.offset) + ") runs past the end of the file (truncated?)",
                  data_start);
    ti.data = base_ + data_start + ti.offset;
  }
  return Ok{};
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || !is_integer(v->type)) return std::nullopt;
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufValueType::FLOAT32 || v->type == GgufValueType::FLOAT64) return v->f;
  if (is_integer(v->type)) return static_cast<double>(v->i);
  return std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || (v->type != GgufValueType::BOOL && !is_integer(v->type))) return std::nullopt;
  return v->i != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufValueType::STRING) return std::nullopt;
  return v->s;
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING) return {};
  return v->strings;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::FLOAT32) return {};
  std::vector<float> out(v->count);
  if (v->count) std::memcpy(out.data(), v->elems, v->count * sizeof(float));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufValueType::ARRAY || !is_integer(v->elem_type)) return {};
  std::vector<int32_t> out(v->count);
  Cursor c(v->elems, v->count * scalar_size(v->elem_type));
  for (uint64_t i = 0; i < v->count; ++i) {
    GgufValue x;
    read_scalar(c, v->elem_type, x);
    out[i] = static_cast<int32_t>(x.i);
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufValueType::ARRAY || !is_integer(v->elem_type)) return {};
  std::vector<int64_t> out(v->count);
  Cursor c(v->elems, v->count * scalar_size(v->elem_type));
  for (uint64_t i = 0; i < v->count; ++i) {
    GgufValue x;
    read_scalar(c, v->elem_type, x);
    out[i] = x.i;
  }
  return out;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  for (const GgufTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void GgufFile::advise_sequential() const {
  if (mapped_) madvise(const_cast<uint8_t*>(base_), size_, MADV_SEQUENTIAL);
}
void GgufFile::advise_willneed() const {
  if (mapped_) madvise(const_cast<uint8_t*>(base_), size_, MADV_WILLNEED);
}
bool GgufFile::lock_memory() const { return mapped_ && mlock(base_, size_) == 0; }
void GgufFile::release(const void* p, size_t n) const {
  if (!mapped_ || n == 0) return;
  const long ps = sysconf(_SC_PAGESIZE);
  if (ps <= 0) return;
  const auto page = static_cast<uintptr_t>(ps);
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  const auto b = reinterpret_cast<uintptr_t>(base_);
  if (lo < b || hi > b + size_ || hi <= lo) return;
  madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace picolm
