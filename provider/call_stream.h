// Tool-call arguments streamed as they are generated (issue 30 item 5): reads the calls of a reply
// while it grows, in any call syntax the grammar constrains, and hands out each call's start (its
// name) and then pieces of its arguments as the JSON text they become. Each syntax's record
// (calls/call_syntax.h) makes its reader; the pieces of a call concatenate to its final arguments:
//   - JSON calls (<tool_call> JSON, Llama's bare JSON, the envelope): the arguments object as the
//     model writes it, less the whitespace outside strings (minified JSON); the caller makes that
//     the final arguments (ToolCallStreamer::calls()).
//   - Qwen3.5 XML parameters and LFM2 Python calls: the JSON that the syntax's reader
//     (CallSyntax::read) makes of the call, converted as it grows: the call so far is closed
//     synthetically and read back with that reader, and the part that cannot change any more is
//     handed out (a string value streams as it is written; other values when they end; the final
//     '}' when the call ends).
//   - Gemma 4 calls: converted to JSON as they are read (gemma4_calls.h: the same reader makes the
//     final arguments), a string's characters as they come, other values when they end.
// Thread-safety: one streamer per generation, used by one thread.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "calls/call_syntax.h"

namespace picolm {

class ToolCallStreamer {
 public:
  // syntax: the family's call syntax; nullptr: the envelope's calls (JSON objects).
  // tools_json: the request's tools (the native syntaxes type values by it).
  ToolCallStreamer(const CallSyntax* syntax, std::string tools_json)
      : stream_(syntax ? syntax->new_stream(std::move(tools_json)) : new_json_call_stream(std::move(tools_json))) {}

  // `text` is the calls' text so far (each call only ever grows at its end); appends the news.
  void update(std::string_view text, std::vector<CallEvent>& events) { stream_->update(text, events); }

  using Streamed = StreamedCall;
  const std::vector<Streamed>& calls() const { return stream_->calls(); }

 private:
  std::unique_ptr<CallStream> stream_;
};

}  // namespace picolm
