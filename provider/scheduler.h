// The engine side of the provider: one loaded model, N parallel slots (one Session, i.e. one KV
// cache, each), a bounded queue of generation jobs and one worker thread that runs them together.
//
// HTTP threads call Engine::prepare (render the chat template, tokenize, compile the grammar: all
// pure work on immutable shared state) and Engine::submit; the worker owns the slots, the thread
// pool and the prompt cache. The worker loop is continuous batching: admit queued jobs into free
// slots (restoring the longest cached prefix), build one batch (the next token of every generating
// slot plus bounded prefill chunks of admitted ones), evaluate it (eval_batch), then per slot sample
// under its grammar and emit. Results come back through the Job: a stream of content deltas and a
// final Completion.
//
// Thread-safety: Engine's public methods may be called from any thread. A Job's inputs are
// written by prepare() before submit() and never after; its outputs are guarded by its mutex.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"
#include "grammar/grammar.h"
#include "model.h"
#include "openai.h"
#include "reasoning.h"
#include "result.h"
#include "sampler.h"

namespace picolm {

namespace grammar { class Grammar; }
class Metrics;

// What prepare() does with a conversation that does not fit in a slot's context with its reply.
enum class ContextOverflow {
  // Keep the system prompt and the last user turn, drop the oldest turns (a user message and
  // everything up to the next one: replies, tool calls and their results go together) until the
  // prompt and the reply's budget fit; the cut moves in steps of about a quarter of the context, so
  // a chat's consecutive requests keep their cached prefix. The default: a chat bot resends its
  // whole history, and a 400 there is a dead end for its user; the response says how many
  // messages were dropped.
  DropOldest,
  Error,  // nothing dropped: 400 context_length_exceeded when the prompt alone does not fit
};
std::optional<ContextOverflow> parse_context_overflow(std::string_view s);  // "drop-oldest" | "error"

// Jump-forward decoding (issue 17 item 3): where the answer's grammar admits exactly one
// continuation (Matcher::forced_continuation: `{"name": "`, the rest of a tool name once its prefix
// is unique, `", "arguments": {"`, closing braces), the provider spells those bytes in the model's
// canonical tokens itself instead of sampling them, less the last token, which could merge with
// the free text after it (the model picks the boundary). On: the run is evaluated as one
// multi-token batch item (one forward step for the run). Step: the same tokens, one per step (the
// comparison mode: at temperature 0 its output is byte-identical to On's). Off: every token is
// sampled under the mask, as before jump-forward existed.
enum class JumpForward { Off, Step, On };
std::optional<JumpForward> parse_jump_forward(std::string_view s);  // "on" | "off" | "step"

// --parallel 0 (auto): as many slots as fit in half of the available memory (less `reserved`, the
// prompt cache's RAM tier), at least 1 and at most kMaxDefaultSlots: with 2-4 cores, more
// concurrent streams than that gain little aggregate speed and divide each stream's rate.
constexpr int kMaxDefaultSlots = 4;
int default_slot_count(uint64_t available_bytes, uint64_t reserved_bytes, uint64_t bytes_per_slot);

struct EngineOptions {
  std::string model_path;
  std::string model_id;        // "" = file name without .gguf
  int threads = 0;             // 0 = physical cores
  Repack repack = Repack::Auto;  // weights repacked at load (ModelOptions::repack)
  int n_ctx = 0;               // 0 = min(training context, 4096)
  std::string chat_template;   // "" = the GGUF's own template; else a family name (family_from_name)
  std::string chat_template_file;  // "" = the GGUF's own template; else a Jinja file rendered instead
  int parallel = 0;            // slots (sequences generating at once); 0 = default_slot_count
  // Prompt tokens per step for admitted requests while other slots stream: the streams' step time
  // grows by about this many tokens of prefill, a new request's first token waits for
  // prompt / prefill_chunk steps.
  int prefill_chunk = 32;
  ContextOverflow context_overflow = ContextOverflow::DropOldest;
  size_t max_queue = 16;       // jobs waiting for a free slot (not counting the running ones)
  // Per request, from arrival (queue wait included); then finish_reason "length". Below PicoClaw's
  // 120 s client timeout, so a slow generation still returns an answer.
  double timeout_sec = 110.0;
  std::string cache_dir;       // prompt cache on disk ("" = off)
  size_t cache_max_mb = 1024;
  size_t cache_ram_mb = 256;
  // Tests only: PromptCacheOptions::inside_write (picolm-provider sets it from
  // PICOLM_TEST_HOLD_CACHE_WRITE to hold a cache write for a kill -9).
  std::function<void(std::string_view temp_path, uint64_t file_bytes)> cache_inside_write;
  size_t grammar_cache_mb = 64;  // compiled grammars kept (bytes incl. their mask caches)
  // --property-order: the order generated objects write their listed properties in (schema
  // order by default: cheaper masks; docs/GRAMMAR.md "Property order").
  grammar::PropertyOrder property_order = grammar::PropertyOrder::Schema;
  // Grammar compilations running at once on the HTTP threads (the others wait for a turn): bounds
  // the compile scratch that many clients with large schemas hold together (docs/RELIABILITY.md).
  // One: a compile is a CPU burst of up to a second or two, and on the 2-4 core boards this serves
  // the engine worker needs the other cores.
  int max_parallel_compiles = 1;
  ReasoningMode reasoning = ReasoningMode::Auto;  // --reasoning: thinking when a request does not say
  JumpForward jump_forward = JumpForward::On;     // --jump-forward: forced grammar runs as one batch
  // --volatile-context: the volatile lines of a system message (a clock, a sender) are moved into
  // a note on the latest message, so the rest stays a cached prefix (volatile_lines.h).
  bool volatile_context = true;
};

// How the reply is produced and read back.
enum class OutputMode {
  Plain,        // free text (stop strings apply)
  Json,         // response_format: the whole reply constrained by a schema
  ToolsTagged,  // native <tool_call> format, tool_choice auto: free text; at the trigger the grammar takes over
  ToolsForced,  // native format, tool_choice required/named: constrained from the first token
  Envelope,     // no native format: {"tool_calls":[...]} or {"content":"..."} from the first token
                // (with response_format beside the tools: {"content": <the schema's instance>})
  // Native format, tool_choice auto with response_format: the calls or the schema's JSON answer,
  // one grammar from the first token (ToolListOptions::answer_schema); the branch is the one the
  // reply took (Job::call_grammar follows the calls alone).
  ToolsOrJson,
};

// The modes whose answer is under the grammar from its first token (after any think block).
inline bool constrained_from_start(OutputMode m) {
  return m == OutputMode::Json || m == OutputMode::ToolsForced || m == OutputMode::Envelope ||
         m == OutputMode::ToolsOrJson;
}

// A streamed piece of the reply: answer text, reasoning (thinking) text, or a tool call's start or
// a piece of its arguments (call_stream.h: the pieces of a call concatenate to its final arguments;
// the call's id and index are the final Completion's).
struct Delta {
  std::string text;  // answer or reasoning text, or (call >= 0) a piece of the call's arguments
  bool reasoning = false;
  int call = -1;            // >= 0: the index of the tool call this delta belongs to
  std::string call_id;      // non-empty: the call starts here (with its name)
  std::string call_name;
};

class Job {
 public:
  // ---- inputs (set by Engine::prepare) ----
  std::vector<int32_t> prompt;
  // Tokens of the prompt that later turns will repeat: everything before the last user message
  // (the system prompt, tools and history). Only this part is saved to the prompt cache, so the
  // new turn and any dynamic tail do not pollute the cache keys.
  size_t stable_len = 0;
  SamplerParams sampling;
  // Token budget (token_budget.h): the reply never exceeds max_tokens (the
  // client's, else the default for constrained output, and never more than the context's room).
  int64_t max_tokens = 0;
  // tool_choice auto without a client max_tokens: a call, once its trigger fired, gets at most this
  // many more tokens (the free text before it is bounded by the context only). 0 = no extra bound.
  int64_t call_max_tokens = 0;
  OutputMode mode = OutputMode::Plain;
  std::shared_ptr<const grammar::Grammar> grammar;  // null for Plain
  // ToolsOrJson: the calls alone (the same format without the answer): a reply it still accepts is
  // (on its way to being) calls; once it refuses the reply, the reply is the answer and streams.
  std::shared_ptr<const grammar::Grammar> call_grammar;
  // Envelope with response_format beside the tools: "content" holds the schema's instance.
  bool envelope_json_content = false;
  std::string trigger;     // ToolsTagged/ToolsForced: "<tool_call>"
  std::string close_tag;   // "</tool_call>"
  std::string tools_json;  // native Qwen3.5 / LFM2 calls: the tools, to read the calls back (tool_format.h)
  bool trigger_at_start = false;  // bare-JSON calls (Llama 3.x): the trigger counts only before any text
  std::vector<std::string> stop;  // Plain/ToolsTagged: text that ends the reply
  ThinkingPlan thinking;   // <think> handling (reasoning.h); the modes above apply to the answer after it
  std::chrono::steady_clock::time_point arrived, deadline;
  std::string endpoint;    // for the log line
  int64_t dropped_messages = 0;  // oldest messages left out to fit the context (ContextOverflow)
  int64_t volatile_lines_moved = 0;  // system-message lines moved into the latest message's note
  // The request asked for the evaluated prompt (ChatRequest::return_prompt): the rendered text and
  // the messages it was rendered from (after moving volatile lines), as JSON.
  std::optional<std::string> evaluated_prompt_text;
  std::string evaluated_messages_json;
  int logprobs_top = -1;   // >= 0: record each sampled token's logprob with this many top tokens (logprobs.h)
  JumpForward jump_forward = JumpForward::On;  // EngineOptions::jump_forward (a bench may set it per job)

  // ---- control ----
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // ---- outputs ----
  // Waits up to `timeout` for news; moves pending content deltas into `deltas`. Returns true once the
  // job is finished (then result() is final and all deltas have been handed out).
  bool wait(std::chrono::milliseconds timeout, std::vector<Delta>& deltas);
  // A non-streamed reply: waits until the job is finished, dropping the deltas; cancels it once
  // `client_gone()` says the client closed its connection (checked every 100 ms).
  void wait_unstreamed(const std::function<bool()>& client_gone);
  const Completion& result() const { return result_; }  // valid after wait() returned true
  bool failed() const { return !error_.empty(); }
  // The logprob entries recorded since the last call (streaming attaches them to the next chunk).
  std::vector<TokenLogprob> take_logprobs();
  const std::string& error() const { return error_; }

  // ---- worker side ----
  void push_delta(std::string text);
  void push_reasoning_delta(std::string text);
  void push_call_start(int index, std::string id, std::string name);
  void push_call_arguments(int index, std::string piece);
  void push_logprob(TokenLogprob lp);
  // With logprobs_top >= 0, the recorded entries become c.logprobs.
  void finish(Completion c, std::string error = {});

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> deltas_;
  std::vector<TokenLogprob> logprobs_;  // every entry so far
  size_t logprobs_taken_ = 0;           // entries handed out by take_logprobs()
  bool done_ = false;
  Completion result_;
  std::string error_;
};

// What the engine may keep resident, by part (docs/RELIABILITY.md "Memory"; the server adds the
// request bodies in flight and a constant, and prints the sum at start-up).
struct EngineMemoryBudget {
  uint64_t model = 0;             // the GGUF file's size (weights mmap'd, or repacked to about that size)
  uint64_t slots = 0;             // every slot's KV cache and recurrent state + the shared scratch
  uint64_t prompt_cache_ram = 0;  // --cache-ram-mb
  uint64_t grammar_cache = 0;     // --grammar-cache-mb
  int parallel_compiles = 0;      // grammar compiles running at once (each with its scratch)
  uint64_t compile_scratch = 0;   // one compile's scratch beyond its grammar (measured, see scheduler.cpp)
  uint64_t other = 0;             // the rest of the process: code, vocabulary tables, threads, allocator
  uint64_t total() const {
    return model + slots + prompt_cache_ram + grammar_cache + uint64_t(parallel_compiles) * compile_scratch + other;
  }
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& opts, Metrics& metrics);
  ~Engine();  // cancels queued jobs, joins the worker
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Renders, tokenizes and compiles the request into a job. nullptr and err on bad input (400).
  std::shared_ptr<Job> prepare(const ChatRequest& req, ApiError& err);
  // Queues the job; false when the queue is full.
  bool submit(std::shared_ptr<Job> job);
  size_t queue_depth() const;
  // Holds admission: queued jobs stay queued (tests; draining). Running jobs continue.
  void set_paused(bool paused);
  // Refuses new jobs, fails the queued ones and cancels the running ones (HTTP threads waiting on
  // them return promptly). Idempotent; the destructor calls it.
  void shutdown();

  // Evaluates the prompt of a conversation so its prefix is in the KV (and the prompt cache).
  // Blocks until done.
  Status warm(const ChatRequest& req);

  const std::string& model_id() const;
  int n_ctx() const;  // of each slot
  int slots() const;
  TemplateFamily family() const;  // the chat template's family (its record, protocols/); Unknown: rendered as written
  std::string description() const;
  EngineMemoryBudget memory_budget() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace picolm
