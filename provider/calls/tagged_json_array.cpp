// The calls of a turn as one JSON array between tags (grammar::ToolCallFormat::JsonArray with the
// family's tags as array_open / array_close):
//   <|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>
// Phi-4-mini writes it (its tags are control tokens of its vocabulary: control_tags). The family's
// tool_call_start / tool_call_end are the tags; openai.h reads the call objects inside.
#include "calls/call_syntax.h"

namespace picolm {

const CallSyntax kTaggedJsonArraySyntax = {
    .name = "tagged-json-array",
    .grammar_format = grammar::ToolCallFormat::JsonArray,
    .control_tags = true,
    .new_stream = new_json_call_stream,
    .calls_into_content = format_json_array_tool_calls,  // its template renders no tool_calls
};

}  // namespace picolm
