// Sampler: greedy, temperature, top-k/top-p/min-p, penalties, seeds and grammar masks.
#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "sampler.h"

using namespace picolm;

namespace {
std::vector<uint32_t> mask_of(size_t n, std::initializer_list<int> allowed) {
  std::vector<uint32_t> m((n + 31) / 32, 0);
  for (int i : allowed) m[size_t(i) / 32] |= 1u << (i % 32);
  return m;
}
std::map<int, int> histogram(SamplerParams p, const std::vector<float>& logits, int draws) {
  Sampler s(p);
  std::map<int, int> h;
  for (int i = 0; i < draws; ++i) {
    auto l = logits;
    h[s.sample(l)]++;
  }
  return h;
}
}  // namespace

TEST_CASE("sampler: greedy takes the argmax, lowest id on ties", "[sampler]") {
  SamplerParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  CHECK(s.sample(l) == 1);
}

TEST_CASE("sampler: the mask is applied before anything else", "[sampler]") {
  std::vector<float> l = {5.0f, 1.0f, 0.5f, 4.0f, -3.0f};
  SamplerParams p;
  p.temperature = 0;
  Sampler greedy(p);
  auto m = mask_of(l.size(), {2, 4});
  auto l1 = l;
  CHECK(greedy.sample(l1, m.data()) == 2);
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler hot(p);
  for (int i = 0; i < 200; ++i) {
    auto l2 = l;
    int t = hot.sample(l2, m.data());
    CHECK((t == 2 || t == 4));
  }
  auto none = mask_of(l.size(), {});
  auto l3 = l;
  CHECK(hot.sample(l3, none.data()) == -1);
}

TEST_CASE("sampler: same seed, same sequence; different seed, different sequence", "[sampler]") {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0;
  p.top_p = 1.0f;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int> out;
    for (int i = 0; i < 50; ++i) {
      auto c = l;
      out.push_back(s.sample(c));
    }
    return out;
  };
  CHECK(run(1) == run(1));
  CHECK(run(1) != run(2));
}

TEST_CASE("sampler: top-k, top-p and min-p cut the tail", "[sampler]") {
  // Probabilities at T=1: softmax of log(0.5, 0.3, 0.15, 0.05).
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.top_k = 2;
  auto h = histogram(p, l, 2000);
  CHECK(h.count(2) == 0);
  CHECK(h.count(3) == 0);
  CHECK(h[0] > h[1]);
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 + 0.3 reaches 0.75: tokens 0 and 1 only
  h = histogram(p, l, 2000);
  CHECK(h.count(2) == 0);
  CHECK(h.count(3) == 0);
  p.top_p = 1.0f;
  p.min_p = 0.2f;  // threshold 0.1: drops only token 3
  h = histogram(p, l, 4000);
  CHECK(h.count(3) == 0);
  CHECK(h[2] > 300);  // expected ~0.158 * 4000 = 632
  p.min_p = 0.0f;
  h = histogram(p, l, 4000);
  CHECK(h[3] > 80);  // expected 200: every token reachable without cuts
}

TEST_CASE("sampler: temperature sharpens and flattens", "[sampler]") {
  std::vector<float> l = {1.0f, 0.0f};
  SamplerParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 0.25f;  // p(0) = 1/(1+e^-4) = 0.982
  auto cold = histogram(p, l, 2000);
  p.temperature = 4.0f;  // p(0) = 1/(1+e^-0.25) = 0.562
  auto hot = histogram(p, l, 2000);
  CHECK(cold[0] > 1900);
  CHECK(hot[0] < 1300);
  CHECK(hot[0] > 1000);
}

TEST_CASE("sampler: repetition, frequency and presence penalties", "[sampler]") {
  SamplerParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {3.0f, 2.0f, -1.0f};
  s.accept(0);
  auto a = l;
  CHECK(s.sample(a) == 1);  // 3 / 2 = 1.5 < 2
  CHECK(a[0] == Approx(1.5f));
  SamplerParams q;
  q.temperature = 0;
  q.frequency_penalty = 0.6f;
  q.presence_penalty = 0.1f;
  Sampler f(q);
  f.accept(0);
  f.accept(0);
  auto b = l;
  CHECK(f.sample(b) == 1);  // 3 - 2*0.6 - 0.1 = 1.7 < 2
  CHECK(b[0] == Approx(1.7f));
}
