// The OpenAI Responses API (POST /v1/responses) on top of the chat-completions request path.
//
// A Responses request is translated into the ChatRequest that POST /v1/chat/completions would
// produce for the same conversation (it is written as a chat-completions body and read by
// parse_chat_request), so validation, Engine::prepare, grammars, token budgets and the job
// machinery are the same; only the wire format around them differs:
//   input (a string, or items: messages, function_call, function_call_output, reasoning,
//   item_reference), instructions, tools (flat function tools), tool_choice, parallel_tool_calls,
//   text.format (text | json_object | json_schema), max_output_tokens, temperature, top_p, seed,
//   reasoning.effort, top_logprobs, stream, store, previous_response_id.
// Answers are response objects (output items: reasoning, message, function_call) and, streamed, the
// typed SSE events (response.created ... response.completed) with sequence numbers.
//
// Stored responses: with store (the default, as OpenAI's) the conversation of a response (its input
// items and output items) and its response object are kept in memory, bounded (ResponseStore), so
// that previous_response_id, item_reference and GET / DELETE /v1/responses/{id} work; after a
// restart, a delete, or once evicted, they are a 400 (404 for GET / DELETE) naming the id.
//
// Thread-safety: the functions are pure; a ResponseStore is internally synchronized; a
// ResponsesStream belongs to one streaming response.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "openai.h"

namespace picolm {

// One item of a conversation in Responses terms (input or output).
struct ResponseItem {
  enum class Kind { Message, FunctionCall, FunctionCallOutput, Reasoning };
  Kind kind = Kind::Message;
  std::string id;         // msg_... / fc_... / rs_... (output items; "" for input items without one)
  std::string role;       // Message: system | user | assistant
  std::string text;       // Message: its text; Reasoning: the reasoning text; FunctionCallOutput: the output
  std::string call_id;    // FunctionCall, FunctionCallOutput
  std::string name;       // FunctionCall
  std::string arguments;  // FunctionCall: the arguments object as JSON text
};

// Recent responses: their conversations, for previous_response_id and item_reference, and the
// response objects, for GET /v1/responses/{id}. Bounded by the number of responses and by the
// bytes of their items and objects; the oldest go first.
class ResponseStore {
 public:
  explicit ResponseStore(size_t max_responses = 512, size_t max_bytes = 64u << 20);
  // conversation: the input items followed by the output items (which are indexed by id).
  // response_json: the response object as it was answered.
  void put(const std::string& response_id, std::vector<ResponseItem> conversation, std::string response_json = {});
  std::optional<std::vector<ResponseItem>> conversation(const std::string& response_id) const;
  std::optional<ResponseItem> item(const std::string& item_id) const;
  std::optional<std::string> response(const std::string& response_id) const;
  // Forgets a response (DELETE /v1/responses/{id}); false if it is not kept.
  bool erase(const std::string& response_id);
  size_t size() const;

 private:
  struct Entry {
    std::vector<ResponseItem> items;
    std::string response_json;
    size_t bytes = 0;
  };
  void erase_locked(std::map<std::string, Entry>::iterator it);
  mutable std::mutex mu_;
  const size_t max_responses_, max_bytes_;
  size_t bytes_ = 0;
  std::deque<std::string> order_;               // response ids, oldest first
  std::map<std::string, Entry> responses_;
  std::map<std::string, std::pair<std::string, size_t>> items_;  // item id -> (response id, index)
};

struct ResponsesRequest {
  ChatRequest chat;                        // what Engine::prepare gets
  std::vector<ResponseItem> conversation;  // previous_response_id's items + this input (not instructions)
  bool store = true;
  std::string previous_response_id;
  // Echoed in the response object (minified JSON; "" = null / default).
  std::optional<std::string> instructions;
  std::string tools_json = "[]";            // the request's tools as sent
  std::string tool_choice_json = "\"auto\"";
  std::string text_format_json = R"({"type":"text"})";
  std::string metadata_json = "{}";
  std::optional<int64_t> max_output_tokens;
};

// Parses and validates a POST /v1/responses body; `store` resolves previous_response_id and
// item_reference (nullptr: both are a 400).
bool parse_responses_request(std::string_view body, const ResponseStore* store, ResponsesRequest& out, ApiError& err);
// An error about the translated chat request (from parse_chat_request or Engine::prepare) names the
// chat-completions fields; this renames them to the Responses API's (messages -> input,
// response_format -> text.format, max_completion_tokens -> max_output_tokens, tools[i].function.x -> tools[i].x).
void responses_error_names(ApiError& err);

// Makes a fresh id with the given prefix ("resp_", "msg_", "fc_", "rs_").
using ItemIdFn = std::function<std::string(std::string_view prefix)>;

struct ResponseHead {
  std::string id;  // resp_...
  int64_t created_at = 0;
  std::string model;
};

// The output items of a finished generation: reasoning (if any), the message (if it has text or
// there is no call), the function calls.
std::vector<ResponseItem> response_output_items(const Completion& c, const ItemIdFn& new_id);
// The response object. status: "completed", "incomplete" (max_output_tokens) or "in_progress"
// (c == nullptr: nothing generated yet).
std::string response_json(const ResponseHead& head, const ResponsesRequest& req, const Completion* c,
                          const std::vector<ResponseItem>& output);

// Writes the typed SSE events of one streamed response ("event: T\ndata: {...}\n\n" each).
class ResponsesStream {
 public:
  ResponsesStream(ResponseHead head, const ResponsesRequest& req, ItemIdFn new_id);
  std::string start();  // response.created, response.in_progress
  std::string reasoning_delta(std::string_view text);
  std::string text_delta(std::string_view text, const std::vector<TokenLogprob>* logprobs);
  // A tool call streamed while it is written (scheduler.h Delta): its item opens with the name,
  // then response.function_call_arguments.delta per piece; finish() closes it.
  std::string call_start(size_t index, std::string_view call_id, std::string_view name);
  std::string call_arguments_delta(size_t index, std::string_view piece);
  // Closes the open items, writes the calls and response.completed / response.incomplete.
  // `output` receives the output items (for the store).
  std::string finish(const Completion& c, std::vector<ResponseItem>& output);
  std::string fail(const std::string& message);  // error + response.failed

 private:
  std::string event(const std::string& type, const std::string& fields_json);
  std::string open_message();
  std::string close_reasoning();
  std::string close_message();

  ResponseHead head_;
  ResponsesRequest req_;
  ItemIdFn new_id_;
  int64_t seq_ = 0;
  int64_t next_index_ = 0;
  std::vector<ResponseItem> output_;
  // The item being streamed: -1 none, else its index in output_.
  int reasoning_open_ = -1, message_open_ = -1;
  std::vector<TokenLogprob> logprobs_;  // of the open message
  std::vector<size_t> calls_;  // the streamed calls' indexes in output_, by call index
  bool want_logprobs_ = false;
};

}  // namespace picolm
