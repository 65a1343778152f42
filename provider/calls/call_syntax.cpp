// What the call syntaxes share: the streamed calls' bookkeeping and the JSON object stream.
#include "calls/call_syntax.h"

#include "calls/call_text.h"

namespace picolm {

using calls::npos;
using calls::skip_ws;

void CallStream::start_call(std::string name, std::vector<CallEvent>& events) {
  calls_.push_back(StreamedCall{std::move(name), "", false});
  events.push_back(CallEvent{calls_.size() - 1, true, calls_.back().name, ""});
}

void CallStream::advance(const std::string& stable, std::vector<CallEvent>& events) {
  StreamedCall& c = calls_.back();
  // Only ever forward: a piece handed out is never taken back (a stable part that would change
  // would be a bug of the conversion; it then waits for the final arguments).
  if (stable.size() <= c.arguments.size() || stable.compare(0, c.arguments.size(), c.arguments) != 0) return;
  events.push_back(CallEvent{calls_.size() - 1, false, "", stable.substr(c.arguments.size())});
  c.arguments = stable;
}

std::vector<ToolCall> parse_native_tool_calls(const CallSyntax& syntax, std::string_view text, std::string_view tools_json) {
  return syntax.read ? syntax.read(text, tools_json) : std::vector<ToolCall>{};
}

namespace {

// {"name": "NAME", "arguments" | "parameters": {...}}: the object after the key, whitespace outside
// strings left out.
class JsonObjectStream final : public CallStream {
 public:
  void update(std::string_view text, std::vector<CallEvent>& events) override {
    for (;;) {
      if (state_ == State::Seek) {
        const size_t k = text.find("\"name\"", pos_);
        if (k == npos) return;
        size_t i = skip_ws(text, k + 6);
        if (i >= text.size()) return;
        if (text[i] != ':') {
          pos_ = k + 6;
          continue;
        }
        i = skip_ws(text, i + 1);
        if (i >= text.size()) return;
        if (text[i] != '"') {
          pos_ = k + 6;
          continue;
        }
        const size_t e = text.find('"', i + 1);
        if (e == npos) return;
        start_call(std::string(text.substr(i + 1, e - i - 1)), events);
        pos_ = e + 1;
        state_ = State::SeekArgs;
      }
      if (state_ == State::SeekArgs) {
        size_t k = text.find("\"arguments\"", pos_), len = 11;
        if (const size_t p = text.find("\"parameters\"", pos_); p < k) k = p, len = 12;
        if (k == npos) return;
        size_t i = skip_ws(text, k + len);
        if (i >= text.size()) return;
        if (text[i] != ':') {
          pos_ = k + len;
          continue;
        }
        i = skip_ws(text, i + 1);
        if (i >= text.size()) return;
        if (text[i] != '{') {
          pos_ = k + len;
          continue;
        }
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
        if (calls::is_ws(c)) continue;
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

 private:
  size_t pos_ = 0;  // bytes of text fully read
  enum class State { Seek, SeekArgs, Args } state_ = State::Seek;
  // The arguments: depth of brackets, inside a string, after a backslash.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

}  // namespace

std::unique_ptr<CallStream> new_json_call_stream(std::string /*tools_json*/) { return std::make_unique<JsonObjectStream>(); }

}  // namespace picolm
