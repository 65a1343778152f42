// Token budgets of constrained output (issue 13): a constrained reply (tool_choice required/named,
// response_format, /tool_call, and a call that has started under tool_choice auto) always ends as
// a complete answer within its budget.
//  - plan_token_budget (Engine::prepare): the budget of a job; a budget below the grammar's
//    shortest answer is refused up front (400 naming the minimum); constrained output without a
//    client max_tokens gets kDefaultConstrainedMaxTokens.
//  - AnswerBudget (decode loop): once the tokens left are down to what the shortest completion
//    takes, the matcher's closing mask takes over; a normal-mode token after which the answer could
//    no longer be finished (a `,` opening another property, a `\n` opening another parallel call,
//    a long key) is taken back and the step redone closing.
//  - TriggerGuard (decode loop, tool_choice auto): the text before the trigger is free; once the
//    budget left cannot hold a whole call, tokens that would start or complete the trigger are
//    masked out, so a call is only opened when it can be finished.
// Thread-safety: AnswerBudget and TriggerGuard belong to one generation (the engine worker);
// plan_token_budget is a pure function of its arguments (any HTTP thread).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "openai.h"

namespace picolm {

enum class OutputMode;  // scheduler.h

// Default budget of constrained output when the request has no max_tokens: a required call cannot
// run for the whole context, and a string without maxLength cannot grow without bound (the closing
// mode ends it once the budget is spent). Documented in README and docs/GRAMMAR.md.
constexpr int64_t kDefaultConstrainedMaxTokens = 1024;

// Extra tokens kept in hand before closing. The take-back check alone keeps every state
// finishable; the margin lets the closing mask start a few tokens early, so it has room to pick
// finer tokens instead of needing the fewest-token spelling of the completion at every step.
constexpr int64_t kClosingMargin = 2;

// What finishing the answer from the matcher's state takes, in tokens (the closing mask's bound);
// -1 when the grammar cannot tell (the vocabulary cannot spell the completion).
int64_t tokens_to_finish(const grammar::Matcher& m);

struct TokenBudget {
  int64_t max_tokens = 0;       // the whole reply
  int64_t call_max_tokens = 0;  // tool_choice auto without max_tokens: a call, from its trigger; 0 = none
  int64_t min_tokens = -1;      // the shortest complete answer (-1: free text, or unknown)
};

// The budget of a job in `mode` with the client's `requested` max_tokens and `room` tokens left in
// the context. `grammar` is the job's (null for free text); for OutputMode::ToolsTagged the
// shortest answer is free text, so no minimum applies. False and a 400 in `err` when the budget is
// below the shortest complete answer.
bool plan_token_budget(OutputMode mode, std::optional<int64_t> requested, int64_t room,
                       const std::shared_ptr<const grammar::Grammar>& grammar,
                       const std::shared_ptr<const grammar::Vocabulary>& vocab, TokenBudget& out, ApiError& err);

class AnswerBudget {
 public:
  bool closing() const { return closing_; }
  // From now on the closing mask (e.g. the request's deadline has passed).
  void force_closing() { closing_ = true; }

  // The mask for the next token with `left` tokens of budget left: the grammar's own, or its
  // closing mask once what is left is down to what finishing takes.
  void fill_mask(const grammar::Matcher& m, int64_t left, uint32_t* mask);
  // Whether fill_mask with `left` tokens left would keep the grammar's own mask from the matcher's
  // state (closing not yet on and not switched on by it). Jump-forward asks this after a planned run.
  bool stays_open(const grammar::Matcher& m, int64_t left) const;

  // After a non-end token accepted under the normal mask, with `left_after` tokens left: true when
  // the answer could no longer be finished from the new state. The caller then rolls the token
  // back and redoes the step (closing is now on).
  bool overshoots(const grammar::Matcher& m, int64_t left_after);

 private:
  bool closing_ = false;
};

class TriggerGuard {
 public:
  // `trigger` opens a call whose grammar (starting with the trigger itself) is `call_grammar`;
  // `at_start`: the trigger counts only while the text is all whitespace (bare-JSON calls). An
  // empty trigger or null grammar gives a guard that never masks.
  TriggerGuard(std::string trigger, bool at_start, std::shared_ptr<const grammar::Grammar> call_grammar,
               std::shared_ptr<const grammar::Vocabulary> vocab);

  // Tokens a call needs once its trigger starts (trigger tokens, shortest call, margin); -1 = none.
  int64_t reserve() const { return reserve_; }

  // With `left` tokens of budget left and `text` generated so far (no call open): fills `mask`
  // (mask_words words: every token but those that would start or complete the trigger) and
  // returns true, or returns false when nothing needs masking.
  bool fill_mask(std::string_view text, int64_t left, uint32_t* mask, size_t mask_words) const;

 private:
  std::string trigger_;
  bool at_start_ = false;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  int64_t reserve_ = -1;
};

}  // namespace picolm
