#include "grammar_walk.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <random>
#include <utility>

namespace picolm::tools {

const char* walk_status_name(WalkStatus s) {
  switch (s) {
    case WalkStatus::Finished: return "finished";
    case WalkStatus::Stuck: return "stuck";
    case WalkStatus::BudgetExhausted: return "budget-exhausted";
    case WalkStatus::Inconsistent: return "inconsistent";
  }
  return "?";
}

namespace {

bool has_closing_byte(const std::string& s) {
  return s.find_first_of("\"}]") != std::string::npos;
}

// ASCII punctuation: what a string still needs before it may close is usually a separator
// (the ':' of a URI scheme, the '-' of a date), rarely one more letter.
bool has_punctuation(const std::string& s) {
  for (unsigned char c : s)
    if (c > 0x20 && c < 0x7f && !std::isalnum(c)) return true;
  return false;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

}  // namespace

WalkVocabulary::WalkVocabulary(std::shared_ptr<const grammar::Vocabulary> v) : vocab(std::move(v)) {
  kind.assign(vocab->size(), Other);
  for (size_t id = 0; id < kind.size(); ++id) {
    const std::string& t = vocab->token(static_cast<int32_t>(id));
    kind[id] = t.empty() ? Empty : has_closing_byte(t) ? Closing : has_punctuation(t) ? Punctuation : Other;
  }
  for (int32_t id : vocab->eog_ids())
    if (id >= 0 && static_cast<size_t>(id) < kind.size()) kind[static_cast<size_t>(id)] = Eog;
}

WalkResult random_walk(const std::shared_ptr<const grammar::Grammar>& grammar, const WalkVocabulary& wv,
                       const WalkOptions& opts) {
  const auto& vocab = wv.vocab;
  WalkResult r;
  std::mt19937_64 rng(opts.seed);
  const int soft_len = std::uniform_int_distribution<int>(opts.soft_len_min, opts.soft_len_max)(rng);
  std::uniform_real_distribution<double> coin(0.0, 1.0);

  grammar::Matcher m(grammar, vocab);
  const size_t n_vocab = vocab->size();
  std::vector<uint32_t> mask((n_vocab + 31) / 32);

  std::vector<int32_t> allowed, closing, punctuation, eog;
  int closing_left = -1;  // >= 0: in closing mode, non-EOG tokens left
  for (int step = 0; step < opts.max_tokens; ++step) {
    std::fill(mask.begin(), mask.end(), 0u);
    if (closing_left < 0 && opts.time_masks) {
      // What a budget-aware decoder asks before every token.
      const auto t0 = std::chrono::steady_clock::now();
      const int t = m.min_completion_tokens();
      const auto t1 = std::chrono::steady_clock::now();
      (void)t;
      r.completion_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (closing_left < 0 && opts.close_after >= 0 && step >= opts.close_after) {
      r.closing_min_tokens = m.min_completion_tokens();
      if (r.closing_min_tokens < 0) {
        r.status = WalkStatus::Inconsistent;
        r.detail = "min_completion_tokens() is -1 (the vocabulary cannot spell the completion)";
        r.text = m.text();
        return r;
      }
      closing_left = r.closing_min_tokens + opts.closing_slack;
      r.closing_budget = closing_left;
      r.closing_used = 0;
    }
    if (closing_left >= 0) {
      const auto t0 = std::chrono::steady_clock::now();
      m.fill_mask_closing(mask.data(), closing_left);
      const auto t1 = std::chrono::steady_clock::now();
      if (opts.time_masks) r.closing_mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    } else if (opts.time_masks) {
      const double c0 = thread_cpu_us();
      const auto t0 = std::chrono::steady_clock::now();
      m.fill_mask(mask.data());
      const auto t1 = std::chrono::steady_clock::now();
      r.mask_cpu_us.push_back(thread_cpu_us() - c0);
      if (r.mask_cpu_us.back() > r.slowest_mask_cpu_us) {
        r.slowest_mask_cpu_us = r.mask_cpu_us.back();
        r.slowest_mask_prefix = m.text();
      }
      r.mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    } else {
      m.fill_mask(mask.data());
    }
    allowed.clear();
    closing.clear();
    punctuation.clear();
    eog.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      uint32_t bits = mask[w];
      while (bits) {
        const size_t id = w * 32 + static_cast<size_t>(__builtin_ctz(bits));
        bits &= bits - 1;
        if (id >= n_vocab) {
          r.status = WalkStatus::Inconsistent;
          r.detail = "mask bit set beyond the vocabulary: " + std::to_string(id);
          r.text = m.text();
          return r;
        }
        const auto tid = static_cast<int32_t>(id);
        const uint8_t k = wv.kind[id];
        if (k == WalkVocabulary::Eog) {
          eog.push_back(tid);
        } else if (k == WalkVocabulary::Empty) {
          r.status = WalkStatus::Inconsistent;
          r.detail = "mask allows empty non-EOG token " + std::to_string(id);
          r.text = m.text();
          return r;
        } else {
          allowed.push_back(tid);
          if (k == WalkVocabulary::Closing) closing.push_back(tid);
          else if (k == WalkVocabulary::Punctuation) punctuation.push_back(tid);
        }
      }
    }
    if (allowed.empty() && eog.empty()) {
      r.status = WalkStatus::Stuck;
      r.detail = "empty mask after " + std::to_string(r.n_tokens) + " tokens";
      r.text = m.text();
      return r;
    }
    if (!eog.empty() && !m.is_complete()) {
      r.status = WalkStatus::Inconsistent;
      r.detail = "mask allows end-of-generation but is_complete() is false";
      r.text = m.text();
      return r;
    }

    if (!allowed.empty() && opts.rollback_check > 0 && coin(rng) < opts.rollback_check) {
      const int32_t probe = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      const std::string before = m.text();
      std::vector<uint32_t> again(mask.size(), 0u);
      if (!m.accept_token(probe)) {
        r.status = WalkStatus::Inconsistent;
        r.detail = "mask allowed token " + std::to_string(probe) + " but accept_token refused it";
        r.text = m.text();
        return r;
      }
      m.rollback(1);
      if (closing_left >= 0) m.fill_mask_closing(again.data(), closing_left);
      else m.fill_mask(again.data());
      if (again != mask || m.text() != before) {
        r.status = WalkStatus::Inconsistent;
        r.detail = "accept_token(" + std::to_string(probe) + ") + rollback(1) changed the " +
                   (m.text() != before ? "text" : "mask");
        r.text = m.text();
        return r;
      }
    }

    int32_t pick;
    const bool closing_phase = closing_left < 0 && step >= soft_len && coin(rng) < opts.close_bias;
    if (closing_left >= 0) {
      // Random logits over the closing mask.
      const size_t n = allowed.size() + eog.size();
      const size_t k = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
      pick = k < allowed.size() ? allowed[k] : eog[k - allowed.size()];
    } else if (closing_phase && !eog.empty()) {
      pick = eog[0];
    } else if (closing_phase && !closing.empty()) {
      pick = closing[std::uniform_int_distribution<size_t>(0, closing.size() - 1)(rng)];
    } else if (closing_phase && !punctuation.empty()) {
      // The shortest ones: among single bytes a needed separator is one choice in a few, among
      // all punctuated tokens ("-shift", ".Tree") it is one in thousands.
      size_t shortest = SIZE_MAX;
      for (int32_t id : punctuation) shortest = std::min(shortest, vocab->token(id).size());
      std::erase_if(punctuation, [&](int32_t id) { return vocab->token(id).size() != shortest; });
      pick = punctuation[std::uniform_int_distribution<size_t>(0, punctuation.size() - 1)(rng)];
    } else {
      // Uniform over every allowed token, end-of-generation included (random logits).
      const size_t n = allowed.size() + eog.size();
      const size_t k = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
      pick = k < allowed.size() ? allowed[k] : eog[k - allowed.size()];
    }
    bool accepted;
    if (opts.time_masks) {
      const auto t0 = std::chrono::steady_clock::now();
      accepted = m.accept_token(pick);
      const auto t1 = std::chrono::steady_clock::now();
      r.accept_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    } else {
      accepted = m.accept_token(pick);
    }
    if (!accepted) {
      r.status = WalkStatus::Inconsistent;
      r.detail = "mask allowed token " + std::to_string(pick) + " but accept_token refused it";
      r.text = m.text();
      return r;
    }
    ++r.n_tokens;
    if (wv.kind[static_cast<size_t>(pick)] == WalkVocabulary::Eog) {
      r.status = WalkStatus::Finished;
      r.text = m.text();
      return r;
    }
    if (closing_left >= 0) {
      ++r.closing_used;
      if (--closing_left < 0) {
        r.status = WalkStatus::BudgetExhausted;
        r.detail = "closing mode used more than " + std::to_string(r.closing_budget) + " tokens";
        r.text = m.text();
        return r;
      }
    }
  }
  r.status = WalkStatus::BudgetExhausted;
  r.detail = "no end-of-generation within " + std::to_string(opts.max_tokens) + " tokens";
  r.text = m.text();
  return r;
}

Stats summarize(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
    return v[i];
  };
  s.median = at(0.5);
  s.p99 = at(0.99);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

}  // namespace picolm::tools
