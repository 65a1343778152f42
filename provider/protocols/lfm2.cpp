// LFM2: <|tool_list_start|>, Python-style calls in <|tool_call_start|>[f(a=1)]<|tool_call_end|>, written into the
// assistant content (the template renders no tool_calls).
#include "calls/call_syntax.h"
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"lfm2"};
constexpr std::string_view kStops[] = {"<|im_end|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::ImStart && has_text(t, "List of tools: <|tool_list_start|>[") &&
         has_text(t, "<|tool_response_start|>") && has_text(t, "<|tool_list_end|>");
}

// huggingface.co/LiquidAI/LFM2-8B-A1B tokenizer_config.json
// (shared/templates/LFM2-8B-A1B.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({{- bos_token -}}
{%- set system_prompt = "" -%}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages[0]["role"] == "system" -%}
	{%- set ns.system_prompt = messages[0]["content"] -%}
	{%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
	{%- set ns.system_prompt = ns.system_prompt + ("\n" if ns.system_prompt else "") + "List of tools: <|tool_list_start|>[" -%}
	{%- for tool in tools -%}
		{%- if tool is not string -%}
			{%- set tool = tool | tojson -%}
		{%- endif -%}
		{%- set ns.system_prompt = ns.system_prompt + tool -%}
		{%- if not loop.last -%}
			{%- set ns.system_prompt = ns.system_prompt + ", " -%}
		{%- endif -%}
	{%- endfor -%}
	{%- set ns.system_prompt = ns.system_prompt + "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system_prompt -%}
	{{- "<|im_start|>system\n" + ns.system_prompt + "<|im_end|>\n" -}}
{%- endif -%}
{%- for message in messages -%}
	{{- "<|im_start|>" + message["role"] + "\n" -}}
	{%- set content = message["content"] -%}
	{%- if content is not string -%}
		{%- set content = content | tojson -%}
	{%- endif -%}
	{%- if message["role"] == "tool" -%}
		{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}
	{%- endif -%}
	{{- content + "<|im_end|>\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
	{{- "<|im_start|>assistant\n" -}}
{%- endif -%})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kLfm2Protocol = {
    .family = TemplateFamily::Lfm2,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/LiquidAI/LFM2-8B-A1B tokenizer_config.json",
    .tools = {"lfm2", true, &kPythonListSyntax, "<|tool_call_start|>", "<|tool_call_end|>", "", true, kStops},
    .reasoning = {},
    .thinks = nullptr,
    .calls_in_content = true,
};

}  // namespace picolm
