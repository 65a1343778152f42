// One record per tool-call syntax: how a model writes its calls, and everything the provider
// decides by that syntax, in one place (as provider/protocols/ holds one record per family). A
// family's record (FamilyTraits::call_syntax) points at its syntax; nullptr = the template has
// no call syntax of its own (calls go through the JSON envelope).
//
// A record says:
//   - the grammar format that constrains the calls (grammar_format; nullopt: not constrained, a
//     family with this syntax gets its calls through the envelope), and whether the reply is the
//     call itself (call_is_reply: Llama's bare JSON);
//   - whether the call tags may be control tokens (control_tags: the decoder renders control
//     tokens' text, the grammar vocabulary keeps the tags' tokens and vocabulary_texts);
//   - how the calls of a whole reply are read (read; nullptr: JSON objects, read by openai.h's
//     readers after the family's tool_call_start; when set, the final arguments come from this
//     reading, not from the JSON the streamer saw);
//   - how a reply being generated yields each call's name and argument pieces (new_stream);
//   - what a conversation lowered for a template that shows no tools asks the model to write
//     (lowered; nullopt: the envelope);
//   - how a past turn's calls go into its content for a template that renders no tool_calls
//     (calls_into_content: LFM2's Python list, Phi-4-mini's tagged array).
//
// To add a syntax: one file here defining its record, its extern below, the records of the
// families that use it, and a test (docs/ARCHITECTURE.md).
//
// Thread-safety: records are constants; a CallStream is used by one thread.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"
#include "grammar/grammar.h"
#include "tool_format.h"

namespace picolm {

struct CallEvent {
  size_t index = 0;       // the call's position in the reply
  bool start = false;     // true: the call starts (name set); false: `arguments` is the next piece
  std::string name;
  std::string arguments;
};

struct StreamedCall {
  std::string name;
  std::string arguments;  // the pieces handed out so far, concatenated
  bool complete = false;  // the call's end was seen (JSON: `arguments` is then the whole object)
};

// The calls of one reply read while it grows (call_stream.h says what the pieces are).
class CallStream {
 public:
  virtual ~CallStream() = default;
  // `text` is the calls' text so far (each call only ever grows at its end); appends the news.
  virtual void update(std::string_view text, std::vector<CallEvent>& events) = 0;
  const std::vector<StreamedCall>& calls() const { return calls_; }

 protected:
  void start_call(std::string name, std::vector<CallEvent>& events);
  // Hands out what `stable` (the current call's arguments JSON that cannot change any more) adds.
  void advance(const std::string& stable, std::vector<CallEvent>& events);
  std::vector<StreamedCall> calls_;
};

// JSON call objects ({"name": ..., "arguments" | "parameters": {...}}) wherever they stand: the
// tagged and bare JSON syntaxes, and the envelope's calls.
std::unique_ptr<CallStream> new_json_call_stream(std::string tools_json);

struct CallSyntax {
  std::string_view name;  // for logs and tests
  std::optional<grammar::ToolCallFormat> grammar_format = std::nullopt;
  bool call_is_reply = false;  // the reply is one call from its first byte: trigger "{" at the start
  bool control_tags = false;
  std::span<const std::string_view> vocabulary_texts = {};  // besides the family's call tags (control_tags)
  std::vector<ToolCall> (*read)(std::string_view text, std::string_view tools_json) = nullptr;
  std::unique_ptr<CallStream> (*new_stream)(std::string tools_json) = nullptr;
  std::optional<LoweredToolSyntax> lowered = std::nullopt;
  // A past turn's calls written into its content, as the model writes them, for a template that
  // renders no tool_calls (ChatProtocol::calls_in_content); nullptr: not for such templates.
  bool (*calls_into_content)(std::span<const ToolCall> calls, const FamilyTraits& traits, std::string& content,
                             std::string* error) = nullptr;
};

extern const CallSyntax kTaggedJsonSyntax;    // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeatable (Qwen, Hermes)
extern const CallSyntax kBareJsonSyntax;      // the whole reply is {"name": ..., "parameters": {...}}, one call (Llama 3.x)
extern const CallSyntax kTaggedJsonArraySyntax;  // <|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|> (Phi-4-mini)
extern const CallSyntax kMistralArraySyntax;  // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}, ...]
extern const CallSyntax kDeepSeekR1Syntax;    // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>...
extern const CallSyntax kQwenXmlSyntax;       // <tool_call>\n<function=NAME>\n<parameter=P>\nvalue\n</parameter>\n</function>\n</tool_call> (Qwen3.5)
extern const CallSyntax kPythonListSyntax;    // <|tool_call_start|>[name(a="v", n=3), ...]<|tool_call_end|> (LFM2, LFM2.5)
extern const CallSyntax kGemma4Syntax;        // <|tool_call>call:NAME{key:<|"|>v<|"|>,n:3}<tool_call|>, repeatable (Gemma 4; gemma4_calls.h)

// Calls a model wrote in a syntax with its own reader (syntax.read), read back into OpenAI calls
// whose arguments_json is a compact JSON object (id left empty); calls cut off before their end,
// or malformed, are dropped. Empty for the JSON syntaxes (openai.h reads those).
//   QwenXml: every <tool_call> block's <function=NAME> and its <parameter=P> values (one newline
//     after the open tag and one before </parameter> belong to the syntax). A value is typed by
//     the parameter's schema in tools_json (type, enum/const, anyOf/oneOf, local $ref): a
//     parameter that can only be a string keeps the raw text; otherwise the text is read as JSON
//     (or True / False / None, as the template writes them) when that gives an allowed non-string
//     type, and is the raw string otherwise.
//   PythonList: [name(k=v, ...), ...] after each <|tool_call_start|> (or a reply that is a bare
//     list); Python literals (True, False, None, quoted strings with escapes, lists, dicts, tuples)
//     become JSON.
//   Gemma4: gemma4_calls.h; the calls read whole before an error are kept.
std::vector<ToolCall> parse_native_tool_calls(const CallSyntax& syntax, std::string_view text, std::string_view tools_json);

}  // namespace picolm
