// ToolCallStreamer (provider/call_stream.h, issue 30 item 5) without a model: replies in every
// call syntax fed a few bytes at a time; the pieces of each call must concatenate to the arguments
// the provider's parser reads from the whole reply, and a long call must come in several pieces.
// (tests/test_streamed_calls.cpp checks the same over loopback with the models.)
#include <catch2/catch.hpp>

#include "call_stream.h"
#include "tool_format.h"

#include <string>
#include <string_view>
#include <vector>

using namespace picolm;

namespace {
const std::string kTools =
    R"([{"type":"function","function":{"name":"write_note","description":"Write a note","parameters":{"type":"object","properties":{"text":{"type":"string","minLength":60,"maxLength":90},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["text","n"]}}}])";
}  // namespace
namespace {
// Feeds `text` to a streamer `step` bytes at a time; returns (call starts, pieces per call, arguments per call).
struct Fed {
  std::vector<std::string> names;
  std::vector<int> pieces;
  std::vector<std::string> arguments;
};
Fed feed(const CallSyntax& style, const std::string& tools, const std::string& text, size_t step) {
  ToolCallStreamer st(&style, tools);
  Fed f;
  std::vector<CallEvent> events;
  for (size_t n = step; ; n += step) {
    st.update(std::string_view(text).substr(0, std::min(n, text.size())), events);
    if (n >= text.size()) break;
  }
  for (const CallEvent& e : events) {
    if (e.start) {
      f.names.push_back(e.name);
      f.pieces.push_back(0);
      f.arguments.emplace_back();
    } else {
      REQUIRE(e.index < f.arguments.size());
      f.arguments[e.index] += e.arguments;
      ++f.pieces[e.index];
    }
  }
  return f;
}
}  // namespace

TEST_CASE("ToolCallStreamer: pieces are prefixes of the final arguments in every syntax", "[unit][tools]") {
  const std::string text60(60, 'a');
  SECTION("qwen3.5 XML") {
    const std::string reply = "<tool_call>\n<function=write_note>\n<parameter=text>\n" + text60 +
                              " \"q\"\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>";
    const auto finals = parse_native_tool_calls(kQwenXmlSyntax, reply, kTools);
    REQUIRE(finals.size() == 1);
    for (size_t step : {1, 3, 7}) {
      const Fed f = feed(kQwenXmlSyntax, kTools, reply, step);
      INFO("step " << step);
      REQUIRE(f.names.size() == 1);
      CHECK(f.names[0] == "write_note");
      CHECK(f.arguments[0] == finals[0].arguments_json);
      CHECK(f.pieces[0] >= 2);
    }
  }
  SECTION("lfm2 python") {
    const std::string reply = "<|tool_call_start|>[write_note(text=\"" + text60 +
                              " \\\"q\\\" \\u00e9\", n=3), write_note(n=1, text=\"x\")]<|tool_call_end|>";
    const auto finals = parse_native_tool_calls(kPythonListSyntax, reply, kTools);
    REQUIRE(finals.size() == 2);
    for (size_t step : {1, 3, 7}) {
      const Fed f = feed(kPythonListSyntax, kTools, reply, step);
      INFO("step " << step);
      REQUIRE(f.names.size() == 2);
      CHECK(f.arguments[0] == finals[0].arguments_json);
      CHECK(f.arguments[1] == finals[1].arguments_json);
      CHECK(f.pieces[0] >= 2);
    }
  }
  SECTION("JSON") {
    const std::string reply = "<tool_call>\n{\"name\": \"write_note\", \"arguments\": {\"text\": \"" + text60 +
                              " {\\\"x\\\"}\", \"n\": 3}}\n</tool_call>";
    const Fed f = feed(kTaggedJsonSyntax, kTools, reply, 2);
    REQUIRE(f.names.size() == 1);
    CHECK(f.arguments[0] == "{\"text\":\"" + text60 + " {\\\"x\\\"}\",\"n\":3}");
    CHECK(f.pieces[0] >= 2);
  }
}
