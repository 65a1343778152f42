#include "grammar/json_value.h"

#include <cmath>
#include <cstdlib>
#include <unordered_map>

namespace picolm::grammar::detail {

bool JValue::is_integer_valued() const {
  return kind == Kind::Number && std::isfinite(number) && std::floor(number) == number;
}

const JValue* JValue::get(std::string_view key) const {
  if (kind != Kind::Object) return nullptr;
  for (const auto& kv : obj)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

struct Parser {
  std::string_view s;
  size_t i = 0;
  std::string err;
  int depth = 0;
  bool repeated = false;    // some object repeats a key
  std::string repeated_key;  // the first one

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool fail(const char* m) {
    if (err.empty()) err = std::string(m) + " at offset " + std::to_string(i);
    return false;
  }
  static void put_utf8(std::string& o, uint32_t cp) {
    if (cp < 0x80) {
      o += char(cp);
    } else if (cp < 0x800) {
      o += char(0xC0 | (cp >> 6));
      o += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      o += char(0xE0 | (cp >> 12));
      o += char(0x80 | ((cp >> 6) & 0x3F));
      o += char(0x80 | (cp & 0x3F));
    } else {
      o += char(0xF0 | (cp >> 18));
      o += char(0x80 | ((cp >> 12) & 0x3F));
      o += char(0x80 | ((cp >> 6) & 0x3F));
      o += char(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(uint32_t& v) {
    if (i + 4 > s.size()) return fail("truncated \\u escape");
    v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else return fail("bad hex digit in \\u escape");
    }
    return true;
  }
  bool string(std::string& o) {
    ++i;  // opening quote
    while (true) {
      if (i >= s.size()) return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"') {
        ++i;
        return true;
      }
      if (c < 0x20) return fail("control character in string");
      if (c != '\\') {
        o += char(c);
        ++i;
        continue;
      }
      ++i;
      if (i >= s.size()) return fail("truncated escape");
      char e = s[i++];
      switch (e) {
        case '"': o += '"'; break;
        case '\\': o += '\\'; break;
        case '/': o += '/'; break;
        case 'b': o += '\b'; break;
        case 'f': o += '\f'; break;
        case 'n': o += '\n'; break;
        case 'r': o += '\r'; break;
        case 't': o += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            size_t save = i;
            i += 2;
            uint32_t lo = 0;
            if (!hex4(lo)) return false;
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else i = save;
          }
          put_utf8(o, cp);  // lone surrogates become WTF-8; only reachable from odd schemas
          break;
        }
        default: return fail("bad escape");
      }
    }
  }
  bool number(JValue& v) {
    size_t b = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size()) return fail("bad number");
    if (s[i] == '0') {
      ++i;
    } else if (s[i] >= '1' && s[i] <= '9') {
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    } else {
      return fail("bad number");
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (i >= s.size() || !(s[i] >= '0' && s[i] <= '9')) return fail("bad fraction");
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= s.size() || !(s[i] >= '0' && s[i] <= '9')) return fail("bad exponent");
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    }
    v.kind = JValue::Kind::Number;
    v.str.assign(s.substr(b, i - b));
    v.number = std::strtod(v.str.c_str(), nullptr);
    return true;
  }
  bool lit(std::string_view w) {
    if (s.substr(i, w.size()) != w) return fail("bad literal");
    i += w.size();
    return true;
  }
  bool value(JValue& v) {
    if (++depth > 512) return fail("nesting too deep");
    ws();
    if (i >= s.size()) return fail("unexpected end");
    bool ok = true;
    char c = s[i];
    if (c == '{') {
      v.kind = JValue::Kind::Object;
      constexpr size_t kIndexFrom = 16;
      std::unordered_map<std::string, size_t> index;  // key -> position in v.obj, once it has kIndexFrom
      ++i;
      ws();
      if (i < s.size() && s[i] == '}') {
        ++i;
      } else {
        while (true) {
          ws();
          if (i >= s.size() || s[i] != '"') { ok = fail("expected key"); break; }
          std::string k;
          if (!string(k)) { ok = false; break; }
          ws();
          if (i >= s.size() || s[i] != ':') { ok = fail("expected ':'"); break; }
          ++i;
          JValue child;
          if (!value(child)) { ok = false; break; }
          // Duplicate keys: the last one wins, as in most parsers. Large objects look keys up in
          // an index (a linear scan made a 150,000-property schema quadratic: 100 s to parse).
          bool replaced = false;
          if (v.obj.size() < kIndexFrom) {
            for (auto& kv : v.obj)
              if (kv.first == k) { kv.second = std::move(child); replaced = true; break; }
          } else {
            if (index.empty())
              for (size_t m = 0; m < v.obj.size(); ++m) index.emplace(v.obj[m].first, m);
            auto [it, fresh] = index.emplace(k, v.obj.size());
            if (!fresh) {
              v.obj[it->second].second = std::move(child);
              replaced = true;
            }
          }
          if (replaced && !repeated) {
            repeated = true;
            repeated_key = k;
          }
          if (!replaced) v.obj.emplace_back(std::move(k), std::move(child));
          ws();
          if (i < s.size() && s[i] == ',') { ++i; continue; }
          if (i < s.size() && s[i] == '}') { ++i; break; }
          ok = fail("expected ',' or '}'");
          break;
        }
      }
    } else if (c == '[') {
      v.kind = JValue::Kind::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == ']') {
        ++i;
      } else {
        while (true) {
          JValue child;
          if (!value(child)) { ok = false; break; }
          v.arr.push_back(std::move(child));
          ws();
          if (i < s.size() && s[i] == ',') { ++i; continue; }
          if (i < s.size() && s[i] == ']') { ++i; break; }
          ok = fail("expected ',' or ']'");
          break;
        }
      }
    } else if (c == '"') {
      v.kind = JValue::Kind::String;
      ok = string(v.str);
    } else if (c == 't') {
      v.kind = JValue::Kind::Bool;
      v.boolean = true;
      ok = lit("true");
    } else if (c == 'f') {
      v.kind = JValue::Kind::Bool;
      ok = lit("false");
    } else if (c == 'n') {
      v.kind = JValue::Kind::Null;
      ok = lit("null");
    } else {
      ok = number(v);
    }
    --depth;
    return ok;
  }
};

}  // namespace

size_t json_tree_bytes(std::string_view text) {
  // Every value but the first follows a ',' or a ':' or opens a container; each is at most one
  // object member (a key string and a JValue) with the vector's growth slack (x2).
  size_t values = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == ',' || c == ':' || c == '[' || c == '{') ++values;
  }
  return values * 2 * sizeof(std::pair<std::string, JValue>);
}

bool parse_json(std::string_view text, JValue& out, std::string& err, std::string* repeated_key) {
  Parser p;
  p.s = text;
  out = JValue{};
  if (!p.value(out)) {
    err = p.err;
    return false;
  }
  p.ws();
  if (p.i != text.size()) {
    err = "trailing characters at offset " + std::to_string(p.i);
    return false;
  }
  if (repeated_key && p.repeated) *repeated_key = p.repeated_key.empty() ? std::string("\"\"") : p.repeated_key;
  return true;
}

std::string json_quote(std::string_view u) {
  static const char* hex = "0123456789abcdef";
  std::string o = "\"";
  for (unsigned char c : u) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          o += "\\u00";
          o += hex[c >> 4];
          o += hex[c & 15];
        } else {
          o += char(c);
        }
    }
  }
  o += '"';
  return o;
}

std::string to_json(const JValue& v) {
  switch (v.kind) {
    case JValue::Kind::Null: return "null";
    case JValue::Kind::Bool: return v.boolean ? "true" : "false";
    case JValue::Kind::Number: return v.str;
    case JValue::Kind::String: return json_quote(v.str);
    case JValue::Kind::Array: {
      std::string o = "[";
      for (size_t k = 0; k < v.arr.size(); ++k) {
        if (k) o += ',';
        o += to_json(v.arr[k]);
      }
      return o + "]";
    }
    case JValue::Kind::Object: {
      std::string o = "{";
      for (size_t k = 0; k < v.obj.size(); ++k) {
        if (k) o += ',';
        o += json_quote(v.obj[k].first);
        o += ':';
        o += to_json(v.obj[k].second);
      }
      return o + "}";
    }
  }
  return "null";
}

bool json_equal(const JValue& a, const JValue& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case JValue::Kind::Null: return true;
    case JValue::Kind::Bool: return a.boolean == b.boolean;
    case JValue::Kind::Number: return a.number == b.number;
    case JValue::Kind::String: return a.str == b.str;
    case JValue::Kind::Array:
      if (a.arr.size() != b.arr.size()) return false;
      for (size_t k = 0; k < a.arr.size(); ++k)
        if (!json_equal(a.arr[k], b.arr[k])) return false;
      return true;
    case JValue::Kind::Object:
      if (a.obj.size() != b.obj.size()) return false;
      for (const auto& kv : a.obj) {
        const JValue* o = b.get(kv.first);
        if (!o || !json_equal(kv.second, *o)) return false;
      }
      return true;
  }
  return false;
}

}  // namespace picolm::grammar::detail
