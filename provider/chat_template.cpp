// Hand-written renderers for published chat templates; see chat_template.h for the contract and
// tests/render_jinja.py for the oracle. Each render_* function follows its template statement by
// statement, including the quirks (they are what the model saw in training), and the comments name
// the template construct a non-obvious line reproduces.
#include "chat_template.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

#include "utf8_out.h"

namespace picolm {
namespace {

// ---------------------------------------------------------------------------------------------
// Minimal JSON: an order-preserving tree (Python dicts keep insertion order, and tojson prints in
// that order) and a printer that matches Python's json.dumps(ensure_ascii=False).

struct Json {
  enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  bool is_integer = false;  // Number: no fraction or exponent in the source (a Python int)
  std::string text;         // String: decoded UTF-8; Number: source text
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* find(std::string_view key) const {
    if (kind != Kind::Object) return nullptr;
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
  bool is_string() const { return kind == Kind::String; }
  bool is_object() const { return kind == Kind::Object; }

  // Defaulted after the class: clang with libstdc++ 12 (the fuzz build) instantiates the copy of
  // vector<pair<string, Json>> at an implicit definition, where Json is still incomplete.
  Json();
  Json(const Json&);
  Json(Json&&) noexcept;
  Json& operator=(const Json&);
  Json& operator=(Json&&) noexcept;
  ~Json();
};
Json::Json() = default;
Json::Json(const Json&) = default;
Json::Json(Json&&) noexcept = default;
Json& Json::operator=(const Json&) = default;
Json& Json::operator=(Json&&) noexcept = default;
Json::~Json() = default;

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  bool parse(Json& out, std::string& error) {
    skip_ws();
    if (!value(out, 0)) {
      error = err_ + " at offset " + std::to_string(pos_);
      return false;
    }
    skip_ws();
    if (pos_ != s_.size()) {
      error = "unexpected text after the JSON value at offset " + std::to_string(pos_);
      return false;
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 512;

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool fail(const char* msg) {
    err_ = msg;
    return false;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth > kMaxDepth) return fail("JSON nested too deeply");
    if (pos_ >= s_.size()) return fail("unexpected end of JSON");
    char c = s_[pos_];
    switch (c) {
      case '{': return object(out, depth);
      case '[': return array(out, depth);
      case '"': out.kind = Json::Kind::String; return string(out.text);
      case 't': out.kind = Json::Kind::Bool; out.boolean = true; return literal("true");
      case 'f': out.kind = Json::Kind::Bool; out.boolean = false; return literal("false");
      case 'n': out.kind = Json::Kind::Null; return literal("null");
      default: return number(out);
    }
  }

  bool object(Json& out, int depth) {
    out.kind = Json::Kind::Object;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return true; }
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
      std::string key;
      if (!string(key)) return false;
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      skip_ws();
      Json v;
      if (!value(v, depth + 1)) return false;
      // Python's json.loads: a repeated key keeps its first position and takes the last value.
      bool replaced = false;
      for (auto& [k, old] : out.members) {
        if (k == key) { old = std::move(v); replaced = true; break; }
      }
      if (!replaced) out.members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (pos_ >= s_.size()) return fail("unexpected end of JSON in an object");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == '}') { ++pos_; return true; }
      return fail("expected ',' or '}'");
    }
  }

  bool array(Json& out, int depth) {
    out.kind = Json::Kind::Array;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return true; }
    for (;;) {
      skip_ws();
      Json v;
      if (!value(v, depth + 1)) return false;
      out.items.push_back(std::move(v));
      skip_ws();
      if (pos_ >= s_.size()) return fail("unexpected end of JSON in an array");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == ']') { ++pos_; return true; }
      return fail("expected ',' or ']'");
    }
  }

  bool hex4(uint32_t& v) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return fail("invalid \\u escape");
    }
    return true;
  }

  bool string(std::string& out) {
    ++pos_;  // opening quote
    for (;;) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') { ++pos_; return true; }
      if (c < 0x20) return fail("control character in a string");
      if (c != '\\') { out += static_cast<char>(c); ++pos_; continue; }
      ++pos_;
      if (pos_ >= s_.size()) return fail("unterminated escape");
      char e = s_[pos_++];
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
          if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 6 <= s_.size() && s_[pos_] == '\\' && s_[pos_ + 1] == 'u') {
            size_t save = pos_;
            pos_ += 2;
            uint32_t lo = 0;
            if (!hex4(lo)) return false;
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else pos_ = save;  // not a pair: the high surrogate stands alone
          }
          put_utf8(out, cp);
          break;
        }
        default: return fail("invalid escape");
      }
    }
  }

  bool number(Json& out) {
    size_t start = pos_;
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (!digit()) return fail("invalid value");
    if (s_[pos_] == '0') ++pos_;
    else while (digit()) ++pos_;
    bool integer = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integer = false;
      ++pos_;
      if (!digit()) return fail("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) return fail("invalid number");
      while (digit()) ++pos_;
    }
    out.kind = Json::Kind::Number;
    out.is_integer = integer;
    out.text = std::string(s_.substr(start, pos_ - start));
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string err_;
};

// Python's repr(float): the shortest round-trip digits, fixed notation when the decimal exponent
// is in [-4, 16), else d.ddde+XX with at least two exponent digits.
std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(static_cast<size_t>(decpt - nd), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out += digits.substr(1);
    }
    int e = decpt - 1;
    out += e < 0 ? "e-" : "e+";
    int ae = e < 0 ? -e : e;
    if (ae < 10) out += '0';
    out += std::to_string(ae);
  }
  return out;
}

void dump_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
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
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", c);
          out += esc;
        } else {
          out += ch;  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

void dump_number(const Json& v, std::string& out) {
  if (v.is_integer) {
    // Python int("-0") is 0; other integers print as written (no leading zeros in JSON).
    if (v.text == "-0") out += '0';
    else out += v.text;
    return;
  }
  out += python_float_repr(std::strtod(v.text.c_str(), nullptr));
}

// json.dumps(v, ensure_ascii=False, indent=indent): separators ", " and ": " without indent,
// "," + newline and ": " with it.
void dump(const Json& v, std::string& out, int indent = -1, int level = 0) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.kind) {
    case Json::Kind::Null: out += "null"; return;
    case Json::Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Json::Kind::Number: dump_number(v, out); return;
    case Json::Kind::String: dump_string(v.text, out); return;
    case Json::Kind::Array:
      if (v.items.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        if (indent >= 0) newline(level + 1);
        dump(v.items[i], out, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    case Json::Kind::Object:
      if (v.members.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        if (indent >= 0) newline(level + 1);
        dump_string(v.members[i].first, out);
        out += ": ";
        dump(v.members[i].second, out, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
  }
}

std::string to_json(const Json& v, int indent = -1) {
  std::string s;
  dump(v, s, indent);
  return s;
}

// Jinja's str() of a JSON value where a template concatenates one (Python str of the parsed value).
std::string python_str(const Json& v) {
  switch (v.kind) {
    case Json::Kind::String: return v.text;
    case Json::Kind::Null: return "None";
    case Json::Kind::Bool: return v.boolean ? "True" : "False";
    default: return to_json(v);  // numbers print alike; containers differ (quotes) but are not expected
  }
}

// ---------------------------------------------------------------------------------------------
// Text helpers that mirror Python string semantics.

// Decodes one UTF-8 code point at s[i]; returns its length (1 for invalid bytes).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + len > s.size()) len = 1;
  if (len == 1) {
    cp = c;
    return 1;
  }
  cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return len;
}

// Python's str.isspace() (what str.strip() without arguments removes, hence Jinja's |trim).
bool python_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    uint32_t cp = 0;
    size_t len = decode_utf8(s, b, cp);
    if (!python_isspace(cp)) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    uint32_t cp = 0;
    decode_utf8(s, start, cp);
    if (!python_isspace(cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Rendering context shared by the families.

// OpenAI clients send content: null next to tool_calls; the oracle does the same, so templates
// that test `content is none` or concatenate it see None.
bool content_is_null(const ChatMessage& m) {
  return m.role == "assistant" && !m.tool_calls.empty() && m.content.empty();
}

struct Ctx {
  std::span<const ChatMessage> msgs;
  const RenderOptions& opt;
  Json tools;  // always an Array (empty = no tools)
  std::string out;
  std::string error;

  bool has_tools() const { return !tools.items.empty(); }
  bool fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  // `'...' + message['content']`: Jinja refuses str + None.
  bool need_content(const ChatMessage& m) {
    if (content_is_null(m)) return fail("the template concatenates message content, which is null for an assistant message with only tool calls");
    return true;
  }
  // Parses a tool call's arguments (templates apply tojson to the parsed object).
  bool arguments(const ToolCall& tc, Json& out) {
    std::string err;
    JsonParser p(tc.arguments_json);
    if (!p.parse(out, err)) return fail("tool call '" + tc.name + "': arguments are not valid JSON: " + err);
    return true;
  }
};

// `{{ x }}` where x may be None prints "None" in Jinja.
std::string content_or_none(const ChatMessage& m) { return content_is_null(m) ? "None" : m.content; }

// ---------------------------------------------------------------------------------------------
// ChatML: {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}

bool render_chatml(Ctx& c) {
  for (const auto& m : c.msgs) {
    if (!c.need_content(m)) return false;
    c.out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (c.opt.add_generation_prompt) c.out += "<|im_start|>assistant\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Qwen2.5 instruct.

constexpr std::string_view kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool render_qwen25(Ctx& c) {
  const auto& msgs = c.msgs;
  if (msgs.empty()) return c.fail("messages is empty (the template reads messages[0])");
  const bool first_is_system = msgs[0].role == "system";
  if (c.has_tools()) {
    c.out += "<|im_start|>system\n";
    c.out += first_is_system ? content_or_none(msgs[0]) : std::string(kQwenDefaultSystem);
    c.out +=
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : c.tools.items) {
      c.out += '\n';
      dump(t, c.out);
    }
    c.out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (first_is_system) {
    if (!c.need_content(msgs[0])) return false;
    c.out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  } else {
    c.out += "<|im_start|>system\n";
    c.out += kQwenDefaultSystem;
    c.out += "<|im_end|>\n";
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    if (m.role == "user" || (m.role == "system" && i != 0) || (m.role == "assistant" && m.tool_calls.empty())) {
      c.out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      c.out += "<|im_start|>assistant";
      if (!m.content.empty()) c.out += "\n" + m.content;
      for (const auto& tc : m.tool_calls) {
        Json args;
        if (!c.arguments(tc, args)) return false;
        c.out += "\n<tool_call>\n{\"name\": \"" + tc.name + "\", \"arguments\": ";
        dump(args, c.out);
        c.out += "}\n</tool_call>";
      }
      c.out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") c.out += "<|im_start|>user";
      c.out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") c.out += "<|im_end|>\n";
    }
    // Any other role (or a leading system message) prints nothing.
  }
  if (c.opt.add_generation_prompt) c.out += "<|im_start|>assistant\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Hermes 2 Pro / Hermes 3 tool_use template.

// The template's json_to_python_type macro, including what Jinja makes of its odd cases:
// `json_spec|items` passes an iterator whose .type is undefined, and an undefined type is
// "iterable" (empty), so arrays come out as list[Union[]]; a type string outside the map is
// iterated character by character and recurses without end, which Jinja reports as an error.
bool hermes_python_type(Ctx& c, const Json* spec, std::string& out, int depth = 0) {
  if (depth > 64) return c.fail("tool schema nested too deeply");
  const Json* type = spec ? spec->find("type") : nullptr;
  if (type == nullptr) {
    out += "Union[]";
    return true;
  }
  if (type->is_string()) {
    const std::string& t = type->text;
    if (t == "string") out += "str";
    else if (t == "number") out += "float";
    else if (t == "integer") out += "int";
    else if (t == "boolean") out += "bool";
    else if (t == "array") out += "list[Union[]]";
    else if (t == "object") {
      if (const Json* ap = spec->find("additionalProperties")) {
        out += "dict[str, ";
        if (!hermes_python_type(c, ap, out, depth + 1)) return false;
        out += ']';
      } else {
        out += "dict";
      }
    } else {
      return c.fail("tool schema type \"" + t + "\" sends the Hermes template into endless recursion");
    }
    return true;
  }
  if (type->kind == Json::Kind::Array || type->kind == Json::Kind::Object) {
    // Iterating a list gives its elements; iterating a dict gives its keys.
    out += "Union[";
    size_t n = type->kind == Json::Kind::Array ? type->items.size() : type->members.size();
    for (size_t i = 0; i < n; ++i) {
      Json sub;
      sub.kind = Json::Kind::Object;
      Json key;
      if (type->kind == Json::Kind::Array) {
        key = type->items[i];
      } else {
        key.kind = Json::Kind::String;
        key.text = type->members[i].first;
      }
      sub.members.emplace_back("type", std::move(key));
      if (!hermes_python_type(c, &sub, out, depth + 1)) return false;
      if (i + 1 < n) out += ',';
    }
    out += ']';
    return true;
  }
  out += "Any";  // number, boolean, null: not iterable
  return true;
}

bool render_hermes(Ctx& c) {
  c.out += c.opt.bos_token;
  c.out +=
      "<|im_start|>system\nYou are a function calling AI model. You are provided with function "
      "signatures within <tools></tools> XML tags. You may call one or more functions to assist with "
      "the user query. Don't make assumptions about what values to plug into functions. Here are the "
      "available tools: <tools> ";
  const auto& tools = c.tools.items;
  for (size_t ti = 0; ti < tools.size(); ++ti) {
    const Json* tool = &tools[ti];
    if (const Json* f = tool->find("function")) tool = f;
    const Json* name = tool->find("name");
    const Json* desc = tool->find("description");
    if (!name || !name->is_string()) return c.fail("tool " + std::to_string(ti) + " has no string name");
    if (!desc || !desc->is_string()) return c.fail("tool '" + name->text + "' has no string description (the Hermes template requires one)");
    const Json* params = tool->find("parameters");
    const Json* props = params ? params->find("properties") : nullptr;
    const bool has_props = props && props->is_object() && !props->members.empty();

    c.out += "{\"type\": \"function\", \"function\": {\"name\": \"" + name->text + "\", \"description\": \"" + name->text + "(";
    if (has_props) {
      for (size_t i = 0; i < props->members.size(); ++i) {
        c.out += props->members[i].first + ": ";
        if (!hermes_python_type(c, &props->members[i].second, c.out)) return false;
        if (i + 1 < props->members.size()) c.out += ", ";
      }
    }
    c.out += ")";
    const Json* ret = tool->find("return");
    if (ret) {
      c.out += " -> ";
      if (!hermes_python_type(c, ret, c.out)) return false;
    }
    c.out += " - " + desc->text + "\n\n";
    if (has_props) {
      for (size_t i = 0; i < props->members.size(); ++i) {
        const auto& [pname, pfields] = props->members[i];
        if (i == 0) c.out += "    Args:\n";
        c.out += "        " + pname + "(";
        if (!hermes_python_type(c, &pfields, c.out)) return false;
        c.out += "): ";
        // param_fields.description|trim: an undefined description trims to "".
        if (const Json* pd = pfields.find("description")) c.out += py_strip(python_str(*pd));
      }
    }
    if (ret) {
      if (const Json* rd = ret->find("description")) {
        if (!rd->is_string()) return c.fail("tool '" + name->text + "': return.description is not a string");
        c.out += "\n    Returns:\n        " + rd->text;
      }
    }
    c.out += "\", \"parameters\": ";
    // `tool.parameters.properties | length == 0` (an undefined value has length 0).
    size_t props_length = 0;
    if (props) {
      if (props->kind == Json::Kind::Object) props_length = props->members.size();
      else if (props->kind == Json::Kind::Array) props_length = props->items.size();
      else if (props->is_string()) props_length = utf8_length(props->text);
      else props_length = 1;
    }
    if (props_length == 0) {
      c.out += "{}";
    } else {
      dump(*params, c.out);
    }
    c.out += "}";
    if (ti + 1 < tools.size()) c.out += "\n";
  }
  c.out +=
      " </tools>Use the following pydantic model json schema for each tool call you will make: "
      "{\"properties\": {\"name\": {\"title\": \"Name\", \"type\": \"string\"}, \"arguments\": {\"title\": "
      "\"Arguments\", \"type\": \"object\"}}, \"required\": [\"name\", \"arguments\"], \"title\": "
      "\"FunctionCall\", \"type\": \"object\"}}\nFor each function call return a json object with "
      "function name and arguments within <tool_call></tool_call> XML tags as follows:\n<tool_call>\n"
      "{\"name\": <function-name>, \"arguments\": <args-dict>}\n</tool_call><|im_end|>\n";

  const auto& msgs = c.msgs;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || m.role == "system" || (m.role == "assistant" && m.tool_calls.empty())) {
      c.out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      c.out += "<|im_start|>assistant";  // the content of a tool-call turn is not shown
      for (const auto& tc : m.tool_calls) {
        Json args;
        if (!c.arguments(tc, args)) return false;
        c.out += "\n<tool_call>\n{\"name\": \"" + tc.name + "\", \"arguments\": ";
        if (args.is_string()) c.out += args.text;  // `arguments is string`: printed as it is
        else dump(args, c.out);
        c.out += "}\n</tool_call>";
      }
      c.out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // loop.previtem is undefined for the first message, so a leading tool result gets no header.
      if (i > 0 && msgs[i - 1].role != "tool") c.out += "<|im_start|>tool\n";
      c.out += "<tool_response>\n" + m.content + (last ? "\n</tool_response>" : "\n</tool_response>\n");
      if (last || msgs[i + 1].role != "tool") c.out += "<|im_end|>";  // no newline: as published
    }
  }
  if (c.opt.add_generation_prompt) c.out += "<|im_start|>assistant\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Llama 3.1 / 3.2 / 3.3 instruct (custom tools in the first user message, the default).

std::string today_date_string() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return buf;
}

void llama_tool_list(Ctx& c) {
  c.out +=
      "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
      "its value}.Do not use variables.\n\n";
  for (const auto& t : c.tools.items) {
    dump(t, c.out, 4);
    c.out += "\n\n";
  }
}

bool render_llama3(Ctx& c, bool llama32) {
  const auto& all = c.msgs;
  c.out += c.opt.bos_token;
  if (all.empty()) return c.fail("messages is empty (the template reads messages[0])");
  size_t start = 0;
  std::string system_message;
  if (all[0].role == "system") {
    system_message = py_strip(content_or_none(all[0]));
    start = 1;
  }
  std::string date = c.opt.date_string;
  if (date.empty()) date = llama32 ? today_date_string() : "26 Jul 2024";

  c.out += "<|start_header_id|>system<|end_header_id|>\n\n";
  if (c.has_tools()) c.out += "Environment: ipython\n";
  c.out += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n";
  c.out += system_message + "<|eot_id|>";

  if (c.has_tools()) {
    if (start >= all.size()) return c.fail("Cannot put tools in the first user message when there's no first user message!");
    std::string first_user = py_strip(content_or_none(all[start]));
    ++start;
    c.out +=
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with "
        "a JSON for a function call with its proper arguments that best answers the given prompt.\n\n";
    llama_tool_list(c);
    c.out += first_user + "<|eot_id|>";
  }

  for (size_t i = start; i < all.size(); ++i) {
    const auto& m = all[i];
    const bool is_tool = m.role == "tool" || m.role == "ipython";
    if (!is_tool && m.tool_calls.empty()) {
      c.out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + py_strip(m.content) + "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) return c.fail("This model only supports single tool-calls at once!");
      const auto& tc = m.tool_calls[0];
      Json args;
      if (!c.arguments(tc, args)) return false;
      c.out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" + tc.name + "\", \"parameters\": ";
      dump(args, c.out);
      c.out += "}<|eot_id|>";
    } else {
      // `message.content is iterable` holds for strings, so the result goes through tojson and
      // reaches the model as a JSON string literal.
      c.out += "<|start_header_id|>ipython<|end_header_id|>\n\n";
      dump_string(m.content, c.out);
      c.out += "<|eot_id|>";
    }
  }
  if (c.opt.add_generation_prompt) c.out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Zephyr / TinyLlama chat. The newline after each `}}` survives trim_blocks, hence "\n".

bool render_zephyr(Ctx& c) {
  const auto& msgs = c.msgs;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const char* tag = m.role == "user" ? "<|user|>\n" : m.role == "system" ? "<|system|>\n" : m.role == "assistant" ? "<|assistant|>\n" : nullptr;
    if (tag) {
      if (!c.need_content(m)) return false;
      c.out += tag + m.content + c.opt.eos_token + "\n";
    }
    if (i + 1 == msgs.size() && c.opt.add_generation_prompt) c.out += "<|assistant|>\n";
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Mistral Nemo 2407.

// `message == user_messages[-1]` compares the message dicts, so an earlier user message equal to
// the last one also gets the tool list.
bool same_message(const ChatMessage& a, const ChatMessage& b) {
  if (a.role != b.role || a.content != b.content || a.name != b.name || a.tool_call_id != b.tool_call_id ||
      a.tool_calls.size() != b.tool_calls.size())
    return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const auto &x = a.tool_calls[i], &y = b.tool_calls[i];
    if (x.id != y.id || x.name != y.name || x.arguments_json != y.arguments_json) return false;
  }
  return true;
}

bool render_mistral_nemo(Ctx& c) {
  const auto& all = c.msgs;
  if (all.empty()) return c.fail("messages is empty (the template reads messages[0])");
  size_t start = 0;
  bool has_system = false;
  std::string system_message;
  if (all[0].role == "system") {
    has_system = true;
    system_message = all[0].content;
    start = 1;
  }
  const ChatMessage* last_user = nullptr;
  for (size_t i = start; i < all.size(); ++i)
    if (all[i].role == "user") last_user = &all[i];

  size_t index = 0;
  for (size_t i = start; i < all.size(); ++i) {
    const auto& m = all[i];
    if (m.role == "tool" || m.role == "tool_results" || !m.tool_calls.empty()) continue;
    if ((m.role == "user") != (index % 2 == 0))
      return c.fail("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
    ++index;
  }

  c.out += c.opt.bos_token;
  for (size_t i = start; i < all.size(); ++i) {
    const auto& m = all[i];
    const bool last = i + 1 == all.size();
    if (m.role == "user") {
      if (c.has_tools() && last_user && same_message(m, *last_user)) {
        c.out += "[AVAILABLE_TOOLS][";
        const auto& tools = c.tools.items;
        for (size_t ti = 0; ti < tools.size(); ++ti) {
          const Json* f = tools[ti].find("function");
          if (!f || !f->is_object()) return c.fail("tool " + std::to_string(ti) + " has no \"function\" object");
          c.out += "{\"type\": \"function\", \"function\": {";
          bool first = true;
          for (const auto& [key, val] : f->members) {
            if (key == "return") continue;
            if (!first) c.out += ", ";
            first = false;
            if (val.is_string()) {
              c.out += "\"" + key + "\": \"" + val.text + "\"";  // not escaped: as published
            } else {
              c.out += "\"" + key + "\": ";
              dump(val, c.out);
            }
          }
          c.out += "}}";
          c.out += ti + 1 < tools.size() ? ", " : "]";
        }
        c.out += "[/AVAILABLE_TOOLS]";
      }
      if (last && has_system) c.out += "[INST]" + system_message + "\n\n" + m.content + "[/INST]";
      else c.out += "[INST]" + m.content + "[/INST]";
    } else if (!m.tool_calls.empty()) {
      c.out += "[TOOL_CALLS][";
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const auto& tc = m.tool_calls[k];
        Json fn;
        fn.kind = Json::Kind::Object;
        Json name;
        name.kind = Json::Kind::String;
        name.text = tc.name;
        fn.members.emplace_back("name", std::move(name));
        Json args;
        if (!c.arguments(tc, args)) return false;
        fn.members.emplace_back("arguments", std::move(args));
        std::string js = to_json(fn);
        js.pop_back();  // out[:-1] drops the closing brace to append the id
        c.out += js;
        if (utf8_length(tc.id) != 9) return c.fail("Tool call IDs should be alphanumeric strings with length 9!");
        c.out += ", \"id\": \"" + tc.id + "\"}";
        c.out += k + 1 < m.tool_calls.size() ? std::string(", ") : "]" + c.opt.eos_token;
      }
    } else if (m.role == "assistant") {
      c.out += m.content + c.opt.eos_token;
    } else if (m.role == "tool" || m.role == "tool_results") {
      c.out += "[TOOL_RESULTS]{\"content\": " + m.content + ", ";  // content|string: raw text
      if (utf8_length(m.tool_call_id) != 9) return c.fail("Tool call IDs should be alphanumeric strings with length 9!");
      c.out += "\"call_id\": \"" + m.tool_call_id + "\"}[/TOOL_RESULTS]";
    } else {
      return c.fail("Only user and assistant roles are supported, with the exception of an initial optional system message!");
    }
  }
  return true;  // the template has no generation prompt
}

// ---------------------------------------------------------------------------------------------
// Gemma 2 instruct.

bool render_gemma2(Ctx& c) {
  const auto& msgs = c.msgs;
  c.out += c.opt.bos_token;
  if (msgs.empty()) return c.fail("messages is empty (the template reads messages[0])");
  if (msgs[0].role == "system") return c.fail("System role not supported");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    if ((m.role == "user") != (i % 2 == 0)) return c.fail("Conversation roles must alternate user/assistant/user/assistant/...");
    const std::string role = m.role == "assistant" ? "model" : m.role;
    c.out += "<start_of_turn>" + role + "\n" + py_strip(content_or_none(m)) + "<end_of_turn>\n";
  }
  if (c.opt.add_generation_prompt) c.out += "<start_of_turn>model\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Phi-3.5 mini instruct.

bool render_phi35(Ctx& c) {
  for (const auto& m : c.msgs) {
    if (m.role == "system" && !m.content.empty()) {
      c.out += "<|system|>\n" + m.content + "<|end|>\n";
    } else if (m.role == "user") {
      c.out += "<|user|>\n" + m.content + "<|end|>\n";
    } else if (m.role == "assistant") {
      if (!c.need_content(m)) return false;
      c.out += "<|assistant|>\n" + m.content + "<|end|>\n";
    }
  }
  c.out += c.opt.add_generation_prompt ? std::string("<|assistant|>\n") : c.opt.eos_token;
  return true;
}

// ---------------------------------------------------------------------------------------------
// DeepSeek-R1 distills (Llama-8B and Qwen-32B share the template). The namespace flags are never
// reset between turns, so only the first tool call of the whole conversation opens a call block
// and only later calls close one; reproduced as published.

bool render_deepseek_r1(Ctx& c) {
  bool is_first = false, is_tool = false, is_output_first = true;
  std::string system_prompt;
  for (const auto& m : c.msgs)
    if (m.role == "system") system_prompt = content_or_none(m);
  c.out += c.opt.bos_token + system_prompt;
  for (const auto& m : c.msgs) {
    if (m.role == "user") {
      is_tool = false;
      c.out += "<｜User｜>" + m.content;
    }
    if (m.role == "assistant" && content_is_null(m)) {
      is_tool = false;
      for (const auto& tc : m.tool_calls) {
        const std::string call = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + tc.name + "\n```json\n" + tc.arguments_json + "\n```<｜tool▁call▁end｜>";
        if (!is_first) {
          c.out += "<｜Assistant｜><｜tool▁calls▁begin｜>" + call;
          is_first = true;
        } else {
          c.out += "\n" + call + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>";
        }
      }
    }
    if (m.role == "assistant" && !content_is_null(m)) {
      if (is_tool) {
        c.out += "<｜tool▁outputs▁end｜>" + m.content + "<｜end▁of▁sentence｜>";
        is_tool = false;
      } else {
        std::string_view content = m.content;
        size_t think = content.rfind("</think>");
        if (think != std::string_view::npos) content.remove_prefix(think + 8);  // split('</think>')[-1]
        c.out += "<｜Assistant｜>";
        c.out += content;
        c.out += "<｜end▁of▁sentence｜>";
      }
    }
    if (m.role == "tool") {
      is_tool = true;
      if (is_output_first) {
        c.out += "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>";
        is_output_first = false;
      } else {
        c.out += "\n<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>";
      }
    }
  }
  if (is_tool) c.out += "<｜tool▁outputs▁end｜>";
  if (c.opt.add_generation_prompt && !is_tool) c.out += "<｜Assistant｜><think>\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Qwen3 (Qwen-Qwen3-0.6B.jinja; the whole dense Qwen3 line shares it).

// Python's str.strip(chars) / lstrip / rstrip for one ASCII character.
std::string_view strip_char(std::string_view s, char ch, bool left, bool right) {
  while (left && !s.empty() && s.front() == ch) s.remove_prefix(1);
  while (right && !s.empty() && s.back() == ch) s.remove_suffix(1);
  return s;
}

// str.split(sep)[0] and [-1].
std::string_view split_first(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}
std::string_view split_last(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

bool render_qwen3(Ctx& c) {
  const auto& msgs = c.msgs;
  // messages[0].role on an empty list is an error in Jinja (attribute of Undefined).
  if (msgs.empty()) return c.fail("messages is empty (the template reads messages[0])");
  const bool first_is_system = msgs[0].role == "system";
  if (c.has_tools()) {
    c.out += "<|im_start|>system\n";
    if (first_is_system) c.out += msgs[0].content + "\n\n";
    c.out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : c.tools.items) {
      c.out += '\n';
      dump(t, c.out);
    }
    c.out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (first_is_system) {
    c.out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  }
  // The last "real" user query: later assistant turns (the current multi-step tool loop) keep
  // their reasoning, earlier ones lose it.
  size_t last_query = msgs.size() - 1;
  for (size_t i = msgs.size(); i-- > 0;) {
    const auto& m = msgs[i];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      c.out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content;  // null content arrives as "" (see chat_template.h)
      std::string_view reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (content.find("</think>") != std::string_view::npos) {
        reasoning = strip_char(split_last(strip_char(split_first(m.content, "</think>"), '\n', false, true), "<think>"), '\n', true, false);
        content = strip_char(split_last(m.content, "</think>"), '\n', true, false);
      }
      if (i > last_query && (last || !reasoning.empty())) {
        c.out += "<|im_start|>assistant\n<think>\n";
        c.out += strip_char(reasoning, '\n', true, true);
        c.out += "\n</think>\n\n";
        c.out += strip_char(content, '\n', true, false);
      } else {
        c.out += "<|im_start|>assistant\n";
        c.out += content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const auto& tc = m.tool_calls[k];
        if ((k == 0 && !content.empty()) || k > 0) c.out += '\n';
        Json args;
        if (!c.arguments(tc, args)) return false;
        c.out += "<tool_call>\n{\"name\": \"" + tc.name + "\", \"arguments\": ";
        if (args.is_string()) c.out += args.text;  // `arguments is string`: printed as it is
        else dump(args, c.out);
        c.out += "}\n</tool_call>";
      }
      c.out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") c.out += "<|im_start|>user";
      c.out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (last || msgs[i + 1].role != "tool") c.out += "<|im_end|>\n";
    }
  }
  if (c.opt.add_generation_prompt) {
    c.out += "<|im_start|>assistant\n";
    if (c.opt.enable_thinking == false) c.out += "<think>\n\n</think>\n\n";
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// SmolLM3 (HuggingFaceTB-SmolLM3-3B.jinja, the Unsloth edit the GGUFs carry: no tool rendering).

constexpr std::string_view kSmolThinkSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "
    "reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please "
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "
    "Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. "
    "Each step should include detailed considerations such as analysing questions, summarizing relevant findings, "
    "brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting "
    "previous steps. In the Solution section, based on various attempts, explorations, and reflections from the "
    "Thought section, systematically present the final solution that you deem correct. The Solution section "
    "should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion.\n\n";

std::string replace_all(std::string s, std::string_view from) {
  size_t p = 0;
  while ((p = s.find(from, p)) != std::string::npos) s.erase(p, from.size());
  return s;
}

// Python's str.rstrip() without arguments.
std::string py_rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t start = e - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    uint32_t cp = 0;
    decode_utf8(s, start, cp);
    if (!python_isspace(cp)) break;
    e = start;
  }
  return std::string(s.substr(0, e));
}

// The template's reasoning mode: the system message's flags win over enable_thinking.
bool smollm3_thinks(std::span<const ChatMessage> msgs, std::optional<bool> enable_thinking) {
  bool think = enable_thinking.value_or(true);
  if (!msgs.empty() && msgs[0].role == "system") {
    const std::string& sys = msgs[0].content;
    if (sys.find("/no_think") != std::string::npos) think = false;
    else if (sys.find("/think") != std::string::npos) think = true;
  }
  return think;
}

bool render_smollm3(Ctx& c) {
  const auto& msgs = c.msgs;
  if (msgs.empty()) return c.fail("messages is empty (the template reads messages[0])");
  const bool think = smollm3_thinks(msgs, c.opt.enable_thinking);
  std::string custom;
  if (msgs[0].role == "system") custom = py_rstrip(replace_all(replace_all(msgs[0].content, "/no_think"), "/think"));
  c.out += "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: ";
  c.out += think ? "/think" : "/no_think";
  c.out += "\n\n## Custom Instructions\n\n";
  if (!custom.empty()) c.out += custom + "\n\n";
  else if (think) c.out += kSmolThinkSystem;
  else c.out += "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";
  c.out += "<|im_end|>\n";
  for (const auto& m : msgs) {
    const std::string& content = m.content;  // `content if content is string else ""`: null is ""
    if (m.role == "user" || m.role == "tool") {
      c.out += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      c.out += "<|im_start|>assistant\n";
      if (!think) c.out += "<think>\n\n</think>\n";
      c.out += strip_char(content, '\n', true, false);
      c.out += "<|im_end|>\n";
    }
  }
  if (c.opt.add_generation_prompt) {
    c.out += "<|im_start|>assistant\n";
    if (!think) c.out += "<think>\n\n</think>\n";
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Gemma 3 instruct (google/gemma-3-*-it tokenizer_config.json).

bool render_gemma3(Ctx& c) {
  const auto& msgs = c.msgs;
  c.out += c.opt.bos_token;
  if (msgs.empty()) return c.fail("messages is empty (the template reads messages[0])");
  std::string first_user_prefix;
  size_t start = 0;
  if (msgs[0].role == "system") {
    first_user_prefix = msgs[0].content + "\n\n";  // not trimmed: only the turn content is
    start = 1;
  }
  for (size_t i = start; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const size_t index = i - start;
    if ((m.role == "user") != (index % 2 == 0)) return c.fail("Conversation roles must alternate user/assistant/user/assistant/...");
    const std::string role = m.role == "assistant" ? "model" : m.role;
    c.out += "<start_of_turn>" + role + "\n" + (index == 0 ? first_user_prefix : std::string());
    if (content_is_null(m)) return c.fail("Invalid content type");  // None is neither a string nor iterable
    c.out += py_strip(m.content) + "<end_of_turn>\n";
  }
  if (c.opt.add_generation_prompt) c.out += "<start_of_turn>model\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Qwen3.5 (Qwen3.5-4B.jinja; the Qwen3.5 line shares it).

// `args_value | string`: Python's str() of a scalar (str(inf) is "inf", unlike json.dumps).
std::string qwen35_str(const Json& v) {
  if (v.kind == Json::Kind::Number && !v.is_integer) {
    const double d = std::strtod(v.text.c_str(), nullptr);
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  }
  return python_str(v);
}

bool render_qwen35(Ctx& c) {
  const auto& msgs = c.msgs;
  if (msgs.empty()) return c.fail("No messages provided.");
  // Every content goes through render_content(...)|trim; null content renders as "".
  auto content_of = [](const ChatMessage& m) { return py_strip(m.content); };
  if (c.has_tools()) {
    c.out += "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
    for (const auto& t : c.tools.items) {
      c.out += '\n';
      dump(t, c.out);
    }
    c.out +=
        "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
        "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
        "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
        "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
        "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
        "the question like normal with your current knowledge and do not tell the user about function calls\n"
        "</IMPORTANT>";
    if (msgs[0].role == "system") {
      const std::string sys = content_of(msgs[0]);
      if (!sys.empty()) c.out += "\n\n" + sys;
    }
    c.out += "<|im_end|>\n";
  } else if (msgs[0].role == "system") {
    c.out += "<|im_start|>system\n" + content_of(msgs[0]) + "<|im_end|>\n";
  }
  // The last user query that is not a tool result wrapped by the client.
  size_t last_query = msgs.size();
  for (size_t i = msgs.size(); i-- > 0;) {
    if (msgs[i].role != "user") continue;
    const std::string t = content_of(msgs[i]);
    if (!(starts_with(t, "<tool_response>") && ends_with(t, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  if (last_query == msgs.size()) return c.fail("No user query found in messages.");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    std::string content = content_of(m);
    if (m.role == "system") {
      if (i != 0) return c.fail("System message must be at the beginning.");
    } else if (m.role == "user") {
      c.out += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (content.find("</think>") != std::string::npos) {
        reasoning = std::string(strip_char(split_last(strip_char(split_first(content, "</think>"), '\n', false, true), "<think>"), '\n', true, false));
        content = std::string(strip_char(split_last(content, "</think>"), '\n', true, false));
      }
      reasoning = py_strip(reasoning);
      if (i > last_query) c.out += "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content;
      else c.out += "<|im_start|>assistant\n" + content;
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const auto& tc = m.tool_calls[k];
        if (k == 0) c.out += py_strip(content).empty() ? "<tool_call>\n<function=" : "\n\n<tool_call>\n<function=";
        else c.out += "\n<tool_call>\n<function=";
        c.out += tc.name + ">\n";
        Json args;
        if (!c.arguments(tc, args)) return false;
        // `arguments|items` needs a mapping.
        if (!args.is_object()) return c.fail("tool call '" + tc.name + "': Can only get item pairs from a mapping.");
        for (const auto& [key, value] : args.members) {
          c.out += "<parameter=" + key + ">\n";
          if (value.kind == Json::Kind::Object || value.kind == Json::Kind::Array) dump(value, c.out);
          else c.out += qwen35_str(value);
          c.out += "\n</parameter>\n";
        }
        c.out += "</function>\n</tool_call>";
      }
      c.out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // `loop.previtem` is undefined for the first message: a leading tool result opens no turn.
      if (i > 0 && msgs[i - 1].role != "tool") c.out += "<|im_start|>user";
      c.out += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") c.out += "<|im_end|>\n";
    } else {
      return c.fail("Unexpected message role.");
    }
  }
  if (c.opt.add_generation_prompt) {
    c.out += "<|im_start|>assistant\n";
    c.out += c.opt.enable_thinking == false ? "<think>\n\n</think>\n\n" : "<think>\n";
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// LFM2 (LFM2-8B-A1B.jinja) and LFM2.5 (LFM2.5-Instruct.jinja).

// A JSON value as a Python literal: None / True / False, the rest as json.dumps spells it.
void dump_python(const Json& v, std::string& out) {
  switch (v.kind) {
    case Json::Kind::Null: out += "None"; return;
    case Json::Kind::Bool: out += v.boolean ? "True" : "False"; return;
    case Json::Kind::Number: dump_number(v, out); return;
    case Json::Kind::String: dump_string(v.text, out); return;
    case Json::Kind::Array:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ", ";
        dump_python(v.items[i], out);
      }
      out += ']';
      return;
    case Json::Kind::Object:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ", ";
        dump_string(v.members[i].first, out);
        out += ": ";
        dump_python(v.members[i].second, out);
      }
      out += '}';
      return;
  }
}

// The content an LFM2 template sees for a message: the calls written into it (chat_template.h).
bool lfm2_content(Ctx& c, const ChatMessage& m, std::string& content) {
  content = m.content;
  if (m.tool_calls.empty()) return true;
  std::string calls, err;
  if (!format_python_tool_calls(m.tool_calls, calls, &err)) return c.fail(err);
  const size_t think = content.rfind("</think>");
  const size_t at = think == std::string::npos ? 0 : think + 8;
  content.insert(at, calls);
  return true;
}

bool render_lfm2(Ctx& c, bool lfm25) {
  const auto& all = c.msgs;
  // messages[0]["role"] of an empty list is an undefined attribute access: Jinja raises.
  if (all.empty()) return c.fail("'list object' has no attribute '0' (messages is empty)");
  c.out += c.opt.bos_token;
  std::string system;
  std::span<const ChatMessage> msgs = all;
  if (all[0].role == "system") {
    system = all[0].content;
    msgs = msgs.subspan(1);
  }
  if (c.has_tools()) {
    system += system.empty() ? "" : "\n";
    system += lfm25 ? "List of tools: [" : "List of tools: <|tool_list_start|>[";
    for (size_t i = 0; i < c.tools.items.size(); ++i) {
      const Json& t = c.tools.items[i];
      if (t.is_string()) system += t.text;  // `tool is not string`: strings go in as they are
      else dump(t, system);
      if (i + 1 < c.tools.items.size()) system += ", ";
    }
    system += lfm25 ? "]" : "]<|tool_list_end|>";
  }
  if (!system.empty()) c.out += "<|im_start|>system\n" + system + "<|im_end|>\n";
  size_t last_assistant = msgs.size();
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i].role == "assistant") last_assistant = i;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    c.out += "<|im_start|>" + m.role + "\n";
    std::string content;
    if (!lfm2_content(c, m, content)) return false;
    if (lfm25 && m.role == "assistant" && i != last_assistant && content.find("</think>") != std::string::npos)
      content = py_strip(split_last(content, "</think>"));
    if (!lfm25 && m.role == "tool") content = "<|tool_response_start|>" + content + "<|tool_response_end|>";
    c.out += content + "<|im_end|>\n";
  }
  if (c.opt.add_generation_prompt) c.out += "<|im_start|>assistant\n";
  return true;
}

// ---------------------------------------------------------------------------------------------
// Family table.

constexpr std::string_view kStopImEnd[] = {"<|im_end|>"};
constexpr std::string_view kStopLlama3[] = {"<|eot_id|>", "<|eom_id|>"};
constexpr std::string_view kStopEos[] = {"</s>"};
constexpr std::string_view kStopGemma[] = {"<end_of_turn>"};
constexpr std::string_view kStopPhi[] = {"<|end|>", "<|endoftext|>"};
constexpr std::string_view kStopDeepSeek[] = {"<｜end▁of▁sentence｜>"};

const FamilyTraits kTraits[] = {
    // name, renders_tool_list, style, start, end, arguments_key, parallel, stops
    {"unknown", false, ToolCallStyle::None, "", "", "", false, {}},
    {"chatml", false, ToolCallStyle::None, "", "", "", false, kStopImEnd},
    {"qwen2.5", true, ToolCallStyle::TaggedJson, "<tool_call>", "</tool_call>", "arguments", true, kStopImEnd},
    {"hermes", true, ToolCallStyle::TaggedJson, "<tool_call>", "</tool_call>", "arguments", true, kStopImEnd},
    {"llama3.1", true, ToolCallStyle::BareJson, "{\"name\"", "", "parameters", false, kStopLlama3},
    {"llama3.2", true, ToolCallStyle::BareJson, "{\"name\"", "", "parameters", false, kStopLlama3},
    {"zephyr", false, ToolCallStyle::None, "", "", "", false, kStopEos},
    {"mistral-nemo", true, ToolCallStyle::MistralArray, "[TOOL_CALLS]", "", "arguments", true, kStopEos},
    {"gemma2", false, ToolCallStyle::None, "", "", "", false, kStopGemma},
    {"phi3.5", false, ToolCallStyle::None, "", "", "", false, kStopPhi},
    {"deepseek-r1", false, ToolCallStyle::DeepSeekR1, "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>", "", true, kStopDeepSeek},
    {"qwen3", true, ToolCallStyle::TaggedJson, "<tool_call>", "</tool_call>", "arguments", true, kStopImEnd},
    // The template shows no tools (tool_format.* lowers them into the system prompt), but SmolLM3
    // was trained on Qwen/Hermes-style <tool_call> JSON, so the lowered prompt asks for that.
    {"smollm3", false, ToolCallStyle::TaggedJson, "<tool_call>", "</tool_call>", "arguments", true, kStopImEnd},
    // No tool syntax was trained; see tool_format.h for the form tools take.
    {"gemma3", false, ToolCallStyle::None, "", "", "", false, kStopGemma},
    {"qwen3.5", true, ToolCallStyle::QwenXml, "<tool_call>", "</tool_call>", "", true, kStopImEnd},
    {"lfm2", true, ToolCallStyle::PythonList, "<|tool_call_start|>", "<|tool_call_end|>", "", true, kStopImEnd},
    {"lfm2.5", true, ToolCallStyle::PythonList, "<|tool_call_start|>", "<|tool_call_end|>", "", true, kStopImEnd},
};
static_assert(std::size(kTraits) == static_cast<size_t>(kLastTemplateFamily) + 1);

const ReasoningTraits kNoReasoning{};
// The separators are what the templates render between </think> and a past answer.
const ReasoningTraits kQwen3Reasoning{true, "<think>", "</think>", "\n\n", false, true};
const ReasoningTraits kSmolReasoning{true, "<think>", "</think>", "\n", false, true};
const ReasoningTraits kR1Reasoning{true, "<think>", "</think>", "\n\n", true, false};
// Qwen3.5's generation prompt opens the block itself ("<think>\n"), or closes it at once when
// enable_thinking is false.
const ReasoningTraits kQwen35Reasoning{true, "<think>", "</think>", "\n\n", true, true};

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return r;
}

}  // namespace

const FamilyTraits& family_traits(TemplateFamily family) { return kTraits[static_cast<size_t>(family)]; }

std::string_view family_name(TemplateFamily family) { return family_traits(family).name; }

const ReasoningTraits& reasoning_traits(TemplateFamily family) {
  switch (family) {
    case TemplateFamily::Qwen3: return kQwen3Reasoning;
    case TemplateFamily::SmolLM3: return kSmolReasoning;
    case TemplateFamily::DeepSeekR1: return kR1Reasoning;
    case TemplateFamily::Qwen35: return kQwen35Reasoning;
    default: return kNoReasoning;
  }
}

bool template_thinks(TemplateFamily family, std::span<const ChatMessage> messages, std::optional<bool> enable_thinking) {
  switch (family) {
    case TemplateFamily::Qwen3:
    case TemplateFamily::Qwen35: return enable_thinking.value_or(true);  // only `is false` turns it off
    case TemplateFamily::SmolLM3: return smollm3_thinks(messages, enable_thinking);
    case TemplateFamily::DeepSeekR1: return true;
    default: return false;
  }
}

std::optional<TemplateFamily> family_from_name(std::string_view name) {
  static constexpr std::pair<std::string_view, TemplateFamily> kNames[] = {
      {"chatml", TemplateFamily::ChatML},
      {"qwen2.5", TemplateFamily::Qwen25},
      {"qwen25", TemplateFamily::Qwen25},
      {"qwen", TemplateFamily::Qwen25},
      {"hermes", TemplateFamily::Hermes},
      {"hermes2", TemplateFamily::Hermes},
      {"hermes3", TemplateFamily::Hermes},
      {"llama3", TemplateFamily::Llama31},
      {"llama3.1", TemplateFamily::Llama31},
      {"llama3.3", TemplateFamily::Llama31},
      {"llama3.2", TemplateFamily::Llama32},
      {"zephyr", TemplateFamily::Zephyr},
      {"tinyllama", TemplateFamily::Zephyr},
      {"mistral", TemplateFamily::MistralNemo},
      {"mistral-nemo", TemplateFamily::MistralNemo},
      {"gemma", TemplateFamily::Gemma2},
      {"gemma2", TemplateFamily::Gemma2},
      {"phi3", TemplateFamily::Phi35},
      {"phi3.5", TemplateFamily::Phi35},
      {"deepseek-r1", TemplateFamily::DeepSeekR1},
      {"deepseek", TemplateFamily::DeepSeekR1},
      {"qwen3", TemplateFamily::Qwen3},
      {"smollm3", TemplateFamily::SmolLM3},
      {"smollm", TemplateFamily::SmolLM3},
      {"gemma3", TemplateFamily::Gemma3},
      {"qwen3.5", TemplateFamily::Qwen35},
      {"qwen35", TemplateFamily::Qwen35},
      {"lfm2", TemplateFamily::Lfm2},
      {"lfm2.5", TemplateFamily::Lfm25},
      {"lfm25", TemplateFamily::Lfm25},
  };
  const std::string key = lower(name);
  for (const auto& [n, f] : kNames)
    if (n == key) return f;
  return std::nullopt;
}

TemplateFamily detect_template_family(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<｜User｜>") && has("<｜Assistant｜>")) {
    // llama.cpp's own R1 template (tools listed, flushed outputs) renders differently.
    if (has("flush_tool_outputs") || has("You can call any of the following function tools")) return TemplateFamily::Unknown;
    return TemplateFamily::DeepSeekR1;
  }
  if (has("<start_of_turn>")) {
    // Gemma 3 folds the system message into the first user turn instead of refusing it.
    if (has("System role not supported") && !has("first_user_prefix")) return TemplateFamily::Gemma2;
    // FunctionGemma and other derivatives that render tools differ.
    if (has("first_user_prefix") && has("<start_of_image>") && !has("tool")) return TemplateFamily::Gemma3;
    return TemplateFamily::Unknown;
  }
  if (has("[INST]")) {
    if (has("[AVAILABLE_TOOLS]") && has("\"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"]")) return TemplateFamily::MistralNemo;
    return TemplateFamily::Unknown;
  }
  if (has("<|start_header_id|>")) {
    if (has("Cutting Knowledge Date: December 2023") && has("Environment: ipython") &&
        has("Given the following functions, please respond with a JSON for a function call")) {
      return has("strftime_now") ? TemplateFamily::Llama32 : TemplateFamily::Llama31;
    }
    return TemplateFamily::Unknown;  // Llama 3.0, Functionary, Firefunction, ...
  }
  if (has("<|im_start|>")) {
    // SmolLM3 as its GGUFs ship it (Unsloth's edit); the original renders tools (xml_tools).
    if (has("Reasoning Mode: ") && has("/no_think") && has("SmolLM") && !has("xml_tools") && !has("python_tools"))
      return TemplateFamily::SmolLM3;
    // LFM2 / LFM2.5: their tool list and Python-style calls (tool-call turns carry the calls in content).
    if (has("List of tools: <|tool_list_start|>[") && has("<|tool_response_start|>") && has("<|tool_list_end|>"))
      return TemplateFamily::Lfm2;
    if (has("\"List of tools: [\"") && has("keep_past_thinking") && has("last_assistant_index")) return TemplateFamily::Lfm25;
    if (has("<tool_call>") && has("<function=") && has("<parameter=")) {
      // Qwen3.5: XML-parameter calls, reasoning after the last query, <think> opened by the prompt.
      if (has("enable_thinking") && has("reasoning_content") && has("last_query_index") && has("<tool_response>") &&
          has("args_value | tojson"))
        return TemplateFamily::Qwen35;
      return TemplateFamily::Unknown;
    }
    if (has("<tool_call>")) {
      // Qwen3: <think> with enable_thinking and the multi-step reasoning rule; Qwen3.5 writes
      // XML-style <function=...> calls instead of JSON.
      if (has("enable_thinking") && has("reasoning_content") && has("last_query_index") && has("<tool_response>") &&
          !has("<function="))
        return TemplateFamily::Qwen3;
      if (has("You are Qwen, created by Alibaba Cloud") && has("<tool_response>") && !has("reasoning_content") && !has("<think>"))
        return TemplateFamily::Qwen25;
      if (has("json_to_python_type") && has("Here are the available tools: <tools>")) return TemplateFamily::Hermes;
      return TemplateFamily::Unknown;
    }
    // Plain ChatML only: templates with tools or a built-in default system prompt differ.
    if (!has("tool") && !has("You are")) return TemplateFamily::ChatML;
    return TemplateFamily::Unknown;
  }
  if (has("<|user|>") && has("<|assistant|>")) {
    if (has("<|end|>") && has("message['role'] == 'system' and message['content']")) return TemplateFamily::Phi35;
    if (has("eos_token") && !has("<|end|>")) return TemplateFamily::Zephyr;
  }
  return TemplateFamily::Unknown;
}

std::string python_json_quote(std::string_view s) {
  std::string out;
  dump_string(s, out);
  return out;
}

bool format_python_tool_calls(std::span<const ToolCall> calls, std::string& out, std::string* error) {
  std::string text = "<|tool_call_start|>[";
  for (size_t i = 0; i < calls.size(); ++i) {
    Json args;
    std::string err;
    JsonParser p(calls[i].arguments_json);
    if (!p.parse(args, err)) {
      if (error) *error = "tool call '" + calls[i].name + "': arguments are not valid JSON: " + err;
      return false;
    }
    if (!args.is_object()) {
      if (error) *error = "tool call '" + calls[i].name + "': arguments are not a JSON object (keyword arguments need one)";
      return false;
    }
    if (i) text += ", ";
    text += calls[i].name + "(";
    for (size_t k = 0; k < args.members.size(); ++k) {
      if (k) text += ", ";
      text += args.members[k].first + "=";
      dump_python(args.members[k].second, text);
    }
    text += ")";
  }
  out += text + "]<|tool_call_end|>";
  return true;
}

bool python_tojson(std::string_view json_text, std::string& out, int indent, std::string* error) {
  Json v;
  std::string err;
  JsonParser p(json_text);
  if (!p.parse(v, err)) {
    if (error) *error = std::move(err);
    return false;
  }
  dump(v, out, indent);
  return true;
}

ChatRenderResult render_chat(TemplateFamily family, std::span<const ChatMessage> messages, const RenderOptions& options) {
  ChatRenderResult result;
  Ctx c{messages, options, Json{}, {}, {}};
  c.tools.kind = Json::Kind::Array;
  std::string_view tools_text = options.tools_json;
  while (!tools_text.empty() && (tools_text.front() == ' ' || tools_text.front() == '\n' || tools_text.front() == '\t' || tools_text.front() == '\r'))
    tools_text.remove_prefix(1);
  if (!tools_text.empty()) {
    std::string err;
    JsonParser p(tools_text);
    if (!p.parse(c.tools, err)) {
      result.error = "tools is not valid JSON: " + err;
      return result;
    }
    if (c.tools.kind == Json::Kind::Null) c.tools.kind = Json::Kind::Array;
    if (c.tools.kind != Json::Kind::Array) {
      result.error = "tools must be a JSON array";
      return result;
    }
  }
  bool ok = false;
  switch (family) {
    case TemplateFamily::Unknown: c.fail("unknown chat template family"); break;
    case TemplateFamily::ChatML: ok = render_chatml(c); break;
    case TemplateFamily::Qwen25: ok = render_qwen25(c); break;
    case TemplateFamily::Hermes: ok = render_hermes(c); break;
    case TemplateFamily::Llama31: ok = render_llama3(c, false); break;
    case TemplateFamily::Llama32: ok = render_llama3(c, true); break;
    case TemplateFamily::Zephyr: ok = render_zephyr(c); break;
    case TemplateFamily::MistralNemo: ok = render_mistral_nemo(c); break;
    case TemplateFamily::Gemma2: ok = render_gemma2(c); break;
    case TemplateFamily::Phi35: ok = render_phi35(c); break;
    case TemplateFamily::DeepSeekR1: ok = render_deepseek_r1(c); break;
    case TemplateFamily::Qwen3: ok = render_qwen3(c); break;
    case TemplateFamily::SmolLM3: ok = render_smollm3(c); break;
    case TemplateFamily::Gemma3: ok = render_gemma3(c); break;
    case TemplateFamily::Qwen35: ok = render_qwen35(c); break;
    case TemplateFamily::Lfm2: ok = render_lfm2(c, false); break;
    case TemplateFamily::Lfm25: ok = render_lfm2(c, true); break;
  }
  result.ok = ok;
  if (ok) result.text = std::move(c.out);
  else result.error = std::move(c.error);
  return result;
}

}  // namespace picolm
