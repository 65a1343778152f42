// Ollama's native API (POST /api/chat, /api/generate; GET /api/tags, /api/version, /api/ps; POST
// /api/show) on top of the chat-completions request path, as responses.h does for the Responses API.
//
// An /api/chat or /api/generate body is translated into the chat-completions body of the same
// conversation and read by parse_chat_request, so validation, Engine::prepare, grammars, token
// budgets and the job are the ones chat completions uses; only the wire format differs:
//   messages (role, content, thinking, tool_calls as {"function":{"name","arguments":{...}}},
//   tool results with tool_name or by position), tools, format ("json" or a JSON Schema), think
//   (true/false, or "low"/"medium"/"high"), options (temperature, top_p, top_k, min_p, seed,
//   num_predict, stop, repeat_penalty, presence_penalty, frequency_penalty, num_ctx), stream (default
//   true: NDJSON lines), keep_alive (accepted; the one model stays loaded).
// Answers are Ollama's objects: {"model","created_at","message":{...},"done":...} (chat) or
// {"model","created_at","response":...} (generate), the final one with done_reason and the counts
// and durations; errors are {"error":"text"} (the ollama clients print an OpenAI-shaped error
// object as "[object Object]").
//
// Thread-safety: everything here is a pure function of its arguments, safe on any HTTP thread.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "openai.h"

namespace picolm {

struct OllamaRequest {
  ChatRequest chat;       // what Engine::prepare gets (stream already resolved: Ollama's default is true)
  bool generate = false;  // /api/generate: the reply is "response", not "message"
  // No messages (chat) or an empty prompt (generate): Ollama's way to load a model; answered at
  // once with done_reason "load", nothing generated.
  bool load_only = false;
  std::string model;               // as sent (every name refers to the one model served)
  std::optional<int64_t> num_ctx;  // options.num_ctx as sent; the server's context applies (ollama_num_ctx_note)
};

// Parse and validate a POST /api/chat or /api/generate body.
bool parse_ollama_chat_request(std::string_view body, OllamaRequest& out, ApiError& err);
bool parse_ollama_generate_request(std::string_view body, OllamaRequest& out, ApiError& err);
// An error about the translated chat request (from parse_chat_request or Engine::prepare) names the
// chat-completions fields; this renames them to Ollama's (response_format -> format,
// max_completion_tokens -> options.num_predict, ...).
void ollama_error_names(ApiError& err);

// {"error":"text"}.
std::string ollama_error_json(std::string_view message);
// The message of an OpenAI-shaped error body ({"error":{"message":...}}) as {"error":"text"}; a body
// that is not one is kept as its text.
std::string ollama_error_from_openai(std::string_view openai_body);

// Ollama's timestamps: RFC 3339 in UTC with nanoseconds ("2026-11-26T15:10:33.123456789Z").
std::string ollama_timestamp(int64_t unix_nanos);

// Writes the answers of one generation: streamed lines (each a JSON object and "\n") or the whole
// answer.
class OllamaReply {
 public:
  OllamaReply(std::string model, bool generate) : model_(std::move(model)), generate_(generate) {}
  // A piece of the answer (thinking = reasoning text) as one NDJSON line, done false.
  std::string delta_line(std::string_view text, bool thinking, int64_t now_nanos) const;
  // The calls of a finished reply as one NDJSON line (done false); "" when there are none.
  std::string calls_line(const Completion& c, int64_t now_nanos) const;
  // The last line: done true, done_reason, the counts and durations (total_nanos: from arrival).
  std::string final_line(const Completion& c, int64_t now_nanos, int64_t total_nanos) const;
  // The whole answer (stream false): message or response with thinking and calls, and the counts.
  std::string whole(const Completion& c, int64_t now_nanos, int64_t total_nanos) const;
  // No generation (load_only): done true, done_reason "load".
  std::string load_only(int64_t now_nanos) const;

 private:
  std::string model_;
  bool generate_;
};

// What /api/tags, /api/show and /api/ps say about the model, read once from its GGUF file.
struct OllamaModelFacts {
  std::string name;                // the served model id
  int64_t size = 0;                // file bytes
  std::string digest;              // 64 hex digits: a fingerprint of the file's header and size (not a SHA-256 of the file)
  std::string modified_at;         // the file's mtime, RFC 3339
  std::string family;              // general.architecture
  std::string parameter_size;      // "1.5B", "260K": from the tensors' element counts
  std::string quantization_level;  // the type of most weight bytes: "Q4_K", "Q8_0", "F16", ...
  int64_t parameter_count = 0;
  std::string model_info_json = "{}";  // scalar GGUF metadata (arrays as null, as Ollama shows them)
  std::string chat_template;           // tokenizer.chat_template ("" when absent)
};
// Reads the facts; on a file that cannot be read, fills name and leaves the rest empty.
OllamaModelFacts read_ollama_model_facts(const std::string& model_path, const std::string& model_id);

std::string ollama_version_json();
std::string ollama_tags_json(const OllamaModelFacts& m);
// capabilities: e.g. {"completion","tools","thinking"}. parameters: Ollama's "name value" lines.
std::string ollama_show_json(const OllamaModelFacts& m, const std::vector<std::string>& capabilities,
                             int64_t n_ctx);
// The loaded model (none while loading): n_ctx is the server's context, size_vram 0 (CPU).
std::string ollama_ps_json(const OllamaModelFacts* loaded, int64_t n_ctx);

}  // namespace picolm
