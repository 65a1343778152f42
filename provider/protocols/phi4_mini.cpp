// Phi-4-mini instruct: Phi-3.5's turns without newlines (<|user|>...<|end|>); the tool list as JSON
// text in the system message's `tools` field, which the template writes as <|tool|>[...]<|/tool|>;
// calls written <|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|> (control tokens
// of its vocabulary; the JSON array after the tag as Ollama's phi4-mini template renders past calls
// and vLLM's phi4_mini_json parser reads them). The template renders neither tool_calls nor the
// `tools` variable: both go into the messages (calls_in_content, tools_in_system_message). Results
// are rendered as written: <|tool|>RESULT<|end|>. llama.cpp 3f545be has no parser of its own for it.
#include "calls/call_syntax.h"
#include "protocol.h"

namespace picolm {
namespace {

constexpr std::string_view kAliases[] = {"phi-4-mini"};
constexpr std::string_view kStops[] = {"<|end|>", "<|endoftext|>"};

bool detect(std::string_view t) {
  return turn_markers(t) == TurnMarkers::Other && has_text(t, "'<|' + message['role'] + '|>'") &&
         has_text(t, "'<|tool|>' + message['tools'] + '<|/tool|>'");
}

// huggingface.co/microsoft/Phi-4-mini-instruct tokenizer_config.json
// (tests/templates/microsoft-Phi-4-mini-instruct.jinja)
constexpr std::string_view kTemplate = R"PICOLM_TEMPLATE({% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %})PICOLM_TEMPLATE";

}  // namespace

const ChatProtocol kPhi4MiniProtocol = {
    .family = TemplateFamily::Phi4Mini,
    .aliases = kAliases,
    .detect = detect,
    .reference_template = kTemplate,
    .reference_origin = "huggingface.co/microsoft/Phi-4-mini-instruct tokenizer_config.json",
    .tools = {"phi4-mini", true, &kTaggedJsonArraySyntax, "<|tool_call|>", "<|/tool_call|>", "arguments", true, kStops},
    .reasoning = {},
    .thinks = nullptr,
    .calls_in_content = true,
    .tools_in_system_message = true,
};

}  // namespace picolm
