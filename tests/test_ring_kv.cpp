// Sliding-window layers in a ring KV cache (issue 19): the ring gives the bits of a full-length
// cache at every position, costs KV memory only for the window, and truncation goes back exactly
// as far as the ring still holds a window (further: everything is dropped).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/thread_pool.h"
#include "model.h"
#include "test_util.h"

using namespace picolm;

namespace {

std::shared_ptr<const Model> gemma3() {  // 6 layers, 0-4 with window 8, 1 KV head of 64
  auto m = Model::load(test_util::model_path("gemma3-tiny-q8_0.gguf"));
  INFO((m ? std::string() : m.error()));
  REQUIRE(m.ok());  // a missing test model fails the test
  return m.value();
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t n_vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Logits of every position of `toks` (evaluated in one eval call), concatenated.
std::vector<float> all_logits(Session& s, std::span<const int32_t> toks) {
  REQUIRE(s.eval(toks, true).ok());
  std::vector<float> out;
  for (size_t i = 0; i < toks.size(); ++i) out.insert(out.end(), s.logits_at(i).begin(), s.logits_at(i).end());
  return out;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("ring KV: window layers in rings give the bits of a full-length cache", "[ring_kv]") {
  auto m = gemma3();
  ThreadPool pool(2);
  const int32_t nv = m->hparams().n_vocab;
  const auto prompt = random_tokens(300, 1, nv);  // wraps a 128-slot ring twice
  const auto decode = random_tokens(40, 2, nv);
  for (int32_t n_batch : {16, 64}) {
    INFO("n_batch " << n_batch);
    SessionOptions ring_opts, full_opts;
    ring_opts.n_batch = full_opts.n_batch = n_batch;
    full_opts.ring_kv = false;
    Session ring(m, pool, ring_opts), full(m, pool, full_opts);
    // Rings of window + largest micro-batch (n_batch + 1) - 1 slots, in whole 64-position blocks.
    const int32_t want_ring = n_batch == 16 ? 64 : 128;
    for (int32_t l = 0; l < m->hparams().n_layer; ++l) {
      CHECK(ring.kv_window(l) == (l % 6 < 5 ? 8 : 0));
      CHECK(ring.kv_ring(l) == (l % 6 < 5 ? want_ring : 0));
      CHECK(full.kv_ring(l) == 0);
    }
    // KV memory: the five window layers keep want_ring slots instead of n_ctx (4096).
    const size_t row = ring.kv_bytes_per_position_per_layer();
    CHECK(full.memory_bytes() - ring.memory_bytes() == 5 * size_t(4096 - want_ring) * row * 2);

    CHECK(same_bits(all_logits(ring, prompt), all_logits(full, prompt)));
    for (int32_t t : decode) {
      REQUIRE(ring.eval(std::span<const int32_t>(&t, 1)).ok());
      REQUIRE(full.eval(std::span<const int32_t>(&t, 1)).ok());
      REQUIRE(same_bits(ring.logits(), full.logits()));
    }
    CHECK(ring.kv_ring_first(0) == 340 - want_ring);
  }
}

TEST_CASE("ring KV: truncation is exact within the ring and drops everything beyond it", "[ring_kv]") {
  auto m = gemma3();
  ThreadPool pool(2);
  const int32_t nv = m->hparams().n_vocab;
  const auto prompt = random_tokens(300, 3, nv);
  const auto tail = random_tokens(30, 4, nv);
  Session s(m, pool);  // n_batch 64: rings of 128 slots; after 300 positions they hold 172..299
  REQUIRE(s.eval(prompt).ok());
  REQUIRE(s.kv_ring_first(0) == 172);
  // Evaluating position n reads the window [n - 7, n): n = 179 is the furthest back possible.
  for (int32_t n : {299, 250, 179}) {
    INFO("truncate to " << n);
    s.truncate(n);
    REQUIRE(s.n_past() == n);
    std::vector<int32_t> full_toks(prompt.begin(), prompt.begin() + n);
    full_toks.insert(full_toks.end(), tail.begin(), tail.end());
    Session ref(m, pool);
    const auto want = all_logits(ref, full_toks);
    const auto got = all_logits(s, tail);
    const size_t skip = size_t(n) * size_t(nv);
    CHECK(same_bits(got, std::span<const float>(want).subspan(skip)));
    s.truncate(0);  // the tail overwrote prompt positions: start the next round afresh
    REQUIRE(s.eval(prompt).ok());
  }
  s.truncate(178);  // the window before 178 starts at 171, which the rings no longer hold
  CHECK(s.n_past() == 0);
  CHECK(s.tokens().empty());
  // After the drop the session works from the start again.
  REQUIRE(s.eval(std::span<const int32_t>(prompt).first(20)).ok());
  Session ref(m, pool);
  REQUIRE(ref.eval(std::span<const int32_t>(prompt).first(20)).ok());
  CHECK(same_bits(s.logits(), ref.logits()));
}
