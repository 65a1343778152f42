#include "scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include "grammar/grammar.h"
#include "kernels/thread_pool.h"
#include "metrics.h"
#include "model.h"
#include "prompt_cache.h"
#include "content_marks.h"
#include "token_budget.h"
#include "tool_format.h"

namespace picolm {

using Clock = std::chrono::steady_clock;

static double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---------------------------------------------------------------- Job

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
    deltas_.push_back(Delta{std::move(text), false});
  }
  cv_.notify_all();
}

void Job::push_reasoning_delta(std::string text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas_.push_back(Delta{std::move(text), true});
  }
  cv_.notify_all();
}

void Job::finish(Completion c, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(c);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- Engine::Impl

struct Engine::Impl {
  EngineOptions opts;
  Metrics& metrics;
  std::shared_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Session> session;  // the one KV slot; worker thread only
  std::unique_ptr<PromptCacheStore> cache;  // null when both tiers are off
  std::shared_ptr<const grammar::Vocabulary> vocab;
  grammar::GrammarCache grammars{opts.grammar_cache_mb << 20};  // opts is initialized first
  TemplateFamily family = TemplateFamily::ChatML;
  std::string bos_text, eos_text;
  std::string model_id;
  int32_t n_vocab = 0;  // logits per position
  int32_t n_ctx = 0;    // the session's context (immutable; read by HTTP threads)

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool paused = false;
  bool stopping = false;
  std::shared_ptr<Job> running;  // guarded by mu
  std::thread worker;
  std::mt19937_64 id_rng{std::random_device{}()};  // worker thread only

  Impl(const EngineOptions& o, Metrics& m) : opts(o), metrics(m) {}

  void worker_loop();
  void run(Job& job);
  std::string new_call_id();
};

std::string Engine::Impl::new_call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[id_rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

void Engine::Impl::worker_loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stopping || (!paused && !queue.empty()); });
      if (stopping) return;
      job = std::move(queue.front());
      queue.pop_front();
      running = job;
    }
    metrics.set_busy(true);
    try {
      run(*job);
    } catch (const std::exception& e) {
      // Tier 2/3 failures must not kill the worker: report them to this request only.
      spdlog::error("generation failed: {}", e.what());
      job->finish(Completion{}, std::string("internal error: ") + e.what());
    }
    metrics.set_busy(false);
    std::lock_guard<std::mutex> lock(mu);
    running.reset();
  }
}

namespace {

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
        splitter_(plan.open, plan.close, plan.start_inside) {
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
  const bool constrained = job.mode == OutputMode::Json || job.mode == OutputMode::ToolsForced || job.mode == OutputMode::Envelope;
  if (!constrained || !job.grammar) return 0;
  constexpr int64_t kSlack = 2;
  const grammar::Matcher start(job.grammar, vocab);
  const int64_t finish = tokens_to_finish(start);
  return finish < 0 ? 0 : finish + kClosingMargin + kSlack;  // -1: unknown; nothing to reserve by
}

// Tokens a forced close costs at most (the newline before it included): kept free for it.
int64_t thinking_close_cost(const ThinkingPlan& plan, const Tokenizer& tok) {
  return plan.split ? static_cast<int64_t>(tok.encode("\n" + plan.close + plan.separator, false, true).size()) : 0;
}

// The calls of a reply: JSON (tagged or bare) or a native syntax (Qwen3.5, LFM2; tool_format.h).
std::vector<GeneratedToolCall> read_tool_calls(const Job& job, ToolCallStyle style, std::string_view text) {
  if (style != ToolCallStyle::QwenXml && style != ToolCallStyle::PythonList)
    return job.trigger_at_start ? parse_bare_tool_calls(text) : parse_tagged_tool_calls(text, job.trigger, job.close_tag);
  std::vector<GeneratedToolCall> calls;
  for (auto& c : parse_native_tool_calls(style, text, job.tools_json)) calls.push_back({"", c.name, c.arguments_json});
  return calls;
}

}  // namespace

void Engine::Impl::run(Job& job) {
  const Tokenizer& tok = model->tokenizer();
  Completion out;
  const auto started = Clock::now();
  out.timings.queue_ms = ms_between(job.arrived, started);
  out.prompt_tokens = static_cast<int64_t>(job.prompt.size());

  // ---- prefill, reusing the longest prefix we have: the KV slot's own, or the prompt cache's ----
  const auto& have = session->tokens();
  size_t live = 0;
  while (live < have.size() && live < job.prompt.size() && have[live] == job.prompt[live]) ++live;
  metrics.count_kv_reuse(live > 0);
  size_t common = 0;
  if (cache) {
    common = cache->restore(*session, job.prompt);
    if (common > live) metrics.count_prompt_cache(true);
    else if (common == 0) metrics.count_prompt_cache(false);
  } else {
    common = live;
    if (common == job.prompt.size()) --common;  // re-evaluate the last token: we need its logits
    session->truncate(static_cast<int32_t>(common));
    // A sliding-window layer's ring reaches back only about n_batch positions: truncating past
    // that drops the whole sequence (Session::truncate), so continue from what is really there.
    common = static_cast<size_t>(session->n_past());
  }
  out.cached_tokens = static_cast<int64_t>(common);
  out.timings.cached_n = out.cached_tokens;

  bool cancelled = false, timed_out = false;
  // Slices so that a cancel or a timeout is noticed during a long prefill.
  constexpr size_t kSlice = 128;
  auto last_progress_log = started;
  // Sliding-window layers (Gemma 3) keep only their last window: the stable prefix must be stored
  // while their rings still hold it, so the prefill stops at the stored length (a cache block
  // boundary), stores, and goes on, as prefill_with_cache does. Other models store after the reply.
  size_t store_at = 0;
  if (cache && job.stable_len > 0) {
    bool windows = false;
    for (int32_t l = 0; l < model->hparams().n_layer; ++l) windows = windows || session->kv_window(l) > 0;
    const size_t B = static_cast<size_t>(cache->options().block_tokens);
    const size_t at = std::min(job.stable_len, job.prompt.size()) / B * B;
    if (windows && at >= common + 2 && at + 2 <= job.prompt.size()) store_at = at;
  }
  for (size_t pos = common, n = 0; pos < job.prompt.size(); pos += n) {
    if (job.cancelled()) { cancelled = true; break; }
    if (Clock::now() > job.deadline) { timed_out = true; break; }
    n = std::min(kSlice, job.prompt.size() - pos);
    if (pos < store_at && pos + n > store_at) n = store_at - pos;
    Status st = session->eval(std::span<const int32_t>(job.prompt.data() + pos, n));
    if (!st.ok()) {
      session->truncate(0);
      job.finish(out, "prefill failed: " + st.error());
      return;
    }
    if (pos + n == store_at) cache->store(*session, store_at);
    // A prompt that takes minutes on a small board shows its progress in the log (rate, ETA).
    if (const auto now = Clock::now(); ms_between(last_progress_log, now) >= 5000 && pos + n < job.prompt.size()) {
      last_progress_log = now;
      const double done = double(pos + n - common), todo = double(job.prompt.size() - common);
      const double rate = done * 1000.0 / std::max(ms_between(started, now), 1.0);
      spdlog::info("prefill {:.0f}/{:.0f} tokens ({:.0f}%), {:.1f} t/s, ETA {:.0f} s", done, todo, 100.0 * done / todo,
                   rate, (todo - done) / std::max(rate, 1e-9));
    }
  }
  const auto prefilled = Clock::now();
  out.timings.prompt_n = static_cast<int64_t>(job.prompt.size() - common);
  out.timings.prompt_ms = ms_between(started, prefilled);
  metrics.add_prompt_tokens(out.timings.prompt_n, out.cached_tokens);
  metrics.add_prefill_ms(out.timings.prompt_ms);

  // ---- decode ----
  Sampler sampler(job.sampling);
  for (int32_t t : job.prompt) sampler.accept(t);
  // LFM2's call tags are control tokens: rendered, so the trigger and the call text see them.
  StreamDecoder decoder(tok, family_traits(family).tool_call_style == ToolCallStyle::PythonList);
  std::unique_ptr<grammar::Matcher> matcher;
  const bool constrained_from_start =
      job.mode == OutputMode::Json || job.mode == OutputMode::ToolsForced || job.mode == OutputMode::Envelope;
  // Thinking first (if any), then the answer: a constrained answer's grammar starts after </think>.
  // Sized only when there is thinking to size (the reserve compiles a matcher and tokenizes).
  const int64_t think_limit =
      job.thinking.split && job.thinking.budget > 0
          ? std::min<int64_t>(job.thinking.budget, job.max_tokens - thinking_close_cost(job.thinking, tok) -
                                                       answer_reserve_tokens(job, vocab))
          : 0;
  ThinkingDriver thinking(job.thinking, tok, constrained_from_start, std::max<int64_t>(think_limit, 0));
  bool answer_grammar_pending = constrained_from_start;
  auto start_answer_grammar = [&] {
    if (answer_grammar_pending && thinking.answer_started()) {
      matcher = std::make_unique<grammar::Matcher>(job.grammar, vocab);
      answer_grammar_pending = false;
    }
  };
  start_answer_grammar();
  std::vector<uint32_t> mask((static_cast<size_t>(n_vocab) + 31) / 32);
  std::vector<float> logits(static_cast<size_t>(n_vocab));

  // Stop strings (and, in ToolsTagged, the trigger) must never be streamed, not even in part:
  // text that could be the start of one is held back until it is decided.
  std::vector<std::string> holds = job.stop;
  if (job.mode == OutputMode::ToolsTagged) holds.push_back(job.trigger);
  const bool streams_content = job.mode == OutputMode::Plain || job.mode == OutputMode::Json ||
                               job.mode == OutputMode::ToolsTagged;

  std::string text;         // all generated text (Plain/Json/Tagged: the content part)
  std::string call_text;    // ToolsTagged: from the trigger on
  size_t emitted = 0;       // bytes of `text` sent as deltas
  bool in_call = false;
  std::string finish = "length";
  int64_t generated = 0;

  auto emit_safe = [&](bool final) {
    if (!streams_content || emitted >= text.size()) return;
    size_t safe = final ? text.size() : text.size() - partial_suffix(text, holds);
    // ToolsTagged: whitespace before a call is not content, so hold text back until it has
    // something else in it (the final answer's content then equals what was streamed).
    if (job.mode == OutputMode::ToolsTagged && all_space(std::string_view(text).substr(0, safe))) return;
    if (safe > emitted) {
      job.push_delta(text.substr(emitted, safe - emitted));
      emitted = safe;
    }
  };

  int64_t limit = job.max_tokens;  // a call under tool_choice auto may lower it (call_max_tokens)
  AnswerBudget budget;
  const TriggerGuard guard(job.mode == OutputMode::ToolsTagged ? job.trigger : std::string(), job.trigger_at_start,
                           job.grammar, vocab);

  while (true) {
    if (generated >= limit || cancelled) break;
    if (job.cancelled()) { cancelled = true; break; }
    if (!timed_out && Clock::now() > job.deadline) {
      timed_out = true;
      // A constrained answer is finished along its shortest path rather than cut off.
      if (matcher) budget.force_closing();
    }
    if (timed_out && !matcher) break;
    if (session->n_past() >= session->n_ctx()) break;
    const int64_t left = limit - generated;

    int32_t id = -1;
    if (thinking.has_forced()) {
      id = thinking.take_forced();  // the provider writes <think> / </think> itself (no grammar is active then)
    } else {
      auto l = session->logits();
      std::copy(l.begin(), l.end(), logits.begin());
      const uint32_t* m = nullptr;
      if (matcher) {
        budget.fill_mask(*matcher, left, mask.data());
        m = mask.data();
      } else if (thinking.answer_started() && guard.fill_mask(text, left, mask.data(), mask.size())) {
        m = mask.data();  // the trigger guard watches the answer only: a <tool_call> inside <think> opens nothing
      }
      id = sampler.sample(logits, m);
      if (id < 0) { finish = "stop"; break; }  // the grammar allows nothing: treat as the end
      if (matcher && !matcher->accept_token(id)) {
        job.finish(out, "internal error: the grammar rejected a token it allowed");
        session->truncate(0);
        return;
      }
      if (matcher && !tok.is_eog(id) && budget.overshoots(*matcher, left - 1)) {
        // The answer could not be finished after this token: take it back, redo the step closing.
        matcher->rollback(1);
        std::copy(l.begin(), l.end(), logits.begin());
        budget.fill_mask(*matcher, left, mask.data());
        id = sampler.sample(logits, mask.data());
        if (id < 0) { finish = "stop"; break; }
        if (!matcher->accept_token(id)) {
          job.finish(out, "internal error: the grammar rejected a token it allowed");
          session->truncate(0);
          return;
        }
      }
      if (tok.is_eog(id) && thinking.close_instead_of_eog()) continue;  // the forced close comes next
    }
    sampler.accept(id);
    if (tok.is_eog(id)) { finish = "stop"; break; }
    ++generated;
    std::string raw_piece = decoder.push(id);
    Status st = session->eval(std::span<const int32_t>(&id, 1));
    if (!st.ok()) {
      job.finish(out, "decode failed: " + st.error());
      session->truncate(0);
      return;
    }
    // Reasoning goes its own way; only the answer's text goes on to stops, triggers and grammar.
    ReasoningPiece split = thinking.split(raw_piece);
    job.push_reasoning_delta(std::move(split.reasoning));
    std::string piece = std::move(split.content);
    if (answer_grammar_pending) {
      start_answer_grammar();
      // Answer text in the same piece as the model's own close: the new grammar must take it, or
      // it is dropped (the grammar then writes the answer from its start).
      if (!answer_grammar_pending && !piece.empty() && !matcher->accept_bytes(piece)) {
        matcher = std::make_unique<grammar::Matcher>(job.grammar, vocab);
        piece.clear();
      }
    }

    if (in_call) {
      call_text += piece;
    } else {
      const size_t old = text.size();
      text += piece;
      if (job.mode == OutputMode::Plain || job.mode == OutputMode::ToolsTagged) {
        // Look for a stop string (or the trigger) that ends inside the new piece.
        size_t longest = 0;
        for (const auto& s : holds) longest = std::max(longest, s.size());
        size_t from = old > longest ? old - longest : 0;
        size_t stop_at = std::string::npos;
        bool is_trigger = false;
        for (const auto& s : holds) {
          if (s.empty()) continue;
          size_t p = text.find(s, from);
          const bool trig = job.mode == OutputMode::ToolsTagged && s == job.trigger;
          // A bare-JSON call (Llama 3.x) is the whole reply: '{' opens a call only before any text.
          if (trig && job.trigger_at_start && p != std::string::npos && !all_space(std::string_view(text).substr(0, p)))
            continue;
          if (p != std::string::npos && p < stop_at) {
            stop_at = p;
            is_trigger = trig;
          }
        }
        if (stop_at != std::string::npos) {
          if (!is_trigger) {
            text.resize(stop_at);
            finish = "stop";
            break;
          }
          call_text = text.substr(stop_at);
          text.resize(stop_at);
          in_call = true;
          if (job.call_max_tokens > 0) limit = std::min(limit, generated + job.call_max_tokens);
          matcher = std::make_unique<grammar::Matcher>(job.grammar, vocab);
          // The call grammar starts with the trigger itself; feed it what was generated so far.
          if (!matcher->accept_bytes(call_text)) {
            matcher = std::make_unique<grammar::Matcher>(job.grammar, vocab);
            (void)matcher->accept_bytes(job.trigger);
            call_text = job.trigger;
          }
        }
      }
      emit_safe(false);
    }
    if (matcher && matcher->is_terminated()) { finish = "stop"; break; }
  }
  // A complete answer that used up its budget ended as the client asked: not cut off.
  if (finish == "length" && matcher && matcher->is_complete()) finish = "stop";
  if (!in_call) {
    ReasoningPiece last = thinking.split(decoder.flush());
    ReasoningPiece rest = thinking.finish();
    job.push_reasoning_delta(last.reasoning + rest.reasoning);
    text += last.content + rest.content;
  }
  if (!thinking.reasoning().empty()) out.reasoning_content = thinking.reasoning();
  out.reasoning_tokens = thinking.reasoning_tokens();
  // The prompt's KV is final; snapshot its stable part (block-aligned) for later requests.
  if (cache && !cancelled && job.stable_len > 0) cache->store(*session, job.stable_len);
  const auto decoded = Clock::now();
  out.completion_tokens = generated;
  out.timings.predicted_n = generated;
  out.timings.predicted_ms = ms_between(prefilled, decoded);
  metrics.add_completion_tokens(generated);
  metrics.add_decode_ms(out.timings.predicted_ms);
  if (timed_out) metrics.count_timeout();
  if (cancelled) metrics.count_cancelled();

  // ---- read the reply back ----
  spdlog::debug("raw output: {}{}", text, call_text);
  switch (job.mode) {
    case OutputMode::Plain:
    case OutputMode::Json:
      out.content = text;
      break;
    case OutputMode::ToolsTagged:
      out.tool_calls = read_tool_calls(job, family_traits(family).tool_call_style, call_text);
      if (!out.tool_calls.empty() && all_space(text)) out.content.reset();
      else out.content = text;
      break;
    case OutputMode::ToolsForced:
      out.tool_calls = read_tool_calls(job, family_traits(family).tool_call_style, text);
      break;
    case OutputMode::Envelope: {
      std::optional<std::string> content;
      (void)parse_envelope(text, out.tool_calls, content);  // cut off: keeps the complete calls
      out.content = content;
      break;
    }
  }
  for (auto& c : out.tool_calls) c.id = new_call_id();
  if (finish == "stop" && !out.tool_calls.empty()) finish = "tool_calls";
  out.finish_reason = finish;
  // Whatever was not streamed yet (the whole content for the modes that parse at the end).
  if (out.content && out.content->size() > emitted) job.push_delta(out.content->substr(emitted));

  spdlog::info("{} prompt={} cached={} gen={} prefill={:.1f}ms ({:.1f} t/s) decode={:.1f}ms ({:.1f} t/s) "
               "queue={:.1f}ms calls={} finish={}{}{}",
               job.endpoint, out.prompt_tokens, out.cached_tokens, generated, out.timings.prompt_ms,
               out.timings.prompt_ms > 0 ? 1000.0 * double(out.timings.prompt_n) / out.timings.prompt_ms : 0.0,
               out.timings.predicted_ms,
               out.timings.predicted_ms > 0 ? 1000.0 * double(generated) / out.timings.predicted_ms : 0.0,
               out.timings.queue_ms, out.tool_calls.size(), finish, cancelled ? " (client gone)" : "",
               timed_out ? " (timeout)" : "");
  job.finish(std::move(out));
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
    if (impl_->running) impl_->running->cancel();
  }
  impl_->cv.notify_all();
  for (auto& j : left) j->finish(Completion{}, "server shutting down");
}

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

  // Chat template family: an explicit name wins, then detection from the GGUF; ChatML otherwise.
  if (!opts.chat_template.empty()) {
    auto f = family_from_name(opts.chat_template);
    if (!f) return Error{"unknown chat template '" + opts.chat_template + "'"};
    impl->family = *f;
  } else {
    auto tmpl = impl->model->gguf().get_string("tokenizer.chat_template");
    TemplateFamily f = tmpl ? detect_template_family(*tmpl) : TemplateFamily::Unknown;
    impl->family = f == TemplateFamily::Unknown ? TemplateFamily::ChatML : f;
  }
  if (tok.bos_id() >= 0) impl->bos_text = tok.token_to_piece(tok.bos_id(), true);
  if (tok.eos_id() >= 0) impl->eos_text = tok.token_to_piece(tok.eos_id(), true);

  // Grammar vocabulary: the exact bytes of every token; control and unused tokens are "" so the
  // grammar never picks them inside constrained output.
  std::vector<std::string> pieces(static_cast<size_t>(impl->n_vocab));
  for (int32_t id = 0; id < impl->n_vocab && id < tok.n_vocab(); ++id) {
    TokenType t = tok.token_type(id);
    // LFM2's <|tool_call_start|> / <|tool_call_end|> are control tokens its calls are written with.
    const std::string special = t == TokenType::Control ? tok.token_to_piece(id, true) : std::string();
    const FamilyTraits& ft = family_traits(impl->family);
    const bool call_tag = ft.tool_call_style == ToolCallStyle::PythonList && !special.empty() &&
                          (special == ft.tool_call_start || special == ft.tool_call_end);
    if ((t == TokenType::Control && !call_tag) || t == TokenType::Unused) continue;
    pieces[static_cast<size_t>(id)] = call_tag ? special : tok.token_to_piece(id, false);
  }
  impl->vocab = grammar::Vocabulary::create(std::move(pieces), tok.eog_ids());

  SessionOptions so;
  so.n_ctx = opts.n_ctx;
  impl->session = std::make_unique<Session>(impl->model, *impl->pool, so);
  impl->n_ctx = impl->session->n_ctx();
  if (!opts.cache_dir.empty() || opts.cache_ram_mb > 0) {
    PromptCacheOptions co;
    co.dir = opts.cache_dir;
    co.max_disk_bytes = uint64_t(opts.cache_max_mb) << 20;
    co.max_ram_bytes = uint64_t(opts.cache_ram_mb) << 20;
    co.log = [](PromptCacheLogLevel level, std::string_view msg) {
      if (level == PromptCacheLogLevel::Warn) spdlog::warn("prompt cache: {}", msg);
      else if (level == PromptCacheLogLevel::Info) spdlog::info("prompt cache: {}", msg);
      else spdlog::debug("prompt cache: {}", msg);
    };
    impl->cache = std::make_unique<PromptCacheStore>(std::move(co));
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

std::shared_ptr<Job> Engine::prepare(const ChatRequest& req, ApiError& err) {
  Impl& s = *impl_;
  const FamilyTraits& traits = family_traits(s.family);
  auto job = std::make_shared<Job>();
  job->arrived = Clock::now();
  job->deadline = job->arrived + std::chrono::milliseconds(static_cast<int64_t>(s.opts.timeout_sec * 1000.0));

  const bool tools_active = !req.tools.empty() && req.tool_choice != ToolChoice::None;
  // Native call syntaxes we constrain: <tool_call>{...}</tool_call> (Qwen2.5, Hermes), a bare JSON
  // object {"name": ..., "parameters": {...}} as the whole reply (Llama 3.1/3.2/3.3), Qwen3.5's
  // XML-parameter <tool_call>s and LFM2's Python-call lists.
  const bool bare_json = traits.tool_call_style == ToolCallStyle::BareJson;
  const bool native = traits.tool_call_style == ToolCallStyle::TaggedJson || bare_json ||
                      traits.tool_call_style == ToolCallStyle::QwenXml || traits.tool_call_style == ToolCallStyle::PythonList;
  if (tools_active) {
    job->mode = native ? (req.tool_choice == ToolChoice::Auto ? OutputMode::ToolsTagged : OutputMode::ToolsForced)
                       : OutputMode::Envelope;
  } else if (req.response_format != ResponseFormat::Text) {
    job->mode = OutputMode::Json;
  }

  // ---- prompt ----
  RenderOptions ro;
  ro.bos_token = s.bos_text;
  ro.eos_token = s.eos_text;
  // Content is text: control-token text in it is marked, so that only the template's own control
  // tokens are parsed as such (content_marks.h).
  const Tokenizer& tok = s.model->tokenizer();
  const ControlTextFinder find_control = [&tok](std::string_view t) { return tok.find_control_text(t); };
  std::vector<ChatMessage> messages = mark_control_text(req.messages, s.family, find_control);
  const std::string tools_json = mark_control_text_json(req.tools_json, find_control);
  if (tools_active && native && !family_needs_tool_lowering(s.family)) {
    ro.tools_json = tools_json;
  } else if (family_needs_tool_lowering(s.family)) {
    // Tool list (if active) and tool history rewritten into plain turns asking for the envelope,
    // or for <tool_call> JSON where the model was trained on it (SmolLM3, whose shipped template
    // drops the tools).
    LoweredConversation low = lower_tool_conversation(s.family, messages, tools_active ? tools_json : "",
                                                      native ? LoweredToolSyntax::Tagged : LoweredToolSyntax::Envelope);
    if (!low.ok) {
      err = ApiError{400, low.error, "invalid_request_error", "messages", ""};
      return nullptr;
    }
    messages = std::move(low.messages);
  } else if (tools_active) {
    ro.tools_json = tools_json;  // the template shows the tools; the envelope grammar still applies
  }
  // Thinking: what the request, the --reasoning default and the template decide together.
  job->thinking = plan_thinking(s.family, messages, req.enable_thinking, req.reasoning_effort, s.opts.reasoning,
                                ro.enable_thinking);
  ChatRenderResult rendered = render_chat(s.family, messages, ro);
  if (!rendered.ok) {
    err = ApiError{400, "the conversation cannot be rendered with the " + std::string(family_name(s.family)) +
                            " chat template: " + rendered.error,
                   "invalid_request_error", "messages", ""};
    return nullptr;
  }
  const UnmarkedPrompt prompt = unmark_control_text(rendered.text);
  job->prompt = tok.encode(prompt.text, false, prompt.plain);
  if (tok.add_bos() && tok.bos_id() >= 0 && (job->prompt.empty() || job->prompt[0] != tok.bos_id())) {
    job->prompt.insert(job->prompt.begin(), tok.bos_id());
  }
  job->stable_len = job->prompt.size();
  size_t last_user = messages.size();
  for (size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "user") {
      last_user = i;
      break;
    }
  if (last_user < messages.size()) {
    // Render the conversation before the last user message; the tokens it shares with the full
    // prompt are the stable prefix (the junction token may tokenize differently, so compare).
    std::vector<ChatMessage> head(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(last_user));
    RenderOptions hro = ro;
    hro.add_generation_prompt = false;
    size_t common = 0;
    if (!head.empty()) {
      ChatRenderResult h = render_chat(s.family, head, hro);
      if (h.ok) {
        const UnmarkedPrompt hp = unmark_control_text(h.text);
        std::vector<int32_t> ht = tok.encode(hp.text, false, hp.plain);
        if (tok.add_bos() && tok.bos_id() >= 0 && (ht.empty() || ht[0] != tok.bos_id())) ht.insert(ht.begin(), tok.bos_id());
        while (common < ht.size() && common < job->prompt.size() && ht[common] == job->prompt[common]) ++common;
      } else {
        common = job->prompt.size();  // cannot tell: cache the whole prompt
      }
    }
    job->stable_len = common;
  }
  const int64_t n_ctx = s.n_ctx;
  if (job->prompt.empty()) {
    err = ApiError{400, "the prompt is empty", "invalid_request_error", "messages", ""};
    return nullptr;
  }
  if (static_cast<int64_t>(job->prompt.size()) >= n_ctx) {
    err = ApiError{400,
                   "the prompt is " + std::to_string(job->prompt.size()) + " tokens; this server's context is " +
                       std::to_string(n_ctx) + " tokens",
                   "invalid_request_error", "messages", "context_length_exceeded"};
    return nullptr;
  }
  const int64_t room = n_ctx - static_cast<int64_t>(job->prompt.size());

  // ---- grammar ----
  grammar::CompileResult compiled;
  if (job->mode == OutputMode::Json) {
    std::string schema = req.response_format == ResponseFormat::JsonSchema ? req.response_schema_json
                                                                           : std::string(R"({"type":"object"})");
    // A JSON answer may be pretty-printed as json.dumps(indent=2) writes it, up to 8 levels deep
    // (newline + at most 16 spaces): bounded runs, and the tokens models prefer stay allowed.
    grammar::CompileOptions co;
    co.whitespace = grammar::Whitespace::Natural;
    co.max_indent = 16;
    compiled = s.grammars.schema(schema, co);
    if (!compiled.ok()) {
      err = ApiError{400, "response_format schema: " + compiled.error_text(), "invalid_request_error",
                     "response_format.json_schema.schema", ""};
      return nullptr;
    }
  } else if (job->mode != OutputMode::Plain) {
    grammar::ToolListOptions to;
    // The whitespace JSON writers put in calls, as the templates show them ({"name": "f",
    // "arguments": {"a": 1}}: one space after ':' and ','; see docs/GRAMMAR.md "Natural
    // whitespace"), on one line: no run is longer than one byte, so it cannot become a loop.
    to.schema.whitespace = grammar::Whitespace::Natural;
    to.schema.max_indent = -1;
    to.parallel = req.parallel_tool_calls;
    if (req.tool_choice == ToolChoice::Named) to.forced_tool = req.tool_choice_name;
    if (job->mode == OutputMode::Envelope) {
      to.format = grammar::ToolCallFormat::Envelope;
      to.allow_text = req.tool_choice == ToolChoice::Auto;
    } else if (bare_json) {
      // The reply is the call itself: it starts with '{' (the trigger, only at the start of the
      // reply) and uses the family's key for the arguments. One call per reply, as the template has.
      to.format = grammar::ToolCallFormat::JsonObject;
      to.parallel = false;
      to.arguments_key = std::string(traits.arguments_key);
      job->trigger = "{";
      job->trigger_at_start = true;
    } else {
      to.format = traits.tool_call_style == ToolCallStyle::QwenXml      ? grammar::ToolCallFormat::QwenXml
                  : traits.tool_call_style == ToolCallStyle::PythonList ? grammar::ToolCallFormat::PythonList
                                                                        : grammar::ToolCallFormat::Hermes;
      job->tools_json = req.tools_json;
      job->trigger = std::string(traits.tool_call_start);
      job->close_tag = std::string(traits.tool_call_end);
    }
    compiled = s.grammars.tools(req.tools_json, to);
    if (!compiled.ok()) {
      err = ApiError{400, "tools: " + compiled.error_text(), "invalid_request_error", "tools", ""};
      return nullptr;
    }
  }
  job->grammar = compiled.grammar;
  TokenBudget budget;
  if (!plan_token_budget(job->mode, req.max_tokens, room, job->grammar, s.vocab, budget, err)) return nullptr;
  job->max_tokens = budget.max_tokens;
  job->call_max_tokens = budget.call_max_tokens;
  size_thinking_budget(job->thinking, job->max_tokens);

  // ---- stops and sampling ----
  if (job->mode == OutputMode::Plain || job->mode == OutputMode::ToolsTagged) {
    for (auto sv : traits.stop_strings) job->stop.emplace_back(sv);
    for (const auto& st : req.stop) job->stop.push_back(st);
  }
  SamplerParams& sp = job->sampling;
  sp.temperature = static_cast<float>(req.temperature.value_or(0.8));
  sp.top_p = static_cast<float>(req.top_p.value_or(0.95));
  sp.top_k = static_cast<int32_t>(req.top_k.value_or(40));
  sp.min_p = static_cast<float>(req.min_p.value_or(0.05));
  sp.repeat_penalty = static_cast<float>(req.repeat_penalty.value_or(1.0));
  sp.presence_penalty = static_cast<float>(req.presence_penalty);
  sp.frequency_penalty = static_cast<float>(req.frequency_penalty);
  sp.seed = req.seed ? *req.seed : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
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
TemplateFamily Engine::family() const { return impl_->family; }
std::string Engine::description() const { return impl_->model->description(); }

}  // namespace picolm
