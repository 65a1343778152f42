// Reasoning split and thinking plan; see reasoning.h.
#include "reasoning.h"

#include <algorithm>

namespace picolm {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Length of the longest suffix of `text` that is a proper prefix of `needle`.
size_t partial_suffix(std::string_view text, std::string_view needle) {
  if (needle.empty()) return 0;
  for (size_t k = std::min(needle.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == needle.substr(0, k)) return k;
  return 0;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return r;
}

}  // namespace

std::optional<ReasoningEffort> reasoning_effort_from_name(std::string_view name) {
  const std::string n = lower(name);
  if (n == "none") return ReasoningEffort::None;
  if (n == "minimal" || n == "low") return ReasoningEffort::Low;  // OpenAI's "minimal": the least thinking we offer
  if (n == "medium") return ReasoningEffort::Medium;
  // xhigh and max (openai's newer names, OpenRouter's xhigh): the most thinking we offer.
  if (n == "high" || n == "xhigh" || n == "max") return ReasoningEffort::High;
  return std::nullopt;
}

std::optional<ReasoningMode> reasoning_mode_from_name(std::string_view name) {
  const std::string n = lower(name);
  if (n == "auto") return ReasoningMode::Auto;
  if (n == "on") return ReasoningMode::On;
  if (n == "off") return ReasoningMode::Off;
  return std::nullopt;
}

int64_t thinking_budget_tokens(ReasoningEffort effort, int64_t max_tokens) {
  max_tokens = std::max<int64_t>(max_tokens, 0);
  switch (effort) {
    case ReasoningEffort::None: return 0;
    case ReasoningEffort::Low: return std::min<int64_t>(max_tokens / 4, 1024);
    case ReasoningEffort::Medium: return std::min<int64_t>(max_tokens / 2, 4096);
    case ReasoningEffort::High: return std::min<int64_t>(max_tokens * 3 / 4, 16384);
  }
  return 0;
}

ThinkingPlan plan_thinking(TemplateFamily family, std::span<const ChatMessage> messages,
                           std::optional<bool> enable_thinking, std::optional<ReasoningEffort> effort,
                           ReasoningMode default_mode, std::optional<bool>& render_enable_thinking) {
  ThinkingPlan plan;
  render_enable_thinking.reset();
  const ReasoningTraits& traits = reasoning_traits(family);
  if (!traits.supported) return plan;
  plan.split = true;
  plan.open = std::string(traits.open);
  plan.close = std::string(traits.close);
  plan.separator = std::string(traits.separator);
  plan.start_inside = traits.prefills_open;

  // What the client asked for, most specific first; nullopt = the template decides.
  std::optional<bool> want = enable_thinking;
  if (!want && effort) want = *effort != ReasoningEffort::None;
  if (!want && default_mode != ReasoningMode::Auto) want = default_mode == ReasoningMode::On;
  if (traits.switchable) render_enable_thinking = want;
  // The template's own rules (SmolLM3's system flags) have the last word on the prompt; the plan
  // follows the prompt, so what the model is told and what is enforced agree.
  plan.enabled = template_thinks(family, messages, render_enable_thinking);
  // A switchable template that opens the block in its prompt (Qwen3.5) closes it there instead
  // when it is told not to think: the reply then starts with the answer.
  if (traits.switchable && !plan.enabled) plan.start_inside = false;
  // A template that always opens the block (DeepSeek R1) cannot be switched off in the prompt:
  // "off" then means no thinking tokens, so the block is closed at once.
  const bool off_by_request = want.has_value() && !*want;
  if (plan.enabled && !off_by_request) {
    plan.effort = effort.value_or(ReasoningEffort::Medium);
    if (plan.effort == ReasoningEffort::None) plan.effort = ReasoningEffort::Medium;  // enable_thinking=true wins
  }
  return plan;
}

void size_thinking_budget(ThinkingPlan& plan, int64_t max_tokens) {
  plan.budget = plan.split ? thinking_budget_tokens(plan.effort, max_tokens) : 0;
  // Budget 0: a block the model (or the prompt) opens anyway is closed at once, and the provider
  // does not open one itself.
  plan.force_open = plan.enabled && !plan.start_inside && plan.budget > 0;
}

ReasoningSplitter::ReasoningSplitter(std::string open, std::string close, bool start_inside, std::string marker)
    : open_(std::move(open)), close_(std::move(close)), marker_(std::move(marker)),
      state_(start_inside ? State::Thinking : State::Start), skip_ws_(start_inside) {}

bool ReasoningSplitter::answer_with_marker(ReasoningPiece& out) {
  const size_t m = held_.find(marker_), c = held_.find(close_);
  const size_t at = std::min(m, c);
  if (at == std::string::npos) {
    // Hold back what may be the start of a marker or a close.
    const size_t keep = std::max(partial_suffix(held_, marker_), partial_suffix(held_, close_));
    out.content.append(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return false;
  }
  out.content.append(held_, 0, at);
  held_.erase(0, at);
  if (at == c && c < m) {  // a close outside a block
    state_ = State::Ended;
    return true;
  }
  // Markers that name nothing, then a block; anything else ends the answer.
  size_t p = 0;
  for (;;) {
    const std::string_view rest = std::string_view(held_).substr(p);
    if (rest.starts_with(open_)) {
      held_.erase(0, p + open_.size());
      state_ = State::Thinking;
      skip_ws_ = true;
      return true;
    }
    if (rest.size() < open_.size() && std::string_view(open_).starts_with(rest)) return false;  // maybe the block
    if (rest.starts_with(marker_)) {
      p += marker_.size();
      continue;
    }
    if (rest.size() < marker_.size() && std::string_view(marker_).starts_with(rest)) return false;  // maybe a marker
    state_ = State::Ended;
    return true;
  }
}

ReasoningPiece ReasoningSplitter::push(std::string_view text) {
  held_ += text;
  ReasoningPiece out;
  run(out);
  return out;
}

void ReasoningSplitter::run(ReasoningPiece& out) {
  for (;;) {
    if (skip_ws_) {
      size_t n = 0;
      while (n < held_.size() && is_space(held_[n])) ++n;
      held_.erase(0, n);
      if (held_.empty()) return;
      skip_ws_ = false;
    }
    switch (state_) {
      case State::Start: {
        size_t p = 0;
        while (p < held_.size() && is_space(held_[p])) ++p;
        if (p == held_.size()) return;  // only whitespace so far: it may precede the open tag
        const std::string_view rest = std::string_view(held_).substr(p);
        if (rest.substr(0, open_.size()) == open_) {
          held_.erase(0, p + open_.size());
          state_ = State::Thinking;
          skip_ws_ = true;
          continue;
        }
        if (rest.size() < open_.size() && std::string_view(open_).substr(0, rest.size()) == rest) return;  // maybe a tag
        state_ = State::Answer;
        continue;
      }
      case State::Thinking: {
        const size_t q = held_.find(close_);
        if (q != std::string::npos) {
          size_t end = q;
          while (end > 0 && is_space(held_[end - 1])) --end;
          out.reasoning.append(held_, 0, end);
          held_.erase(0, q + close_.size());
          state_ = State::Answer;
          skip_ws_ = true;
          continue;
        }
        size_t safe = held_.size() - partial_suffix(held_, close_);
        while (safe > 0 && is_space(held_[safe - 1])) --safe;  // may be the whitespace before close
        out.reasoning.append(held_, 0, safe);
        held_.erase(0, safe);
        return;
      }
      case State::Answer:
        if (!marker_.empty()) {
          if (answer_with_marker(out)) continue;
          return;
        }
        out.content += held_;
        held_.clear();
        return;
      case State::Ended:
        held_.clear();
        return;
    }
  }
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  run(out);
  if (skip_ws_ || state_ == State::Ended) {
    held_.clear();
  } else if (state_ == State::Answer && !marker_.empty() && held_.starts_with(marker_)) {
    // Held at the end: markers that opened no block end the answer. (A partial marker or close
    // is text, as below: llama.cpp's content runs until a whole one.)
    state_ = State::Ended;
  } else if (state_ == State::Thinking) {
    size_t end = held_.size();
    while (end > 0 && is_space(held_[end - 1])) --end;
    out.reasoning.append(held_, 0, end);
  } else {
    out.content += held_;  // Start: whitespace or an incomplete open tag was the answer after all
  }
  held_.clear();
  return out;
}

}  // namespace picolm
