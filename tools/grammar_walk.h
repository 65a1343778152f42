// Random walks under a grammar's token mask: the sampler of `picolm-grammar sample/bench` and of
// the grammar property test.
//
// A walk plays a model with random logits: it fills the mask, picks one allowed token, accepts it,
// and repeats until an end-of-generation token is accepted. Uniform picks over a 32k-152k vocabulary
// would almost never close a string, so after a per-walk "soft length" the walk prefers tokens
// that contain a closing byte (`"`, `}`, `]`), else ones with ASCII punctuation, and takes
// end-of-generation as soon as it is allowed.
// Thread-safety: free functions without shared state.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace picolm::tools {

struct WalkOptions {
  uint64_t seed = 1;
  int max_tokens = 512;       // hard budget; a walk that needs more is reported as BudgetExhausted
  int soft_len_min = 8;       // the soft length is drawn uniformly from [soft_len_min, soft_len_max]
  int soft_len_max = 48;
  double close_bias = 0.9;    // after the soft length: probability of preferring closing tokens
  double rollback_check = 0.0;  // per step: probability of accepting a random allowed token,
                                // rolling it back, and requiring the same mask and text as before
  bool time_masks = false;    // record the time of every fill_mask and accept_token call
  // Closing mode (issue 13): after `close_after` accepted tokens (-1: never) the walk follows
  // Matcher::fill_mask_closing with tokens_left = min_completion_tokens() + closing_slack,
  // counting down, picking uniformly among the allowed tokens. A walk that then needs more
  // tokens than that is reported as BudgetExhausted.
  int close_after = -1;
  int closing_slack = 0;
};

enum class WalkStatus {
  Finished,         // an end-of-generation token was accepted
  Stuck,            // the mask allowed nothing (and the walk had not finished)
  BudgetExhausted,  // max_tokens accepted without finishing
  Inconsistent,     // mask and accept_token disagree, rollback did not restore the state, or the
                    // mask allowed an empty non-EOG token
};
const char* walk_status_name(WalkStatus s);

struct WalkResult {
  WalkStatus status = WalkStatus::Stuck;
  std::string text;               // bytes accepted (Matcher::text())
  int n_tokens = 0;               // tokens accepted, EOG included
  std::string detail;             // what went wrong, for Stuck/Inconsistent
  std::vector<double> mask_us;    // per fill_mask call, when time_masks (wall clock)
  std::vector<double> mask_cpu_us;  // the same in thread CPU time: immune to preemption by other
                                    // processes, but includes ~0.3 us of clock_gettime syscalls
  std::vector<double> accept_us;  // per accept_token call, when time_masks
  double slowest_mask_cpu_us = 0;  // the slowest fill_mask (CPU time) and the text before it
  std::string slowest_mask_prefix;
  // Closing mode: the shortest completion when it started, the tokens then allowed, the tokens
  // used (EOG not counted; -1 = closing never started).
  int closing_min_tokens = -1;
  int closing_budget = -1;
  int closing_used = -1;
  std::vector<double> completion_us;  // per step before closing, when time_masks: min_completion_tokens()
  std::vector<double> closing_mask_us;  // per fill_mask_closing call, when time_masks (wall clock)
};

// A vocabulary with each token's class for the walk's heuristics, computed once and shared by
// any number of walks (immutable after construction).
struct WalkVocabulary {
  enum Kind : uint8_t { Other, Eog, Empty, Closing, Punctuation };
  explicit WalkVocabulary(std::shared_ptr<const grammar::Vocabulary> v);
  std::shared_ptr<const grammar::Vocabulary> vocab;
  std::vector<uint8_t> kind;  // [token id] -> Kind
};

WalkResult random_walk(const std::shared_ptr<const grammar::Grammar>& grammar, const WalkVocabulary& wv,
                       const WalkOptions& opts);

// Summary statistics of a list of samples (microseconds or milliseconds, the caller's unit).
struct Stats {
  double median = 0, p99 = 0, max = 0, mean = 0;
  size_t n = 0;
};
Stats summarize(std::vector<double> samples);

}  // namespace picolm::tools
