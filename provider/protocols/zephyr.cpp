// Zephyr / TinyLlama chat: <|user|>\n...</s>\n; no tool syntax.
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"zephyr", "tinyllama"};
constexpr std::string_view kStops[] = {"</s>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::UserAssistant && has_text(t, "eos_token") && !has_text(t, "<|end|>");
}

// the TinyLlama-1.1B-Chat GGUF (shared/golden/llama-spm32k-q4km.json)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kZephyrProtocol = {
    .family = TemplateFamily::Zephyr,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "the TinyLlama-1.1B-Chat GGUF (shared/golden/llama-spm32k-q4km.json)",
    .tools = {"zephyr", false, nullptr, "", "", "", false, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
