// A minimal streaming JSON writer for the provider's responses (OpenAI bodies, SSE chunks, metrics
// never go through here). Strings are written as valid UTF-8 whatever the input: generated text can
// end in a cut multi-byte sequence, and a client's JSON parser must never see invalid UTF-8, so bad
// bytes become U+FFFD.
// Thread-safety: a JsonWriter is used by one thread at a time; append_json_string is pure.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace picolm::json {

// Appends the ASCII byte c (< 0x80) as it appears inside a JSON string: the escapes Python's
// json.dumps writes (\" \\ \n \r \t \b \f, \u00XX for the other control characters), else c
// itself. Shared with the Jinja interpreter's tojson (provider/jinja/jinja_value.cpp).
inline void append_json_ascii(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out.push_back(static_cast<char>(c));
      }
  }
}

// Appends s as a quoted JSON string.
inline void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      append_json_ascii(out, c);
      ++i;
      continue;
    }
    // Multi-byte sequence: copy it only if it is well-formed (no overlongs, no surrogates).
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (ok) {
      static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for one bad byte, then resynchronise
      ++i;
    }
  }
  out.push_back('"');
}

// Builder with automatic commas. Usage: w.begin_object().key("a").value(1).end_object().
class JsonWriter {
 public:
  JsonWriter& begin_object() { pre_value(); out_.push_back('{'); first_.push_back(true); return *this; }
  JsonWriter& end_object() { out_.push_back('}'); first_.pop_back(); return *this; }
  JsonWriter& begin_array() { pre_value(); out_.push_back('['); first_.push_back(true); return *this; }
  JsonWriter& end_array() { out_.push_back(']'); first_.pop_back(); return *this; }
  JsonWriter& key(std::string_view k) {
    comma();
    append_json_string(out_, k);
    out_.push_back(':');
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(std::string_view s) { pre_value(); append_json_string(out_, s); return *this; }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { pre_value(); out_ += b ? "true" : "false"; return *this; }
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(int64_t v) { pre_value(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(uint64_t v) { pre_value(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(double v) {
    pre_value();
    if (!(v == v) || v > 1e300 || v < -1e300) { out_ += "null"; return *this; }  // JSON has no NaN/Inf
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ += buf;
    return *this;
  }
  JsonWriter& null() { pre_value(); out_ += "null"; return *this; }
  // Inserts already serialised JSON (caller guarantees validity).
  JsonWriter& raw(std::string_view json) { pre_value(); out_ += json; return *this; }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void comma() {
    if (!first_.empty()) {
      if (!first_.back()) out_.push_back(',');
      first_.back() = false;
    }
  }
  void pre_value() {
    if (after_key_) { after_key_ = false; return; }
    comma();
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace picolm::json
