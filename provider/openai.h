// OpenAI wire format: request parsing and validation (chat completions, /tool_call), response and
// stream-chunk JSON, error objects. No engine state: everything here is a pure function of its
// arguments, safe to call from any HTTP thread.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"
#include "logprobs.h"
#include "reasoning.h"

namespace picolm {

// Tier-1 error for the HTTP edge: becomes {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
std::string error_json(const ApiError& e);

enum class ToolChoice { None, Auto, Required, Named };
enum class ResponseFormat { Text, JsonObject, JsonSchema };

struct ToolSpec {
  std::string name;
  std::string description;
  std::string parameters_json;  // the JSON Schema of the arguments ("{}" when absent)
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<ToolSpec> tools;
  std::string tools_json;  // the request's tools array, minified ("" when there are none)
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // Named
  bool parallel_tool_calls = true;
  ResponseFormat response_format = ResponseFormat::Text;
  std::string response_schema_json;  // JsonSchema: the schema, minified
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;      // extension (llama.cpp servers accept it too)
  std::optional<double> min_p;       // extension
  std::optional<double> repeat_penalty;  // extension
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  bool stream = false;
  bool include_usage = false;
  // logprobs: report the sampled tokens' log-probabilities (logprobs.h), with the top_logprobs
  // most likely allowed tokens of each step.
  bool logprobs = false;
  int top_logprobs = 0;
  // Thinking, resolved from every switch clients send (parse_thinking in openai.cpp has the
  // order): on/off and the effort; nullopt = not given.
  std::optional<bool> enable_thinking;
  std::optional<ReasoningEffort> reasoning_effort;
  // Extension "return_prompt": true: the response's "picolm" object carries the prompt as the model
  // was given it (the rendered text, and the messages after volatile lines were moved).
  bool return_prompt = false;
  // The tools came as the legacy "functions" (function_call as tool_choice): one call at most,
  // answered as message.function_call with finish_reason "function_call".
  bool legacy_functions = false;
};

// Parses and validates a POST /v1/chat/completions body. Unknown fields are ignored; a known field
// of the wrong type or an impossible value gives a 400 naming the field (ApiError::param).
bool parse_chat_request(std::string_view body, ChatRequest& out, ApiError& err);

// POST /tool_call: {"messages" | "prompt", "tools", "tool_choice"?, "system"?, "max_tokens"?,
// "temperature"?, "seed"?}. tool_choice defaults to "required" (the endpoint exists to get a call)
// and parallel_tool_calls to false.
bool parse_tool_call_request(std::string_view body, ChatRequest& out, ApiError& err);

struct GeneratedToolCall {
  std::string id;              // call_...
  std::string name;
  std::string arguments_json;  // minified arguments object
};

struct Timings {
  int64_t prompt_n = 0;      // prompt tokens evaluated (not taken from a cache)
  int64_t cached_n = 0;      // prompt tokens reused from the KV / prompt cache
  double prompt_ms = 0.0;    // prefill wall time
  int64_t predicted_n = 0;   // generated tokens
  double predicted_ms = 0.0; // decode wall time
  double queue_ms = 0.0;     // time waiting for the engine
};

struct Completion {
  std::optional<std::string> content;  // nullopt -> JSON null
  std::optional<std::string> reasoning_content;  // the <think> text; nullopt -> field absent
  std::vector<GeneratedToolCall> tool_calls;
  std::string finish_reason = "stop";  // stop | length | tool_calls
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;  // of completion_tokens: the think block's (open and close tags included)
  int64_t cached_tokens = 0;
  int64_t dropped_messages = 0;  // oldest messages left out to fit the context ("picolm" extension field)
  int64_t volatile_lines_moved = 0;  // system-message lines moved to the latest message (volatile_lines.h)
  // ChatRequest::return_prompt: the prompt as evaluated ("picolm": {"prompt", "messages"}).
  std::optional<std::string> evaluated_prompt_text;
  std::string evaluated_messages_json;
  Timings timings;
  std::optional<std::vector<TokenLogprob>> logprobs;  // the request asked for logprobs: one per sampled token
};

struct ResponseIds {
  std::string id;       // chatcmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;
  bool legacy_functions = false;  // ChatRequest::legacy_functions: the call as function_call
};

std::string chat_completion_json(const ResponseIds& ids, const Completion& c);
// Messages as an OpenAI "messages" array (tool-call arguments as JSON strings).
std::string messages_json(std::span<const ChatMessage> messages);
// Stream chunks (the JSON after "data: ").
std::string chunk_role_json(const ResponseIds& ids);
// logprobs: the entries to attach to this chunk (nullptr: "logprobs": null).
std::string chunk_content_json(const ResponseIds& ids, std::string_view delta,
                               const std::vector<TokenLogprob>* logprobs = nullptr);
std::string chunk_reasoning_json(const ResponseIds& ids, std::string_view delta);  // delta.reasoning_content
std::string chunk_tool_call_json(const ResponseIds& ids, size_t index, const GeneratedToolCall& call);
// A call streamed while it is written: its first chunk (id, type, name, empty arguments), then
// chunks with pieces of its arguments (index and function.arguments only), as OpenAI streams them.
std::string chunk_tool_call_start_json(const ResponseIds& ids, size_t index, std::string_view id, std::string_view name);
std::string chunk_tool_call_arguments_json(const ResponseIds& ids, size_t index, std::string_view piece);
std::string chunk_finish_json(const ResponseIds& ids, std::string_view finish_reason,
                              const std::vector<TokenLogprob>* logprobs = nullptr);
std::string chunk_usage_json(const ResponseIds& ids, const Completion& c);
// /tool_call response: {"tool_calls":[{"id","name","arguments":{...}}],"content"?,"finish_reason","usage"}
std::string tool_call_response_json(const Completion& c);
// The provider's one model is also listed as "picolm" (the id examples/picoclaw configures as
// openai/picolm), so a client that checks /v1/models for its configured id finds it whatever
// GGUF file is served. Requests may name any model; this only matters to such checks.
inline constexpr std::string_view kModelAlias = "picolm";
// The ids /v1/models lists: model_id, then kModelAlias unless model_id already is it.
std::vector<std::string> served_model_ids(const std::string& model_id);
std::string models_json(const std::string& model_id, int64_t created, int64_t n_ctx);
// GET /v1/models/{id}: the one model object.
std::string model_json(const std::string& model_id, int64_t created, int64_t n_ctx);
// {"content":[{"token","logprob","bytes","top_logprobs":[...]}...]}: choices[i].logprobs as OpenAI shapes it.
std::string logprobs_json(const std::vector<TokenLogprob>& entries);
// The array inside it ([{"token","logprob","bytes","top_logprobs"}...]): the Responses API's output_text.logprobs.
std::string logprobs_array_json(const std::vector<TokenLogprob>& entries);

// Parses the text inside <tool_call>...</tool_call> tags (Hermes/Qwen output) into calls. Entries
// that are not a JSON object with a string "name" and an object "arguments" are skipped.
// A reply that is itself one call (or an array of calls): {"name": ..., "arguments"|"parameters": {...}}.
std::vector<GeneratedToolCall> parse_bare_tool_calls(std::string_view text);
std::vector<GeneratedToolCall> parse_tagged_tool_calls(std::string_view text, std::string_view open_tag,
                                                       std::string_view close_tag);
// Parses the generic envelope {"tool_calls":[{"name","arguments"}...]} or {"content":"..."}.
// Returns false when text is not a complete envelope; `calls` then holds the complete calls of a
// reply that was cut off inside the tool_calls array.
bool parse_envelope(std::string_view text, std::vector<GeneratedToolCall>& calls,
                    std::optional<std::string>& content);

}  // namespace picolm
