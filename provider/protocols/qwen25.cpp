// Qwen2.5 instruct: ChatML with a "# Tools" system block, <tool_call> JSON calls, <tool_response> results.
#include "calls/call_syntax.h"
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"qwen2.5", "qwen25", "qwen"};
constexpr std::string_view kStops[] = {"<|im_end|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::ImStart && has_text(t, "<tool_call>") && !(has_text(t, "<function=") && has_text(t, "<parameter=")) &&
         has_text(t, "You are Qwen, created by Alibaba Cloud") && has_text(t, "<tool_response>") && !has_text(t, "reasoning_content") &&
         !has_text(t, "<think>");
}

// huggingface.co/Qwen/Qwen2.5-7B-Instruct tokenizer_config.json (via llama.cpp models/templates)
// (shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kQwen25Protocol = {
    .family = TemplateFamily::Qwen25,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/Qwen/Qwen2.5-7B-Instruct tokenizer_config.json (via llama.cpp models/templates)",
    .tools = {"qwen2.5", true, &kTaggedJsonSyntax, "<tool_call>", "</tool_call>", "arguments", true, kStops},
    .reasoning = {},
    .thinks = nullptr,
};

}  // namespace picolm
