// LFM2 / LFM2.5 Python-style calls (grammar::ToolCallFormat::PythonList):
//   <|tool_call_start|>[name(a="v", n=3), ...]<|tool_call_end|>
// keyword arguments with Python literal values (True / False / None, either quote, tuples). The
// tags are control tokens in LFM2's vocabulary.
#include "calls/call_syntax.h"
#include "calls/call_text.h"
#include "calls/python_literal.h"

namespace picolm {
namespace {

using calls::JsonValue;
using calls::npos;
using calls::skip_ws;

constexpr std::string_view kStart = "<|tool_call_start|>";

// One list [name(k=v, ...), ...] at `pos`; appends the complete calls.
size_t read_list(std::string_view text, size_t pos, std::vector<ToolCall>& calls) {
  calls::PythonLiteralReader p(text, pos);
  if (!p.eat('[')) return pos;
  std::vector<ToolCall> found;
  for (;;) {
    ToolCall call;
    if (!p.name(call.name, '(') || !p.eat('(')) break;
    JsonValue args;
    args.kind = JsonValue::Kind::Object;
    bool ok = true;
    while (!p.eat(')')) {
      std::string key;
      JsonValue v;
      if (!p.name(key, '=') || !p.eat('=') || !p.value(v)) {
        ok = false;
        break;
      }
      args.obj.emplace_back(std::move(key), std::move(v));
      if (p.peek() != ')' && !p.eat(',')) {
        ok = false;
        break;
      }
    }
    if (!ok) break;
    call.arguments_json = grammar::detail::to_json(args);
    found.push_back(std::move(call));
    if (!p.eat(',')) break;
  }
  for (auto& c : found) calls.push_back(std::move(c));
  return p.pos();
}

std::vector<ToolCall> read_calls(std::string_view text, std::string_view /*tools_json*/) {
  std::vector<ToolCall> calls;
  size_t pos = text.find(kStart);
  if (pos == npos) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first != npos && text[first] == '[') read_list(text, first, calls);
  }
  while (pos != npos) {
    pos = read_list(text, pos + kStart.size(), calls);
    pos = text.find(kStart, pos);
  }
  return calls;
}

std::string arguments_of(const std::string& text) { return calls::one_call_arguments(read_calls, text, ""); }

// The JSON read_calls makes of each call, converted as it grows (as QwenXml's stream does).
class PythonListStream final : public CallStream {
 public:
  void update(std::string_view text, std::vector<CallEvent>& events) override {
    for (;;) {
      if (!in_call_) {
        if (!list_open_) {
          size_t b = npos;
          if (const size_t k = text.find(kStart, pos_); k != npos) b = k + kStart.size();
          else if (pos_ == 0 && skip_ws(text, 0) < text.size() && text[skip_ws(text, 0)] == '[') b = skip_ws(text, 0);
          if (b == npos || b >= text.size()) return;
          if (text[b] != '[') {
            pos_ = b;
            continue;
          }
          pos_ = b + 1;
          list_open_ = true;
        }
        size_t i = skip_ws(text, pos_);
        if (i >= text.size()) return;
        if (text[i] == ',') {
          pos_ = i + 1;
          continue;
        }
        if (text[i] == ']') {
          list_open_ = false;
          pos_ = i + 1;
          continue;
        }
        const size_t paren = text.find('(', i);
        if (paren == npos) return;
        start_call(std::string(text.substr(i, paren - i)), events);
        pos_ = i;
        in_call_ = true;
      }
      const std::string_view seg = text.substr(pos_);
      size_t j = calls_.back().name.size() + 1;
      size_t done = j;            // end of the complete keyword arguments
      size_t open_string = npos;  // a string value being written: its opening quote
      bool closed = false;
      for (;;) {
        j = skip_ws(seg, j);
        if (j >= seg.size()) break;
        if (seg[j] == ')') {
          closed = true;
          done = j + 1;
          break;
        }
        if (seg[j] == ',') {
          ++j;
          continue;
        }
        const size_t eq = seg.find('=', j);
        if (eq == npos) break;
        const size_t v = eq + 1;
        if (v >= seg.size()) break;
        // The value's end: a string's closing quote, or ',' / ')' outside brackets and strings.
        size_t k = v;
        int depth = 0;
        bool str = false, esc = false, ended = false;
        for (; k < seg.size(); ++k) {
          const char c = seg[k];
          if (str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') {
              str = false;
              if (depth == 0 && seg[v] == '"') {
                ++k;
                ended = true;
                break;
              }
            }
            continue;
          }
          if (c == '"') str = true;
          else if (c == '[' || c == '{' || c == '(') ++depth;
          else if (c == ']' || c == '}') --depth;
          else if ((c == ',' || c == ')') && depth == 0) {
            ended = true;
            break;
          }
        }
        if (!ended) {
          if (seg[v] == '"') open_string = v;
          break;
        }
        j = done = k;
      }
      if (closed) {
        advance(arguments_of("[" + std::string(seg.substr(0, done)) + "]"), events);
        calls_.back().complete = true;
        pos_ += done;
        in_call_ = false;
        continue;
      }
      std::string stable;
      if (open_string != npos) {
        std::string synth = "[" + std::string(seg.substr(0, open_string));
        synth.append(calls::safe_string_prefix(seg.substr(open_string))).append("\")]");
        stable = arguments_of(synth);
        if (stable.size() >= 2 && stable.compare(stable.size() - 2, 2, "\"}") == 0) stable.resize(stable.size() - 2);
        else stable.clear();
      } else {
        stable = arguments_of("[" + std::string(seg.substr(0, done)) + ")]");
        if (!stable.empty() && stable.back() == '}') stable.pop_back();
      }
      advance(stable, events);
      return;
    }
  }

 private:
  size_t pos_ = 0;  // where the current call starts
  bool in_call_ = false;
  bool list_open_ = false;  // inside [...]
};

std::unique_ptr<CallStream> new_stream(std::string /*tools_json*/) { return std::make_unique<PythonListStream>(); }

// LFM2's templates render no tool_calls: the list goes where the model writes it, after a past
// turn's thinking.
bool calls_into_content(std::span<const ToolCall> calls, const FamilyTraits& /*traits*/, std::string& content,
                        std::string* error) {
  std::string list;
  if (!format_python_tool_calls(calls, list, error)) return false;
  const size_t think = content.rfind("</think>");
  content.insert(think == std::string::npos ? 0 : think + 8, list);
  return true;
}

}  // namespace

const CallSyntax kPythonListSyntax = {
    .name = "python-list",
    .grammar_format = grammar::ToolCallFormat::PythonList,
    .control_tags = true,
    .read = read_calls,
    .new_stream = new_stream,
    .calls_into_content = calls_into_content,
};

}  // namespace picolm
