// Qwen2.5 instruct: ChatML with a "# Tools" system block, <tool_call> JSON calls, <tool_response> results.
#include "calls/call_syntax.h"
#include "protocol.h"
#include "qwen25_template.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"qwen2.5", "qwen25", "qwen"};
constexpr std::string_view kStops[] = {"<|im_end|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::ImStart && has_text(t, "<tool_call>") && !(has_text(t, "<function=") && has_text(t, "<parameter=")) &&
         has_text(t, "You are Qwen, created by Alibaba Cloud") && has_text(t, "<tool_response>") && !has_text(t, "reasoning_content") &&
         !has_text(t, "<think>");
}


}  // namespace

const ChatProtocol kQwen25Protocol = {
    .family = TemplateFamily::Qwen25,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kQwen25Template,
    .reference_origin = "huggingface.co/Qwen/Qwen2.5-7B-Instruct tokenizer_config.json (via llama.cpp models/templates)",
    .tools = {"qwen2.5", true, &kTaggedJsonSyntax, "<tool_call>", "</tool_call>", "arguments", true, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
