// Tool calling for chat templates that have no tool syntax of their own (ChatML, Zephyr, Gemma 2,
// Phi-3.5, or a template no protocol record recognises, rendered as written) or that do not show the tool list to the
// model (DeepSeek R1): rewrite an OpenAI conversation into plain messages the template can render.
//
//   - the tool list and the reply format go into the system message (Gemma 2, which refuses a
//     system role, gets them, and any system message, at the top of the first user turn);
//   - past assistant tool calls become assistant text in the same syntax the model is asked to use
//     (with the Envelope syntax and tools present, plain past replies become {"content": "..."});
//   - tool results become a user turn of <tool_response> blocks; consecutive user turns are merged
//     so templates that insist on alternation (Gemma 2) accept the conversation.
// With LoweredToolSyntax::Native, DeepSeek R1 instead keeps its own call / result rendering; only
// the tool list (in its own call syntax, worded as llama.cpp's R1 template words it) is added to the
// system prompt, and the content of a turn that also has tool calls is dropped (that template
// renders one or the other).
//
// Which syntax a family gets (the scheduler decides): SmolLM3, whose shipped template drops the
// tools but whose model was trained on <tool_call> JSON, gets Tagged; every family without a call
// syntax of its own, Gemma 3 included, gets the Envelope. Gemma 3 was trained on no call format
// (Google documents prompt-only function calling), so the best-supported form is the one that asks
// only for JSON, which it writes reliably, constrained from the first token; llama.cpp's server
// does the same for templates without a tool format. Gemma 3 keeps its system message: its
// template folds it into the first user turn itself.
//
// Families whose template renders tools natively (family_traits(f).renders_tool_list) need none
// of this: pass tools_json to render_chat instead.
//
// Thread-safety: pure functions; no shared state.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"

namespace picolm {

// The call syntax a lowered conversation asks for (the grammar engine constrains the same shapes).
enum class LoweredToolSyntax : uint8_t {
  Tagged,    // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeatable (Hermes style)
  Envelope,  // the whole reply is {"tool_calls": [{"name": ..., "arguments": {...}}]} or {"content": "..."}
  Native,    // DeepSeek R1: its own <｜tool▁calls▁begin｜> syntax; every other family: as Tagged
};

struct LoweredConversation {
  bool ok = false;
  std::vector<ChatMessage> messages;  // render these with render_chat(family, messages, {tools_json = ""})
  std::string error;                  // tools_json or tool-call arguments that are not valid JSON
};

// True when render_chat cannot present tools for this family by itself.
bool family_needs_tool_lowering(TemplateFamily family);

// Rewrites the conversation for a family that needs lowering (see the top of this file); for the
// others it returns the messages unchanged. tools_json is the OpenAI tools array ("" = none: the
// tool calls and results in the history are still rewritten).
LoweredConversation lower_tool_conversation(TemplateFamily family, std::span<const ChatMessage> messages,
                                            std::string_view tools_json,
                                            LoweredToolSyntax syntax = LoweredToolSyntax::Tagged);

// Past tool calls written the way the lowered prompt asks the model to write them
// (arguments re-serialised on one line, keys in their original order). Empty string and
// `error` set when an arguments text is not JSON.
std::string format_lowered_tool_calls(std::span<const ToolCall> calls, LoweredToolSyntax syntax,
                                      std::string* error);

}  // namespace picolm
