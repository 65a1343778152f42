// Log-probabilities of generated tokens (OpenAI `logprobs` / `top_logprobs`).
//
// What is reported: the model's distribution at a step, restricted to the tokens the grammar mask
// allowed there (nothing else could have been sampled), before temperature, top-k/p and penalties:
// log softmax of the raw logits over the allowed set. The sampled token's value, and the top_n
// allowed tokens by logit. Without a mask the whole vocabulary is the allowed set.
// Cost: one pass over the vocabulary per generated token, only for requests that ask.
//
// Thread-safety: pure functions.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace picolm {

class Tokenizer;

struct TopLogprob {
  std::string token;  // the token's bytes (may be part of a UTF-8 sequence)
  double logprob = 0.0;
};

struct TokenLogprob {
  std::string token;
  double logprob = 0.0;
  std::vector<TopLogprob> top;  // the top_n allowed tokens, most likely first
};

// OpenAI caps top_logprobs at 20.
constexpr int kMaxTopLogprobs = 20;

// logits: n_vocab raw values of the step; mask: bit i set = token i allowed (nullptr: all);
// id: the sampled token; top_n in [0, kMaxTopLogprobs].
TokenLogprob token_logprob(std::span<const float> logits, const uint32_t* mask, int32_t id, int top_n,
                           const Tokenizer& tok);

}  // namespace picolm
