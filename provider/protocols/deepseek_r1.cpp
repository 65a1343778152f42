// DeepSeek-R1 distills: <｜User｜> / <｜Assistant｜>, <think> opened by the prompt; the template concatenates
// the arguments text of past calls and shows no tool list (tool_format.h adds one).
#include "calls/call_syntax.h"
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"deepseek-r1", "deepseek"};
constexpr std::string_view kStops[] = {"<｜end▁of▁sentence｜>"};

bool detect(std::string_view t) {
  // llama.cpp's own R1 template (tools listed, flushed outputs) renders differently.
  return turn_markers(t) == TurnMarkers::DeepSeek && !has_text(t, "flush_tool_outputs") &&
         !has_text(t, "You can call any of the following function tools");
}

// huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Llama-8B tokenizer_config.json (the Qwen distills render the same)
// (shared/templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kDeepSeekR1Protocol = {
    .family = TemplateFamily::DeepSeekR1,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Llama-8B tokenizer_config.json (the Qwen distills render the same)",
    .tools = {"deepseek-r1", false, &kDeepSeekR1Syntax, "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>", "", true, kStops},
    .reasoning = {true, "<think>", "</think>", "\n\n", true, false},
    .thinks = thinks_always,
    .arguments_as_text = true,
    .answer_after_last_think = true,
    .native_lowering = true,
};

}  // namespace picolm
