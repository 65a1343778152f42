// Tool-call arguments streamed as they are generated (issue 30 item 5): reads the calls of a reply
// while it grows, in any call syntax the grammar constrains, and hands out each call's start (its
// name) and then pieces of its arguments as the JSON text they become. The pieces of a call
// concatenate to its final arguments:
//   - JSON calls (<tool_call> JSON, Llama's bare JSON, the envelope): the arguments object as the
//     model writes it, less the whitespace outside strings (minified JSON); the caller makes that
//     the final arguments (ToolCallStreamer::calls()).
//   - Qwen3.5 XML parameters and LFM2 Python calls: the JSON that parse_native_tool_calls
//     (tool_format.h) makes of the call, converted as it grows: the call so far is closed
//     synthetically and read back with that parser, and the part that cannot change any more is
//     handed out (a string value streams as it is written; other values when they end; the final
//     '}' when the call ends).
//   - Gemma 4 calls: converted to JSON as they are read (gemma4_calls.h: the same reader makes the
//     final arguments), a string's characters as they come, other values when they end.
// Thread-safety: one streamer per generation, used by one thread.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template.h"
#include "gemma4_calls.h"

namespace picolm {

struct CallEvent {
  size_t index = 0;       // the call's position in the reply
  bool start = false;     // true: the call starts (name set); false: `arguments` is the next piece
  std::string name;
  std::string arguments;
};

class ToolCallStreamer {
 public:
  // style: TaggedJson, BareJson (and the envelope, whose calls are the same JSON objects),
  // QwenXml, PythonList or Gemma4. tools_json: the request's tools (the native formats type values by it).
  ToolCallStreamer(ToolCallStyle style, std::string tools_json);

  // `text` is the calls' text so far (each call only ever grows at its end); appends the news.
  void update(std::string_view text, std::vector<CallEvent>& events);

  struct Streamed {
    std::string name;
    std::string arguments;  // the pieces handed out so far, concatenated
    bool complete = false;  // the call's end was seen (JSON: `arguments` is then the whole object)
  };
  const std::vector<Streamed>& calls() const { return calls_; }

 private:
  void update_json(std::string_view text, std::vector<CallEvent>& events);
  void update_xml(std::string_view text, std::vector<CallEvent>& events);
  void update_python(std::string_view text, std::vector<CallEvent>& events);
  void update_gemma4(std::string_view text, std::vector<CallEvent>& events);
  // Hands out what `stable` (the arguments' JSON that cannot change any more) adds.
  void advance(const std::string& stable, std::vector<CallEvent>& events);
  bool string_only(const std::string& name, const std::string& param);

  ToolCallStyle style_;
  std::string tools_json_;
  std::vector<Streamed> calls_;
  size_t pos_ = 0;  // bytes of text fully read (JSON), or where the current call starts (native)
  enum class State { Seek, SeekArgs, Args } state_ = State::Seek;
  bool list_open_ = false;  // PythonList: inside [...]
  // JSON arguments: depth of brackets, inside a string, after a backslash.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  std::map<std::pair<std::string, std::string>, bool> string_only_;  // QwenXml: (tool, param)
  Gemma4CallReader gemma4_{/*text_between=*/true};                   // Gemma4
};

}  // namespace picolm
