// JSON calls between tags, repeatable (grammar::ToolCallFormat::Hermes):
//   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
// The family's tool_call_start / tool_call_end are the tags; openai.h reads the calls. A template
// that shows no tools (SmolLM3) is lowered asking for the same syntax.
#include "calls/call_syntax.h"

namespace picolm {

const CallSyntax kTaggedJsonSyntax = {
    .name = "tagged-json",
    .grammar_format = grammar::ToolCallFormat::Hermes,
    .new_stream = new_json_call_stream,
    .lowered = LoweredToolSyntax::Tagged,
};

}  // namespace picolm
