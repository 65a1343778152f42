#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace picolm {

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  rng_.seed(p_.seed);
  history_.clear();
}

void Sampler::accept(int32_t token) { history_.push_back(token); }

int32_t Sampler::sample(std::span<float> logits, const uint32_t* mask) {
  const int32_t n = int32_t(logits.size());
  auto allowed = [&](int32_t i) { return !mask || (mask[i >> 5] >> (i & 31)) & 1u; };

  // Penalties over the recent history (llama.cpp semantics).
  if (!history_.empty() && (p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f)) {
    const size_t from = p_.repeat_last_n > 0 && history_.size() > size_t(p_.repeat_last_n)
                            ? history_.size() - size_t(p_.repeat_last_n)
                            : (p_.repeat_last_n == 0 ? history_.size() : 0);
    std::unordered_map<int32_t, int> counts;
    for (size_t i = from; i < history_.size(); ++i) counts[history_[i]]++;
    for (auto [tok, cnt] : counts) {
      if (tok < 0 || tok >= n) continue;
      float& l = logits[size_t(tok)];
      if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= float(cnt) * p_.frequency_penalty + (cnt > 0 ? p_.presence_penalty : 0.0f);
    }
  }

  if (p_.temperature <= 0.0f) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; ++i)
      if (allowed(i) && (best < 0 || logits[size_t(i)] > logits[size_t(best)])) best = i;  // ties: lowest id
    return best;
  }

  candidates_.clear();
  for (int32_t i = 0; i < n; ++i)
    if (allowed(i) && std::isfinite(logits[size_t(i)])) candidates_.emplace_back(logits[size_t(i)], i);
  if (candidates_.empty()) return -1;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) {
    keep = size_t(p_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax with temperature.
  const float mx = candidates_[0].first;
  std::vector<float> probs(candidates_.size());
  double sum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs[i] = std::exp((candidates_[i].first - mx) / p_.temperature);
    sum += probs[i];
  }
  for (float& pr : probs) pr = float(pr / sum);
  // min-p: drop tokens below min_p * p(top).
  if (p_.min_p > 0.0f) {
    const float thr = p_.min_p * probs[0];
    size_t k = 1;
    while (k < probs.size() && probs[k] >= thr) ++k;
    keep = k;
  } else {
    keep = probs.size();
  }
  // top-p: smallest prefix whose mass reaches top_p.
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t k = 0;
    while (k < keep) {
      cum += probs[k++];
      if (cum >= p_.top_p) break;
    }
    keep = std::max<size_t>(k, 1);
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace picolm
