// Plain ChatML: <|im_start|>role\n...<|im_end|>\n, no tool syntax (tools are lowered, tool_format.h).
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"chatml"};
constexpr std::string_view kStops[] = {"<|im_end|>"};

bool detect(std::string_view t) {
  // Plain ChatML only: templates with tools or a built-in default system prompt differ.
  return turn_markers(t) == TurnMarkers::ImStart && !has_text(t, "<tool_call>") && !has_text(t, "tool") && !has_text(t, "You are");
}

// the ChatML template llama.cpp and Hugging Face use for models without one
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kChatMLProtocol = {
    .family = TemplateFamily::ChatML,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "the ChatML template llama.cpp and Hugging Face use for models without one",
    .tools = {"chatml", false, nullptr, "", "", "", false, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
