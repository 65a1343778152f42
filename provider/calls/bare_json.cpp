// The reply is the call itself, one per reply (grammar::ToolCallFormat::JsonObject):
//   {"name": ..., "parameters": {...}}   (the family's arguments_key names the arguments)
// openai.h reads the call.
#include "calls/call_syntax.h"

namespace picolm {

const CallSyntax kBareJsonSyntax = {
    .name = "bare-json",
    .grammar_format = grammar::ToolCallFormat::JsonObject,
    .call_is_reply = true,
    .new_stream = new_json_call_stream,
};

}  // namespace picolm
