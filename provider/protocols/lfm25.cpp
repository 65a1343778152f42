// LFM2.5 Instruct: "List of tools: [...]", Python-style calls as LFM2, past </think> stripped.
#include "calls/call_syntax.h"
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"lfm2.5", "lfm25"};
constexpr std::string_view kStops[] = {"<|im_end|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::ImStart && has_text(t, "\"List of tools: [\"") && has_text(t, "keep_past_thinking") &&
         has_text(t, "last_assistant_index");
}

// huggingface.co/LiquidAI/LFM2.5-1.2B-Instruct tokenizer_config.json
// (shared/templates/LFM2.5-Instruct.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({{- bos_token -}}
{%- set keep_past_thinking = keep_past_thinking | default(false) -%}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages[0]["role"] == "system" -%}
    {%- set ns.system_prompt = messages[0]["content"] -%}
    {%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
    {%- set ns.system_prompt = ns.system_prompt + ("\n" if ns.system_prompt else "") + "List of tools: [" -%}
    {%- for tool in tools -%}
        {%- if tool is not string -%}
            {%- set tool = tool | tojson -%}
        {%- endif -%}
        {%- set ns.system_prompt = ns.system_prompt + tool -%}
        {%- if not loop.last -%}
            {%- set ns.system_prompt = ns.system_prompt + ", " -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set ns.system_prompt = ns.system_prompt + "]" -%}
{%- endif -%}
{%- if ns.system_prompt -%}
    {{- "<|im_start|>system\n" + ns.system_prompt + "<|im_end|>\n" -}}
{%- endif -%}
{%- set ns.last_assistant_index = -1 -%}
{%- for message in messages -%}
    {%- if message["role"] == "assistant" -%}
        {%- set ns.last_assistant_index = loop.index0 -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {{- "<|im_start|>" + message["role"] + "\n" -}}
    {%- set content = message["content"] -%}
    {%- if content is not string -%}
        {%- set content = content | tojson -%}
    {%- endif -%}
    {%- if message["role"] == "assistant" and not keep_past_thinking and loop.index0 != ns.last_assistant_index -%}
        {%- if "</think>" in content -%}
            {%- set content = content.split("</think>")[-1] | trim -%}
        {%- endif -%}
    {%- endif -%}
    {{- content + "<|im_end|>\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\n" -}}
{%- endif -%})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kLfm25Protocol = {
    .family = TemplateFamily::Lfm25,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/LiquidAI/LFM2.5-1.2B-Instruct tokenizer_config.json",
    .tools = {"lfm2.5", true, &kPythonListSyntax, "<|tool_call_start|>", "<|tool_call_end|>", "", true, kStops},
    .reasoning = {},
    .thinks = nullptr,
    .calls_in_content = true,
};

}  // namespace picolm
