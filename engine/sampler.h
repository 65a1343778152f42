// Token sampler: greedy, temperature, top-k, top-p, min-p, repetition/frequency/presence penalties,
// seed. An optional allow-mask (from the grammar) is applied before anything else.
// Thread-safety: a Sampler is used by one thread at a time.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace picolm {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int32_t repeat_last_n = 64;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0xC0FFEE;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // logits: n_vocab values (modified in place). mask: bit i set = token i allowed (nullptr: all).
  // Returns -1 only when the mask allows nothing.
  int32_t sample(std::span<float> logits, const uint32_t* mask = nullptr);
  // Records a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  void reset();
  const SamplerParams& params() const { return p_; }

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace picolm
