// Conversation lowering for templates without tool syntax; see tool_format.h.
#include "tool_format.h"

#include "gemma4_calls.h"

#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <utility>

#include "utf8_out.h"

namespace picolm {
namespace {

// Splits the top level of a JSON array (already validated) into its element texts.
std::vector<std::string_view> split_array(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (depth == 1 && start == std::string_view::npos && !space && c != ',' && c != ']') start = i;
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (depth == 1 && start != std::string_view::npos) {  // closing the outer array
        out.push_back(text.substr(start, i - start));
        start = std::string_view::npos;
      }
      --depth;
    } else if (c == ',' && depth == 1 && start != std::string_view::npos) {
      out.push_back(text.substr(start, i - start));
      start = std::string_view::npos;
    }
  }
  for (auto& e : out)
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t' || e.back() == '\n' || e.back() == '\r')) e.remove_suffix(1);
  return out;
}

std::string json_quote(std::string_view s) { return python_json_quote(s); }

bool is_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  return true;
}

// One tool per line, as Qwen2.5 and Hermes list them.
bool tool_lines(std::string_view tools_json, std::string& out, std::string& error) {
  std::string normalized;
  if (!python_tojson(tools_json, normalized, -1, &error)) {
    error = "tools is not valid JSON: " + error;
    return false;
  }
  if (normalized.empty() || normalized.front() != '[') {
    error = "tools must be a JSON array";
    return false;
  }
  for (std::string_view tool : split_array(normalized)) {
    out += '\n';
    out += tool;
  }
  return true;
}

std::string instructions(bool deepseek_native, const std::string& lines, LoweredToolSyntax syntax) {
  if (deepseek_native) {
    // The wording of llama.cpp's DeepSeek R1 template, in the model's native call syntax.
    return "You can call any of the following function tools to satisfy the user's requests:" + lines +
           "\n\nExample function tool call syntax:\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
           "example_function_name\n```json\n{\n  \"arg1\": \"some_value\"\n  ...\n}\n```\n<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  }
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" +
      lines + "\n</tools>\n\n";
  if (syntax != LoweredToolSyntax::Envelope) {
    s += "For each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call>";
  } else {
    s += "Reply with one JSON object and nothing else: {\"tool_calls\": [{\"name\": <function-name>, "
         "\"arguments\": <args-json-object>}]} to call functions, or {\"content\": <your reply as a JSON "
         "string>} to answer directly.";
  }
  return s;
}

void append_turn(std::vector<ChatMessage>& out, ChatMessage m) {
  // Merge consecutive user turns (tool results followed by a question) into one.
  if (m.role == "user" && !out.empty() && out.back().role == "user" && out.back().tool_calls.empty()) {
    out.back().content += "\n\n" + m.content;
    return;
  }
  out.push_back(std::move(m));
}

}  // namespace

bool family_needs_tool_lowering(TemplateFamily family) { return !family_traits(family).renders_tool_list; }

std::string format_lowered_tool_calls(std::span<const ToolCall> calls, LoweredToolSyntax syntax, std::string* error) {
  std::string out;
  if (syntax == LoweredToolSyntax::Envelope) out += "{\"tool_calls\": [";
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string args;
    std::string err;
    if (!python_tojson(calls[i].arguments_json, args, -1, &err)) {
      if (error) *error = "tool call '" + calls[i].name + "': arguments are not valid JSON: " + err;
      return {};
    }
    const std::string name = json_quote(calls[i].name);
    const std::string call = "{\"name\": " + name + ", \"arguments\": " + args + "}";
    if (syntax != LoweredToolSyntax::Envelope) {
      if (i) out += '\n';
      out += "<tool_call>\n" + call + "\n</tool_call>";
    } else {
      if (i) out += ", ";
      out += call;
    }
  }
  if (syntax == LoweredToolSyntax::Envelope) out += "]}";
  return out;
}

LoweredConversation lower_tool_conversation(TemplateFamily family, std::span<const ChatMessage> messages,
                                            std::string_view tools_json, LoweredToolSyntax syntax) {
  LoweredConversation r;
  if (!family_needs_tool_lowering(family)) {
    r.ok = true;
    r.messages.assign(messages.begin(), messages.end());
    return r;
  }
  std::string lines;
  const bool has_tools = !is_blank(tools_json);
  if (has_tools && !tool_lines(tools_json, lines, r.error)) return r;
  const bool any_tools = has_tools && !lines.empty();
  const bool deepseek_native = family == TemplateFamily::DeepSeekR1 && syntax == LoweredToolSyntax::Native;
  const std::string preamble = any_tools ? instructions(deepseek_native, lines, syntax) : std::string();

  std::vector<ChatMessage> out;
  size_t first = 0;
  std::string system_text;
  bool had_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system_text = messages[0].content;
    had_system = true;
    first = 1;
  }
  if (!preamble.empty()) system_text = had_system ? system_text + "\n\n" + preamble : preamble;

  // Gemma 2 refuses a system role: its system text opens the first user turn instead.
  const bool system_in_user = family == TemplateFamily::Gemma2;
  if (!system_text.empty() || had_system) {
    if (!system_in_user) {
      ChatMessage sys;
      sys.role = "system";
      sys.content = system_text;
      out.push_back(std::move(sys));
    }
  }
  std::string pending_user_prefix = system_in_user ? system_text : std::string();

  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (deepseek_native) {  // native call and result rendering
      out.push_back(m);
      // The R1 template shows either the content or the calls of a turn (calls only when content
      // is null); keep the calls.
      if (!m.tool_calls.empty()) out.back().content.clear();
      continue;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::string err;
      std::string calls = format_lowered_tool_calls(m.tool_calls, syntax, &err);
      if (!err.empty()) {
        r.error = std::move(err);
        return r;
      }
      ChatMessage a;
      a.role = "assistant";
      a.content = m.content.empty() ? calls : m.content + "\n" + calls;
      out.push_back(std::move(a));
    } else if (m.role == "assistant" && any_tools && syntax == LoweredToolSyntax::Envelope) {
      // Past replies in the shape the model is told to answer in (and was made to, by the grammar).
      ChatMessage a = m;
      std::string_view text = m.content;
      // R1's template keeps only what follows the last </think>; do so before wrapping, or the
      // split would cut the JSON.
      const size_t think = text.rfind("</think>");
      if (family == TemplateFamily::DeepSeekR1 && think != std::string_view::npos) text.remove_prefix(think + 8);
      a.content = "{\"content\": " + json_quote(text) + "}";
      out.push_back(std::move(a));
    } else if (m.role == "tool") {
      ChatMessage u;
      u.role = "user";
      u.content = "<tool_response>\n" + m.content + "\n</tool_response>";
      // Results of one round of calls form one user turn, joined like Qwen2.5 joins them.
      if (i > first && messages[i - 1].role == "tool" && !out.empty() && out.back().role == "user") {
        out.back().content += "\n" + u.content;
      } else {
        append_turn(out, std::move(u));
      }
    } else if (m.role == "user") {
      append_turn(out, m);
    } else {
      out.push_back(m);
    }
  }
  if (!pending_user_prefix.empty()) {
    for (auto& m : out) {
      if (m.role == "user") {
        m.content = pending_user_prefix + "\n\n" + m.content;
        pending_user_prefix.clear();
        break;
      }
    }
    if (!pending_user_prefix.empty()) {  // no user turn at all
      ChatMessage u;
      u.role = "user";
      u.content = pending_user_prefix;
      out.insert(out.begin(), std::move(u));
    }
  }
  r.ok = true;
  r.messages = std::move(out);
  return r;
}

}  // namespace picolm

// ---------------------------------------------------------------------------------------------
// Native call syntaxes read back (parse_native_tool_calls).

namespace picolm {
namespace {

// A literal value: JSON, or Python's literal syntax (True/False/None, either quote, tuples).
struct Lit {
  enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // String: decoded UTF-8; Number: JSON spelling
  std::vector<Lit> items;
  std::vector<std::pair<std::string, Lit>> members;
  const Lit* get(std::string_view key) const {
    if (kind != Kind::Object) return nullptr;
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }

  // Defaulted after the class: clang with libstdc++ 12 (the fuzz build) instantiates the copy of
  // vector<pair<string, Lit>> at an implicit definition, where Lit is still incomplete.
  Lit();
  Lit(const Lit&);
  Lit(Lit&&) noexcept;
  Lit& operator=(const Lit&);
  Lit& operator=(Lit&&) noexcept;
  ~Lit();
};
Lit::Lit() = default;
Lit::Lit(const Lit&) = default;
Lit::Lit(Lit&&) noexcept = default;
Lit& Lit::operator=(const Lit&) = default;
Lit& Lit::operator=(Lit&&) noexcept = default;
Lit::~Lit() = default;

class LitParser {
 public:
  explicit LitParser(std::string_view s, size_t pos = 0) : s_(s), i_(pos) {}
  size_t pos() const { return i_; }
  bool at_end() {
    ws();
    return i_ >= s_.size();
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  char peek() {
    ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }

  bool value(Lit& v, int depth = 0) {
    if (depth > 64) return false;
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"' || c == '\'') {
      v.kind = Lit::Kind::String;
      return string(v.text);
    }
    if (c == '[' || c == '(') {
      const char close = c == '[' ? ']' : ')';
      ++i_;
      v.kind = Lit::Kind::Array;
      if (eat(close)) return true;
      for (;;) {
        Lit item;
        if (!value(item, depth + 1)) return false;
        v.items.push_back(std::move(item));
        if (eat(close)) return true;
        if (!eat(',')) return false;
        if (eat(close)) return true;  // Python allows a trailing comma
      }
    }
    if (c == '{') {
      ++i_;
      v.kind = Lit::Kind::Object;
      if (eat('}')) return true;
      for (;;) {
        ws();
        Lit key;
        if (!value(key, depth + 1) || key.kind != Lit::Kind::String) return false;
        if (!eat(':')) return false;
        Lit item;
        if (!value(item, depth + 1)) return false;
        v.members.emplace_back(std::move(key.text), std::move(item));
        if (eat('}')) return true;
        if (!eat(',')) return false;
        if (eat('}')) return true;
      }
    }
    for (const auto& [word, kind, b] : {std::tuple{"True", Lit::Kind::Bool, true}, std::tuple{"true", Lit::Kind::Bool, true},
                                        std::tuple{"False", Lit::Kind::Bool, false}, std::tuple{"false", Lit::Kind::Bool, false},
                                        std::tuple{"None", Lit::Kind::Null, false}, std::tuple{"null", Lit::Kind::Null, false}}) {
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

  // A Python identifier-like name up to `stop` (a keyword argument or a function name).
  bool name(std::string& out, char stop) {
    ws();
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != stop && s_[i_] != ',' && s_[i_] != ')' && s_[i_] != '(' && s_[i_] != '[' &&
           s_[i_] != ']' && s_[i_] != ' ' && s_[i_] != '\n')
      ++i_;
    out = std::string(s_.substr(start, i_ - start));
    return !out.empty();
  }

 private:
  bool ident_char(size_t k) const {
    if (k >= s_.size()) return false;
    const char c = s_[k];
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

  bool number(Lit& v) {
    // JSON spelling out: a sign, digits, an optional fraction and exponent (Python's "1." and
    // ".5" completed with a zero).
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
    v.kind = Lit::Kind::Number;
    v.text = std::move(out);
    return true;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex(size_t n, uint32_t& cp) {
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
  bool string(std::string& out) {
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

  std::string_view s_;
  size_t i_;
};

void write_json(const Lit& v, std::string& out) {
  switch (v.kind) {
    case Lit::Kind::Null: out += "null"; return;
    case Lit::Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Lit::Kind::Number: out += v.text; return;
    case Lit::Kind::String: {
      // Compact JSON string: only what JSON requires is escaped.
      std::string q = python_json_quote(v.text);
      out += q;
      return;
    }
    case Lit::Kind::Array:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        write_json(v.items[i], out);
      }
      out += ']';
      return;
    case Lit::Kind::Object:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ',';
        out += python_json_quote(v.members[i].first);
        out += ':';
        write_json(v.members[i].second, out);
      }
      out += '}';
      return;
  }
}

// ---- schema types of a parameter (QwenXml) ----
enum : uint8_t { kTNull = 1, kTBool = 2, kTNum = 4, kTStr = 8, kTArr = 16, kTObj = 32, kTAll = 63 };

uint8_t type_bit(std::string_view t) {
  if (t == "null") return kTNull;
  if (t == "boolean") return kTBool;
  if (t == "number" || t == "integer") return kTNum;
  if (t == "string") return kTStr;
  if (t == "array") return kTArr;
  if (t == "object") return kTObj;
  return 0;
}

uint8_t value_bit(const Lit& v) {
  switch (v.kind) {
    case Lit::Kind::Null: return kTNull;
    case Lit::Kind::Bool: return kTBool;
    case Lit::Kind::Number: return kTNum;
    case Lit::Kind::String: return kTStr;
    case Lit::Kind::Array: return kTArr;
    case Lit::Kind::Object: return kTObj;
  }
  return 0;
}

const Lit* resolve_ref(const Lit& root, std::string_view ref) {
  if (ref.substr(0, 1) != "#") return nullptr;
  ref.remove_prefix(1);
  const Lit* cur = &root;
  while (!ref.empty() && cur) {
    if (ref[0] != '/') return nullptr;
    ref.remove_prefix(1);
    const size_t slash = ref.find('/');
    std::string token(ref.substr(0, slash));
    ref = slash == std::string_view::npos ? std::string_view() : ref.substr(slash);
    std::string key;  // JSON pointer escapes
    for (size_t k = 0; k < token.size(); ++k) {
      if (token[k] == '~' && k + 1 < token.size()) key += token[++k] == '1' ? '/' : '~';
      else key += token[k];
    }
    if (cur->kind == Lit::Kind::Array) {
      char* end = nullptr;
      const unsigned long idx = std::strtoul(key.c_str(), &end, 10);
      cur = (end && *end == '\0' && idx < cur->items.size()) ? &cur->items[idx] : nullptr;
    } else {
      cur = cur->get(key);
    }
  }
  return cur;
}

// The JSON types a schema allows (a superset is fine: it only decides how text is read).
uint8_t schema_types(const Lit* s, const Lit& root, int depth = 0) {
  if (!s || depth > 16) return kTAll;
  if (s->kind == Lit::Kind::Bool) return s->boolean ? kTAll : 0;
  if (s->kind != Lit::Kind::Object) return kTAll;
  uint8_t t = kTAll;
  if (const Lit* ty = s->get("type")) {
    uint8_t bits = 0;
    if (ty->kind == Lit::Kind::String) bits = type_bit(ty->text);
    for (const auto& x : ty->items)
      if (x.kind == Lit::Kind::String) bits |= type_bit(x.text);
    t &= bits;
  }
  for (const char* kw : {"enum", "const"}) {
    const Lit* e = s->get(kw);
    if (!e) continue;
    uint8_t bits = 0;
    if (std::string_view(kw) == "const") bits = value_bit(*e);
    else
      for (const auto& x : e->items) bits |= value_bit(x);
    t &= bits;
  }
  for (const char* kw : {"anyOf", "oneOf"}) {
    const Lit* a = s->get(kw);
    if (!a || a->kind != Lit::Kind::Array) continue;
    uint8_t bits = 0;
    for (const auto& x : a->items) bits |= schema_types(&x, root, depth + 1);
    t &= bits;
  }
  if (const Lit* a = s->get("allOf"); a && a->kind == Lit::Kind::Array)
    for (const auto& x : a->items) t &= schema_types(&x, root, depth + 1);
  if (const Lit* r = s->get("$ref"); r && r->kind == Lit::Kind::String) t &= schema_types(resolve_ref(root, r->text), root, depth + 1);
  return t;
}

// The types parameter `param` of tool `name` may take.
uint8_t parameter_types(const Lit& tools, std::string_view name, std::string_view param) {
  for (const auto& t : tools.items) {
    const Lit* fn = t.get("function");
    if (!fn) fn = &t;
    const Lit* n = fn->get("name");
    if (!n || n->kind != Lit::Kind::String || n->text != name) continue;
    const Lit* params = fn->get("parameters");
    if (!params) return kTAll;
    const Lit* props = params->get("properties");
    const Lit* p = props ? props->get(param) : nullptr;
    if (!p) p = params->get("additionalProperties");
    return schema_types(p, *params);
  }
  return kTAll;
}

Lit xml_value(std::string_view raw, uint8_t types) {
  Lit v;
  v.kind = Lit::Kind::String;
  v.text = std::string(raw);
  if ((types & ~kTStr) == 0) return v;
  Lit parsed;
  LitParser p(raw);
  // A quoted string is still text: the raw text is the string.
  if (p.value(parsed) && p.at_end() && parsed.kind != Lit::Kind::String && (value_bit(parsed) & types)) return parsed;
  if (!(types & kTStr) && p.at_end() && parsed.kind != Lit::Kind::String) return parsed;
  return v;
}

void parse_qwen_xml(std::string_view text, const Lit& tools, std::vector<ToolCall>& calls) {
  size_t pos = 0;
  constexpr std::string_view kOpen = "<tool_call>", kFn = "<function=", kParam = "<parameter=", kParamEnd = "</parameter>",
                             kFnEnd = "</function>";
  auto skip_ws = [&](size_t i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
    return i;
  };
  while ((pos = text.find(kOpen, pos)) != std::string_view::npos) {
    size_t i = skip_ws(pos + kOpen.size());
    pos = i;
    if (text.substr(i, kFn.size()) != kFn) continue;
    i += kFn.size();
    const size_t gt = text.find('>', i);
    if (gt == std::string_view::npos) return;
    ToolCall call;
    call.name = std::string(text.substr(i, gt - i));
    i = gt + 1;
    Lit args;
    args.kind = Lit::Kind::Object;
    bool closed = false;
    for (;;) {
      i = skip_ws(i);
      if (text.substr(i, kFnEnd.size()) == kFnEnd) {
        closed = true;
        i += kFnEnd.size();
        break;
      }
      if (text.substr(i, kParam.size()) != kParam) break;
      i += kParam.size();
      const size_t pgt = text.find('>', i);
      if (pgt == std::string_view::npos) break;
      std::string key(text.substr(i, pgt - i));
      const uint8_t types = parameter_types(tools, call.name, key);
      size_t vstart = pgt + 1;
      if (vstart < text.size() && text[vstart] == '\n') ++vstart;
      const size_t vend = text.find(kParamEnd, vstart);
      if (vend == std::string_view::npos) break;  // cut off
      std::string_view raw = text.substr(vstart, vend - vstart);
      if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
      args.members.emplace_back(std::move(key), xml_value(raw, types));
      i = vend + kParamEnd.size();
    }
    pos = i;
    if (!closed) continue;
    write_json(args, call.arguments_json);
    calls.push_back(std::move(call));
  }
}

// One list [name(k=v, ...), ...] at `pos`; appends the complete calls.
size_t parse_python_list(std::string_view text, size_t pos, std::vector<ToolCall>& calls) {
  LitParser p(text, pos);
  if (!p.eat('[')) return pos;
  std::vector<ToolCall> found;
  for (;;) {
    ToolCall call;
    if (!p.name(call.name, '(') || !p.eat('(')) break;
    Lit args;
    args.kind = Lit::Kind::Object;
    bool ok = true;
    while (!p.eat(')')) {
      std::string key;
      Lit v;
      if (!p.name(key, '=') || !p.eat('=') || !p.value(v)) {
        ok = false;
        break;
      }
      args.members.emplace_back(std::move(key), std::move(v));
      if (p.peek() != ')' && !p.eat(',')) {
        ok = false;
        break;
      }
    }
    if (!ok) break;
    write_json(args, call.arguments_json);
    found.push_back(std::move(call));
    if (!p.eat(',')) break;
  }
  for (auto& c : found) calls.push_back(std::move(c));
  return p.pos();
}

}  // namespace

std::vector<ToolCall> parse_native_tool_calls(ToolCallStyle style, std::string_view text, std::string_view tools_json) {
  std::vector<ToolCall> calls;
  if (style == ToolCallStyle::QwenXml) {
    Lit tools;
    LitParser p(tools_json);
    if (!p.value(tools) || tools.kind != Lit::Kind::Array) tools = Lit{};
    parse_qwen_xml(text, tools, calls);
  } else if (style == ToolCallStyle::PythonList) {
    constexpr std::string_view kStart = "<|tool_call_start|>";
    size_t pos = text.find(kStart);
    if (pos == std::string_view::npos) {
      const size_t first = text.find_first_not_of(" \t\r\n");
      if (first != std::string_view::npos && text[first] == '[') parse_python_list(text, first, calls);
    }
    while (pos != std::string_view::npos) {
      pos = parse_python_list(text, pos + kStart.size(), calls);
      pos = text.find(kStart, pos);
    }
  } else if (style == ToolCallStyle::Gemma4) {
    // The calls read whole before an error are kept (as the other syntaxes keep theirs).
    calls = parse_gemma4_calls(text, /*text_between=*/true).calls;
  }
  return calls;
}

}  // namespace picolm
