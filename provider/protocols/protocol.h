// One record per model family: everything the provider needs to serve a family beyond rendering
// its template, in one place (like engine/arch/ for architectures). The template itself is always
// rendered by the Jinja interpreter (provider/jinja/): the model's own tokenizer.chat_template, or
// `--chat-template-file`, or for `--chat-template NAME` the record's reference template.
//
// A record says:
//   - how to recognise the family from the template text (detect);
//   - the published template it was written against (reference_template, origin beside it);
//   - its tool-call syntax (tools: a pointer to the syntax's record in calls/, which says the
//     grammar's call format, how calls are read back and streamed, whether the tags may be
//     control tokens; beside it the family's own tags, argument key, parallel calls, stop strings);
//   - its reasoning markers and whether the prompt lets the model think (reasoning, thinks);
//   - how an OpenAI conversation is handed to its template (the context quirks below) and
//     whether tools must be lowered into plain turns (tool_format.h).
// A template that no record recognises is rendered as written, and its tool calls go through
// the JSON envelope (the generic record, kGenericProtocol); the provider warns at start.
//
// To add a family whose call syntax exists already (calls/call_syntax.h): one file here defining
// its record (copy the closest one), its file in provider/CMakeLists.txt, its extern below, one
// line in registry.cpp, one TemplateFamily member in chat_template.h, and a test case (the
// family's line in tests/chat_template_cases.h; see docs/ARCHITECTURE.md). A new call syntax adds
// its own record file in calls/ (calls/call_syntax.h says what it holds). Nothing in the
// scheduler, the HTTP layer or the grammar vocabulary changes.
//
// Thread-safety: records are constants.
#pragma once
#include <optional>
#include <span>
#include <string_view>

#include "chat_template.h"
#include "grammar/grammar.h"

namespace picolm {

struct ChatProtocol {
  TemplateFamily family;
  std::span<const std::string_view> aliases;  // more names for --chat-template (the canonical one is tools.name)
  // Recognises the family's template. Records are tried in registry order; the first match wins.
  // nullptr: never detected (chosen by name only).
  bool (*detect)(std::string_view template_text);
  std::string_view reference_template;  // the published template, byte for byte
  std::string_view reference_origin;    // where it was published
  FamilyTraits tools;                   // tool-call syntax and stop strings
  ReasoningTraits reasoning;
  // Whether the prompt for these messages lets the model think, by the template's own rules.
  // nullptr: never (reasoning.supported is false) or always (prefills_open without switchable).
  bool (*thinks)(std::span<const ChatMessage> messages, std::optional<bool> enable_thinking);
  // How the conversation is given to the template (chat_template.h states the common rules):
  bool null_content_as_empty = false;  // a null content is given as "" (the template tests `in` on it)
  bool arguments_as_text = false;      // tool-call arguments stay JSON text (the template concatenates them)
  // The template renders no tool_calls: a turn's calls go into its content as the model writes
  // them, in the record's call syntax (LFM2's Python list; Phi-4-mini's tagged JSON array).
  bool calls_in_content = false;
  // The template reads no `tools` variable but a JSON text in the system message's `tools` field
  // (Phi-4-mini): the tool list (the functions of the OpenAI list, json.dumps spelling) is put
  // there, into the first message when it is a system message, else into an empty system message
  // put before the conversation.
  bool tools_in_system_message = false;
  // The generation prompt the template leaves out: with add_generation_prompt, a prompt that ends
  // with `after` gets `open` appended (Gemma 4 after a turn whose text and results it closed).
  struct TurnReopen {
    std::string_view after, open;
  } reopen_turn = {};
  // A marker that opens thinking blocks anywhere in a plain answer (Gemma 4's "<|channel>", of
  // which reasoning.open is the marker plus a name): such a block is reasoning, and a marker that
  // opens none or a stray reasoning.close ends the answer, as llama.cpp 3f545be reads Gemma 4's
  // replies (ReasoningSplitter). "": only a block at the start of the reply is reasoning.
  std::string_view answer_block_marker = {};
  // How tools are lowered into plain turns for a template that cannot show them (tool_format.h):
  bool system_in_first_user = false;    // no system role: the system text opens the first user turn (Gemma 2)
  bool answer_after_last_think = false;  // the template keeps only what follows a past reply's last </think> (DeepSeek R1)
  // With LoweredToolSyntax::Native the template's own call and result rendering stays; only the
  // tool list is added to the system prompt (DeepSeek R1). Otherwise Native is lowered as Tagged.
  bool native_lowering = false;
};

// The record of a family (the generic one for TemplateFamily::Unknown).
const ChatProtocol& protocol_of(TemplateFamily family);
// Every family record, in detection order (without the generic one).
std::span<const ChatProtocol* const> all_protocols();
// The record whose detect() accepts the template, or nullptr.
const ChatProtocol* detect_protocol(std::string_view template_text);

// Helpers for detect(): substring tests on the template text.
inline bool has_text(std::string_view t, std::string_view s) { return t.find(s) != std::string_view::npos; }

// Thinking rules shared by several records.
bool thinks_unless_disabled(std::span<const ChatMessage> messages, std::optional<bool> enable_thinking);
bool thinks_always(std::span<const ChatMessage> messages, std::optional<bool> enable_thinking);

extern const ChatProtocol kGenericProtocol;
extern const ChatProtocol kChatMLProtocol;
extern const ChatProtocol kQwen25Protocol;
extern const ChatProtocol kHermesProtocol;
extern const ChatProtocol kLlama31Protocol;
extern const ChatProtocol kLlama32Protocol;
extern const ChatProtocol kZephyrProtocol;
extern const ChatProtocol kMistralNemoProtocol;
extern const ChatProtocol kGemma2Protocol;
extern const ChatProtocol kPhi35Protocol;
extern const ChatProtocol kDeepSeekR1Protocol;
extern const ChatProtocol kQwen3Protocol;
extern const ChatProtocol kSmolLM3Protocol;
extern const ChatProtocol kGemma3Protocol;
extern const ChatProtocol kQwen35Protocol;
extern const ChatProtocol kLfm2Protocol;
extern const ChatProtocol kLfm25Protocol;
extern const ChatProtocol kGemma4Protocol;
extern const ChatProtocol kPhi4MiniProtocol;
extern const ChatProtocol kGranite4Protocol;

}  // namespace picolm

namespace picolm {

// Which turn markers a template uses, by the first of these it contains (templates of other
// families may mention later ones in text): the coarse split detect() functions start from.
enum class TurnMarkers : uint8_t { DeepSeek, Gemma, Inst, Llama3Header, ImStart, UserAssistant, Other };
TurnMarkers turn_markers(std::string_view template_text);

}  // namespace picolm
