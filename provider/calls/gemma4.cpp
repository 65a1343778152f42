// Gemma 4's calls (grammar::ToolCallFormat::Gemma4; the reader is gemma4_calls.h):
//   <|tool_call>call:NAME{key:<|"|>v<|"|>,n:3}<tool_call|>, adjacent when parallel.
// Its tags and its string quote may be control tokens in a GGUF: the grammar keeps them all.
#include "calls/call_syntax.h"
#include "gemma4_calls.h"

namespace picolm {
namespace {

std::vector<ToolCall> read_calls(std::string_view text, std::string_view /*tools_json*/) {
  // The calls read whole before an error are kept (as the other syntaxes keep theirs).
  return parse_gemma4_calls(text, /*text_between=*/true).calls;
}

// Converted to JSON as they are read (the same reader makes the final arguments), a string's
// characters as they come, other values when they end.
class Gemma4Stream final : public CallStream {
 public:
  void update(std::string_view text, std::vector<CallEvent>& events) override {
    // After a malformed call the reader stops; the final reading (parse_gemma4_calls) decides.
    std::vector<Gemma4Event> read;
    reader_.update(text, read);
    for (auto& e : read) {
      switch (e.kind) {
        case Gemma4Event::Kind::Start:
          calls_.push_back(StreamedCall{e.text, "", false});
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

 private:
  Gemma4CallReader reader_{/*text_between=*/true};
};

std::unique_ptr<CallStream> new_stream(std::string /*tools_json*/) { return std::make_unique<Gemma4Stream>(); }

constexpr std::string_view kVocabularyTexts[] = {gemma4::kQuote};

}  // namespace

const CallSyntax kGemma4Syntax = {
    .name = "gemma4",
    .grammar_format = grammar::ToolCallFormat::Gemma4,  // the grammar forces CompileOptions::gemma4_values on
    .control_tags = true,
    .vocabulary_texts = kVocabularyTexts,
    .read = read_calls,
    .new_stream = new_stream,
};

}  // namespace picolm
