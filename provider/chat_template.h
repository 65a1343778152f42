// Chat prompt rendering: the model's own Jinja chat template run by the interpreter in
// provider/jinja/, with the context Hugging Face transformers gives it (trim_blocks, lstrip_blocks,
// tojson = json.dumps with ensure_ascii=False and key order kept, raise_exception, strftime_now).
// What a family needs beyond its template (detection, tool-call syntax, reasoning, stop strings,
// context quirks) is its record in provider/protocols/. tests/test_chat_template.cpp checks every
// family against python3-jinja2 running the real template files (tests/render_jinja.py).
//
// Conventions shared with that oracle, i.e. how an OpenAI-style request maps onto the template
// variables:
//   - an assistant message with tool calls and empty content has content = null;
//   - tool-call arguments are given to the template as a parsed JSON value (the template applies
//     tojson), except DeepSeek R1, whose template concatenates the argument text as it is;
//   - `tools` is defined only when the request has a non-empty tools array;
//   - Qwen3's template tests `'</think>' in message.content`, which Jinja cannot do on null: for
//     that family a null content is given as "" (as llama.cpp does for templates that need string
//     content), so tool-call turns from OpenAI clients render;
//   - the LFM2 / LFM2.5 templates render no tool_calls field: an assistant message's calls are
//     written into its content the way the model writes them (after a leading <think> block, if
//     any: <|tool_call_start|>[f(a=1, b="x")]<|tool_call_end|>, Python literals, json.dumps
//     spelling otherwise), and the template renders that content; arguments that are not an
//     object cannot be written and fail the render;
//   - `enable_thinking` is defined only when RenderOptions::enable_thinking is set, `date_string`
//     only when RenderOptions::date_string is not empty;
//   - an assistant message's reasoning_content is defined only when ChatMessage::reasoning_content
//     is set; tool_call_id and name only when not empty;
//   - when the template fails (raise_exception, or an operation Jinja rejects such as string +
//     null), render_chat fails too, with a message.
//
// Thread-safety: a ChatTemplate is immutable after create() and may be shared by threads;
// everything else is a pure function of its arguments.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jinja.h"

namespace picolm {

struct ToolCall {
  std::string id;              // e.g. "call_abc"; Mistral requires 9 alphanumeric characters
  std::string name;            // function name
  std::string arguments_json;  // the arguments object as JSON text
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool" (others pass through where the template allows)
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  std::string name;                  // optional
  // assistant only: the reasoning of a past turn as the client sends it back (DeepSeek / vLLM
  // style); nullopt = not given (Qwen3 then reads it from a <think> block in content)
  std::optional<std::string> reasoning_content;
};

struct RenderOptions {
  bool add_generation_prompt = true;
  std::string tools_json;  // OpenAI "tools" array as JSON text; "" or "[]" = no tools
  std::string bos_token;   // the model's BOS/EOS token text, e.g. "<s>", "</s>"
  std::string eos_token;
  // Llama 3.x "Today Date:". Empty = what the template does on its own: Llama 3.1/3.3 use the fixed
  // "26 Jul 2024"; Llama 3.2 uses today's local date (strftime "%d %b %Y").
  std::string date_string;
  // chat_template_kwargs.enable_thinking (Qwen3, SmolLM3); nullopt = undefined in the template.
  std::optional<bool> enable_thinking;
};

enum class TemplateFamily : uint8_t {
  Unknown,      // no record recognises the template: rendered as written, calls through the JSON envelope
  ChatML,       // plain <|im_start|>role\n...<|im_end|>\n, no tools
  Qwen25,       // Qwen2.5 instruct: ChatML + "# Tools" system block, <tool_call>, <tool_response>
  Hermes,       // NousResearch Hermes 2 Pro / Hermes 3 tool_use template
  Llama31,      // Llama 3.1 / 3.3 instruct (JSON tool calls, "Environment: ipython")
  Llama32,      // Llama 3.2 instruct (as 3.1, date from strftime_now)
  Zephyr,       // Zephyr / TinyLlama chat: <|user|>\n...</s>\n
  MistralNemo,  // Mistral Nemo 2407: [INST], [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]
  Gemma2,       // Gemma 2 instruct: <start_of_turn>user/model
  Phi35,        // Phi-3.5 mini instruct: <|user|>\n...<|end|>\n
  DeepSeekR1,   // DeepSeek-R1 distills (Llama and Qwen): <｜User｜>, <｜Assistant｜>
  Qwen3,        // Qwen3 (dense, 2025): ChatML + "# Tools", <tool_call> JSON, <think>, enable_thinking
  SmolLM3,      // SmolLM3-3B (the Unsloth template GGUFs ship): ChatML, /think /no_think, no tool list
  Gemma3,       // Gemma 3 instruct: Gemma 2 turns, the system prompt folded into the first user turn
  Qwen35,       // Qwen3.5: ChatML + "# Tools" (JSON tool lines), XML-parameter <tool_call>s, <think> prefilled
  Lfm2,         // LFM2 (e.g. LFM2-8B-A1B): <|tool_list_start|>, Python-style calls, <|tool_response_start|>
  Lfm25,        // LFM2.5 Instruct: "List of tools: [...]", Python-style calls, past </think> stripped
  Gemma4,       // Gemma 4: <|turn>ROLE, <|tool_call>call:NAME{key:VALUE}<tool_call|>, <|channel>thought
  Phi4Mini,     // Phi-4-mini instruct: Phi-3.5 turns, tools in the system message, <|tool_call|>[JSON]<|/tool_call|>
  Granite4,     // Granite 4.0 / 4.1: <|start_of_role|>ROLE<|end_of_role|>, <tools> JSON lines, <tool_call> JSON
};
constexpr TemplateFamily kLastTemplateFamily = TemplateFamily::Granite4;

// How a family's model writes tool calls in its output: one record per syntax (calls/call_syntax.h).
struct CallSyntax;

// A family's tool-call syntax and where its turn ends.
struct FamilyTraits {
  std::string_view name;         // canonical name, accepted by family_from_name
  bool renders_tool_list;        // the template shows the tools to the model
  const CallSyntax* call_syntax;  // nullptr: the template has no tool-call syntax
  std::string_view tool_call_start;  // output text that opens the tool calls ("" if none)
  std::string_view tool_call_end;    // output text that closes one call ("" = the JSON value ends it)
  std::string_view arguments_key;    // "arguments" or "parameters"
  bool parallel_tool_calls;          // several calls in one assistant turn
  // Text that ends the assistant turn (besides the EOS token id); the first one is what the
  // template appends after an assistant message, if it appends a fixed marker.
  std::span<const std::string_view> stop_strings;
};

const FamilyTraits& family_traits(TemplateFamily family);
std::string_view family_name(TemplateFamily family);

// Names for --chat-template: the canonical names plus aliases ("chatml", "qwen2.5"/"qwen",
// "hermes", "llama3"/"llama3.1"/"llama3.3", "llama3.2", "zephyr"/"tinyllama", "mistral"/"mistral-nemo",
// "gemma"/"gemma2", "phi3"/"phi3.5", "deepseek-r1", "qwen3", "smollm3", "gemma3", "qwen3.5"/"qwen35",
// "lfm2", "lfm2.5"/"lfm25", "gemma4"/"gemma-4", "phi4-mini"/"phi-4-mini", "granite4"/"granite-4"/"granite4.1"). Case-insensitive; nullopt if unknown.
std::optional<TemplateFamily> family_from_name(std::string_view name);

// Recognises the family from the template text by distinctive literals (each record's detect()).
// Unknown for templates no record knows (Command-R, Functionary, Firefunction, Llama 3.0, Mistral
// v1-v3, ...): those are still rendered as written.
TemplateFamily detect_template_family(std::string_view jinja_text);

// For the start-up warning about a template no record recognises: its size, its first line and
// the turn markers it uses, e.g. `2,113 bytes, first line "{%- for m in messages %}", turn markers: none known`.
std::string describe_template(std::string_view jinja_text);

// How a family's model writes its reasoning ("thinking") before the answer.
struct ReasoningTraits {
  bool supported = false;         // the model thinks inside open ... close
  std::string_view open, close;   // "<think>", "</think>"
  // What the model writes between close and the answer (the template's own rendering of a past
  // turn shows it): "\n\n" for Qwen3, "\n" for SmolLM3. Forced after close when the budget ends.
  std::string_view separator;
  bool prefills_open = false;     // the generation prompt ends with open (DeepSeek R1): the reply starts inside
  bool switchable = false;        // enable_thinking turns it off in the template
};
const ReasoningTraits& reasoning_traits(TemplateFamily family);

// Whether the prompt render_chat makes for these messages lets the model think, by the template's
// own rules: Qwen3 thinks unless enable_thinking is false; SmolLM3's "/no_think" or "/think" in the
// system message wins over enable_thinking; DeepSeek R1 always thinks; other families never.
bool template_thinks(TemplateFamily family, std::span<const ChatMessage> messages, std::optional<bool> enable_thinking);

struct ChatRenderResult {
  bool ok = false;
  std::string text;   // the prompt, when ok
  std::string error;  // what is wrong with the conversation, when !ok
};

// A chat template parsed once (per model) and the family whose record serves it.
class ChatTemplate {
 public:
  ChatTemplate() = default;
  // The template text as the model ships it (or --chat-template-file); `family` from
  // detect_template_family (Unknown: rendered as written, calls through the envelope). False, with
  // a message naming the template line, if the text is not a template the interpreter can run.
  static bool create(std::string_view text, TemplateFamily family, ChatTemplate* out, std::string* error);
  // The reference template of a family's record (--chat-template NAME); ChatML for Unknown.
  static const ChatTemplate& builtin(TemplateFamily family);
  TemplateFamily family() const { return family_; }
  ChatRenderResult render(std::span<const ChatMessage> messages, const RenderOptions& options) const;

 private:
  jinja::Template parsed_;
  TemplateFamily family_ = TemplateFamily::Unknown;
};

// Renders the conversation with the family's reference template (ChatTemplate::builtin). Fails on
// bad input (tools_json or tool-call arguments that are not JSON, conversations the template
// rejects) and for Unknown.
ChatRenderResult render_chat(TemplateFamily family, std::span<const ChatMessage> messages,
                             const RenderOptions& options);
// Renders the conversation with `tmpl`, under the conventions of tmpl.family()'s record.
ChatRenderResult render_chat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                             const RenderOptions& options);

// Jinja's `tojson` as the templates above see it (Python json.dumps with ensure_ascii=False, key
// order kept, Python's number spelling): re-serialises JSON text into `out`. indent < 0 gives one
// line with ", " and ": " separators. False, with a message in `error`, if the text is not JSON.
bool python_tojson(std::string_view json_text, std::string& out, int indent = -1, std::string* error = nullptr);
// A JSON string literal as Python's json.dumps(ensure_ascii=False) writes it.
std::string python_json_quote(std::string_view s);

// Tool calls as LFM2 writes them: <|tool_call_start|>[f(a=1, b="x"), g()]<|tool_call_end|>.
// False, with a message in `error`, when arguments are not a JSON object.
bool format_python_tool_calls(std::span<const ToolCall> calls, std::string& out, std::string* error = nullptr);
// A turn's calls as a tagged JSON array, as Phi-4-mini writes them (and Ollama's template for it
// renders them): <|tool_call|>[{"name": "f", "arguments": {"a": 1}}]<|/tool_call|>, json.dumps
// spelling, the family's tags and arguments key; appended to `out`.
bool format_json_array_tool_calls(std::span<const ToolCall> calls, const FamilyTraits& t, std::string& out,
                                  std::string* error);

}  // namespace picolm
