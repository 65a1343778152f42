// picolm-gguf: prints a GGUF file's metadata (arrays abbreviated) and its tensor table.
// A file the reader rejects gives a one-line error naming the problem and exit status 1.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "gguf.h"

using namespace picolm;

namespace {

const char* value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "str";
    case GgufValueType::ARRAY: return "arr";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "?";
}

// Printable, one-line form of a string: escapes control characters, cuts long text.
std::string quoted(std::string_view s, size_t max_len) {
  std::string out = "\"";
  size_t n = 0;
  for (char ch : s) {
    if (n++ >= max_len) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += ch;
  }
  out += "\"";
  if (s.size() > max_len) out += " (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string element(const GgufValue& v, uint64_t i) {
  const uint8_t* p = v.elems;
  char buf[64];
  switch (v.elem_type) {
    case GgufValueType::UINT8: return std::to_string(p[i]);
    case GgufValueType::INT8: return std::to_string(static_cast<int8_t>(p[i]));
    case GgufValueType::BOOL: return p[i] ? "true" : "false";
    case GgufValueType::UINT16: { uint16_t x; std::memcpy(&x, p + 2 * i, 2); return std::to_string(x); }
    case GgufValueType::INT16: { int16_t x; std::memcpy(&x, p + 2 * i, 2); return std::to_string(x); }
    case GgufValueType::UINT32: { uint32_t x; std::memcpy(&x, p + 4 * i, 4); return std::to_string(x); }
    case GgufValueType::INT32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); return std::to_string(x); }
    case GgufValueType::UINT64: { uint64_t x; std::memcpy(&x, p + 8 * i, 8); return std::to_string(x); }
    case GgufValueType::INT64: { int64_t x; std::memcpy(&x, p + 8 * i, 8); return std::to_string(x); }
    case GgufValueType::FLOAT32: { float x; std::memcpy(&x, p + 4 * i, 4); std::snprintf(buf, sizeof buf, "%g", x); return buf; }
    case GgufValueType::FLOAT64: { double x; std::memcpy(&x, p + 8 * i, 8); std::snprintf(buf, sizeof buf, "%g", x); return buf; }
    default: return "?";
  }
}

std::string format_value(const GgufValue& v, bool full) {
  char buf[64];
  switch (v.type) {
    case GgufValueType::STRING: return quoted(v.s, full ? SIZE_MAX : 120);
    case GgufValueType::BOOL: return v.i ? "true" : "false";
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: std::snprintf(buf, sizeof buf, "%g", v.f); return buf;
    case GgufValueType::UINT64: return std::to_string(v.u);
    case GgufValueType::ARRAY: {
      const uint64_t show = full ? v.count : (v.count < 8 ? v.count : 6);
      std::string out = std::string("[") + value_type_name(v.elem_type) + " x " + std::to_string(v.count) + "] [";
      for (uint64_t i = 0; i < show; ++i) {
        if (i) out += ", ";
        out += v.elem_type == GgufValueType::STRING ? quoted(v.strings[i], 40) : element(v, i);
      }
      if (show < v.count) out += ", ...";
      return out + "]";
    }
    default: return std::to_string(v.i);
  }
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-gguf [options] FILE.gguf\n"
               "  --no-tensors   metadata only\n"
               "  --key KEY      print one metadata value in full (exit 1 if missing)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, key;
  bool tensors = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--no-tensors") {
      tensors = false;
    } else if (a == "--key" && i + 1 < argc) {
      key = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "picolm-gguf: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      path = a;
    }
  }
  if (path.empty()) {
    usage(stderr);
    return 2;
  }
  auto f = GgufFile::open(path);
  if (!f) {
    std::fprintf(stderr, "picolm-gguf: %s\n", f.error().c_str());
    return 1;
  }
  const GgufFile& g = *f.value();
  if (!key.empty()) {
    const GgufValue* v = g.find(key);
    if (!v) {
      std::fprintf(stderr, "picolm-gguf: %s: no key '%s'\n", path.c_str(), key.c_str());
      return 1;
    }
    if (v->type == GgufValueType::STRING) std::fwrite(v->s.data(), 1, v->s.size(), stdout);
    else std::fputs(format_value(*v, true).c_str(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }

  std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, alignment %llu, data at offset %llu, %zu bytes\n",
              path.c_str(), g.version(), g.metadata().size(), g.tensors().size(),
              static_cast<unsigned long long>(g.alignment()), static_cast<unsigned long long>(g.data_offset()),
              g.bytes().size());
  std::printf("\nmetadata:\n");
  for (const auto& [k, v] : g.metadata())
    std::printf("  %-44s %-4s %s\n", k.c_str(), value_type_name(v.type), format_value(v, false).c_str());

  if (tensors) {
    std::printf("\ntensors:\n  %-5s %-36s %-6s %-22s %14s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
    std::map<std::string, std::pair<int, uint64_t>> by_type;
    uint64_t total = 0, params = 0;
    for (size_t i = 0; i < g.tensors().size(); ++i) {
      const GgufTensor& t = g.tensors()[i];
      std::string shape = "[";
      for (size_t d = 0; d < t.ne.size(); ++d) shape += (d ? ", " : "") + std::to_string(t.ne[d]);
      shape += "]";
      const char* tn = ggml_type_traits(t.type)->name;
      std::printf("  %-5zu %-36s %-6s %-22s %14llu %12llu\n", i, t.name.c_str(), tn, shape.c_str(),
                  static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.n_bytes));
      auto& bt = by_type[tn];
      ++bt.first;
      bt.second += t.n_bytes;
      total += t.n_bytes;
      params += t.n_elements();
    }
    std::printf("\ntotal: %.2f M parameters, %.2f MiB of tensor data;", static_cast<double>(params) / 1e6,
                static_cast<double>(total) / (1024.0 * 1024.0));
    for (const auto& [tn, c] : by_type)
      std::printf(" %s x%d (%.1f MiB)", tn.c_str(), c.first, static_cast<double>(c.second) / (1024.0 * 1024.0));
    std::printf("\n");
  }
  return 0;
}
