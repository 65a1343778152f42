// Gemma 3 instruct: Gemma 2 turns, the system prompt folded into the first user turn. No call syntax was
// trained: tools go through the JSON envelope (tool_format.h).
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"gemma3"};
constexpr std::string_view kStops[] = {"<end_of_turn>"};

bool detect(std::string_view t) {
  // FunctionGemma and other derivatives that render tools differ.
  return turn_markers(t) == TurnMarkers::Gemma && has_text(t, "first_user_prefix") && has_text(t, "<start_of_image>") &&
         !has_text(t, "tool");
}

// google/gemma-3-*-it tokenizer_config.json (as llama.cpp and Hugging Face copy it)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kGemma3Protocol = {
    .family = TemplateFamily::Gemma3,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "google/gemma-3-*-it tokenizer_config.json (as llama.cpp and Hugging Face copy it)",
    .tools = {"gemma3", false, nullptr, "", "", "", false, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
