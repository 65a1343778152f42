// Mistral's calls: [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}, ...]
// Not constrained by the grammar (no grammar_format): a family with this syntax gets its calls
// through the JSON envelope, whose calls are streamed as JSON objects.
#include "calls/call_syntax.h"

namespace picolm {

const CallSyntax kMistralArraySyntax = {
    .name = "mistral-array",
    .new_stream = new_json_call_stream,
};

}  // namespace picolm
