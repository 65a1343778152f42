// Gemma 2 instruct: <start_of_turn>user / model, no system role, no tool syntax.
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"gemma", "gemma2"};
constexpr std::string_view kStops[] = {"<end_of_turn>"};

bool detect(std::string_view t) {
  // Gemma 3 folds the system message into the first user turn instead of refusing it.
  return turn_markers(t) == TurnMarkers::Gemma && has_text(t, "System role not supported") && !has_text(t, "first_user_prefix");
}

// huggingface.co/google/gemma-2-2b-it tokenizer_config.json
// (shared/templates/google-gemma-2-2b-it.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '
' + message['content'] | trim + '<end_of_turn>
' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model
'}}{% endif %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kGemma2Protocol = {
    .family = TemplateFamily::Gemma2,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/google/gemma-2-2b-it tokenizer_config.json",
    .tools = {"gemma2", false, nullptr, "", "", "", false, kStops},
    .reasoning = {},
    .thinks = nullptr,
    .system_in_first_user = true,
};

}  // namespace picolm
