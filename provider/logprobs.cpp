#include "logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer.h"

namespace picolm {

namespace {
bool allowed(const uint32_t* mask, size_t i) { return !mask || ((mask[i >> 5] >> (i & 31)) & 1u); }
}  // namespace

TokenLogprob token_logprob(std::span<const float> logits, const uint32_t* mask, int32_t id, int top_n,
                           const Tokenizer& tok) {
  top_n = std::clamp(top_n, 0, kMaxTopLogprobs);
  const size_t n = logits.size();
  // log softmax over the allowed set, in double: the sum runs over up to ~250k terms, and the
  // reported values must agree with the probabilities a client recomputes to many digits.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i)
    if (allowed(mask, i) && logits[i] > max_logit) max_logit = logits[i];
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i)
    if (allowed(mask, i)) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_z = static_cast<double>(max_logit) + std::log(sum);

  TokenLogprob out;
  out.token = tok.token_to_piece(id, false);
  out.logprob = id >= 0 && static_cast<size_t>(id) < n ? static_cast<double>(logits[static_cast<size_t>(id)]) - log_z
                                                         : -std::numeric_limits<double>::infinity();
  if (top_n == 0) return out;
  // The top_n allowed ids by logit (ties: lower id first, so the order is deterministic).
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(top_n) + 1);
  auto better = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  for (size_t i = 0; i < n; ++i) {
    if (!allowed(mask, i)) continue;
    const int32_t t = static_cast<int32_t>(i);
    if (best.size() == static_cast<size_t>(top_n) && !better(t, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), t, better), t);
    if (best.size() > static_cast<size_t>(top_n)) best.pop_back();
  }
  for (int32_t t : best) {
    out.top.push_back(TopLogprob{tok.token_to_piece(t, false), static_cast<double>(logits[static_cast<size_t>(t)]) - log_z});
  }
  return out;
}

}  // namespace picolm
