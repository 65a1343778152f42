// Phi-3.5 mini instruct: <|user|>\n...<|end|>\n; no tool syntax.
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"phi3", "phi3.5"};
constexpr std::string_view kStops[] = {"<|end|>", "<|endoftext|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::UserAssistant && has_text(t, "<|end|>") &&
         has_text(t, "message['role'] == 'system' and message['content']");
}

// huggingface.co/microsoft/Phi-3.5-mini-instruct tokenizer_config.json
// (shared/templates/microsoft-Phi-3.5-mini-instruct.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
' + message['content'] + '<|end|>
'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kPhi35Protocol = {
    .family = TemplateFamily::Phi35,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/microsoft/Phi-3.5-mini-instruct tokenizer_config.json",
    .tools = {"phi3.5", false, nullptr, "", "", "", false, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
