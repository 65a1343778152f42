#include "calls/python_literal.h"

#include <cstdlib>
#include <tuple>

#include "utf8_out.h"

namespace picolm::calls {

using Kind = JsonValue::Kind;

void PythonLiteralReader::ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
}

bool PythonLiteralReader::eat(char c) {
  ws();
  if (i_ < s_.size() && s_[i_] == c) {
    ++i_;
    return true;
  }
  return false;
}

char PythonLiteralReader::peek() {
  ws();
  return i_ < s_.size() ? s_[i_] : '\0';
}

bool PythonLiteralReader::value(JsonValue& v, int depth) {
  if (depth > 64) return false;
  ws();
  if (i_ >= s_.size()) return false;
  const char c = s_[i_];
  if (c == '"' || c == '\'') {
    v.kind = Kind::String;
    return string(v.str);
  }
  if (c == '[' || c == '(') {
    const char close = c == '[' ? ']' : ')';
    ++i_;
    v.kind = Kind::Array;
    if (eat(close)) return true;
    for (;;) {
      JsonValue item;
      if (!value(item, depth + 1)) return false;
      v.arr.push_back(std::move(item));
      if (eat(close)) return true;
      if (!eat(',')) return false;
      if (eat(close)) return true;  // Python allows a trailing comma
    }
  }
  if (c == '{') {
    ++i_;
    v.kind = Kind::Object;
    if (eat('}')) return true;
    for (;;) {
      ws();
      JsonValue key;
      if (!value(key, depth + 1) || key.kind != Kind::String) return false;
      if (!eat(':')) return false;
      JsonValue item;
      if (!value(item, depth + 1)) return false;
      v.obj.emplace_back(std::move(key.str), std::move(item));
      if (eat('}')) return true;
      if (!eat(',')) return false;
      if (eat('}')) return true;
    }
  }
  for (const auto& [word, kind, b] : {std::tuple{"True", Kind::Bool, true}, std::tuple{"true", Kind::Bool, true},
                                      std::tuple{"False", Kind::Bool, false}, std::tuple{"false", Kind::Bool, false},
                                      std::tuple{"None", Kind::Null, false}, std::tuple{"null", Kind::Null, false}}) {
    const std::string_view w = word;
    if (s_.substr(i_, w.size()) == w && !ident_char(i_ + w.size())) {
      i_ += w.size();
      v.kind = kind;
      v.boolean = b;
      return true;
    }
  }
  return number(v);
}

bool PythonLiteralReader::name(std::string& out, char stop) {
  ws();
  const size_t start = i_;
  while (i_ < s_.size() && s_[i_] != stop && s_[i_] != ',' && s_[i_] != ')' && s_[i_] != '(' && s_[i_] != '[' &&
         s_[i_] != ']' && s_[i_] != ' ' && s_[i_] != '\n')
    ++i_;
  out = std::string(s_.substr(start, i_ - start));
  return !out.empty();
}

bool PythonLiteralReader::ident_char(size_t k) const {
  if (k >= s_.size()) return false;
  const char c = s_[k];
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool PythonLiteralReader::number(JsonValue& v) {
  // JSON spelling out: a sign, digits, an optional fraction and exponent.
  size_t k = i_;
  std::string out;
  if (k < s_.size() && (s_[k] == '-' || s_[k] == '+')) {
    if (s_[k] == '-') out += '-';
    ++k;
  }
  const size_t int_start = k;
  while (k < s_.size() && s_[k] >= '0' && s_[k] <= '9') ++k;
  std::string digits(s_.substr(int_start, k - int_start));
  if (digits.empty()) digits = "0";
  while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
  out += digits;
  bool any = k > int_start;
  if (k < s_.size() && s_[k] == '.') {
    ++k;
    const size_t f = k;
    while (k < s_.size() && s_[k] >= '0' && s_[k] <= '9') ++k;
    out += '.';
    out += k > f ? std::string(s_.substr(f, k - f)) : std::string("0");
    any = any || k > f;
  }
  if (!any) return false;
  if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
    size_t e = k + 1;
    std::string exp = "e";
    if (e < s_.size() && (s_[e] == '-' || s_[e] == '+')) exp += s_[e++];
    const size_t d = e;
    while (e < s_.size() && s_[e] >= '0' && s_[e] <= '9') ++e;
    if (e > d) {
      out += exp + std::string(s_.substr(d, e - d));
      k = e;
    }
  }
  if (ident_char(k)) return false;
  i_ = k;
  v.kind = Kind::Number;
  v.number = std::strtod(out.c_str(), nullptr);
  v.str = std::move(out);
  return true;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

bool PythonLiteralReader::hex(size_t n, uint32_t& cp) {
  cp = 0;
  if (i_ + n > s_.size()) return false;
  for (size_t k = 0; k < n; ++k) {
    const int h = hex_value(s_[i_ + k]);
    if (h < 0) return false;
    cp = cp * 16 + uint32_t(h);
  }
  i_ += n;
  return true;
}

// A quoted string with the escapes of Python (and so JSON's); a surrogate pair in \u escapes is
// joined into its character, as JSON readers do.
bool PythonLiteralReader::string(std::string& out) {
  const char q = s_[i_++];
  out.clear();
  while (i_ < s_.size()) {
    const char c = s_[i_++];
    if (c == q) return true;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i_ >= s_.size()) return false;
    const char e = s_[i_++];
    uint32_t cp = 0;
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'a': out += '\a'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      // JSON's escaped solidus: the grammar's string automaton (the JSON one) allows it and
      // checked the schema's constraints on "/", so it is read as JSON reads it.
      case '/': out += '/'; break;
      case '\n': break;  // a line continuation
      case 'x':
        if (!hex(2, cp)) return false;
        put_utf8(out, cp);
        break;
      case 'u':
      case 'U':
        if (!hex(e == 'u' ? 4 : 8, cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
          const size_t save = i_;
          i_ += 2;
          uint32_t lo = 0;
          if (hex(4, lo) && lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          else i_ = save;
        }
        put_utf8(out, cp);
        break;
      default:  // Python keeps an unknown escape as it is
        out += '\\';
        out += e;
    }
  }
  return false;  // cut off
}

uint8_t value_type_bit(const JsonValue& v) {
  switch (v.kind) {
    case Kind::Null: return kTNull;
    case Kind::Bool: return kTBool;
    case Kind::Number: return kTNum;
    case Kind::String: return kTStr;
    case Kind::Array: return kTArr;
    case Kind::Object: return kTObj;
  }
  return 0;
}

}  // namespace picolm::calls
