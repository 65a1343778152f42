#include "call_stream.h"

#include "tool_format.h"

namespace picolm {

namespace {

constexpr size_t npos = std::string_view::npos;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Bytes at the end of `s` that begin a UTF-8 character not complete yet.
size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest suffix of `s` that is a proper prefix of `needle`.
size_t partial_suffix(std::string_view s, std::string_view needle) {
  for (size_t k = std::min(needle.size() - 1, s.size()); k > 0; --k)
    if (s.compare(s.size() - k, k, needle, 0, k) == 0) return k;
  return 0;
}

// The arguments JSON of the one call `text` holds ("" when it holds none).
std::string native_arguments(ToolCallStyle style, std::string_view text, std::string_view tools_json) {
  std::vector<ToolCall> calls = parse_native_tool_calls(style, text, tools_json);
  return calls.size() == 1 ? calls[0].arguments_json : std::string();
}

// `partial` (a JSON string literal being written, from its opening quote) cut before an escape or
// UTF-8 character that is not complete, or a high surrogate whose pair has not come yet.
std::string_view safe_string_prefix(std::string_view partial) {
  size_t cut = partial.size();
  for (size_t i = 1; i < partial.size(); ++i) {
    if (partial[i] != '\\') continue;
    const size_t len = i + 1 < partial.size() && partial[i + 1] == 'u' ? 6 : 2;
    if (i + len > partial.size()) {
      cut = i;
      break;
    }
    if (len == 6 && i + len == partial.size()) {
      const char h = static_cast<char>(partial[i + 2] | 0x20), x = static_cast<char>(partial[i + 3] | 0x20);
      if (h == 'd' && (x == '8' || x == '9' || x == 'a' || x == 'b')) cut = i;  // high surrogate, pair pending
    }
    ++i;
  }
  std::string_view s = partial.substr(0, cut);
  return s.substr(0, s.size() - incomplete_utf8_tail(s));
}

}  // namespace

ToolCallStreamer::ToolCallStreamer(ToolCallStyle style, std::string tools_json)
    : style_(style), tools_json_(std::move(tools_json)) {}

void ToolCallStreamer::update(std::string_view text, std::vector<CallEvent>& events) {
  if (style_ == ToolCallStyle::QwenXml) update_xml(text, events);
  else if (style_ == ToolCallStyle::PythonList) update_python(text, events);
  else if (style_ == ToolCallStyle::Gemma4) update_gemma4(text, events);
  else update_json(text, events);
}

void ToolCallStreamer::advance(const std::string& stable, std::vector<CallEvent>& events) {
  Streamed& c = calls_.back();
  // Only ever forward: a piece handed out is never taken back (a stable part that would change
  // would be a bug of the conversion; it then waits for the final arguments).
  if (stable.size() <= c.arguments.size() || stable.compare(0, c.arguments.size(), c.arguments) != 0) return;
  events.push_back(CallEvent{calls_.size() - 1, false, "", stable.substr(c.arguments.size())});
  c.arguments = stable;
}

// {"name": "NAME", "arguments" | "parameters": {...}}: the object after the key, whitespace outside
// strings left out.
void ToolCallStreamer::update_json(std::string_view text, std::vector<CallEvent>& events) {
  for (;;) {
    if (state_ == State::Seek) {
      const size_t k = text.find("\"name\"", pos_);
      if (k == npos) return;
      size_t i = skip_ws(text, k + 6);
      if (i >= text.size()) return;
      if (text[i] != ':') { pos_ = k + 6; continue; }
      i = skip_ws(text, i + 1);
      if (i >= text.size()) return;
      if (text[i] != '"') { pos_ = k + 6; continue; }
      const size_t e = text.find('"', i + 1);
      if (e == npos) return;
      calls_.push_back(Streamed{std::string(text.substr(i + 1, e - i - 1)), "", false});
      events.push_back(CallEvent{calls_.size() - 1, true, calls_.back().name, ""});
      pos_ = e + 1;
      state_ = State::SeekArgs;
    }
    if (state_ == State::SeekArgs) {
      size_t k = text.find("\"arguments\"", pos_), len = 11;
      if (const size_t p = text.find("\"parameters\"", pos_); p < k) k = p, len = 12;
      if (k == npos) return;
      size_t i = skip_ws(text, k + len);
      if (i >= text.size()) return;
      if (text[i] != ':') { pos_ = k + len; continue; }
      i = skip_ws(text, i + 1);
      if (i >= text.size()) return;
      if (text[i] != '{') { pos_ = k + len; continue; }
      pos_ = i;
      depth_ = 0;
      in_string_ = escaped_ = false;
      state_ = State::Args;
    }
    std::string piece;
    bool closed = false;
    size_t i = pos_;
    for (; i < text.size() && !closed; ++i) {
      const char c = text[i];
      if (in_string_) {
        piece += c;
        if (escaped_) escaped_ = false;
        else if (c == '\\') escaped_ = true;
        else if (c == '"') in_string_ = false;
        continue;
      }
      if (is_ws(c)) continue;
      piece += c;
      if (c == '"') in_string_ = true;
      else if (c == '{' || c == '[') ++depth_;
      else if ((c == '}' || c == ']') && --depth_ == 0) closed = true;
    }
    pos_ = i;
    if (!piece.empty()) {
      events.push_back(CallEvent{calls_.size() - 1, false, "", piece});
      calls_.back().arguments += piece;
    }
    if (!closed) return;
    calls_.back().complete = true;
    state_ = State::Seek;
  }
}

bool ToolCallStreamer::string_only(const std::string& name, const std::string& param) {
  const auto key = std::make_pair(name, param);
  if (auto it = string_only_.find(key); it != string_only_.end()) return it->second;
  // How the reader types a value of this parameter: string-only when none of these reads as
  // anything but the string itself (tool_format.h reads values by the parameter's schema).
  bool only = true;
  for (const char* v : {"5", "true", "null", "[]", "{}"}) {
    const std::string call = "<tool_call>\n<function=" + name + ">\n<parameter=" + param + ">\n" + v +
                             "\n</parameter>\n</function>";
    const std::string args = native_arguments(ToolCallStyle::QwenXml, call, tools_json_);
    const std::string tail = "\"" + std::string(v) + "\"}";
    only = only && args.size() >= tail.size() && args.compare(args.size() - tail.size(), tail.size(), tail) == 0;
  }
  string_only_[key] = only;
  return only;
}

// <tool_call>\n<function=NAME>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>
void ToolCallStreamer::update_xml(std::string_view text, std::vector<CallEvent>& events) {
  constexpr std::string_view kOpen = "<tool_call>", kFn = "<function=", kParam = "<parameter=",
                             kParamEnd = "</parameter>", kFnEnd = "</function>";
  for (;;) {
    if (state_ == State::Seek) {
      const size_t k = text.find(kOpen, pos_);
      if (k == npos) return;
      const size_t f = skip_ws(text, k + kOpen.size());
      if (f + kFn.size() > text.size()) return;
      if (text.substr(f, kFn.size()) != kFn) { pos_ = k + kOpen.size(); continue; }
      const size_t gt = text.find('>', f + kFn.size());
      if (gt == npos) return;
      calls_.push_back(Streamed{std::string(text.substr(f + kFn.size(), gt - f - kFn.size())), "", false});
      events.push_back(CallEvent{calls_.size() - 1, true, calls_.back().name, ""});
      pos_ = k;
      state_ = State::Args;
    }
    const std::string_view seg = text.substr(pos_);
    const std::string& name = calls_.back().name;
    size_t i = seg.find('>', seg.find(kFn)) + 1;
    size_t done = i;                       // end of the complete parameters
    size_t open_value = npos;              // start of a string value being written
    for (;;) {
      i = skip_ws(seg, i);
      if (seg.substr(i, kFnEnd.size()) == kFnEnd) {
        const size_t end = i + kFnEnd.size();
        advance(native_arguments(style_, seg.substr(0, end), tools_json_), events);
        calls_.back().complete = true;
        pos_ += end;
        state_ = State::Seek;
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
    if (state_ == State::Seek) continue;
    std::string stable;
    if (open_value != npos) {
      std::string_view value = seg.substr(open_value);
      value.remove_suffix(partial_suffix(value, "\n</parameter>"));
      value.remove_suffix(incomplete_utf8_tail(value));
      std::string synth(seg.substr(0, open_value));
      synth.append(value).append("\n</parameter>\n</function>");
      stable = native_arguments(style_, synth, tools_json_);
      if (stable.size() >= 2 && stable.compare(stable.size() - 2, 2, "\"}") == 0) stable.resize(stable.size() - 2);
      else stable.clear();
    } else {
      std::string synth(seg.substr(0, done));
      synth.append("</function>");
      stable = native_arguments(style_, synth, tools_json_);
      if (!stable.empty() && stable.back() == '}') stable.pop_back();
    }
    advance(stable, events);
    return;
  }
}

// [name(k=v, ...), ...] after <|tool_call_start|> (or a reply that is a bare list).
void ToolCallStreamer::update_python(std::string_view text, std::vector<CallEvent>& events) {
  constexpr std::string_view kStart = "<|tool_call_start|>";
  for (;;) {
    if (state_ == State::Seek) {
      if (!list_open_) {
        size_t b = npos;
        if (const size_t k = text.find(kStart, pos_); k != npos) b = k + kStart.size();
        else if (pos_ == 0 && skip_ws(text, 0) < text.size() && text[skip_ws(text, 0)] == '[') b = skip_ws(text, 0);
        if (b == npos || b >= text.size()) return;
        if (text[b] != '[') { pos_ = b; continue; }
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
      calls_.push_back(Streamed{std::string(text.substr(i, paren - i)), "", false});
      events.push_back(CallEvent{calls_.size() - 1, true, calls_.back().name, ""});
      pos_ = i;
      state_ = State::Args;
    }
    const std::string_view seg = text.substr(pos_);
    size_t j = calls_.back().name.size() + 1;
    size_t done = j;              // end of the complete keyword arguments
    size_t open_string = npos;    // a string value being written: its opening quote
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
      advance(native_arguments(style_, "[" + std::string(seg.substr(0, done)) + "]", tools_json_), events);
      calls_.back().complete = true;
      pos_ += done;
      state_ = State::Seek;
      continue;
    }
    std::string stable;
    if (open_string != npos) {
      std::string synth = "[" + std::string(seg.substr(0, open_string));
      synth.append(safe_string_prefix(seg.substr(open_string))).append("\")]");
      stable = native_arguments(style_, synth, tools_json_);
      if (stable.size() >= 2 && stable.compare(stable.size() - 2, 2, "\"}") == 0) stable.resize(stable.size() - 2);
      else stable.clear();
    } else {
      stable = native_arguments(style_, "[" + std::string(seg.substr(0, done)) + ")]", tools_json_);
      if (!stable.empty() && stable.back() == '}') stable.pop_back();
    }
    advance(stable, events);
    return;
  }
}

void ToolCallStreamer::update_gemma4(std::string_view text, std::vector<CallEvent>& events) {
  // After a malformed call the reader stops; the final reading (parse_gemma4_calls) decides.
  std::vector<Gemma4Event> read;
  gemma4_.update(text, read);
  for (auto& e : read) {
    switch (e.kind) {
      case Gemma4Event::Kind::Start:
        calls_.push_back(Streamed{e.text, "", false});
        events.push_back(CallEvent{e.index, true, std::move(e.text), ""});
        break;
      case Gemma4Event::Kind::Arguments:
        calls_[e.index].arguments += e.text;
        events.push_back(CallEvent{e.index, false, "", std::move(e.text)});
        break;
      case Gemma4Event::Kind::End:
        calls_[e.index].complete = true;
        break;
    }
  }
}

}  // namespace picolm
