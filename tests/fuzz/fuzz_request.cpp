// libFuzzer target: the OpenAI request parser (chat completions and the plain tool-call API). Any
// body must be accepted or refused with an error naming a field; never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "openai.h"

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
  return 0;
}
