// DeepSeek R1's calls:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>...
// Not constrained by the grammar (no grammar_format): the family's calls go through the JSON
// envelope (its template shows no tools, so the conversation is lowered asking for the envelope).
#include "calls/call_syntax.h"

namespace picolm {

const CallSyntax kDeepSeekR1Syntax = {
    .name = "deepseek-r1",
    .new_stream = new_json_call_stream,
};

}  // namespace picolm
