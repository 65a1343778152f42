#include "scheduler.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <thread>

#include "grammar/grammar.h"
#include "kernels/thread_pool.h"
#include "metrics.h"
#include "model.h"
#include "prompt_cache.h"
#include "call_stream.h"
#include "content_marks.h"
#include "grammar_vocab.h"
#include "token_budget.h"
#include "tool_format.h"
#include "volatile_lines.h"
#include "protocols/protocol.h"

namespace picolm {

using Clock = std::chrono::steady_clock;

static double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---------------------------------------------------------------- Job

void Job::wait_unstreamed(const std::function<bool()>& client_gone) {
  std::vector<Delta> ignored;
  while (!wait(std::chrono::milliseconds(100), ignored)) {
    ignored.clear();
    if (!cancelled() && client_gone()) cancel();
  }
}

bool Job::wait(std::chrono::milliseconds timeout, std::vector<Delta>& deltas) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !deltas_.empty(); });
  while (!deltas_.empty()) {
    deltas.push_back(std::move(deltas_.front()));
    deltas_.pop_front();
  }
  return done_;
}

void Job::push_delta(std::string text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas_.push_back(Delta{std::move(text), false, -1, "", ""});
  }
  cv_.notify_all();
}

void Job::push_call_start(int index, std::string id, std::string name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas_.push_back(Delta{"", false, index, std::move(id), std::move(name)});
  }
  cv_.notify_all();
}

void Job::push_call_arguments(int index, std::string piece) {
  if (piece.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas_.push_back(Delta{std::move(piece), false, index, "", ""});
  }
  cv_.notify_all();
}

void Job::push_reasoning_delta(std::string text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas_.push_back(Delta{std::move(text), true, -1, "", ""});
  }
  cv_.notify_all();
}

void Job::push_logprob(TokenLogprob lp) {
  std::lock_guard<std::mutex> lock(mu_);
  logprobs_.push_back(std::move(lp));
}

std::vector<TokenLogprob> Job::take_logprobs() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TokenLogprob> out(logprobs_.begin() + static_cast<std::ptrdiff_t>(logprobs_taken_), logprobs_.end());
  logprobs_taken_ = logprobs_.size();
  return out;
}

void Job::finish(Completion c, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (logprobs_top >= 0) c.logprobs = logprobs_;
    result_ = std::move(c);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

namespace {

// Prompt tokens per evaluation while no stream is running: small enough that a cancel or a timeout
// is noticed during a long prefill, large enough to amortize the weight reads.
constexpr size_t kPrefillSlice = 128;

// Length of the longest suffix of `text` that is a proper prefix of one of `needles`.
size_t partial_suffix(std::string_view text, const std::vector<std::string>& needles) {
  size_t best = 0;
  for (const auto& n : needles) {
    if (n.empty()) continue;
    size_t max = std::min(n.size() - 1, text.size());
    for (size_t k = max; k > best; --k) {
      if (text.compare(text.size() - k, k, n, 0, k) == 0) { best = k; break; }
    }
  }
  return best;
}

bool all_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}


// ---------------------------------------------------------------- thinking (issue 19)
//
// The <think> part of a reply: the tokens the provider writes itself (the open tag when thinking
// is on, the close tag and separator when the thinking budget is spent), the count against the
// budget, and the split into reasoning and content (ReasoningSplitter). The decode loop takes a
// forced token instead of sampling when there is one, feeds every decoded piece through split(),
// and starts the answer's grammar once answer_started().

class ThinkingDriver {
 public:
  // think_limit: thinking tokens (forced open included) after which close is forced.
  ThinkingDriver(const ThinkingPlan& plan, const Tokenizer& tok, bool constrained_answer, int64_t think_limit)
      : plan_(plan), tok_(tok), constrained_(constrained_answer), limit_(think_limit),
        splitter_(plan.open, plan.close, plan.start_inside, plan.block_marker) {
    if (!plan_.split) return;
    if (plan_.start_inside && limit_ <= 0) force_close();  // the prompt opened it; no tokens for it
    // Open the block only if there is room to think in it.
    bool opened = plan_.start_inside;
    if (plan_.force_open && limit_ > static_cast<int64_t>(tok_.encode(plan_.open + "\n", false, true).size())) {
      enqueue(plan_.open + "\n");
      opened = true;
    }
    // A constrained answer without an open block starts at the first token: its grammar leaves no
    // room for a block the model might open, so there is nothing to split.
    active_ = opened || !constrained_;
  }

  bool active() const { return active_; }
  bool thinking() const { return active_ && !splitter_.in_answer(); }
  // A stray marker ended the answer (ThinkingPlan::block_marker): the reply stops there.
  bool answer_ended() const { return active_ && splitter_.ended(); }
  // The answer (and its grammar) may start: thinking is over and nothing forced is pending.
  bool answer_started() const { return !active_ || (splitter_.in_answer() && forced_.empty()); }
  bool has_forced() const { return !forced_.empty(); }
  int32_t take_forced() {
    const int32_t id = forced_.front();
    forced_.pop_front();
    return id;
  }

  // An end-of-generation token was sampled inside the block. A constrained answer must still come,
  // so the block is closed instead; free text just ends (the reply is then reasoning only).
  bool close_instead_of_eog() {
    if (!thinking() || !constrained_ || closing_) return false;
    force_close();
    return true;
  }

  // Every generated piece (forced or sampled), in order. Returns the newly decided parts.
  ReasoningPiece split(std::string_view piece) {
    if (!active_) return ReasoningPiece{{}, std::string(piece)};
    if (!piece.empty()) last_char_ = piece.back();
    const bool was_thinking = splitter_.state() == ReasoningSplitter::State::Thinking;
    ReasoningPiece part = splitter_.push(piece);
    reasoning_ += part.reasoning;
    // The block's tokens: from the one that opens it to the one that closes it.
    if (was_thinking || splitter_.state() == ReasoningSplitter::State::Thinking) ++reasoning_tokens_;
    if (splitter_.state() == ReasoningSplitter::State::Thinking) {
      ++think_tokens_;
      if (!closing_ && think_tokens_ >= limit_ && forced_.empty()) force_close();
    } else if (was_thinking && splitter_.in_answer() && !closing_ && constrained_ && !plan_.separator.empty()) {
      // The model closed the block itself: write the template's separator for it, since the
      // answer's grammar starts at its first byte.
      closing_ = true;
      enqueue(plan_.separator);
    }
    return part;
  }
  ReasoningPiece finish() {
    if (!active_) return {};
    ReasoningPiece part = splitter_.finish();
    reasoning_ += part.reasoning;
    return part;
  }
  const std::string& reasoning() const { return reasoning_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void enqueue(const std::string& text) {
    for (int32_t id : tok_.encode(text, false, true)) forced_.push_back(id);
  }
  void force_close() {
    closing_ = true;
    enqueue((last_char_ == '\n' ? "" : "\n") + plan_.close + plan_.separator);
  }

  const ThinkingPlan& plan_;
  const Tokenizer& tok_;
  const bool constrained_;
  const int64_t limit_;
  bool active_ = false;  // the reply is split at all
  ReasoningSplitter splitter_;
  std::deque<int32_t> forced_;
  std::string reasoning_;
  int64_t think_tokens_ = 0;
  int64_t reasoning_tokens_ = 0;
  bool closing_ = false;  // the close (or the separator after the model's own close) is scheduled
  char last_char_ = '\n';
};

// Tokens the answer after </think> needs at least, kept free when the thinking budget is sized so
// that a constrained answer still fits in max_tokens: what finishing it from the grammar's start
// takes (token_budget.h, the closing mask's own bound; the call tags included) plus the closing
// margin, plus a few tokens so the answer is not forced onto its shortest spelling at once. This is
// the one place where thinking and the token budget (issue 13) meet. Free text (and tool_choice
// auto, whose call is optional and guarded by TriggerGuard) reserves nothing.
int64_t answer_reserve_tokens(const Job& job, const std::shared_ptr<const grammar::Vocabulary>& vocab) {
  if (!constrained_from_start(job.mode) || !job.grammar) return 0;
  constexpr int64_t kSlack = 2;
  const grammar::Matcher start(job.grammar, vocab);
  const int64_t finish = tokens_to_finish(start);
  return finish < 0 ? 0 : finish + kClosingMargin + kSlack;  // -1: unknown; nothing to reserve by
}

// Tokens a forced close costs at most (the newline before it included): kept free for it.
int64_t thinking_close_cost(const ThinkingPlan& plan, const Tokenizer& tok) {
  return plan.split ? static_cast<int64_t>(tok.encode("\n" + plan.close + plan.separator, false, true).size()) : 0;
}

// An envelope reply whose first key is "tool_calls" (not yet decided: false).
bool envelope_has_calls(std::string_view text) {
  size_t i = text.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || text[i] != '{') return false;
  i = text.find_first_not_of(" \t\r\n", i + 1);
  return i != std::string_view::npos && text.compare(i, 12, "\"tool_calls\"") == 0;
}

// Envelope with an answer schema: the text of the value of "content" in {"content": VALUE} as the
// model wrote it (the grammar fixed the frame; only whitespace surrounds VALUE); nullopt when the
// reply is not that (cut off, or calls).
std::optional<std::string> envelope_content_text(std::string_view text) {
  const size_t key = text.find("\"content\"");
  if (key == std::string_view::npos) return std::nullopt;
  size_t b = text.find(':', key);
  size_t e = text.find_last_of('}');
  if (b == std::string_view::npos || e == std::string_view::npos || e <= b) return std::nullopt;
  ++b;
  while (b < e && all_space(text.substr(b, 1))) ++b;
  while (e > b && all_space(text.substr(e - 1, 1))) --e;
  return std::string(text.substr(b, e - b));
}

// The calls of a reply: JSON objects (after the trigger, or the whole reply) or, for a syntax with
// its own reader, what that reader makes of the reply (calls/call_syntax.h).
std::vector<GeneratedToolCall> read_tool_calls(const Job& job, const CallSyntax* syntax, std::string_view text) {
  if (!syntax || !syntax->read)
    return job.trigger_at_start ? parse_bare_tool_calls(text) : parse_tagged_tool_calls(text, job.trigger, job.close_tag);
  std::vector<GeneratedToolCall> calls;
  for (auto& c : syntax->read(text, job.tools_json)) calls.push_back({"", c.name, c.arguments_json});
  return calls;
}

}  // namespace

// ---------------------------------------------------------------- Engine::Impl

class Generation;

// One KV slot: a Session and the request generating in it (null: free). The Session keeps its KV
// after a request, so the next request of the same chat admitted into it reuses that prefix.
struct Slot {
  int index = 0;
  std::unique_ptr<Session> session;
  std::unique_ptr<Generation> gen;
  uint64_t admitted = 0;   // admission order: older slots get the prefill budget first
};

struct Engine::Impl {
  EngineOptions opts;
  Metrics& metrics;
  std::shared_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::vector<Slot> slots;  // worker thread only (their count is fixed at create)
  std::unique_ptr<PromptCacheStore> cache;  // null when both tiers are off; shared by the slots
  std::unique_ptr<VolatileLineTracker> volatile_lines;  // null with --volatile-context off (HTTP threads; locked)
  std::shared_ptr<const grammar::Vocabulary> vocab;
  EngineMemoryBudget memory_budget;  // set by create()
  grammar::GrammarCache grammars{opts.grammar_cache_mb << 20, opts.max_parallel_compiles};  // opts is initialized first
  ChatTemplate chat_template;  // parsed once; rendered by the HTTP threads (immutable)
  TemplateFamily family = TemplateFamily::ChatML;  // chat_template.family(): its record (protocols/)
  std::string bos_text, eos_text;
  std::string model_id;
  int32_t n_vocab = 0;  // logits per position
  int32_t n_ctx = 0;    // each slot's context (immutable; read by HTTP threads)

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool paused = false;
  bool stopping = false;
  std::vector<std::shared_ptr<Job>> running;  // [slot]; guarded by mu (shutdown cancels them)
  std::thread worker;
  std::mt19937_64 id_rng{std::random_device{}()};  // worker thread only
  uint64_t admissions = 0;                          // worker thread only

  Impl(const EngineOptions& o, Metrics& m) : opts(o), metrics(m) {}
  ~Impl();

  // The worker: admit, then one batch step, until shutdown.
  void worker_loop();
  bool admit();
  void step();
  void release(Slot& slot);
  std::string new_call_id();

  // Engine::prepare, step by step (HTTP threads; read the immutable parts only, except the
  // grammar cache and the volatile-line tracker, which lock).
  struct Preparing;
  void choose_output_mode(Preparing& p) const;
  void select_messages(Preparing& p) const;
  bool render_prompt(Preparing& p, std::vector<ChatMessage> kept) const;
  bool fit_context(Preparing& p) const;
  void keep_evaluated_prompt(Preparing& p) const;
  void find_stable_prefix(Preparing& p) const;
  void native_call_options(Preparing& p, grammar::ToolListOptions& to) const;
  bool compile_grammar(Preparing& p);
  bool set_budgets(Preparing& p) const;
  void set_stops_and_sampling(Preparing& p) const;
};

std::string Engine::Impl::new_call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[id_rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

// ---------------------------------------------------------------- Generation
//
// One request in one slot, from admission to its Completion: the state Engine::Impl::run held in
// local variables when the engine ran one job at a time (sampler, grammar matcher, budget and
// closing state, thinking driver, stream decoder, stop-string and trigger scanning). The worker
// steps every slot's Generation once per batch: prefill_chunk() / prefill_evaluated() while the
// prompt is evaluated, then choose_tokens() / token_evaluated() for each generated token (or forced run); the
// evaluation in between runs for all slots together (eval_batch).

class Generation {
 public:
  Generation(Engine::Impl& engine, Slot& slot, std::shared_ptr<Job> job);
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  bool prefilling() const { return phase_ == Phase::Prefill; }
  bool done() const { return phase_ == Phase::Done; }

  // Up to max_n prompt tokens to evaluate in this step (empty: the prefill ended here, by cancel
  // or timeout, and the reply starts).
  std::span<const int32_t> prefill_chunk(size_t max_n);
  void prefill_evaluated(size_t n);
  // The tokens to evaluate in this step: one sampled token, or a run the grammar forced
  // (jump-forward, scheduler.h: the whole run with JumpForward::On, one token of it with Step).
  // Empty when the reply is finished (done() is then true). Valid until the next call.
  std::span<const int32_t> choose_tokens();
  void token_evaluated();
  // The evaluation of this step's tokens failed: the request fails, the slot's KV is dropped.
  void eval_failed(const std::string& what);

 private:
  enum class Phase { Prefill, Decode, Done };
  void end_prefill();
  void start_answer_grammar();
  void plan_jump(int64_t left);
  void emit_safe(bool final);
  void fail(const std::string& error);
  void finalize();

  Engine::Impl& e_;
  Slot& slot_;
  Session& session_;
  std::shared_ptr<Job> job_ptr_;
  Job& job_;
  const Tokenizer& tok_;
  Phase phase_ = Phase::Prefill;
  Completion out_;
  Clock::time_point started_, prefilled_, last_progress_log_;

  // ---- prefill ----
  size_t common_ = 0;    // prompt tokens the slot already held (its own KV or the prompt cache)
  size_t pos_ = 0;       // next prompt token to evaluate
  size_t store_at_ = 0;  // sliding-window and hybrid models: where the prefill stops to store / snapshot
  bool hybrid_ = false;  // recurrent layers: state snapshots at the stable prefix and the prompt's end
  bool cancelled_ = false, timed_out_ = false;

  // ---- decode ----
  std::optional<Sampler> sampler_;
  std::optional<StreamDecoder> decoder_;
  std::unique_ptr<grammar::Matcher> matcher_;
  // ToolsOrJson: the answer so far under the calls alone; null once it refuses it (an answer).
  std::unique_ptr<grammar::Matcher> call_matcher_;
  // Tool calls streamed as they are written (call_stream.h); null when the reply has no calls to read.
  std::optional<ToolCallStreamer> calls_stream_;
  std::vector<std::string> streamed_ids_;  // the ids given to the calls streamed so far
  void stream_calls(std::string_view calls_text);
  std::optional<ThinkingDriver> thinking_;
  std::optional<TriggerGuard> guard_;
  AnswerBudget budget_;
  bool answer_grammar_pending_ = false;
  std::vector<uint32_t> mask_;
  std::vector<float> logits_;
  // Stop strings (and, in ToolsTagged, the trigger) must never be streamed, not even in part:
  // text that could be the start of one is held back until it is decided.
  std::vector<std::string> holds_;
  bool streams_content_ = false;
  std::string text_;       // all generated text (Plain/Json/Tagged: the content part)
  std::string call_text_;  // ToolsTagged: from the trigger on
  size_t emitted_ = 0;     // bytes of text_ sent as deltas
  bool in_call_ = false;
  std::string finish_ = "length";
  int64_t generated_ = 0;
  int64_t limit_ = 0;      // max_tokens; a call under tool_choice auto may lower it (call_max_tokens)
  std::string raw_piece_;  // the text of the token(s) being evaluated
  std::vector<int32_t> run_;  // the tokens of this step (the batch item points at them)
  // Jump-forward: forced tokens planned but not yet emitted (nor accepted by the matcher).
  std::deque<int32_t> jump_queue_;
};

Generation::Generation(Engine::Impl& engine, Slot& slot, std::shared_ptr<Job> job)
    : e_(engine), slot_(slot), session_(*slot.session), job_ptr_(std::move(job)), job_(*job_ptr_),
      tok_(engine.model->tokenizer()) {
  started_ = last_progress_log_ = Clock::now();
  out_.timings.queue_ms = ms_between(job_.arrived, started_);
  out_.prompt_tokens = static_cast<int64_t>(job_.prompt.size());
  out_.dropped_messages = job_.dropped_messages;
  out_.volatile_lines_moved = job_.volatile_lines_moved;
  out_.evaluated_prompt_text = job_.evaluated_prompt_text;
  out_.evaluated_messages_json = job_.evaluated_messages_json;
  if (job_.cancelled()) {
    // Gone while queued: nothing was evaluated, so nothing is counted as prefill (issue 15 item 9).
    cancelled_ = true;
    end_prefill();
    return;
  }

  // ---- reuse the longest prefix we have: the slot's own KV, or the shared prompt cache's ----
  const auto& have = session_.tokens();
  size_t live = 0;
  while (live < have.size() && live < job_.prompt.size() && have[live] == job_.prompt[live]) ++live;
  e_.metrics.count_kv_reuse(live > 0);
  if (e_.cache) {
    common_ = e_.cache->restore(session_, job_.prompt);
    if (common_ > live) e_.metrics.count_prompt_cache(true);
    else if (common_ == 0) e_.metrics.count_prompt_cache(false);
  } else {
    common_ = live;
    if (common_ == job_.prompt.size()) --common_;  // re-evaluate the last token: we need its logits
    session_.truncate(static_cast<int32_t>(common_));
    // A sliding-window layer's ring reaches back only about n_batch positions: truncating past
    // that drops the whole sequence (Session::truncate), so continue from what is really there.
    common_ = static_cast<size_t>(session_.n_past());
  }
  out_.cached_tokens = static_cast<int64_t>(common_);
  out_.timings.cached_n = out_.cached_tokens;
  pos_ = common_;

  // Sliding-window layers (Gemma 3) keep only their last window: the stable prefix must be stored
  // while their rings still hold it, so the prefill stops at the stored length (a cache block
  // boundary), stores, and goes on, as prefill_with_cache does. Other models store after the reply.
  if (e_.cache && job_.stable_len > 0) {
    bool windows = false;
    for (int32_t l = 0; l < e_.model->hparams().n_layer; ++l) windows = windows || session_.kv_window(l) > 0;
    const size_t B = static_cast<size_t>(e_.cache->options().block_tokens);
    const size_t at = std::min(job_.stable_len, job_.prompt.size()) / B * B;
    if (windows && at >= common_ + 2 && at + 2 <= job_.prompt.size()) store_at_ = at;
  }
  // Hybrid models (recurrent layers) have their state only at n_past() and at kept snapshots
  // (Session::keep_state_snapshot), and truncate() can only go back to one. So, as
  // prefill_with_cache does, the prefill stops at the stable prefix (a cache block boundary when
  // there is a cache), keeps a snapshot there and stores it; and keeps one at the prompt's end.
  // A later request in this slot (the next turn, or another prompt with the same system prompt)
  // then goes back to one of them instead of to 0.
  hybrid_ = session_.has_recurrent_state();
  if (hybrid_) {
    // The state restored (prompt cache) or kept (live prefix) at common_ is a point to return to.
    const auto snaps = session_.state_snapshot_positions();
    if (common_ > 0 && std::find(snaps.begin(), snaps.end(), static_cast<int32_t>(common_)) == snaps.end())
      session_.keep_state_snapshot();
    if (job_.stable_len > 0) {
      const size_t B = e_.cache ? static_cast<size_t>(e_.cache->options().block_tokens) : 1;
      const size_t at = std::min(job_.stable_len, job_.prompt.size()) / B * B;
      if (at >= common_ + 2 && at + 2 <= job_.prompt.size()) store_at_ = at;
    }
  }
  if (pos_ >= job_.prompt.size()) end_prefill();
}

std::span<const int32_t> Generation::prefill_chunk(size_t max_n) {
  if (job_.cancelled()) cancelled_ = true;
  else if (Clock::now() > job_.deadline) timed_out_ = true;
  if (cancelled_ || timed_out_) {
    end_prefill();
    return {};
  }
  const size_t left = job_.prompt.size() - pos_;
  size_t n = std::min(max_n, left);
  if (n == 0) return {};
  // No one-token tail chunk: with weights that are not repacked a one-token evaluation takes the
  // decode kernels, whose float rounding differs from the prefill GEMM's (ARCHITECTURE.md, Numerics).
  if (left - n == 1) n = n > 1 ? n - 1 : n + 1;
  if (pos_ < store_at_ && pos_ + n > store_at_) n = store_at_ - pos_;
  return std::span<const int32_t>(job_.prompt.data() + pos_, n);
}

void Generation::prefill_evaluated(size_t n) {
  pos_ += n;
  if (pos_ == store_at_) {
    if (hybrid_) session_.keep_state_snapshot();
    if (e_.cache) e_.cache->store(session_, store_at_);
  }
  if (hybrid_ && pos_ == job_.prompt.size()) session_.keep_state_snapshot();
  // A prompt that takes minutes on a small board shows its progress in the log (rate, ETA).
  if (const auto now = Clock::now(); ms_between(last_progress_log_, now) >= 5000 && pos_ < job_.prompt.size()) {
    last_progress_log_ = now;
    const double done = double(pos_ - common_), todo = double(job_.prompt.size() - common_);
    const double rate = done * 1000.0 / std::max(ms_between(started_, now), 1.0);
    spdlog::info("slot {}: prefill {:.0f}/{:.0f} tokens ({:.0f}%), {:.1f} t/s, ETA {:.0f} s", slot_.index, done, todo,
                 100.0 * done / todo, rate, (todo - done) / std::max(rate, 1e-9));
  }
  if (pos_ >= job_.prompt.size()) end_prefill();
}

void Generation::end_prefill() {
  prefilled_ = Clock::now();
  // Only what was really evaluated: a request cancelled or timed out in the queue or in the middle
  // of its prefill counts the part it evaluated (issue 15 item 9).
  out_.timings.prompt_n = static_cast<int64_t>(pos_ > common_ ? pos_ - common_ : 0);
  out_.timings.prompt_ms = ms_between(started_, prefilled_);
  e_.metrics.add_prompt_tokens(out_.timings.prompt_n, out_.cached_tokens);
  e_.metrics.add_prefill_ms(out_.timings.prompt_ms);
  phase_ = Phase::Decode;

  sampler_.emplace(job_.sampling);
  for (int32_t t : job_.prompt) sampler_->accept(t);
  // LFM2's and Phi-4-mini's call tags (and Gemma 4's, in a GGUF that marks them so) are control
  // tokens: rendered, so the trigger and the call text see them.
  const CallSyntax* syntax = family_traits(e_.family).call_syntax;
  decoder_.emplace(tok_, syntax && syntax->control_tags);
  const bool from_start = constrained_from_start(job_.mode);
  // Thinking first (if any), then the answer: a constrained answer's grammar starts after </think>.
  // Sized only when there is thinking to size (the reserve compiles a matcher and tokenizes).
  const int64_t think_limit =
      job_.thinking.split && job_.thinking.budget > 0
          ? std::min<int64_t>(job_.thinking.budget, job_.max_tokens - thinking_close_cost(job_.thinking, tok_) -
                                                        answer_reserve_tokens(job_, e_.vocab))
          : 0;
  thinking_.emplace(job_.thinking, tok_, from_start, std::max<int64_t>(think_limit, 0));
  answer_grammar_pending_ = from_start;
  start_answer_grammar();
  mask_.assign((static_cast<size_t>(e_.n_vocab) + 31) / 32, 0u);
  logits_.assign(static_cast<size_t>(e_.n_vocab), 0.0f);
  holds_ = job_.stop;
  if (job_.mode == OutputMode::ToolsTagged) holds_.push_back(job_.trigger);
  streams_content_ = job_.mode == OutputMode::Plain || job_.mode == OutputMode::Json ||
                     job_.mode == OutputMode::ToolsTagged || job_.mode == OutputMode::ToolsOrJson;
  limit_ = job_.max_tokens;
  guard_.emplace(job_.mode == OutputMode::ToolsTagged ? job_.trigger : std::string(), job_.trigger_at_start,
                 job_.grammar, e_.vocab);
  if (job_.mode == OutputMode::ToolsTagged || job_.mode == OutputMode::ToolsForced ||
      job_.mode == OutputMode::ToolsOrJson || job_.mode == OutputMode::Envelope) {
    // The envelope's calls are JSON objects (nullptr); otherwise the family's own syntax.
    calls_stream_.emplace(job_.mode == OutputMode::Envelope ? nullptr : family_traits(e_.family).call_syntax,
                          job_.tools_json);
  }
}

// Hands the calls' news to the client: each call's start (with the id the Completion will carry)
// and the pieces of its arguments.
void Generation::stream_calls(std::string_view calls_text) {
  std::vector<CallEvent> events;
  calls_stream_->update(calls_text, events);
  for (CallEvent& ev : events) {
    if (ev.start) {
      streamed_ids_.push_back(e_.new_call_id());
      job_.push_call_start(static_cast<int>(ev.index), streamed_ids_.back(), std::move(ev.name));
    } else {
      job_.push_call_arguments(static_cast<int>(ev.index), std::move(ev.arguments));
    }
  }
}

void Generation::start_answer_grammar() {
  if (answer_grammar_pending_ && thinking_->answer_started()) {
    matcher_ = std::make_unique<grammar::Matcher>(job_.grammar, e_.vocab);
    if (job_.call_grammar) call_matcher_ = std::make_unique<grammar::Matcher>(job_.call_grammar, e_.vocab);
    answer_grammar_pending_ = false;
  }
}

void Generation::emit_safe(bool final) {
  if (!streams_content_ || emitted_ >= text_.size()) return;
  size_t safe = final ? text_.size() : text_.size() - partial_suffix(text_, holds_);
  // ToolsTagged: whitespace before a call is not content, so hold text back until it has
  // something else in it (the final answer's content then equals what was streamed).
  if (job_.mode == OutputMode::ToolsTagged && all_space(std::string_view(text_).substr(0, safe))) return;
  // ToolsOrJson: the answer streams once the reply can no longer be a call.
  if (job_.mode == OutputMode::ToolsOrJson && call_matcher_) return;
  if (safe > emitted_) {
    job_.push_delta(text_.substr(emitted_, safe - emitted_));
    emitted_ = safe;
  }
}

void Generation::fail(const std::string& error) {
  job_.finish(out_, error);
  session_.truncate(0);
  phase_ = Phase::Done;
}

void Generation::eval_failed(const std::string& what) {
  fail((phase_ == Phase::Prefill ? "prefill failed: " : "decode failed: ") + what);
}

// Jump-forward (scheduler.h): the grammar's forced bytes spelled in the tokenizer's canonical
// tokens, less the boundary token, bounded by the budget and the context. The tokens are checked
// against the grammar here and queued; choose_tokens() accepts and emits them. With the closing
// mode on (budget spent, deadline passed) nothing is planned: closing decides every token.
void Generation::plan_jump(int64_t left) {
  if (job_.jump_forward == JumpForward::Off || !matcher_ || budget_.closing() || timed_out_ ||
      thinking_->has_forced())
    return;
  // A run is at most this many bytes: longer forced runs (a long constant) continue in the next one.
  constexpr size_t kJumpMaxBytes = 256;
  const std::string forced = matcher_->forced_continuation(kJumpMaxBytes);
  if (forced.empty()) return;
  // As the chat text would be tokenized: user-defined tokens such as <tool_call> split out.
  std::vector<int32_t> ids = tok_.encode(forced, false, true);
  // Only tokens that spell the run from its start byte for byte and that the grammar knows (a
  // SentencePiece dummy prefix or a control token ends the run there).
  size_t k = 0, bytes = 0;
  for (; k < ids.size(); ++k) {
    const std::string& t = e_.vocab->token(ids[k]);
    if (t.empty() || forced.compare(bytes, t.size(), t) != 0) break;
    bytes += t.size();
  }
  const bool whole = k == ids.size() && bytes == forced.size();
  ids.resize(k);
  int accepted = 0;
  for (int32_t id : ids) {
    if (!matcher_->accept_token(id)) break;
    ++accepted;
  }
  ids.resize(static_cast<size_t>(accepted));
  // Back off at the boundary: the run's last token could merge with the free bytes after it (BPE
  // writes `":"` + `get` as `":` + `"get`), so the model picks the boundary token itself. Only a
  // run after which nothing but end-of-generation can follow keeps it.
  if (!ids.empty() && !(whole && ids.size() == k && matcher_->is_terminated())) {
    matcher_->rollback(1);
    ids.pop_back();
  }
  // The budget: after the run the answer must still be finishable without the closing mode (the
  // switch AnswerBudget::fill_mask would throw at the next step), so a jump never goes past what
  // closing allows; and the run must fit in the context.
  const auto fits_after = [&](int64_t n) {
    if (static_cast<int64_t>(session_.n_past()) + n > static_cast<int64_t>(session_.n_ctx())) return false;
    const int64_t left_after = left - n;
    if (matcher_->is_terminated()) return left_after >= 0;
    return budget_.stays_open(*matcher_, left_after);
  };
  while (!ids.empty() && !fits_after(static_cast<int64_t>(ids.size()))) {
    matcher_->rollback(1);
    ids.pop_back();
  }
  matcher_->rollback(static_cast<int>(ids.size()));
  jump_queue_.assign(ids.begin(), ids.end());
}

std::span<const int32_t> Generation::choose_tokens() {
  run_.clear();
  raw_piece_.clear();
  for (;;) {
    if (generated_ >= limit_ || cancelled_) break;
    if (job_.cancelled()) { cancelled_ = true; break; }
    if (!timed_out_ && Clock::now() > job_.deadline) {
      timed_out_ = true;
      // A constrained answer is finished along its shortest path rather than cut off.
      if (matcher_) budget_.force_closing();
      jump_queue_.clear();  // closing decides from here
    }
    if (timed_out_ && !matcher_) break;
    if (session_.n_past() >= session_.n_ctx()) break;
    const int64_t left = limit_ - generated_;

    if (jump_queue_.empty()) plan_jump(left);
    if (!jump_queue_.empty()) {
      // Forced tokens have no sampled choice: logprobs reports each with logprob 0 (probability 1:
      // the grammar left no other bytes) and itself as its only top entry.
      const size_t n = job_.jump_forward == JumpForward::On ? jump_queue_.size() : 1;
      for (size_t i = 0; i < n; ++i) {
        const int32_t id = jump_queue_.front();
        jump_queue_.pop_front();
        if (!matcher_->accept_token(id)) {
          fail("internal error: the grammar rejected a forced token");
          return {};
        }
        if (job_.logprobs_top >= 0) {
          TokenLogprob lp{tok_.token_to_piece(id, false), 0.0, {}};
          if (job_.logprobs_top > 0) lp.top.push_back(TopLogprob{lp.token, 0.0});
          job_.push_logprob(std::move(lp));
        }
        sampler_->accept(id);
        ++generated_;
        raw_piece_ += decoder_->push(id);
        run_.push_back(id);
      }
      e_.metrics.add_slot_tokens(slot_.index, static_cast<int64_t>(n));
      e_.metrics.add_jump_forward_tokens(static_cast<int64_t>(n));
      return run_;
    }

    int32_t id = -1;
    if (thinking_->has_forced()) {
      id = thinking_->take_forced();  // the provider writes <think> / </think> itself (no grammar is active then)
    } else {
      auto l = session_.logits();
      std::copy(l.begin(), l.end(), logits_.begin());
      const uint32_t* m = nullptr;
      if (matcher_) {
        budget_.fill_mask(*matcher_, left, mask_.data());
        m = mask_.data();
      } else if (thinking_->answer_started() && guard_->fill_mask(text_, left, mask_.data(), mask_.size())) {
        m = mask_.data();  // the trigger guard watches the answer only: a <tool_call> inside <think> opens nothing
      }
      id = sampler_->sample(logits_, m);
      if (id < 0) { finish_ = "stop"; break; }  // the grammar allows nothing: treat as the end
      if (matcher_ && !matcher_->accept_token(id)) {
        fail("internal error: the grammar rejected a token it allowed");
        return {};
      }
      if (matcher_ && !tok_.is_eog(id) && budget_.overshoots(*matcher_, left - 1)) {
        // The answer could not be finished after this token: take it back, redo the step closing.
        matcher_->rollback(1);
        std::copy(l.begin(), l.end(), logits_.begin());
        budget_.fill_mask(*matcher_, left, mask_.data());
        id = sampler_->sample(logits_, mask_.data());
        if (id < 0) { finish_ = "stop"; break; }
        if (!matcher_->accept_token(id)) {
          fail("internal error: the grammar rejected a token it allowed");
          return {};
        }
      }
      // logprobs (logprobs.h): the sampled token under the mask it was sampled with.
      if (job_.logprobs_top >= 0 && !tok_.is_eog(id)) job_.push_logprob(token_logprob(l, m, id, job_.logprobs_top, tok_));
      if (tok_.is_eog(id) && thinking_->close_instead_of_eog()) continue;  // the forced close comes next
    }
    sampler_->accept(id);
    if (tok_.is_eog(id)) { finish_ = "stop"; break; }
    ++generated_;
    e_.metrics.add_slot_tokens(slot_.index, 1);
    raw_piece_ = decoder_->push(id);
    run_.push_back(id);
    return run_;
  }
  finalize();
  return {};
}

void Generation::token_evaluated() {
  // Reasoning goes its own way; only the answer's text goes on to stops, triggers and grammar.
  ReasoningPiece split = thinking_->split(raw_piece_);
  job_.push_reasoning_delta(std::move(split.reasoning));
  std::string piece = std::move(split.content);
  if (answer_grammar_pending_) {
    start_answer_grammar();
    // Answer text in the same piece as the model's own close: the new grammar must take it, or
    // it is dropped (the grammar then writes the answer from its start).
    if (!answer_grammar_pending_ && !piece.empty() && !matcher_->accept_bytes(piece)) {
      matcher_ = std::make_unique<grammar::Matcher>(job_.grammar, e_.vocab);
      piece.clear();
    }
  }
  if (call_matcher_ && !piece.empty() && !call_matcher_->accept_bytes(piece)) call_matcher_.reset();

  if (in_call_) {
    call_text_ += piece;
    stream_calls(call_text_);
  } else {
    const size_t old = text_.size();
    text_ += piece;
    if (job_.mode == OutputMode::Plain || job_.mode == OutputMode::ToolsTagged) {
      // Look for a stop string (or the trigger) that ends inside the new piece.
      size_t longest = 0;
      for (const auto& s : holds_) longest = std::max(longest, s.size());
      size_t from = old > longest ? old - longest : 0;
      size_t stop_at = std::string::npos;
      bool is_trigger = false;
      for (const auto& s : holds_) {
        if (s.empty()) continue;
        size_t p = text_.find(s, from);
        const bool trig = job_.mode == OutputMode::ToolsTagged && s == job_.trigger;
        // A bare-JSON call (Llama 3.x) is the whole reply: '{' opens a call only before any text.
        if (trig && job_.trigger_at_start && p != std::string::npos && !all_space(std::string_view(text_).substr(0, p)))
          continue;
        if (p != std::string::npos && p < stop_at) {
          stop_at = p;
          is_trigger = trig;
        }
      }
      if (stop_at != std::string::npos) {
        if (!is_trigger) {
          text_.resize(stop_at);
          finish_ = "stop";
          finalize();
          return;
        }
        call_text_ = text_.substr(stop_at);
        text_.resize(stop_at);
        in_call_ = true;
        if (job_.call_max_tokens > 0) limit_ = std::min(limit_, generated_ + job_.call_max_tokens);
        matcher_ = std::make_unique<grammar::Matcher>(job_.grammar, e_.vocab);
        // The call grammar starts with the trigger itself; feed it what was generated so far.
        if (!matcher_->accept_bytes(call_text_)) {
          matcher_ = std::make_unique<grammar::Matcher>(job_.grammar, e_.vocab);
          (void)matcher_->accept_bytes(job_.trigger);
          call_text_ = job_.trigger;
        }
        stream_calls(call_text_);
      }
    }
    if (calls_stream_ && (job_.mode == OutputMode::ToolsForced || (job_.mode == OutputMode::ToolsOrJson && call_matcher_) ||
                          (job_.mode == OutputMode::Envelope && envelope_has_calls(text_))))
      stream_calls(text_);
    emit_safe(false);
  }
  if ((matcher_ && matcher_->is_terminated()) || thinking_->answer_ended()) {
    finish_ = "stop";
    finalize();
  }
}

void Generation::finalize() {
  phase_ = Phase::Done;
  // A complete answer that used up its budget ended as the client asked: not cut off.
  if (finish_ == "length" && matcher_ && matcher_->is_complete()) finish_ = "stop";
  if (!in_call_) {
    ReasoningPiece last = thinking_->split(decoder_->flush());
    ReasoningPiece rest = thinking_->finish();
    job_.push_reasoning_delta(last.reasoning + rest.reasoning);
    text_ += last.content + rest.content;
  }
  if (!thinking_->reasoning().empty()) out_.reasoning_content = thinking_->reasoning();
  out_.reasoning_tokens = thinking_->reasoning_tokens();
  // The prompt's KV is final; snapshot its stable part (block-aligned) for later requests.
  if (e_.cache && !cancelled_ && job_.stable_len > 0) e_.cache->store(session_, job_.stable_len);
  const auto decoded = Clock::now();
  out_.completion_tokens = generated_;
  out_.timings.predicted_n = generated_;
  out_.timings.predicted_ms = ms_between(prefilled_, decoded);
  e_.metrics.add_completion_tokens(generated_);
  e_.metrics.add_decode_ms(out_.timings.predicted_ms);
  if (timed_out_) e_.metrics.count_timeout();
  if (cancelled_) e_.metrics.count_cancelled();

  // ---- read the reply back ----
  spdlog::debug("raw output: {}{}", text_, call_text_);
  switch (job_.mode) {
    case OutputMode::Plain:
    case OutputMode::Json:
      out_.content = text_;
      break;
    case OutputMode::ToolsTagged:
      out_.tool_calls = read_tool_calls(job_, family_traits(e_.family).call_syntax, call_text_);
      if (!out_.tool_calls.empty() && all_space(text_)) out_.content.reset();
      else out_.content = text_;
      break;
    case OutputMode::ToolsForced:
      out_.tool_calls = read_tool_calls(job_, family_traits(e_.family).call_syntax, text_);
      break;
    case OutputMode::ToolsOrJson:
      // Calls when the calls' grammar took the whole reply and it is complete there, or when the
      // reply was cut off on the way to a call; otherwise the reply is the schema's answer.
      if (call_matcher_ && (call_matcher_->is_complete() || !matcher_ || !matcher_->is_complete()))
        out_.tool_calls = read_tool_calls(job_, family_traits(e_.family).call_syntax, text_);
      else
        out_.content = text_;
      break;
    case OutputMode::Envelope: {
      std::optional<std::string> content;
      (void)parse_envelope(text_, out_.tool_calls, content);  // cut off: keeps the complete calls
      if (job_.envelope_json_content && out_.tool_calls.empty()) content = envelope_content_text(text_);
      out_.content = content;
      break;
    }
  }
  // Calls streamed while they were written keep the id they were announced with; their arguments
  // are the streamed pieces plus what was still held back (the final piece goes out now).
  for (size_t i = 0; i < out_.tool_calls.size(); ++i) {
    GeneratedToolCall& c = out_.tool_calls[i];
    if (!calls_stream_ || i >= calls_stream_->calls().size() || calls_stream_->calls()[i].name != c.name) {
      c.id = e_.new_call_id();
      continue;
    }
    const ToolCallStreamer::Streamed& s = calls_stream_->calls()[i];
    c.id = streamed_ids_[i];
    // JSON calls: the object as written, minified (the same JSON value the parser read).
    const CallSyntax* syntax = family_traits(e_.family).call_syntax;
    if (s.complete && (job_.mode == OutputMode::Envelope || !syntax || !syntax->read))
      c.arguments_json = s.arguments;
    if (c.arguments_json.compare(0, s.arguments.size(), s.arguments) == 0)
      job_.push_call_arguments(static_cast<int>(i), c.arguments_json.substr(s.arguments.size()));
    else
      spdlog::warn("call {}: streamed arguments are not a prefix of the final ones", i);
  }
  if (finish_ == "stop" && !out_.tool_calls.empty()) finish_ = "tool_calls";
  out_.finish_reason = finish_;
  // Whatever was not streamed yet (the whole content for the modes that parse at the end).
  if (out_.content && out_.content->size() > emitted_) job_.push_delta(out_.content->substr(emitted_));

  const Timings& t = out_.timings;
  spdlog::info("{} slot={} prompt={} cached={} gen={} prefill={:.1f}ms ({:.1f} t/s) decode={:.1f}ms ({:.1f} t/s) "
               "queue={:.1f}ms calls={} finish={}{}{}{}",
               job_.endpoint, slot_.index, out_.prompt_tokens, out_.cached_tokens, generated_, t.prompt_ms,
               t.prompt_ms > 0 && t.prompt_n > 0 ? 1000.0 * double(t.prompt_n) / t.prompt_ms : 0.0, t.predicted_ms,
               t.predicted_ms > 0 && generated_ > 0 ? 1000.0 * double(generated_) / t.predicted_ms : 0.0, t.queue_ms,
               out_.tool_calls.size(), finish_, cancelled_ ? " (client gone)" : "", timed_out_ ? " (timeout)" : "",
               job_.dropped_messages > 0 ? fmt::format(" dropped={}", job_.dropped_messages) : std::string());
  job_.finish(std::move(out_));
}

// ---------------------------------------------------------------- the worker's steps

namespace {
// How much of a slot's first `common` tokens a new prompt can keep. A hybrid model's recurrent
// state exists only at n_past() and at its kept snapshots: truncating below n_past() goes back to
// the latest snapshot at or before `common` (Session::truncate).
size_t reusable_prefix(const Session& s, size_t common) {
  if (!s.has_recurrent_state() || common >= static_cast<size_t>(s.n_past())) return common;
  size_t best = 0;
  for (int32_t p : s.state_snapshot_positions())
    if (static_cast<size_t>(p) <= common) best = std::max(best, static_cast<size_t>(p));
  return best;
}
}  // namespace

Engine::Impl::~Impl() = default;

void Engine::Impl::worker_loop() {
  while (admit()) step();
}

// Queued jobs into free slots (oldest first), each into the free slot whose KV shares the longest
// prefix with its prompt (the next turn of a chat finds its own history there). Waits while
// nothing runs and nothing can be admitted. False once the engine stops and no slot is busy.
bool Engine::Impl::admit() {
  std::vector<std::pair<Slot*, std::shared_ptr<Job>>> admitted;
  {
    std::unique_lock<std::mutex> lock(mu);
    const auto busy = [&] {
      return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.gen != nullptr; });
    };
    if (!busy()) cv.wait(lock, [&] { return stopping || (!paused && !queue.empty()); });
    if (stopping) return busy();  // running jobs were cancelled: step them to their end
    while (!paused && !queue.empty()) {
      std::shared_ptr<Job>& job = queue.front();
      Slot* best = nullptr;
      size_t best_common = 0;
      for (Slot& s : slots) {
        if (s.gen || std::any_of(admitted.begin(), admitted.end(), [&](const auto& a) { return a.first == &s; }))
          continue;
        const auto& have = s.session->tokens();
        size_t common = 0;
        while (common < have.size() && common < job->prompt.size() && have[common] == job->prompt[common]) ++common;
        common = reusable_prefix(*s.session, common);
        // Ties go to the slot holding less: its KV is the cheaper to lose.
        if (!best || common > best_common || (common == best_common && have.size() < best->session->tokens().size())) {
          best = &s;
          best_common = common;
        }
      }
      if (!best) break;
      running[static_cast<size_t>(best->index)] = job;
      admitted.emplace_back(best, std::move(job));
      queue.pop_front();
    }
  }
  for (auto& [slot, job] : admitted) {
    slot->admitted = ++admissions;
    try {
      slot->gen = std::make_unique<Generation>(*this, *slot, job);
    } catch (const std::exception& e) {
      spdlog::error("admission failed: {}", e.what());
      job->finish(Completion{}, std::string("internal error: ") + e.what());
      slot->session->truncate(0);
      release(*slot);
    }
    if (slot->gen && slot->gen->done()) release(*slot);
  }
  int busy = 0;
  for (const Slot& s : slots) busy += s.gen ? 1 : 0;
  metrics.set_slots_busy(busy);
  return true;
}

void Engine::Impl::release(Slot& slot) {
  slot.gen.reset();
  std::lock_guard<std::mutex> lock(mu);
  running[static_cast<size_t>(slot.index)].reset();
}

// One evaluation for every busy slot: the next token of each generating slot, and prefill chunks of
// admitted ones within a per-step budget (oldest admission first), so that a long new prompt does
// not stall the running streams for the whole of its prefill.
void Engine::Impl::step() {
  std::vector<Slot*> order;
  for (Slot& s : slots)
    if (s.gen) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
  const bool decoding = std::any_of(order.begin(), order.end(), [](const Slot* s) { return !s->gen->prefilling(); });
  // Alone, a prefill goes in slices (a cancel or timeout is noticed during a long prompt); beside
  // running streams, in chunks small enough that their token rate stays steady.
  size_t prefill_budget = decoding ? static_cast<size_t>(std::max(opts.prefill_chunk, 2)) : kPrefillSlice;

  std::vector<SeqBatch> items;
  std::vector<Slot*> item_slots;
  for (Slot* s : order) {
    Generation& g = *s->gen;
    try {
      if (g.prefilling()) {
        // With no budget left this only notices a cancel or timeout (the prefill then ends).
        std::span<const int32_t> chunk = g.prefill_chunk(prefill_budget);
        if (!chunk.empty()) {
          prefill_budget -= std::min(prefill_budget, chunk.size());
          items.push_back(SeqBatch{s->session.get(), chunk, false});
          item_slots.push_back(s);
          continue;
        }
        if (g.prefilling()) continue;  // no budget left for it in this step
      }
      if (g.done()) continue;
      const std::span<const int32_t> tokens = g.choose_tokens();
      if (tokens.empty()) continue;
      metrics.count_decode_step();
      items.push_back(SeqBatch{s->session.get(), tokens, false});
      item_slots.push_back(s);
    } catch (const std::exception& e) {
      // Tier 2/3 failures must not kill the worker: report them to this request only.
      spdlog::error("generation failed: {}", e.what());
      if (!g.done()) g.eval_failed(std::string("internal error: ") + e.what());
    }
  }

  if (!items.empty()) {
    metrics.observe_batch(static_cast<int64_t>(items.size()));
    Status st = eval_batch(items);
    std::vector<std::string> errors(items.size());
    if (!st.ok()) {
      // Nothing advanced: find which item fails by evaluating them one at a time.
      for (size_t i = 0; i < items.size(); ++i) {
        Status one = items.size() == 1 ? st : eval_batch(std::span<const SeqBatch>(&items[i], 1));
        if (!one.ok()) errors[i] = one.error();
      }
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Generation& g = *item_slots[i]->gen;
      try {
        if (!errors[i].empty()) g.eval_failed(errors[i]);
        else if (g.prefilling()) g.prefill_evaluated(items[i].tokens.size());
        else g.token_evaluated();
      } catch (const std::exception& e) {
        spdlog::error("generation failed: {}", e.what());
        if (!g.done()) g.eval_failed(std::string("internal error: ") + e.what());
      }
    }
  }
  int busy = 0;
  for (Slot* s : order) {
    if (s->gen->done()) release(*s);
    else ++busy;
  }
  metrics.set_slots_busy(busy);
}

// ---------------------------------------------------------------- context overflow

namespace {

// Reply tokens kept free when old turns are dropped and the request has no max_tokens (never more
// than half the context).
constexpr int64_t kOverflowReplyReserve = 512;

// Where the oldest turns of a conversation may be cut: the leading system (developer) messages are
// kept; a turn is a user message and everything up to the next one (the replies, tool calls and
// tool results), so a call and its results go together and the roles still alternate; the last
// user turn is never dropped. Dropping up to cuts[k] leaves messages [0, first) + [cuts[k], end).
struct TurnCuts {
  size_t first = 0;
  std::vector<size_t> cuts;  // ascending; empty: nothing can be dropped
};

// The cuts worth trying, fewest dropped first. Not every turn boundary: a chat at the limit grows by
// a turn per request, and cutting just enough each time would move the cut every request, so the
// prompt after the system part would change every time and nothing after it could come from the
// prompt cache. The cut instead moves in steps of about `step_bytes` of history (message text
// measured from the conversation's start, which later turns do not change): the first boundary
// past each multiple of the step. Requests then keep the same cut, and their cached prefix, until
// the history has grown by a step. The last boundary (everything before the last user turn) is
// always a candidate.
TurnCuts turn_cuts(const std::vector<ChatMessage>& m, size_t step_bytes) {
  TurnCuts t;
  while (t.first < m.size() && (m[t.first].role == "system" || m[t.first].role == "developer")) ++t.first;
  size_t last_user = m.size();
  for (size_t i = m.size(); i-- > t.first;)
    if (m[i].role == "user") {
      last_user = i;
      break;
    }
  if (last_user == m.size()) return t;
  size_t bytes = 0, next_line = step_bytes;
  for (size_t i = t.first; i < last_user; ++i) {
    bytes += m[i].content.size() + 16;  // 16: the template's frame around a message, roughly
    for (const auto& c : m[i].tool_calls) bytes += c.name.size() + c.arguments_json.size() + 16;
    if (m[i].reasoning_content) bytes += m[i].reasoning_content->size();
    if (m[i + 1].role != "user") continue;
    if (bytes >= next_line || i + 1 == last_user) {
      t.cuts.push_back(i + 1);
      while (next_line <= bytes) next_line += step_bytes;
    }
  }
  return t;
}

}  // namespace

// ---------------------------------------------------------------- slot count

namespace {

struct SlotMemory {
  uint64_t kv = 0;     // the KV cache
  uint64_t total = 0;  // KV + scratch (Session::memory_bytes)
};

SlotMemory slot_memory(const Session& s) {
  SlotMemory m;
  m.kv = s.kv_bytes();  // attention layers only (a hybrid's recurrent layers have none), rings as allocated
  // A hybrid slot also keeps up to max_state_snapshots copies of its recurrent state (Generation).
  m.total = s.memory_bytes() + static_cast<uint64_t>(std::max(SessionOptions{}.max_state_snapshots, 0)) *
                                   s.recurrent_state_bytes();
  return m;
}

// MemAvailable (what can be allocated without swapping), else the free pages; 0: unknown.
uint64_t available_memory_bytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    std::fclose(f);
    if (found) return uint64_t(kb) << 10;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

int default_slot_count(uint64_t available_bytes, uint64_t reserved_bytes, uint64_t bytes_per_slot) {
  if (available_bytes == 0 || bytes_per_slot == 0) return 1;
  const uint64_t usable = (available_bytes - std::min(available_bytes, reserved_bytes)) / 2;
  const uint64_t fit = usable / bytes_per_slot;
  return static_cast<int>(std::clamp<uint64_t>(fit, 1, kMaxDefaultSlots));
}

// ---------------------------------------------------------------- Engine

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  shutdown();
  if (impl_->worker.joinable()) impl_->worker.join();
  impl_->metrics.set_queue_depth_source({});  // it points into this engine
  impl_->metrics.set_prompt_cache_source({});
}

void Engine::shutdown() {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    left.swap(impl_->queue);
    for (auto& job : impl_->running)
      if (job) job->cancel();
  }
  impl_->cv.notify_all();
  for (auto& j : left) j->finish(Completion{}, "server shutting down");
}

// The chat template the engine renders: --chat-template NAME picks a record's reference template;
// otherwise --chat-template-file or the GGUF's own tokenizer.chat_template, rendered as written,
// its family (record) detected from the text. Without a template: ChatML. A GGUF template the
// interpreter cannot parse falls back, with a warning, to its family's reference template, or to
// ChatML when no record recognises it (the model still serves); a file given on the command line
// must parse.
namespace {

Status choose_chat_template(const EngineOptions& opts, const GgufFile& gguf, ChatTemplate& out) {
  if (!opts.chat_template.empty()) {
    if (!opts.chat_template_file.empty()) return Error{"--chat-template and --chat-template-file exclude each other"};
    auto f = family_from_name(opts.chat_template);
    if (!f) return Error{"unknown chat template '" + opts.chat_template + "'"};
    out = ChatTemplate::builtin(*f);
    spdlog::info("chat template: {} (--chat-template, the record's reference template)", family_name(*f));
    return Ok{};
  }
  std::string text, origin;
  if (!opts.chat_template_file.empty()) {
    std::ifstream in(opts.chat_template_file, std::ios::binary);
    if (!in) return Error{"cannot read --chat-template-file " + opts.chat_template_file};
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    origin = opts.chat_template_file;
  } else if (auto t = gguf.get_string("tokenizer.chat_template")) {
    text = std::string(*t);
    origin = "the GGUF's tokenizer.chat_template";
  } else {
    out = ChatTemplate::builtin(TemplateFamily::ChatML);
    spdlog::info("chat template: the GGUF has none; ChatML");
    return Ok{};
  }
  const TemplateFamily family = detect_template_family(text);
  std::string error;
  if (!ChatTemplate::create(text, family, &out, &error)) {
    if (!opts.chat_template_file.empty()) return Error{"--chat-template-file " + origin + ": " + error};
    // A recognised family still has its record's published template; otherwise ChatML.
    const TemplateFamily fallback = family == TemplateFamily::Unknown ? TemplateFamily::ChatML : family;
    spdlog::warn("chat template: {} cannot be run ({}); rendering the {} reference template instead", origin, error,
                 family_name(fallback));
    out = ChatTemplate::builtin(fallback);
    return Ok{};
  }
  if (family == TemplateFamily::Unknown) {
    spdlog::warn("chat template: {} ({}) is not recognised by any protocol record; it is rendered as "
                 "written, tools are described in the system prompt and calls use the JSON envelope "
                 "{{\"tool_calls\": [...]}}, no thinking markers, the turn ends at the end-of-generation tokens",
                 origin, describe_template(text));
  } else {
    spdlog::info("chat template: {} ({})", family_name(family), origin);
  }
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& opts, Metrics& metrics) {
  auto impl = std::make_unique<Impl>(opts, metrics);
  const int threads = opts.threads > 0 ? opts.threads : ThreadPool::default_threads();
  impl->pool = std::make_unique<ThreadPool>(threads);
  ModelOptions mo;
  mo.repack = opts.repack;
  mo.pool = impl->pool.get();
  std::error_code size_ec;
  const uintmax_t file_bytes = std::filesystem::file_size(opts.model_path, size_ec);
  spdlog::info("loading model {} ({} MiB)", opts.model_path, size_ec ? 0 : file_bytes >> 20);
  const auto load_started = Clock::now();
  auto loaded = Model::load(opts.model_path, mo);
  if (!loaded.ok()) return Error{loaded.error()};
  impl->model = std::move(loaded.value());
  const double load_s = ms_between(load_started, Clock::now()) / 1000.0;
  spdlog::info("model {}: kernels {}, {} threads, loaded in {:.2f} s{}", impl->model->description(), best_kernels().name,
               threads, load_s,
               impl->model->packed_bytes() > 0
                   ? fmt::format(", weights repacked ({} MiB in {:.2f} s, {:.0f} MiB/s)", impl->model->packed_bytes() >> 20,
                                 impl->model->pack_seconds(),
                                 double(impl->model->packed_bytes() >> 20) / std::max(impl->model->pack_seconds(), 1e-6))
                   : std::string());
  const Tokenizer& tok = impl->model->tokenizer();
  impl->n_vocab = impl->model->hparams().n_vocab;

  if (Status st = choose_chat_template(opts, impl->model->gguf(), impl->chat_template); !st.ok()) return Error{st.error()};
  impl->family = impl->chat_template.family();
  if (tok.bos_id() >= 0) impl->bos_text = tok.token_to_piece(tok.bos_id(), true);
  if (tok.eos_id() >= 0) impl->eos_text = tok.token_to_piece(tok.eos_id(), true);

  // Grammar vocabulary (grammar_vocab.h); a syntax whose call tags may be control tokens (LFM2's
  // <|tool_call_start|> / <|tool_call_end|>, Phi-4-mini's <|tool_call|> / <|/tool_call|>; Gemma 4's
  // tags and string quote where a GGUF marks them Control) has them kept with their text for its
  // call grammar.
  const FamilyTraits& ft = family_traits(impl->family);
  std::vector<std::string_view> call_tags;
  if (ft.call_syntax && ft.call_syntax->control_tags) {
    call_tags = {ft.tool_call_start, ft.tool_call_end};
    call_tags.insert(call_tags.end(), ft.call_syntax->vocabulary_texts.begin(), ft.call_syntax->vocabulary_texts.end());
  }
  impl->vocab = grammar_vocabulary(tok, impl->n_vocab, call_tags);

  // ---- slots: one Session (KV cache) each, all of the same context ----
  SessionOptions so;
  so.n_ctx = opts.n_ctx;
  // The slots are evaluated together by the one worker: one set of micro-batch scratch serves all.
  so.workspace = make_eval_workspace();
  auto first = std::make_unique<Session>(impl->model, *impl->pool, so);
  impl->n_ctx = first->n_ctx();
  const SlotMemory mem = slot_memory(*first);
  int n_slots = opts.parallel;
  std::string why = "--parallel";
  if (n_slots <= 0) {
    const uint64_t avail = available_memory_bytes();
    const uint64_t cache_ram = uint64_t(opts.cache_ram_mb) << 20;
    n_slots = default_slot_count(avail, cache_ram, mem.total);
    why = avail ? fmt::format("auto: {} MiB available", avail >> 20) : std::string("auto: available memory unknown");
  }
  spdlog::info("slots: {} x {} tokens of context, {:.1f} MiB per slot (KV {:.1f} MiB) ({}); {} batch-invariant", n_slots,
               impl->n_ctx, double(mem.total) / (1 << 20), double(mem.kv) / (1 << 20), why,
               batch_invariant(*impl->model) ? "answers are" : "answers are NOT (AVX-512 without repacked weights)");
  impl->slots.resize(static_cast<size_t>(n_slots));
  {
    EngineMemoryBudget& b = impl->memory_budget;
    std::error_code ec;
    const auto file = std::filesystem::file_size(opts.model_path, ec);
    b.model = ec ? 0 : uint64_t(file);
    b.slots = uint64_t(n_slots) * mem.total;
    b.prompt_cache_ram = opts.cache_dir.empty() && opts.cache_ram_mb == 0 ? 0 : uint64_t(opts.cache_ram_mb) << 20;
    b.grammar_cache = uint64_t(opts.grammar_cache_mb) << 20;
    b.parallel_compiles = std::max(opts.max_parallel_compiles, 0);
    // Measured (issue 28, picolm-grammar compile under /usr/bin/time): a 10,000-property schema
    // compiles to a 21.7 MB grammar at a peak of 88 MB, a 13,000-property one is refused at the
    // 32 MB grammar limit at a peak of 78 MB; the scratch beyond the grammar kept stays under 96 MB.
    b.compile_scratch = uint64_t(96) << 20;
    // Measured: resident at start-up beyond model and slots is 15 MB with a 512-token vocabulary
    // and 61 MB with 151,936 tokens (tokenizer and grammar vocabulary tables, ~300 bytes a token);
    // the slack covers the connection threads' stacks and the allocator's own overhead.
    b.other = (uint64_t(32) << 20) + uint64_t(384) * uint64_t(std::max(impl->n_vocab, 0));
  }
  for (int i = 0; i < n_slots; ++i) {
    Slot& slot = impl->slots[static_cast<size_t>(i)];
    slot.index = i;
    slot.session = i == 0 ? std::move(first) : std::make_unique<Session>(impl->model, *impl->pool, so);
  }
  impl->running.resize(static_cast<size_t>(n_slots));
  metrics.set_slots(n_slots);
  if (!opts.cache_dir.empty() || opts.cache_ram_mb > 0) {
    PromptCacheOptions co;
    co.dir = opts.cache_dir;
    co.max_disk_bytes = uint64_t(opts.cache_max_mb) << 20;
    co.max_ram_bytes = uint64_t(opts.cache_ram_mb) << 20;
    co.inside_write = opts.cache_inside_write;
    co.log = [](PromptCacheLogLevel level, std::string_view msg) {  // msg starts "prompt cache: "
      if (level == PromptCacheLogLevel::Warn) spdlog::warn("{}", msg);
      else if (level == PromptCacheLogLevel::Info) spdlog::info("{}", msg);
      else spdlog::debug("{}", msg);
    };
    impl->cache = std::make_unique<PromptCacheStore>(std::move(co));
  }
  if (opts.volatile_context) {
    VolatileOptions vo;
    // Beside the prompt cache's files, so a restart keeps the layout they were computed with.
    if (!opts.cache_dir.empty()) vo.state_file = (std::filesystem::path(opts.cache_dir) / "volatile-lines.txt").string();
    impl->volatile_lines = std::make_unique<VolatileLineTracker>(std::move(vo));
  }

  impl->model_id = opts.model_id;
  if (impl->model_id.empty()) {
    impl->model_id = std::filesystem::path(opts.model_path).stem().string();
  }
  Impl* raw = impl.get();
  metrics.set_queue_depth_source([raw] {
    std::lock_guard<std::mutex> lock(raw->mu);
    return raw->queue.size();
  });
  if (raw->cache) {
    metrics.set_prompt_cache_source([raw] {
      const PromptCacheStats st = raw->cache->stats();
      PromptCacheFigures f;
      f.disk_bytes = static_cast<int64_t>(st.disk_bytes);
      f.ram_bytes = static_cast<int64_t>(st.ram_bytes);
      f.files_written = static_cast<int64_t>(st.files_written);
      f.files_rejected = static_cast<int64_t>(st.files_rejected);
      f.disk_evictions = static_cast<int64_t>(st.disk_evictions);
      f.ram_evictions = static_cast<int64_t>(st.ram_evictions);
      return f;
    });
  }
  impl->worker = std::thread([raw] { raw->worker_loop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

// ---------------------------------------------------------------- Engine::prepare

// What the steps of Engine::prepare hand to each other for one request.
struct Engine::Impl::Preparing {
  Preparing(const ChatRequest& r, Job& j, ApiError& e) : req(r), job(j), err(e) {}
  const ChatRequest& req;
  Job& job;
  ApiError& err;
  // choose_output_mode
  bool tools_active = false;         // tools given and tool_choice is not none
  bool native = false;               // the family's own call syntax is constrained (else the envelope)
  bool answer_beside_tools = false;  // response_format beside tools under tool_choice auto
  // render_prompt / fit_context
  RelocatedMessages relocated;             // volatile system lines moved (volatile_lines.h)
  std::span<const ChatMessage> source;     // the request's messages, or `relocated`'s
  std::vector<ChatMessage> marked;         // source with control-token text marked (content_marks.h)
  std::string tools_json;                  // the tools with control-token text marked
  RenderOptions ro;                        // as the last render used them
  std::vector<ChatMessage> messages;       // as rendered (tool history lowered where the family needs it)
  bool keep_text = false;                  // return_prompt or debug log: keep the rendered text
  std::string evaluated_text;              // keep_text: the rendered prompt
  size_t drop_first = 0, drop_end = 0;     // messages [drop_first, drop_end) of `source` were dropped
};

// Step 1. The output mode: native calls, the envelope, a JSON answer, or plain text.
void Engine::Impl::choose_output_mode(Preparing& p) const {
  const ChatRequest& req = p.req;
  const FamilyTraits& traits = family_traits(family);
  p.tools_active = !req.tools.empty() && req.tool_choice != ToolChoice::None;
  // The family's own syntax is constrained when the grammar has a format for it and the model
  // sees the tools: in its template, or in the lowered conversation in that syntax (SmolLM3).
  p.native = traits.call_syntax && traits.call_syntax->grammar_format &&
             (traits.renders_tool_list || traits.call_syntax->lowered);
  // response_format beside tools under tool_choice auto: the reply is the calls or the schema's
  // answer (OpenAI applies the schema to the text answer); the grammar has both branches.
  p.answer_beside_tools = p.tools_active && req.tool_choice == ToolChoice::Auto && req.response_format != ResponseFormat::Text;
  if (p.tools_active) {
    p.job.mode = !p.native                           ? OutputMode::Envelope
                 : req.tool_choice != ToolChoice::Auto ? OutputMode::ToolsForced
                 : p.answer_beside_tools              ? OutputMode::ToolsOrJson
                                                      : OutputMode::ToolsTagged;
  } else if (req.response_format != ResponseFormat::Text) {
    p.job.mode = OutputMode::Json;
  }
}

// Step 2. The messages to render: volatile lines of the system message (a clock, a sender) moved
// into a note on the latest message, so the system prompt, the tools and the history stay a
// prefix the cache holds (volatile_lines.h); control-token text in content marked, so that only
// the template's own control tokens are parsed as such (content_marks.h).
void Engine::Impl::select_messages(Preparing& p) const {
  const ChatRequest& req = p.req;
  const Tokenizer& tok = model->tokenizer();
  const ControlTextFinder find_control = [&tok](std::string_view t) { return tok.find_control_text(t); };
  p.source = req.messages;
  if (volatile_lines && !req.messages.empty() && req.messages[0].role == "system") {
    const std::vector<size_t> lines = volatile_lines->classify(req.messages[0].content, conversation_key(req.messages));
    if (!lines.empty()) {
      p.relocated = relocate_volatile_lines(req.messages, lines);
      if (!p.relocated.moved.empty()) {
        p.source = p.relocated.messages;
        p.job.volatile_lines_moved = static_cast<int64_t>(p.relocated.moved.size());
      }
    }
  }
  p.keep_text = req.return_prompt || spdlog::should_log(spdlog::level::debug);
  p.marked = mark_control_text(p.source, family, find_control);
  p.tools_json = mark_control_text_json(req.tools_json, find_control);
}

// Step 3. Renders `kept` (the marked messages, or the ones left after dropping old turns) with the
// chat template into job.prompt; sets p.messages, p.ro and the thinking plan to what was rendered.
bool Engine::Impl::render_prompt(Preparing& p, std::vector<ChatMessage> kept) const {
  const Tokenizer& tok = model->tokenizer();
  p.ro = RenderOptions{};
  p.ro.bos_token = bos_text;
  p.ro.eos_token = eos_text;
  p.messages = std::move(kept);
  if (family_needs_tool_lowering(family)) {
    // Tool list (if active) and tool history rewritten into plain turns asking for the envelope,
    // or for <tool_call> JSON where the model was trained on it (SmolLM3, whose shipped template
    // drops the tools).
    LoweredConversation low = lower_tool_conversation(family, p.messages, p.tools_active ? p.tools_json : "",
                                                      p.native ? *family_traits(family).call_syntax->lowered
                                                               : LoweredToolSyntax::Envelope);
    if (!low.ok) {
      p.err = ApiError{400, low.error, "invalid_request_error", "messages", ""};
      return false;
    }
    p.messages = std::move(low.messages);
  } else if (p.tools_active) {
    // The template shows the tools (under the envelope too: the grammar still applies).
    p.ro.tools_json = p.tools_json;
  }
  // Thinking: what the request, the --reasoning default and the template decide together.
  p.job.thinking = plan_thinking(family, p.messages, p.req.enable_thinking, p.req.reasoning_effort, opts.reasoning,
                                 p.ro.enable_thinking);
  // Stray channel markers end a plain answer (Gemma 4); before a call the call grammar decides.
  if (p.job.thinking.split && p.job.mode == OutputMode::Plain)
    p.job.thinking.block_marker = std::string(protocol_of(family).answer_block_marker);
  ChatRenderResult rendered = render_chat(chat_template, p.messages, p.ro);
  if (!rendered.ok) {
    p.err = ApiError{400, "the conversation cannot be rendered with the " + std::string(family_name(family)) +
                              " chat template: " + rendered.error,
                     "invalid_request_error", "messages", ""};
    return false;
  }
  const UnmarkedPrompt prompt = unmark_control_text(rendered.text);
  if (p.keep_text) p.evaluated_text = prompt.text;
  p.job.prompt = tok.encode(prompt.text, false, prompt.plain);
  if (tok.add_bos() && tok.bos_id() >= 0 && (p.job.prompt.empty() || p.job.prompt[0] != tok.bos_id())) {
    p.job.prompt.insert(p.job.prompt.begin(), tok.bos_id());
  }
  return true;
}

// Step 4. With --context-overflow drop-oldest: drops the fewest oldest turns that make the prompt
// and the reply's budget fit (all of them before the last user turn at most: the reply then gets
// what room there is). Then the prompt must be non-empty and shorter than the context.
bool Engine::Impl::fit_context(Preparing& p) const {
  Job& job = p.job;
  if (opts.context_overflow == ContextOverflow::DropOldest) {
    const int64_t reserve = std::min<int64_t>(p.req.max_tokens.value_or(kOverflowReplyReserve), n_ctx / 2);
    const auto fits = [&] { return static_cast<int64_t>(job.prompt.size()) + reserve <= n_ctx; };
    if (!fits()) {
      // A step of n_ctx bytes is about a quarter of the context in tokens.
      const TurnCuts cuts = turn_cuts(p.marked, std::max<size_t>(256, static_cast<size_t>(n_ctx)));
      for (size_t k = 0; k < cuts.cuts.size(); ++k) {
        std::vector<ChatMessage> kept(p.marked.begin(), p.marked.begin() + static_cast<std::ptrdiff_t>(cuts.first));
        kept.insert(kept.end(), p.marked.begin() + static_cast<std::ptrdiff_t>(cuts.cuts[k]), p.marked.end());
        if (!render_prompt(p, std::move(kept))) {
          if (k + 1 == cuts.cuts.size()) return false;  // err says why
          p.err = ApiError{};
          continue;  // e.g. a template that wants a turn this cut removed: cut further
        }
        job.dropped_messages = static_cast<int64_t>(cuts.cuts[k] - cuts.first);
        p.drop_first = cuts.first;
        p.drop_end = cuts.cuts[k];
        if (fits()) break;
      }
    }
  }
  if (job.prompt.empty()) {
    p.err = ApiError{400, "the prompt is empty", "invalid_request_error", "messages", ""};
    return false;
  }
  if (static_cast<int64_t>(job.prompt.size()) >= n_ctx) {
    p.err = ApiError{400,
                     "the prompt is " + std::to_string(job.prompt.size()) + " tokens; this server's context is " +
                         std::to_string(n_ctx) + " tokens",
                     "invalid_request_error", "messages", "context_length_exceeded"};
    return false;
  }
  return true;
}

// Step 5. What return_prompt and the debug log show: the evaluated prompt and messages.
void Engine::Impl::keep_evaluated_prompt(Preparing& p) const {
  if (!p.keep_text) return;
  spdlog::debug("evaluated prompt ({} tokens{}):\n{}", p.job.prompt.size(),
                p.relocated.moved.empty() ? std::string()
                                          : fmt::format(", {} volatile system lines moved to message {}",
                                                        p.relocated.moved.size(), p.relocated.note_message),
                p.evaluated_text);
  if (p.req.return_prompt) {
    std::vector<ChatMessage> kept(p.source.begin(), p.source.end());
    if (p.drop_end > p.drop_first)
      kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(p.drop_first), kept.begin() + static_cast<std::ptrdiff_t>(p.drop_end));
    p.job.evaluated_messages_json = messages_json(kept);
    p.job.evaluated_prompt_text = std::move(p.evaluated_text);
  }
}

// Step 6. The stable prefix (job.stable_len): the tokens the prompt shares with the conversation
// rendered up to the last user message, which the slots and the prompt cache keep for the next
// turn (the junction token may tokenize differently, so the tokens are compared).
void Engine::Impl::find_stable_prefix(Preparing& p) const {
  const Tokenizer& tok = model->tokenizer();
  Job& job = p.job;
  job.stable_len = job.prompt.size();
  size_t last_user = p.messages.size();
  for (size_t i = p.messages.size(); i-- > 0;)
    if (p.messages[i].role == "user") {
      last_user = i;
      break;
    }
  if (last_user >= p.messages.size()) return;
  std::vector<ChatMessage> head(p.messages.begin(), p.messages.begin() + static_cast<std::ptrdiff_t>(last_user));
  RenderOptions hro = p.ro;
  hro.add_generation_prompt = false;
  size_t common = 0;
  if (!head.empty()) {
    // The head is rendered with an empty user turn after it: the tokens it shares with the prompt
    // then end where the last user message's content starts, also for templates that render a
    // system message only inside the first user turn (Gemma 3) or refuse a conversation without
    // a user turn (Qwen3.5: "No user query found"). Without it if the template refuses that.
    head.push_back(ChatMessage{"user", "", {}, "", "", std::nullopt});
    ChatRenderResult h = render_chat(chat_template, head, hro);
    if (!h.ok) {
      head.pop_back();
      h = render_chat(chat_template, head, hro);
    }
    if (h.ok) {
      const UnmarkedPrompt hp = unmark_control_text(h.text);
      std::vector<int32_t> ht = tok.encode(hp.text, false, hp.plain);
      if (tok.add_bos() && tok.bos_id() >= 0 && (ht.empty() || ht[0] != tok.bos_id())) ht.insert(ht.begin(), tok.bos_id());
      while (common < ht.size() && common < job.prompt.size() && ht[common] == job.prompt[common]) ++common;
    } else {
      common = job.prompt.size();  // cannot tell: cache the whole prompt
    }
  }
  job.stable_len = common;
}

// The grammar options of the family's call syntax (calls/call_syntax.h): the format, where the
// calls start and end, and the key of the arguments.
void Engine::Impl::native_call_options(Preparing& p, grammar::ToolListOptions& to) const {
  const FamilyTraits& traits = family_traits(family);
  const CallSyntax& syntax = *traits.call_syntax;
  to.format = *syntax.grammar_format;
  if (syntax.call_is_reply) {
    // The reply is the call itself: it starts with '{' (the trigger, only at the start of the
    // reply) and uses the family's key for the arguments. One call per reply, as the template has.
    to.parallel = false;
    to.arguments_key = std::string(traits.arguments_key);
    p.job.trigger = "{";
    p.job.trigger_at_start = true;
  } else {
    p.job.tools_json = p.req.tools_json;
    p.job.trigger = std::string(traits.tool_call_start);
    p.job.close_tag = std::string(traits.tool_call_end);
    if (to.format == grammar::ToolCallFormat::JsonArray) {
      // The calls of a turn as one JSON array between the tags (Phi-4-mini).
      to.array_open = traits.tool_call_start;
      to.array_close = traits.tool_call_end;
      to.arguments_key = std::string(traits.arguments_key);
    }
  }
}

// Step 7. The grammar: the response_format's schema, the tool calls, or both as alternatives.
bool Engine::Impl::compile_grammar(Preparing& p) {
  const ChatRequest& req = p.req;
  Job& job = p.job;
  grammar::CompileResult compiled;
  const std::string answer_schema =
      req.response_format == ResponseFormat::JsonSchema ? req.response_schema_json : std::string(R"({"type":"object"})");
  // A JSON answer may be pretty-printed as json.dumps(indent=2) writes it, up to 8 levels deep
  // (newline + at most 16 spaces): bounded runs, and the tokens models prefer stay allowed.
  grammar::CompileOptions answer_options;
  answer_options.whitespace = grammar::Whitespace::Natural;
  answer_options.max_indent = 16;
  answer_options.property_order = opts.property_order;
  if (job.mode == OutputMode::Json || p.answer_beside_tools) {
    // Alone, or first on its own beside tools: its errors are the response_format's.
    compiled = grammars.schema(answer_schema, answer_options);
    if (!compiled.ok()) {
      p.err = ApiError{400, "response_format schema: " + compiled.error_text(), "invalid_request_error",
                       "response_format.json_schema.schema", ""};
      return false;
    }
  }
  if (job.mode != OutputMode::Plain && job.mode != OutputMode::Json) {
    grammar::ToolListOptions to;
    // The whitespace JSON writers put in calls, as the templates show them ({"name": "f",
    // "arguments": {"a": 1}}: one space after ':' and ','; see docs/GRAMMAR.md "Natural
    // whitespace"), on one line: no run is longer than one byte, so it cannot become a loop.
    to.schema.whitespace = grammar::Whitespace::Natural;
    to.schema.max_indent = -1;
    to.schema.property_order = opts.property_order;
    // A named tool_choice asks for that call, once (as OpenAI answers it): the grammar admits one.
    to.parallel = req.parallel_tool_calls && req.tool_choice != ToolChoice::Named;
    if (req.tool_choice == ToolChoice::Named) to.forced_tool = req.tool_choice_name;
    if (job.mode == OutputMode::Envelope) {
      to.format = grammar::ToolCallFormat::Envelope;
      to.allow_text = req.tool_choice == ToolChoice::Auto;
    } else {
      native_call_options(p, to);
    }
    if (p.answer_beside_tools) {
      // The calls alone first (their errors are the tools'), then the calls or the answer.
      compiled = grammars.tools(req.tools_json, to);
      if (compiled.ok() && job.mode == OutputMode::ToolsOrJson) job.call_grammar = compiled.grammar;
      if (compiled.ok()) {
        to.answer_schema = answer_schema;
        to.answer_options = answer_options;
        job.envelope_json_content = job.mode == OutputMode::Envelope;
      }
    }
    if (!p.answer_beside_tools || compiled.ok()) compiled = grammars.tools(req.tools_json, to);
    if (!compiled.ok()) {
      p.err = ApiError{400, "tools: " + compiled.error_text(), "invalid_request_error", "tools", ""};
      return false;
    }
  }
  job.grammar = compiled.grammar;
  return true;
}

// Step 8. The token budgets (the reply's, the calls', the thinking's).
bool Engine::Impl::set_budgets(Preparing& p) const {
  Job& job = p.job;
  const int64_t room = n_ctx - static_cast<int64_t>(job.prompt.size());
  TokenBudget budget;
  if (!plan_token_budget(job.mode, p.req.max_tokens, room, job.grammar, vocab, budget, p.err)) return false;
  job.max_tokens = budget.max_tokens;
  job.call_max_tokens = budget.call_max_tokens;
  size_thinking_budget(job.thinking, job.max_tokens);
  return true;
}

// Step 9. Stop strings (the family's end-of-turn text and the request's) and sampling.
void Engine::Impl::set_stops_and_sampling(Preparing& p) const {
  const ChatRequest& req = p.req;
  Job& job = p.job;
  if (job.mode == OutputMode::Plain || job.mode == OutputMode::ToolsTagged) {
    for (auto sv : family_traits(family).stop_strings) job.stop.emplace_back(sv);
    for (const auto& st : req.stop) job.stop.push_back(st);
  }
  SamplerParams& sp = job.sampling;
  sp.temperature = static_cast<float>(req.temperature.value_or(0.8));
  sp.top_p = static_cast<float>(req.top_p.value_or(0.95));
  sp.top_k = static_cast<int32_t>(req.top_k.value_or(40));
  sp.min_p = static_cast<float>(req.min_p.value_or(0.05));
  sp.repeat_penalty = static_cast<float>(req.repeat_penalty.value_or(1.0));
  sp.presence_penalty = static_cast<float>(req.presence_penalty);
  sp.frequency_penalty = static_cast<float>(req.frequency_penalty);
  job.logprobs_top = req.logprobs ? req.top_logprobs : -1;
  job.jump_forward = opts.jump_forward;
  sp.seed = req.seed ? *req.seed : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
}

std::shared_ptr<Job> Engine::prepare(const ChatRequest& req, ApiError& err) {
  Impl& s = *impl_;
  auto job = std::make_shared<Job>();
  job->arrived = Clock::now();
  job->deadline = job->arrived + std::chrono::milliseconds(static_cast<int64_t>(s.opts.timeout_sec * 1000.0));
  Impl::Preparing p(req, *job, err);
  s.choose_output_mode(p);
  s.select_messages(p);
  if (!s.render_prompt(p, p.marked)) return nullptr;
  if (!s.fit_context(p)) return nullptr;
  s.keep_evaluated_prompt(p);
  s.find_stable_prefix(p);
  if (!s.compile_grammar(p)) return nullptr;
  if (!s.set_budgets(p)) return nullptr;
  s.set_stops_and_sampling(p);
  return job;
}

bool Engine::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping || impl_->queue.size() >= impl_->opts.max_queue) return false;
    impl_->queue.push_back(std::move(job));
  }
  impl_->cv.notify_all();
  return true;
}

size_t Engine::queue_depth() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.size();
}

void Engine::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->paused = paused;
  }
  impl_->cv.notify_all();
}

Status Engine::warm(const ChatRequest& req) {
  ApiError err;
  auto job = prepare(req, err);
  if (!job) return Error{err.message};
  job->max_tokens = 0;
  job->endpoint = "warm";
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->queue.push_back(job);  // not subject to the queue limit: start-up only
  }
  impl_->cv.notify_all();
  std::vector<Delta> ignored;
  while (!job->wait(std::chrono::milliseconds(1000), ignored)) ignored.clear();
  if (job->failed()) return Error{job->error()};
  return Ok{};
}

const std::string& Engine::model_id() const { return impl_->model_id; }
int Engine::n_ctx() const { return impl_->n_ctx; }
int Engine::slots() const { return static_cast<int>(impl_->slots.size()); }

std::optional<JumpForward> parse_jump_forward(std::string_view s) {
  if (s == "on") return JumpForward::On;
  if (s == "off") return JumpForward::Off;
  if (s == "step") return JumpForward::Step;
  return std::nullopt;
}

std::optional<ContextOverflow> parse_context_overflow(std::string_view s) {
  if (s == "drop-oldest") return ContextOverflow::DropOldest;
  if (s == "error") return ContextOverflow::Error;
  return std::nullopt;
}
TemplateFamily Engine::family() const { return impl_->family; }
std::string Engine::description() const { return impl_->model->description(); }

EngineMemoryBudget Engine::memory_budget() const { return impl_->memory_budget; }

}  // namespace picolm
