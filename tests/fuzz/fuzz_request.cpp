// libFuzzer target: the OpenAI request parsers (chat completions, the plain tool-call API and the
// Responses API, whose requests are rewritten into chat-completions bodies and parsed again). Any
// body must be accepted or refused with an error naming a field; never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "openai.h"
#include "responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  picolm::ChatRequest req;
  picolm::ApiError err;
  if (!picolm::parse_chat_request(body, req, err)) {
    if (err.message.empty()) __builtin_trap();  // a refusal must say why
  }
  picolm::ChatRequest tc;
  picolm::ApiError terr;
  if (!picolm::parse_tool_call_request(body, tc, terr)) {
    if (terr.message.empty()) __builtin_trap();
  }
  picolm::ResponsesRequest rr;
  picolm::ApiError rerr;
  if (!picolm::parse_responses_request(body, nullptr, rr, rerr)) {
    if (rerr.message.empty()) __builtin_trap();
  }
  return 0;
}
