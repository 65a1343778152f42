// Internal to the call syntaxes: Python literals (the values LFM2 writes in its calls, and Qwen3.5's
// non-string parameter values) read into the project's one JSON tree (grammar/json_value.h).
// JSON is a subset: True/False/None and true/false/null, either quote, tuples as arrays, a
// trailing comma, Python's escapes (\x, \U, \a, \v, line continuation); numbers are given their
// JSON spelling (Python's "1." and ".5" completed with a zero).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/json_value.h"

namespace picolm::calls {

using JsonValue = grammar::detail::JValue;

class PythonLiteralReader {
 public:
  explicit PythonLiteralReader(std::string_view s, size_t pos = 0) : s_(s), i_(pos) {}
  size_t pos() const { return i_; }
  bool at_end() {
    ws();
    return i_ >= s_.size();
  }
  void ws();
  bool eat(char c);
  char peek();
  // One literal at the current position (after whitespace); false if there is none, or it is cut off.
  bool value(JsonValue& v, int depth = 0);
  // A Python identifier-like name up to `stop` (a keyword argument or a function name).
  bool name(std::string& out, char stop);

 private:
  bool ident_char(size_t k) const;
  bool number(JsonValue& v);
  bool hex(size_t n, uint32_t& cp);
  bool string(std::string& out);

  std::string_view s_;
  size_t i_;
};

// JSON types as bits, for the QwenXml reader typing values by their schema.
enum : uint8_t { kTNull = 1, kTBool = 2, kTNum = 4, kTStr = 8, kTArr = 16, kTObj = 32, kTAll = 63 };
uint8_t value_type_bit(const JsonValue& v);

}  // namespace picolm::calls
