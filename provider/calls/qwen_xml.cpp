// Qwen3.5's XML-parameter calls (grammar::ToolCallFormat::QwenXml):
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// A string VALUE is raw text; other values are JSON, or True / False / None as the template's str()
// writes them. How a value is read depends on the parameter's schema (call_syntax.h).
#include <cstdlib>
#include <map>
#include <utility>

#include "calls/call_syntax.h"
#include "calls/call_text.h"
#include "calls/python_literal.h"

namespace picolm {
namespace {

using calls::JsonValue;
using calls::kTAll;
using calls::kTArr;
using calls::kTBool;
using calls::kTNull;
using calls::kTNum;
using calls::kTObj;
using calls::kTStr;
using calls::npos;
using calls::skip_ws;
using Kind = JsonValue::Kind;

constexpr std::string_view kOpen = "<tool_call>", kFn = "<function=", kParam = "<parameter=",
                           kParamEnd = "</parameter>", kFnEnd = "</function>";

// ---- schema types of a parameter ----
uint8_t type_bit(std::string_view t) {
  if (t == "null") return kTNull;
  if (t == "boolean") return kTBool;
  if (t == "number" || t == "integer") return kTNum;
  if (t == "string") return kTStr;
  if (t == "array") return kTArr;
  if (t == "object") return kTObj;
  return 0;
}

const JsonValue* resolve_ref(const JsonValue& root, std::string_view ref) {
  if (ref.substr(0, 1) != "#") return nullptr;
  ref.remove_prefix(1);
  const JsonValue* cur = &root;
  while (!ref.empty() && cur) {
    if (ref[0] != '/') return nullptr;
    ref.remove_prefix(1);
    const size_t slash = ref.find('/');
    std::string token(ref.substr(0, slash));
    ref = slash == npos ? std::string_view() : ref.substr(slash);
    std::string key;  // JSON pointer escapes
    for (size_t k = 0; k < token.size(); ++k) {
      if (token[k] == '~' && k + 1 < token.size()) key += token[++k] == '1' ? '/' : '~';
      else key += token[k];
    }
    if (cur->kind == Kind::Array) {
      char* end = nullptr;
      const unsigned long idx = std::strtoul(key.c_str(), &end, 10);
      cur = (end && *end == '\0' && idx < cur->arr.size()) ? &cur->arr[idx] : nullptr;
    } else {
      cur = cur->get(key);
    }
  }
  return cur;
}

// The JSON types a schema allows (a superset is fine: it only decides how text is read).
uint8_t schema_types(const JsonValue* s, const JsonValue& root, int depth = 0) {
  if (!s || depth > 16) return kTAll;
  if (s->kind == Kind::Bool) return s->boolean ? kTAll : 0;
  if (s->kind != Kind::Object) return kTAll;
  uint8_t t = kTAll;
  if (const JsonValue* ty = s->get("type")) {
    uint8_t bits = 0;
    if (ty->kind == Kind::String) bits = type_bit(ty->str);
    for (const auto& x : ty->arr)
      if (x.kind == Kind::String) bits |= type_bit(x.str);
    t &= bits;
  }
  for (const char* kw : {"enum", "const"}) {
    const JsonValue* e = s->get(kw);
    if (!e) continue;
    uint8_t bits = 0;
    if (std::string_view(kw) == "const") bits = calls::value_type_bit(*e);
    else
      for (const auto& x : e->arr) bits |= calls::value_type_bit(x);
    t &= bits;
  }
  for (const char* kw : {"anyOf", "oneOf"}) {
    const JsonValue* a = s->get(kw);
    if (!a || a->kind != Kind::Array) continue;
    uint8_t bits = 0;
    for (const auto& x : a->arr) bits |= schema_types(&x, root, depth + 1);
    t &= bits;
  }
  if (const JsonValue* a = s->get("allOf"); a && a->kind == Kind::Array)
    for (const auto& x : a->arr) t &= schema_types(&x, root, depth + 1);
  if (const JsonValue* r = s->get("$ref"); r && r->kind == Kind::String)
    t &= schema_types(resolve_ref(root, r->str), root, depth + 1);
  return t;
}

// The types parameter `param` of tool `name` may take.
uint8_t parameter_types(const JsonValue& tools, std::string_view name, std::string_view param) {
  for (const auto& t : tools.arr) {
    const JsonValue* fn = t.get("function");
    if (!fn) fn = &t;
    const JsonValue* n = fn->get("name");
    if (!n || n->kind != Kind::String || n->str != name) continue;
    const JsonValue* params = fn->get("parameters");
    if (!params) return kTAll;
    const JsonValue* props = params->get("properties");
    const JsonValue* p = props ? props->get(param) : nullptr;
    if (!p) p = params->get("additionalProperties");
    return schema_types(p, *params);
  }
  return kTAll;
}

JsonValue xml_value(std::string_view raw, uint8_t types) {
  JsonValue v;
  v.kind = Kind::String;
  v.str = std::string(raw);
  if ((types & ~kTStr) == 0) return v;
  JsonValue parsed;
  calls::PythonLiteralReader p(raw);
  // A quoted string is still text: the raw text is the string.
  if (p.value(parsed) && p.at_end() && parsed.kind != Kind::String && (calls::value_type_bit(parsed) & types)) return parsed;
  if (!(types & kTStr) && p.at_end() && parsed.kind != Kind::String) return parsed;
  return v;
}

std::vector<ToolCall> read_calls(std::string_view text, std::string_view tools_json) {
  std::vector<ToolCall> calls;
  JsonValue tools;
  std::string err;
  if (!grammar::detail::parse_json(tools_json, tools, err) || tools.kind != Kind::Array) tools = JsonValue{};
  size_t pos = 0;
  while ((pos = text.find(kOpen, pos)) != npos) {
    size_t i = skip_ws(text, pos + kOpen.size());
    pos = i;
    if (text.substr(i, kFn.size()) != kFn) continue;
    i += kFn.size();
    const size_t gt = text.find('>', i);
    if (gt == npos) break;
    ToolCall call;
    call.name = std::string(text.substr(i, gt - i));
    i = gt + 1;
    JsonValue args;
    args.kind = Kind::Object;
    bool closed = false;
    for (;;) {
      i = skip_ws(text, i);
      if (text.substr(i, kFnEnd.size()) == kFnEnd) {
        closed = true;
        i += kFnEnd.size();
        break;
      }
      if (text.substr(i, kParam.size()) != kParam) break;
      i += kParam.size();
      const size_t pgt = text.find('>', i);
      if (pgt == npos) break;
      std::string key(text.substr(i, pgt - i));
      const uint8_t types = parameter_types(tools, call.name, key);
      size_t vstart = pgt + 1;
      if (vstart < text.size() && text[vstart] == '\n') ++vstart;
      const size_t vend = text.find(kParamEnd, vstart);
      if (vend == npos) break;  // cut off
      std::string_view raw = text.substr(vstart, vend - vstart);
      if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
      args.obj.emplace_back(std::move(key), xml_value(raw, types));
      i = vend + kParamEnd.size();
    }
    pos = i;
    if (!closed) continue;
    call.arguments_json = grammar::detail::to_json(args);
    calls.push_back(std::move(call));
  }
  return calls;
}

std::string arguments_of(std::string_view text, std::string_view tools_json) {
  return calls::one_call_arguments(read_calls, text, tools_json);
}

// The JSON read_calls makes of each call, converted as it grows: the call so far is closed
// synthetically and read back, and the part that cannot change any more is handed out (a string
// value streams as it is written; other values when they end; the final '}' when the call ends).
class QwenXmlStream final : public CallStream {
 public:
  explicit QwenXmlStream(std::string tools_json) : tools_json_(std::move(tools_json)) {}

  void update(std::string_view text, std::vector<CallEvent>& events) override {
    for (;;) {
      if (!in_call_) {
        const size_t k = text.find(kOpen, pos_);
        if (k == npos) return;
        const size_t f = skip_ws(text, k + kOpen.size());
        if (f + kFn.size() > text.size()) return;
        if (text.substr(f, kFn.size()) != kFn) {
          pos_ = k + kOpen.size();
          continue;
        }
        const size_t gt = text.find('>', f + kFn.size());
        if (gt == npos) return;
        start_call(std::string(text.substr(f + kFn.size(), gt - f - kFn.size())), events);
        pos_ = k;
        in_call_ = true;
      }
      const std::string_view seg = text.substr(pos_);
      const std::string& name = calls_.back().name;
      size_t i = seg.find('>', seg.find(kFn)) + 1;
      size_t done = i;           // end of the complete parameters
      size_t open_value = npos;  // start of a string value being written
      for (;;) {
        i = skip_ws(seg, i);
        if (seg.substr(i, kFnEnd.size()) == kFnEnd) {
          const size_t end = i + kFnEnd.size();
          advance(arguments_of(seg.substr(0, end), tools_json_), events);
          calls_.back().complete = true;
          pos_ += end;
          in_call_ = false;
          break;
        }
        if (seg.substr(i, kParam.size()) != kParam) break;  // more to come
        const size_t pgt = seg.find('>', i + kParam.size());
        if (pgt == npos) break;
        size_t vstart = pgt + 1;
        if (vstart < seg.size() && seg[vstart] == '\n') ++vstart;
        const size_t vend = seg.find(kParamEnd, vstart);
        if (vend == npos) {
          if (vstart > pgt + 1 && string_only(name, std::string(seg.substr(i + kParam.size(), pgt - i - kParam.size()))))
            open_value = vstart;
          break;
        }
        i = done = vend + kParamEnd.size();
      }
      if (!in_call_) continue;
      std::string stable;
      if (open_value != npos) {
        std::string_view value = seg.substr(open_value);
        value.remove_suffix(calls::partial_suffix(value, "\n</parameter>"));
        value.remove_suffix(calls::incomplete_utf8_tail(value));
        std::string synth(seg.substr(0, open_value));
        synth.append(value).append("\n</parameter>\n</function>");
        stable = arguments_of(synth, tools_json_);
        if (stable.size() >= 2 && stable.compare(stable.size() - 2, 2, "\"}") == 0) stable.resize(stable.size() - 2);
        else stable.clear();
      } else {
        std::string synth(seg.substr(0, done));
        synth.append("</function>");
        stable = arguments_of(synth, tools_json_);
        if (!stable.empty() && stable.back() == '}') stable.pop_back();
      }
      advance(stable, events);
      return;
    }
  }

 private:
  // Whether the reader types every value of this parameter as a string (then a value streams as
  // it is written): none of these reads as anything but the string itself.
  bool string_only(const std::string& name, const std::string& param) {
    const auto key = std::make_pair(name, param);
    if (auto it = string_only_.find(key); it != string_only_.end()) return it->second;
    bool only = true;
    for (const char* v : {"5", "true", "null", "[]", "{}"}) {
      const std::string call = "<tool_call>\n<function=" + name + ">\n<parameter=" + param + ">\n" + v +
                               "\n</parameter>\n</function>";
      const std::string args = arguments_of(call, tools_json_);
      const std::string tail = "\"" + std::string(v) + "\"}";
      only = only && args.size() >= tail.size() && args.compare(args.size() - tail.size(), tail.size(), tail) == 0;
    }
    string_only_[key] = only;
    return only;
  }

  std::string tools_json_;
  size_t pos_ = 0;  // where the current call starts
  bool in_call_ = false;
  std::map<std::pair<std::string, std::string>, bool> string_only_;  // (tool, param)
};

std::unique_ptr<CallStream> new_stream(std::string tools_json) {
  return std::make_unique<QwenXmlStream>(std::move(tools_json));
}

}  // namespace

const CallSyntax kQwenXmlSyntax = {
    .name = "qwen-xml",
    .grammar_format = grammar::ToolCallFormat::QwenXml,
    .read = read_calls,
    .new_stream = new_stream,
};

}  // namespace picolm
