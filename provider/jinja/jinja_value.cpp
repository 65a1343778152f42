// Values: Python spellings (repr, str, json.dumps) and the JSON reader.
#include <charconv>
#include <cmath>
#include <cstring>

#include "../json_writer.h"  // header-only: the JSON escapes, shared with the provider's writer
#include "jinja.h"
#include "jinja_internal.h"

namespace picolm::jinja {

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(std::string key, Value value) {
  for (auto& [k, v] : *dict_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  dict_->emplace_back(std::move(key), std::move(value));
}

namespace detail {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes one code point at s[i], advancing i; invalid bytes decode as themselves (U+0080..U+00FF
// would be wrong, so they are kept as 0xDC80+byte, Python's surrogateescape).
uint32_t next_cp(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || i + n >= s.size() + (n == 0 ? 1 : 0)) {
    if (n == 0) return s[i++] & 0x7F;
    ++i;
    return 0xDC00 + c;
  }
  uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k <= n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      ++i;
      return 0xDC00 + c;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  i += n + 1;
  return cp;
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) out += next_cp(s, i);
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF) out += static_cast<char>(c - 0xDC00);
    else append_utf8(out, c);
  }
  return out;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next_cp(s, i);
    ++n;
  }
  return n;
}

// Python's str.isspace.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.isprintable, closely enough for the characters chat text carries: controls, the
// separators other than space, format characters, surrogates and private use are not printable.
static bool py_printable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF)) return false;
  if (c == 0x061C || c == 0x180E || (c >= 0xE0000 && c <= 0xE007F) || c >= 0xF0000) return false;
  return true;
}

std::string py_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = false;
  size_t p = 0;
  if (sci[0] == '-') {
    neg = true;
    p = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t c = next_cp(s, i);
    if (c == static_cast<uint32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (!py_printable(c)) {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      else if (c < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      else std::snprintf(buf, sizeof(buf), "\\U%08x", c);
      out += buf;
    } else out.append(s.substr(start, i - start));
  }
  out += q;
  return out;
}

std::string dict_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::String: return key.as_string().starts_with('\0') ? std::string("\0s", 2) + key.as_string() : key.as_string();
    case Value::Kind::Int: return std::string("\0i", 2) + (key.is_big_integer() ? key.as_string() : std::to_string(key.as_int()));
    case Value::Kind::Float: return std::string("\0f", 2) + py_float(key.as_float());
    case Value::Kind::Bool: return std::string("\0b", 2) + (key.as_bool() ? "1" : "0");
    case Value::Kind::None: return std::string("\0n", 2);
    case Value::Kind::List:
      if (key.is_tuple()) break;
      throw Error("unhashable type: 'list'");
    case Value::Kind::Dict: throw Error("unhashable type: 'dict'");
    default: break;
  }
  throw Error("unsupported dict key");
}

Value key_value(const std::string& stored) {
  if (stored.empty() || stored[0] != '\0') return Value::string(stored);
  const char type = stored.size() > 1 ? stored[1] : 's';
  const std::string text = stored.substr(2);
  switch (type) {
    case 'i': {
      int64_t i = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
      if (ec != std::errc() || end != text.data() + text.size()) return Value::big_integer(text);
      return Value::integer(i);
    }
    case 'f': return Value::number(std::strtod(text.c_str(), nullptr));
    case 'b': return Value::boolean(text == "1");
    case 'n': return Value::none();
    default: return Value::string(text);
  }
}

static std::string canonical_key(const std::string& stored) {
  if (stored.size() < 2 || stored[0] != '\0') return stored;
  if (stored[1] == 'b') return std::string("\0i", 2) + stored.substr(2);
  if (stored[1] == 'f') {
    const double f = std::strtod(stored.c_str() + 2, nullptr);
    if (std::isfinite(f) && f == std::trunc(f) && std::fabs(f) < 9.2e18) return std::string("\0i", 2) + std::to_string(static_cast<int64_t>(f));
  }
  return stored;
}

const Value* find_key(const Value& dict, const Value& key) {
  const std::string want = dict_key(key);
  if (const Value* v = dict.find(want)) return v;
  if (want.empty() || want[0] != '\0') return nullptr;
  const std::string canon = canonical_key(want);
  for (const auto& [k, v] : dict.entries())
    if (!k.empty() && k[0] == '\0' && canonical_key(k) == canon) return &v;
  return nullptr;
}

void set_key(Value& dict, const Value& key, Value value) {
  const std::string stored = dict_key(key);
  const std::string canon = canonical_key(stored);
  for (auto& [k, v] : dict.entries())
    if (k == stored || canonical_key(k) == canon) {
      v = std::move(value);
      return;
    }
  dict.entries().emplace_back(stored, std::move(value));
}

std::string key_json_text(const std::string& stored) {
  if (stored.empty() || stored[0] != '\0') return stored;
  const Value k = key_value(stored);
  switch (k.kind()) {
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    case Value::Kind::Float: {
      const double f = k.as_float();
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
      return py_float(f);
    }
    case Value::Kind::Int: return k.is_big_integer() ? k.as_string() : std::to_string(k.as_int());
    default: return k.as_string();
  }
}

static void py_repr(const Value& v, std::string& out, int depth);

static void py_repr_item(const Value& v, std::string& out, int depth) {
  if (v.is_string()) out += py_repr_string(v.as_string());
  else py_repr(v, out, depth);
}

static void py_repr(const Value& v, std::string& out, int depth) {
  if (depth > 200) throw Error("value nested too deeply to print");
  switch (v.kind()) {
    case Value::Kind::Undefined: break;
    case Value::Kind::None: out += "None"; break;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; break;
    case Value::Kind::Int: out += v.is_big_integer() ? v.as_string() : std::to_string(v.as_int()); break;
    case Value::Kind::Float: out += py_float(v.as_float()); break;
    case Value::Kind::String: out += v.as_string(); break;
    case Value::Kind::List: {
      if (v.is_generator()) throw Error("cannot print a generator (add |list)");
      out += v.is_tuple() ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        py_repr_item(items[i], out, depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      break;
    }
    case Value::Kind::Dict: {
      if (v.is_namespace()) {
        // jinja2 >= 3.1 prints a namespace as <Namespace {'key': value, ...}>.
        out += "<Namespace {";
        for (size_t i = 0; i < v.entries().size(); ++i) {
          if (i) out += ", ";
          out += py_repr_string(v.entries()[i].first) + ": ";
          py_repr_item(v.entries()[i].second, out, depth + 1);
        }
        out += "}>";
        break;
      }
      out += "{";
      bool first = true;
      for (const auto& [k, x] : v.entries()) {
        if (!first) out += ", ";
        first = false;
        py_repr_item(key_value(k), out, depth + 1);
        out += ": ";
        py_repr_item(x, out, depth + 1);
      }
      out += "}";
      break;
    }
    case Value::Kind::Callable: out += "<function>"; break;
  }
}

void json_string(std::string_view s, std::string& out) {
  // Bytes from 0x80 up are copied as they are (json_writer.h's append_json_string would replace
  // ill-formed UTF-8, but a lone surrogate from "\\ud800" must come out as python3-jinja2 writes
  // it, in the bytes the interpreter holds).
  out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x80) json::append_json_ascii(out, c);
    else out += ch;
  }
  out += '"';
}

static void to_json_rec(const Value& v, std::string& out, int indent, int level, std::string_view item_sep,
                        std::string_view key_sep) {
  if (level > 200) throw Error("value nested too deeply for tojson");
  auto newline = [&](int lv) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * lv, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined: throw Error("Object of type Undefined is not JSON serializable");
    case Value::Kind::Callable: throw Error("a function is not JSON serializable");
    case Value::Kind::None: out += "null"; break;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Kind::Int: out += v.is_big_integer() ? v.as_string() : std::to_string(v.as_int()); break;
    case Value::Kind::Float: {
      const double f = v.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
      else out += py_float(f);
      break;
    }
    case Value::Kind::String: json_string(v.as_string(), out); break;
    case Value::Kind::List: {
      if (v.is_generator()) throw Error("Object of type generator is not JSON serializable");
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(level + 1);
        to_json_rec(items[i], out, indent, level + 1, item_sep, key_sep);
      }
      if (indent >= 0) newline(level);
      out += ']';
      break;
    }
    case Value::Kind::Dict: {
      const auto& entries = v.entries();
      if (entries.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(level + 1);
        json_string(key_json_text(entries[i].first), out);
        out += key_sep;
        to_json_rec(entries[i].second, out, indent, level + 1, item_sep, key_sep);
      }
      if (indent >= 0) newline(level);
      out += '}';
      break;
    }
  }
}

}  // namespace detail

std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep) {
  std::string out;
  detail::to_json_rec(v, out, indent, 0, item_sep, key_sep);
  return out;
}

std::string to_python_str(const Value& v) {
  std::string out;
  detail::py_repr(v, out, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// JSON reader.

namespace {

struct JsonReader {
  std::string_view s;
  size_t pos = 0;
  std::string error;

  void ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) ++pos;
  }
  bool fail(const std::string& m) {
    if (error.empty()) error = m + " at offset " + std::to_string(pos);
    return false;
  }
  bool hex4(uint32_t& v) {
    if (pos + 4 > s.size()) return fail("bad \\u escape");
    v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return fail("bad \\u escape");
    }
    return true;
  }
  bool string(std::string& out) {
    ++pos;  // "
    while (true) {
      if (pos >= s.size()) return fail("unterminated string");
      const char c = s[pos++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s.size()) return fail("unterminated string");
      const char e = s[pos++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && pos + 6 <= s.size() && s[pos] == '\\' && s[pos + 1] == 'u') {
            const size_t save = pos;
            pos += 2;
            uint32_t lo = 0;
            if (!hex4(lo)) return false;
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else pos = save;
          }
          detail::append_utf8(out, cp);
          break;
        }
        default: return fail("bad escape");
      }
    }
  }
  bool value(Value& out, int depth) {
    if (depth > 512) return fail("JSON nested too deeply");
    ws();
    if (pos >= s.size()) return fail("unexpected end");
    const char c = s[pos];
    if (c == '{') {
      ++pos;
      out = Value::dict();
      ws();
      if (pos < s.size() && s[pos] == '}') {
        ++pos;
        return true;
      }
      while (true) {
        ws();
        if (pos >= s.size() || s[pos] != '"') return fail("expected a key");
        std::string key;
        if (!string(key)) return false;
        ws();
        if (pos >= s.size() || s[pos] != ':') return fail("expected ':'");
        ++pos;
        Value v;
        if (!value(v, depth + 1)) return false;
        out.set(detail::dict_key(Value::string(std::move(key))), std::move(v));
        ws();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == '}') {
          ++pos;
          return true;
        }
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos;
      out = Value::list();
      ws();
      if (pos < s.size() && s[pos] == ']') {
        ++pos;
        return true;
      }
      while (true) {
        Value v;
        if (!value(v, depth + 1)) return false;
        out.items().push_back(std::move(v));
        ws();
        if (pos < s.size() && s[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < s.size() && s[pos] == ']') {
          ++pos;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      std::string str;
      if (!string(str)) return false;
      out = Value::string(std::move(str));
      return true;
    }
    if (s.substr(pos, 4) == "true") {
      pos += 4;
      out = Value::boolean(true);
      return true;
    }
    if (s.substr(pos, 5) == "false") {
      pos += 5;
      out = Value::boolean(false);
      return true;
    }
    if (s.substr(pos, 4) == "null") {
      pos += 4;
      out = Value::none();
      return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = pos;
      if (s[pos] == '-') ++pos;
      const size_t int_start = pos;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      if (pos == int_start) return fail("bad number");
      bool is_float = false;
      if (pos < s.size() && s[pos] == '.') {
        is_float = true;
        ++pos;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      }
      if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
        is_float = true;
        ++pos;
        if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      }
      const std::string_view text = s.substr(start, pos - start);
      if (is_float) {
        double d = 0;
        auto r = std::from_chars(text.data(), text.data() + text.size(), d);
        if (r.ec == std::errc::result_out_of_range) {
          // Python reads 1e400 as inf and 1e-400 as 0.0.
          const size_t e = text.find_first_of("eE");
          const bool tiny = e != std::string_view::npos && e + 1 < text.size() && text[e + 1] == '-';
          d = tiny ? 0.0 : HUGE_VAL;
          if (text[0] == '-') d = -d;
        } else if (r.ec != std::errc()) return fail("bad number");
        out = Value::number(d);
      } else {
        int64_t i = 0;
        auto r = std::from_chars(text.data(), text.data() + text.size(), i);
        if (r.ec == std::errc()) out = Value::integer(i);
        else out = Value::big_integer(std::string(text));
      }
      return true;
    }
    return fail("unexpected character");
  }
};

}  // namespace

bool parse_json(std::string_view text, Value* out, std::string* error) {
  JsonReader r;
  r.s = text;
  Value v;
  if (!r.value(v, 0)) {
    if (error) *error = r.error;
    return false;
  }
  r.ws();
  if (r.pos != text.size()) {
    if (error) *error = "trailing characters at offset " + std::to_string(r.pos);
    return false;
  }
  *out = std::move(v);
  return true;
}

bool chat_context_from_json(std::string_view json, Value* out, std::string* error, bool parse_tool_arguments) {
  Value ctx;
  if (!parse_json(json, &ctx, error)) return false;
  if (!ctx.is_dict()) {
    if (error) *error = "the context must be a JSON object";
    return false;
  }
  if (!parse_tool_arguments) {
    *out = std::move(ctx);
    return true;
  }
  const Value* messages = ctx.find("messages");
  if (messages && messages->is_list()) {
    Value copy = *messages;  // shares the items; they are replaced one by one below
    Value::List rebuilt;
    for (size_t i = 0; i < copy.items().size(); ++i) {
      Value m = copy.items()[i];
      const Value* calls = m.is_dict() ? m.find("tool_calls") : nullptr;
      if (calls && calls->is_list()) {
        Value::List new_calls;
        for (const Value& tc : calls->items()) {
          const Value* fn = tc.is_dict() ? tc.find("function") : nullptr;
          const Value* args = fn && fn->is_dict() ? fn->find("arguments") : nullptr;
          if (!args || !args->is_string()) {
            new_calls.push_back(tc);
            continue;
          }
          Value parsed;
          std::string e;
          if (!parse_json(args->as_string(), &parsed, &e)) {
            if (error) *error = "messages[" + std::to_string(i) + "]: tool call arguments are not JSON: " + e;
            return false;
          }
          Value new_fn = Value::dict(fn->entries());
          new_fn.set("arguments", std::move(parsed));
          Value new_tc = Value::dict(tc.entries());
          new_tc.set("function", std::move(new_fn));
          new_calls.push_back(std::move(new_tc));
        }
        Value new_m = Value::dict(m.entries());
        new_m.set("tool_calls", Value::list(std::move(new_calls)));
        m = std::move(new_m);
      }
      rebuilt.push_back(std::move(m));
    }
    ctx.set("messages", Value::list(std::move(rebuilt)));
  }
  *out = std::move(ctx);
  return true;
}

}  // namespace picolm::jinja
