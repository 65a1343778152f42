#include "token_budget.h"

#include <algorithm>
#include <climits>

#include "scheduler.h"

namespace picolm {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Length of the longest suffix of `text` that is a proper prefix of `needle`.
size_t partial_prefix_suffix(std::string_view text, std::string_view needle) {
  const size_t max = std::min(needle.size() - 1, text.size());
  for (size_t k = max; k > 0; --k)
    if (text.compare(text.size() - k, k, needle, 0, k) == 0) return k;
  return 0;
}

}  // namespace

int64_t tokens_to_finish(const grammar::Matcher& m) { return m.min_completion_tokens(); }

bool plan_token_budget(OutputMode mode, std::optional<int64_t> requested, int64_t room,
                       const std::shared_ptr<const grammar::Grammar>& grammar,
                       const std::shared_ptr<const grammar::Vocabulary>& vocab, TokenBudget& out, ApiError& err) {
  const bool constrained = constrained_from_start(mode);
  out = TokenBudget{};
  out.max_tokens = std::min<int64_t>(requested.value_or(constrained ? kDefaultConstrainedMaxTokens : room), room);
  if (mode == OutputMode::ToolsTagged && !requested) out.call_max_tokens = kDefaultConstrainedMaxTokens;
  if (!constrained || !grammar) return true;
  // Prompt-independent: the grammar's shortest answer from its start, trigger and close tags included.
  out.min_tokens = tokens_to_finish(grammar::Matcher(grammar, vocab));
  if (out.min_tokens <= out.max_tokens) return true;  // also -1: the grammar cannot tell
  const std::string what = mode == OutputMode::Json          ? "the shortest reply the response_format schema allows"
                           : mode == OutputMode::ToolsOrJson ? "the shortest tool call or response_format answer"
                                                             : "the shortest complete tool call";
  const std::string need = std::to_string(out.min_tokens);
  if (requested && *requested < out.min_tokens) {
    err = ApiError{400,
                   "max_tokens is " + std::to_string(*requested) + ", but " + what + " takes " + need +
                       " tokens: set max_tokens to at least " + need,
                   "invalid_request_error", "max_tokens", ""};
  } else {
    err = ApiError{400,
                   "the prompt leaves " + std::to_string(room) + " tokens of this server's context, but " + what +
                       " takes " + need + " tokens",
                   "invalid_request_error", "messages", "context_length_exceeded"};
  }
  return false;
}

namespace {

// True when the answer can be finished from the matcher's state within `room` tokens (or the
// grammar cannot tell). Every token spells at least one byte, so the shortest completion's bytes
// bound its tokens: the cheap byte count settles it until the budget gets close, and only then is
// the fewest-token count of the completion asked for.
bool finish_fits(const grammar::Matcher& m, int64_t room) {
  if (static_cast<int64_t>(m.min_completion_bytes()) <= room) return true;
  const int64_t need = tokens_to_finish(m);
  return need < 0 || need <= room;
}

}  // namespace

bool AnswerBudget::stays_open(const grammar::Matcher& m, int64_t left) const {
  // Closing once the tokens left are down to what finishing takes plus the margin.
  return !closing_ && finish_fits(m, left - kClosingMargin - 1);
}

void AnswerBudget::fill_mask(const grammar::Matcher& m, int64_t left, uint32_t* mask) {
  if (!stays_open(m, left)) closing_ = true;
  if (closing_) m.fill_mask_closing(mask, static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX)));
  else m.fill_mask(mask);
}

bool AnswerBudget::overshoots(const grammar::Matcher& m, int64_t left_after) {
  if (closing_ || m.is_complete() || finish_fits(m, left_after)) return false;
  closing_ = true;
  return true;
}

TriggerGuard::TriggerGuard(std::string trigger, bool at_start, std::shared_ptr<const grammar::Grammar> call_grammar,
                           std::shared_ptr<const grammar::Vocabulary> vocab)
    : trigger_(std::move(trigger)), at_start_(at_start), vocab_(std::move(vocab)) {
  if (trigger_.empty() || !call_grammar || !vocab_) return;
  grammar::Matcher m(std::move(call_grammar), vocab_);
  if (!m.accept_bytes(trigger_)) return;
  const int64_t need = tokens_to_finish(m);
  if (need < 0) return;
  // After the trigger the call needs `need` tokens; the token that completes the trigger is one
  // more, and the bytes after the trigger in that token may start the call's JSON (the margin).
  // A partial trigger needs up to its length in tokens more, so the guard starts that much earlier.
  reserve_ = need + 1 + kClosingMargin + static_cast<int64_t>(trigger_.size());
}

bool TriggerGuard::fill_mask(std::string_view text, int64_t left, uint32_t* mask, size_t mask_words) const {
  if (reserve_ < 0 || left > reserve_) return false;
  if (at_start_ && !std::all_of(text.begin(), text.end(), is_space)) return false;  // inert after text
  // A trigger in the text so far would have opened a call, so a new one must end in the next
  // token: only the last trigger.size() - 1 bytes of the text can take part.
  const std::string_view tail = text.substr(text.size() - std::min(text.size(), trigger_.size() - 1));
  const size_t partial = partial_prefix_suffix(text, trigger_);
  std::fill(mask, mask + mask_words, ~0u);
  std::string joined;
  const size_t n = std::min(vocab_->size(), mask_words * 32);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = vocab_->token(static_cast<int32_t>(id));
    if (piece.empty()) continue;
    // Only a piece holding the trigger's first byte, or continuing the partial trigger at the end
    // of the text, can form it (the triggers in use do not overlap themselves).
    const bool continues = partial > 0 && piece[0] == trigger_[partial];
    if (!continues && piece.find(trigger_[0]) == std::string::npos) continue;
    joined.assign(tail);
    joined += piece;
    if (joined.find(trigger_) != std::string::npos || partial_prefix_suffix(joined, trigger_) > 0)
      mask[id / 32] &= ~(1u << (id % 32));
  }
  return true;
}

}  // namespace picolm
