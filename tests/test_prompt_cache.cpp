// Prompt cache: exactness of restored prefixes (bit-identical logits), rejection of every kind of
// bad file, eviction, two writers, RAM alternation.
//
// Why tolerance 0 holds: restored K/V are the very fp16 bytes the same model computed for the same
// tokens, and every row of a prefill (quantized activations, matmul, attention, norms) is computed
// from its own row and the cache only, so splitting a prompt into "cached prefix + evaluated tail"
// instead of one batch changes no arithmetic. That holds for tails of 2 or more tokens: matmuls of
// 2+ tokens all run the many-token GEMM (and Session::eval never cuts a 1-token micro-batch out of
// a longer eval), while a 1-token eval runs the decode dots, whose float rounding order differs: a
// restore that leaves exactly one token to evaluate agrees with a full prefill only up to that
// order (the provider's restores end before the last user message, so their tails are longer).
// With repacked weights (ModelOptions::repack, on by default where the CPU has packed kernels) a
// 1-token eval does the same operations as a batch, so there even 1-token tails are exact.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "model.h"
#include "prompt_cache.h"
#include "test_util.h"

using namespace picolm;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const Model> load_model(const char* file) {
  const std::string path = test_util::model_path(file);  // ../shared/models, or tests/models (gemma4)
  auto m = Model::load(path);
  INFO(path << ": " << (m ? "" : m.error()));
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

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "picolm-pc-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> files(const std::string& ext) const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(path)) {
      const std::string n = e.path().filename().string();
      if (n.size() >= ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) out.push_back(e.path().string());
    }
    return out;
  }
  uint64_t pkv_bytes() const {
    uint64_t s = 0;
    for (auto& f : files(".pkv")) s += fs::file_size(f);
    return s;
  }
};

std::vector<float> full_prefill_logits(const std::shared_ptr<const Model>& m, ThreadPool& pool,
                                       const std::vector<int32_t>& prompt, bool all = false) {
  Session s(m, pool);
  REQUIRE(s.eval(prompt, all).ok());
  if (!all) return {s.logits().begin(), s.logits().end()};
  std::vector<float> out;
  for (size_t i = 0; i < prompt.size(); ++i) out.insert(out.end(), s.logits_at(i).begin(), s.logits_at(i).end());
  return out;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

PromptCacheOptions opts_for(const std::string& dir, int32_t block, uint64_t ram = uint64_t(1) << 28) {
  PromptCacheOptions o;
  o.dir = dir;
  o.block_tokens = block;
  o.max_ram_bytes = ram;
  return o;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(n));
}

// Offset of the layer table (format 2: after the tokens and the block checksums), and the size of
// everything the meta checksum covers plus itself.
size_t layers_offset(const std::vector<uint8_t>& b) {
  uint32_t n_tokens, block;
  std::memcpy(&n_tokens, b.data() + 48, 4);
  std::memcpy(&block, b.data() + 52, 4);
  return 80 + 4 * size_t(n_tokens) + 8 * size_t(n_tokens / block);
}
size_t meta_bytes(const std::vector<uint8_t>& b) {
  uint32_t n_layer;
  std::memcpy(&n_layer, b.data() + 36, 4);
  return layers_offset(b) + 4 * size_t(n_layer) + 8 + 8;
}

// Re-seals a file's header checksum after an edit, so that only the edited field is wrong.
void reseal(std::vector<uint8_t>& b) {
  const size_t meta = meta_bytes(b);
  const uint64_t h = prompt_cache_xxh64(b.data(), meta - 8, 0);
  std::memcpy(b.data() + meta - 8, &h, 8);
}

}  // namespace

TEST_CASE("xxh64 matches the published test vectors", "[prompt_cache]") {
  CHECK(prompt_cache_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull);
  CHECK(prompt_cache_xxh64("a", 1, 0) == 0xD24EC4F1A98C6E5Bull);
  CHECK(prompt_cache_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull);
  const char* s = "Nobody inspects the spammish repetition";  // 39 bytes: stripes + 4 + 3 tail
  CHECK(prompt_cache_xxh64(s, std::strlen(s), 0) == 0xFBCEA83C8A378BF1ull);
  CHECK(prompt_cache_xxh64("xxhash", 6, 20141025) == 0xB559B98D844E0635ull);
}

TEST_CASE("cached prefixes give bit-identical logits (RAM, disk, prefix + new tail)", "[prompt_cache]") {
  // gemma3: five of six layers are sliding-window layers (window 8) kept in rings of 128 slots,
  // which the 220-token prompt wraps.
  // qwen35 / lfm2: hybrids, whose entries carry the recurrent state at their end (format 3).
  // gemma4: sliding layers in rings, global layers of another K/V row width, and two layers that read
  // other layers' K/V (nothing of theirs is stored).
  for (const char* file : {"stories260K.gguf", "llama-spm32k-q4km.gguf", "gemma3-tiny-q8_0.gguf",
                           "qwen35-tiny-q8_0.gguf", "lfm2-tiny-q8_0.gguf", "gemma4-tiny-q4km.gguf"}) {
    DYNAMIC_SECTION(file) {
      auto m = load_model(file);
      ThreadPool pool(2);
      TempDir dir;
      bool ring = false;
      {
        Session probe(m, pool);
        for (int32_t l = 0; l < m->hparams().n_layer; ++l) ring = ring || probe.kv_ring(l) > 0;
      }
      CHECK(ring == (std::string(file).rfind("gemma", 0) == 0));
      const bool small = m->hparams().n_ctx_train <= 128;
      const int32_t block = small ? 16 : 64;
      const size_t n_sys = small ? 90 : 200, n_tail = small ? 9 : 20;
      const auto sys = random_tokens(n_sys, 1, m->hparams().n_vocab);
      const auto prompt = concat(sys, random_tokens(n_tail, 2, m->hparams().n_vocab));
      const auto ref = full_prefill_logits(m, pool, prompt);
      const size_t stored_len = n_sys / size_t(block) * size_t(block);

      PromptCacheStore store(opts_for(dir.path, block));
      {
        Session s(m, pool);
        auto r = prefill_with_cache(&store, s, prompt, n_sys);
        REQUIRE(r.ok());
        CHECK(r->cached_tokens == 0);
        CHECK(r->evaluated_tokens == prompt.size());
        CHECK(r->stored_tokens == stored_len);
        CHECK(same_bits(s.logits(), ref));
        CHECK(dir.files(".pkv").size() == 1);
      }
      {  // RAM hit
        Session s(m, pool);
        auto r = prefill_with_cache(&store, s, prompt, n_sys);
        REQUIRE(r.ok());
        CHECK(r->cached_tokens == stored_len);
        CHECK(r->evaluated_tokens == prompt.size() - stored_len);
        CHECK(store.stats().ram_hits == 1);
        CHECK(same_bits(s.logits(), ref));
      }
      {  // disk hit after a restart
        PromptCacheStore fresh(opts_for(dir.path, block));
        Session s(m, pool);
        auto r = prefill_with_cache(&fresh, s, prompt, n_sys);
        REQUIRE(r.ok());
        CHECK(r->cached_tokens == stored_len);
        CHECK(fresh.stats().disk_hits == 1);
        CHECK(fresh.stats().files_rejected == 0);
        CHECK(same_bits(s.logits(), ref));
      }
      {  // prefix hit + different tail == full prefill, at every evaluated position
        // A block boundary inside the cached prefix. An entry with window layers only serves its
        // own length (it keeps their last positions before its end only): a full prefill then.
        const size_t keep = stored_len - size_t(block);
        const auto other = concat(std::vector<int32_t>(sys.begin(), sys.begin() + long(keep)),
                                  random_tokens(n_tail + 5, 3, m->hparams().n_vocab));
        const auto ref_all = full_prefill_logits(m, pool, other, /*all=*/true);
        for (int restart = 0; restart < 2; ++restart) {
          PromptCacheStore fresh(opts_for(dir.path, block));
          PromptCacheStore& st = restart ? fresh : store;
          Session s(m, pool);
          PrefillWithCacheOptions po;
          po.all_logits = true;
          po.defer_store = true;
          auto r = prefill_with_cache(&st, s, other, other.size(), po);
          REQUIRE(r.ok());
          // Hybrids too: the entry's recurrent state is that of its own end.
          CHECK(r->cached_tokens == (ring || s.has_recurrent_state() ? 0 : keep));
          const size_t nv = size_t(m->hparams().n_vocab);
          for (size_t i = 0; i < r->evaluated_tokens; ++i)
            REQUIRE(same_bits(s.logits_at(i),
                              std::span<const float>(ref_all).subspan((r->cached_tokens + i) * nv, nv)));
        }
      }
      {  // the session's own longer live prefix wins and is not reloaded
        Session s(m, pool);
        REQUIRE(s.eval(prompt).ok());
        const auto longer = concat(prompt, random_tokens(4, 4, m->hparams().n_vocab));
        auto r = prefill_with_cache(&store, s, longer, 0);
        REQUIRE(r.ok());
        CHECK(r->cached_tokens == prompt.size());
        CHECK(r->evaluated_tokens == 4);
        CHECK(store.stats().live_hits == 1);
        CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, longer)));
      }
    }
  }
}

TEST_CASE("bad cache files are never used and are deleted", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const int32_t block = 16;
  const auto prompt = random_tokens(70, 5, m->hparams().n_vocab);
  const auto ref = full_prefill_logits(m, pool, prompt);
  std::string good_path;
  std::vector<uint8_t> good;
  {
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, prompt, prompt.size()).ok());
    auto f = dir.files(".pkv");
    REQUIRE(f.size() == 1);
    good_path = f[0];
    good = read_bytes(good_path);
  }
  REQUIRE(good.size() > 1000);

  // Puts `bytes` (first n) in place of the good file and checks that a fresh store ignores it,
  // deletes it, counts it, and that the answer is still the exact full prefill.
  auto expect_rejected = [&](const std::vector<uint8_t>& bytes, size_t n, const std::string& why_part) {
    write_bytes(good_path, bytes, n);
    std::vector<std::string> logged;
    PromptCacheOptions o = opts_for(dir.path, block, 0);
    o.log = [&](PromptCacheLogLevel, std::string_view msg) { logged.emplace_back(msg); };
    PromptCacheStore st(o);
    Session s(m, pool);
    PrefillWithCacheOptions po;
    po.defer_store = true;  // keep the directory empty so that deletion is observable
    auto r = prefill_with_cache(&st, s, prompt, prompt.size(), po);
    REQUIRE(r.ok());
    CHECK(r->cached_tokens == 0);
    CHECK(same_bits(s.logits(), ref));
    CHECK(!fs::exists(good_path));
    CHECK(st.stats().files_rejected == 1);
    CHECK(st.stats().disk_hits == 0);
    CHECK(logged.size() >= 1);
    if (!why_part.empty()) CHECK_THAT(st.stats().last_rejection, Catch::Contains(why_part));
  };

  SECTION("the good file itself loads") {
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    CHECK(st.restore(s, prompt) == 64);
    CHECK(st.stats().disk_hits == 1);
  }
  SECTION("truncated at many offsets") {
    std::vector<size_t> cuts = {0, 1, 7, 8, 12, 16, 48, 79, 80, 81, 80 + 4 * 64, good.size() / 2,
                                good.size() - 8, good.size() - 1};
    for (size_t i = 0; i < 24; ++i) cuts.push_back(good.size() * (2 * i + 1) / 50);
    for (size_t c : cuts) {
      INFO("cut at " << c << " of " << good.size());
      expect_rejected(good, c, "");
    }
    auto longer = good;  // appended garbage
    longer.push_back(0);
    expect_rejected(longer, longer.size(), "expected");
  }
  SECTION("one flipped byte anywhere") {
    std::vector<size_t> offs = {0, 8, 12, 16, 24, 32, 36, 40, 44, 48, 52, 56, 64, 72, 79, 80, 81, 80 + 4 * 64 + 3,
                                good.size() - 1};
    for (size_t i = 0; i < 40; ++i) offs.push_back(good.size() * (2 * i + 1) / 80);
    for (size_t off : offs) {
      INFO("flip at " << off << " of " << good.size());
      auto bad = good;
      bad[off] ^= 0x20;
      expect_rejected(bad, bad.size(), "");
    }
  }
  SECTION("identity fields that differ, with a valid checksum") {
    struct Case {
      size_t off;
      const char* why;
    };
    for (Case c : {Case{8, "version"}, Case{16, "model fingerprint"}, Case{24, "tokenizer fingerprint"},
                   Case{32, "dimensions"}, Case{36, "dimensions"}, Case{40, "dimensions"}, Case{44, "dimensions"}}) {
      INFO(c.why);
      auto bad = good;
      bad[c.off] ^= 1;
      reseal(bad);
      expect_rejected(bad, bad.size(), c.why);
    }
    // Window layers claimed by a file of a model that has none: count, and a layer's window.
    for (size_t off : {size_t(72), layers_offset(good), layers_offset(good) + 4}) {
      INFO("window field at " << off);
      auto bad = good;
      bad[off] ^= 8;
      reseal(bad);
      expect_rejected(bad, bad.size(), "window");
    }
    {  // A recurrent state claimed by a file of a model that has none (format 3).
      auto bad = good;
      bad[76] ^= 8;
      reseal(bad);
      expect_rejected(bad, bad.size(), "recurrent state");
    }
    // Token ids that do not match the name/key (e.g. a file copied under another name).
    auto bad = good;
    bad[80] ^= 1;
    reseal(bad);
    expect_rejected(bad, bad.size(), "");
  }
  SECTION("a file of another model under this model's name is deleted; under its own name it is left alone") {
    auto zoo = load_model("zoo-Q4_K.gguf");  // same tokenizer as stories260K, other weights
    REQUIRE(zoo->tokenizer().fingerprint() == m->tokenizer().fingerprint());
    TempDir other;
    {
      PromptCacheStore st(opts_for(other.path, block, 0));
      Session s(zoo, pool);
      REQUIRE(prefill_with_cache(&st, s, prompt, prompt.size()).ok());
    }
    auto f = other.files(".pkv");
    REQUIRE(f.size() == 1);
    const auto zoo_bytes = read_bytes(f[0]);
    expect_rejected(zoo_bytes, zoo_bytes.size(), "model fingerprint");
    // Under its own name in our directory: another provider's file, not ours to judge.
    const std::string own = dir.path + "/" + fs::path(f[0]).filename().string();
    write_bytes(own, zoo_bytes, zoo_bytes.size());
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    CHECK(st.restore(s, prompt) == 0);
    CHECK(fs::exists(own));
    CHECK(st.stats().files_rejected == 0);
  }
  SECTION("half-written files") {
    fs::remove(good_path);
    // A writer that dies mid-write leaves its temporary file; it is never read, and removed.
    const std::string tmp_name = "." + fs::path(good_path).stem().string();
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const std::string t = dir.path + "/" + tmp_name + "." + std::to_string(::getpid()) + ".1.tmp";
      int fd = ::open(t.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0 || ::write(fd, good.data(), good.size() / 2) < 0) ::_exit(1);
      ::_exit(0);  // dies without finishing, renaming or cleaning up
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    REQUIRE(dir.files(".tmp").size() == 1);
    {
      PromptCacheStore st(opts_for(dir.path, block, 0));  // start-up sweep: the writer is gone
      CHECK(dir.files(".tmp").empty());
      Session s(m, pool);
      CHECK(st.restore(s, prompt) == 0);
      CHECK(st.stats().misses == 1);
    }
    // The library's own writer killed mid-write: a file-size limit below the file's size makes the
    // kernel kill the child with SIGXFSZ inside write().
    child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      struct rlimit core {0, 0}, fsize {good.size() / 2, good.size() / 2};
      ::setrlimit(RLIMIT_CORE, &core);
      ::setrlimit(RLIMIT_FSIZE, &fsize);
      ThreadPool own(1);
      Session s(m, own);
      if (!s.eval(prompt).ok()) ::_exit(1);
      PromptCacheStore st(opts_for(dir.path, block, 0));
      st.store(s, prompt.size());
      ::_exit(2);  // not reached
    }
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGXFSZ);
    CHECK(dir.files(".pkv").empty());
    REQUIRE(dir.files(".tmp").size() == 1);
    {
      PromptCacheStore st(opts_for(dir.path, block, 0));
      CHECK(dir.files(".tmp").empty());
      Session s(m, pool);
      CHECK(st.restore(s, prompt) == 0);
    }
    // A partial file that somehow got the final name (e.g. copied by hand) fails the size check.
    expect_rejected(good, good.size() / 2, "truncated");
  }
}

TEST_CASE("eviction keeps the directory under its budget, least recently used first", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const int32_t block = 16;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 6; ++i) prompts.push_back(random_tokens(50, 100 + i, m->hparams().n_vocab));
  uint64_t one = 0;
  {
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, prompts[0], 50).ok());
    one = dir.pkv_bytes();
    REQUIRE(one > 0);
  }
  PromptCacheOptions o = opts_for(dir.path, block, 0);
  o.max_disk_bytes = one * 3 + one / 2;  // room for three files
  PromptCacheStore st(o);
  auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };  // distinct mtimes
  for (size_t i = 1; i < 6; ++i) {
    pause();
    if (i == 4) {  // use prompt 1 again: it becomes the most recently used file
      Session s(m, pool);
      CHECK(st.restore(s, prompts[1]) == 48);
      pause();
    }
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, prompts[i], 50).ok());
    CHECK(dir.pkv_bytes() <= o.max_disk_bytes);
  }
  CHECK(dir.files(".pkv").size() == 3);
  CHECK(st.stats().disk_evictions == 3);
  // Survivors: 1 (used at step 4), 4, 5. Evicted: 0, 2, 3.
  for (size_t i = 0; i < 6; ++i) {
    PromptCacheStore probe(opts_for(dir.path, block, 0));
    Session s(m, pool);
    INFO("prompt " << i);
    CHECK(probe.restore(s, prompts[i]) == ((i == 1 || i == 4 || i == 5) ? 48u : 0u));
  }
}

TEST_CASE("a prefix larger than the whole disk budget is not written", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  PromptCacheOptions o = opts_for(dir.path, 16, 0);
  o.max_disk_bytes = 1000;
  PromptCacheStore st(o);
  Session s(m, pool);
  auto r = prefill_with_cache(&st, s, random_tokens(40, 61, m->hparams().n_vocab), 40);
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 32);
  CHECK(dir.files(".pkv").empty());
  CHECK(dir.files(".tmp").empty());
  CHECK(st.stats().files_written == 0);
}

TEST_CASE("a longer file serves its prefixes and replaces the shorter file it covers", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const auto sys = random_tokens(40, 7, m->hparams().n_vocab);
  const auto turn2 = concat(sys, random_tokens(40, 8, m->hparams().n_vocab));
  PromptCacheStore st(opts_for(dir.path, 16, 0));
  {
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, sys, sys.size()).ok());  // stores 32
    REQUIRE(prefill_with_cache(&st, s, turn2, turn2.size()).ok());  // stores 80, deletes the 32-token file
  }
  CHECK(dir.files(".pkv").size() == 1);
  PromptCacheStore fresh(opts_for(dir.path, 16, 0));
  Session s(m, pool);
  const auto new_chat = concat(sys, random_tokens(5, 9, m->hparams().n_vocab));
  auto r = prefill_with_cache(&fresh, s, new_chat, 0);
  REQUIRE(r.ok());
  CHECK(r->cached_tokens == 32);
  CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, new_chat)));
}

TEST_CASE("two processes writing the same prefix at once leave one valid file", "[prompt_cache]") {
  auto m = load_model("llama-spm32k-q4km.gguf");
  TempDir dir;
  const auto prompt = random_tokens(200, 11, m->hparams().n_vocab);
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = ::fork();
    REQUIRE(k >= 0);
    if (k == 0) {
      // Child: own pool (threads do not survive fork), prefill, wait for the common start, store.
      ThreadPool pool(1);
      Session s(m, pool);
      if (!s.eval(prompt).ok()) ::_exit(2);
      PromptCacheStore st(opts_for(dir.path, 64, 0));
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(3);
      const size_t n = st.store(s, prompt.size());
      ::_exit(n == 192 ? 0 : 4);  // whether this child wrote or found the other's file is a race
    }
  }
  char buf[2];
  REQUIRE(::read(ready[0], buf, 1) == 1);
  REQUIRE(::read(ready[0], buf + 1, 1) == 1);
  REQUIRE(::write(go[1], "gg", 2) == 2);
  for (pid_t k : kids) {
    int status = 0;
    REQUIRE(::waitpid(k, &status, 0) == k);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  CHECK(dir.files(".pkv").size() == 1);
  CHECK(dir.files(".tmp").empty());
  ThreadPool pool(2);
  PromptCacheStore st(opts_for(dir.path, 64, 0));
  Session s(m, pool);
  auto r = prefill_with_cache(&st, s, prompt, 0);
  REQUIRE(r.ok());
  CHECK(r->cached_tokens == 192);
  CHECK(st.stats().disk_hits == 1);
  CHECK(st.stats().files_rejected == 0);
  CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, prompt)));
}

TEST_CASE("alternating between two system prompts never re-prefills either (RAM LRU)", "[prompt_cache]") {
  auto m = load_model("llama-spm32k-q4km.gguf");
  ThreadPool pool(2);
  const int32_t nv = m->hparams().n_vocab;
  const auto chat_sys = random_tokens(200, 21, nv);
  const auto summary_sys = random_tokens(150, 22, nv);
  PromptCacheStore st(opts_for("", 64));  // RAM only
  Session s(m, pool);  // one session, as in the provider
  for (int turn = 0; turn < 6; ++turn) {
    const auto& sys = turn % 2 ? summary_sys : chat_sys;
    const auto prompt = concat(sys, random_tokens(10, 100 + uint32_t(turn), nv));
    auto r = prefill_with_cache(&st, s, prompt, sys.size());
    REQUIRE(r.ok());
    INFO("turn " << turn);
    if (turn >= 2) {
      CHECK(r->cached_tokens == sys.size() / 64 * 64);
      CHECK(r->evaluated_tokens == prompt.size() - sys.size() / 64 * 64);
    }
    if (turn == 2 || turn == 3) CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, prompt)));
  }
  CHECK(st.stats().ram_hits == 4);
  CHECK(st.stats().ram_entries == 2);
  CHECK(st.stats().misses == 2);
}

TEST_CASE("a RAM budget for one snapshot evicts the least recently used one", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  const int32_t nv = m->hparams().n_vocab;
  const auto a = random_tokens(60, 31, nv), b = random_tokens(50, 32, nv);
  Session s(m, pool);
  uint64_t one = 0;
  {
    PromptCacheStore probe(opts_for("", 16));
    REQUIRE(prefill_with_cache(&probe, s, a, a.size()).ok());
    one = probe.stats().ram_bytes;
    REQUIRE(one > 0);
  }
  PromptCacheOptions o = opts_for("", 16);
  o.max_ram_bytes = one + one / 2;  // a's snapshot (48 tokens) fits, a and b's (48 + 48) do not
  PromptCacheStore small(o);
  s.truncate(0);  // forget the live prefix of the probe run
  for (int turn = 0; turn < 4; ++turn) {
    const auto& sys = turn % 2 ? b : a;
    auto r = prefill_with_cache(&small, s, concat(sys, random_tokens(5, 200 + uint32_t(turn), nv)), sys.size());
    REQUIRE(r.ok());
    INFO("turn " << turn);
    CHECK(r->cached_tokens == 0);  // the other prompt's snapshot pushed ours out
    CHECK(small.stats().ram_entries == 1);
  }
  CHECK(small.stats().ram_evictions == 3);
  CHECK(small.stats().ram_bytes <= o.max_ram_bytes);
}

TEST_CASE("one store shared by two threads gives exact results", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  TempDir dir;
  const int32_t nv = m->hparams().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(70, 41, nv), random_tokens(60, 42, nv),
                                                     concat(random_tokens(70, 41, nv), random_tokens(20, 43, nv))};
  std::vector<std::vector<float>> refs;
  {
    ThreadPool pool(1);
    for (auto& p : prompts) refs.push_back(full_prefill_logits(m, pool, p));
  }
  PromptCacheOptions o = opts_for(dir.path, 16);
  o.max_ram_bytes = 40000;  // about two snapshots: RAM evictions happen too
  PromptCacheStore st(o);
  std::atomic<int> mismatches{0}, failures{0};
  auto worker = [&](int id) {
    ThreadPool pool(1);  // a pool belongs to one owner thread
    Session s(m, pool);
    for (int i = 0; i < 12; ++i) {
      const size_t k = size_t(i + id) % prompts.size();
      auto r = prefill_with_cache(&st, s, prompts[k], prompts[k].size() - 5);
      if (!r) ++failures;
      else if (!same_bits(s.logits(), refs[k])) ++mismatches;
    }
  };
  std::thread t1(worker, 0), t2(worker, 1);
  t1.join();
  t2.join();
  CHECK(failures == 0);
  CHECK(mismatches == 0);
  const auto stats = st.stats();
  CHECK(stats.ram_hits + stats.disk_hits + stats.live_hits > 0);
  CHECK(stats.files_rejected == 0);
  CHECK(stats.ram_bytes <= o.max_ram_bytes);
}

TEST_CASE("default_dir follows XDG_CACHE_HOME, then HOME", "[prompt_cache]") {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK(PromptCacheStore::default_dir() == "/x/cache/picolm");
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* h = std::getenv("HOME")) CHECK(PromptCacheStore::default_dir() == std::string(h) + "/.cache/picolm");
  if (old_xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

TEST_CASE("an unusable directory leaves the RAM tier working", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const std::string file = dir.path + "/not-a-dir";
  write_bytes(file, {1, 2, 3}, 3);
  std::vector<std::string> logged;
  PromptCacheOptions o = opts_for(file + "/cache", 16);
  o.log = [&](PromptCacheLogLevel, std::string_view msg) { logged.emplace_back(msg); };
  PromptCacheStore st(o);
  CHECK(logged.size() == 1);
  const auto p = random_tokens(40, 51, m->hparams().n_vocab);
  Session s(m, pool);
  REQUIRE(prefill_with_cache(&st, s, p, p.size()).ok());
  s.truncate(0);
  auto r = prefill_with_cache(&st, s, p, p.size());
  REQUIRE(r.ok());
  CHECK(r->cached_tokens == 32);
  CHECK(st.stats().ram_hits == 1);
}

TEST_CASE("window layers: an entry serves its own length only, and is not stored once the ring moved on",
          "[prompt_cache]") {
  auto m = load_model("gemma3-tiny-q8_0.gguf");  // window 8 on 5 of 6 layers, rings of 128 slots
  ThreadPool pool(2);
  TempDir dir;
  const int32_t nv = m->hparams().n_vocab;
  const auto sys = random_tokens(100, 21, nv);
  PromptCacheStore st(opts_for(dir.path, 16));
  Session s(m, pool);
  REQUIRE(s.kv_ring(0) == 128);
  REQUIRE(s.kv_ring(5) == 0);  // the global layer keeps every position
  auto r = prefill_with_cache(&st, s, concat(sys, random_tokens(30, 22, nv)), sys.size());
  REQUIRE(r.ok());
  CHECK(r->stored_tokens == 96);
  // Decoding 100 more tokens reuses the ring slots of positions < 102, the stored prefix's last
  // window among them: a store now has nothing exact to save.
  for (int32_t t : random_tokens(100, 23, nv)) REQUIRE(s.eval(std::span<const int32_t>(&t, 1)).ok());
  CHECK(s.kv_ring_first(0) == 230 - 128);
  CHECK(st.store(s, sys.size()) == 0);

  // The live session shares 100 tokens with the next prompt but can no longer go back to 100:
  // truncation drops everything, and the 96-token entry is restored instead.
  const auto next = concat(sys, random_tokens(20, 24, nv));
  const auto ref = full_prefill_logits(m, pool, next);
  CHECK(st.restore(s, next) == 96);
  CHECK(st.stats().ram_hits == 1);
  REQUIRE(s.eval(std::span<const int32_t>(next).subspan(96)).ok());
  CHECK(same_bits(s.logits(), ref));
  {  // the same from the file, in a fresh store
    PromptCacheStore fresh(opts_for(dir.path, 16, 0));
    Session s2(m, pool);
    CHECK(fresh.restore(s2, next) == 96);
    CHECK(fresh.stats().disk_hits == 1);
    REQUIRE(s2.eval(std::span<const int32_t>(next).subspan(96)).ok());
    CHECK(same_bits(s2.logits(), ref));
  }
  {  // a prompt that shares only the first 48 tokens: the entry cannot serve it
    const auto other = concat(std::vector<int32_t>(sys.begin(), sys.begin() + 48), random_tokens(60, 25, nv));
    PromptCacheStore fresh(opts_for(dir.path, 16, 0));
    Session s2(m, pool);
    auto r2 = prefill_with_cache(&fresh, s2, other, 0);
    REQUIRE(r2.ok());
    CHECK(r2->cached_tokens == 0);
    CHECK(same_bits(s2.logits(), full_prefill_logits(m, pool, other)));
  }
  {  // a prompt running far past its stable prefix: prefill_with_cache stores at the stable block
     // boundary before the rest of the prompt moves the rings on, and the entry is exact
    TempDir dir2;
    PromptCacheStore st2(opts_for(dir2.path, 16));
    const auto sys2 = random_tokens(70, 26, nv);
    Session s2(m, pool);
    std::vector<size_t> progress;
    PrefillWithCacheOptions po;
    po.progress = [&](size_t done, size_t total) {
      CHECK(total == 270);
      progress.push_back(done);
    };
    auto r2 = prefill_with_cache(&st2, s2, concat(sys2, random_tokens(200, 27, nv)), sys2.size(), po);
    REQUIRE(r2.ok());
    CHECK(r2->stored_tokens == 64);
    CHECK(r2->evaluated_tokens == 270);
    REQUIRE(!progress.empty());
    CHECK(progress.back() == 270);
    CHECK(std::is_sorted(progress.begin(), progress.end()));
    const auto next2 = concat(sys2, random_tokens(30, 28, nv));
    PromptCacheStore fresh(opts_for(dir2.path, 16, 0));
    Session s3(m, pool);
    auto r3 = prefill_with_cache(&fresh, s3, next2, 0);
    REQUIRE(r3.ok());
    CHECK(r3->cached_tokens == 64);
    CHECK(same_bits(s3.logits(), full_prefill_logits(m, pool, next2)));
  }
  {  // the tail (window layers' last positions) is checksummed: a flipped byte in it rejects the file
    auto files = dir.files(".pkv");
    REQUIRE(files.size() == 1);
    auto bytes = read_bytes(files[0]);
    bytes[bytes.size() - 3] ^= 0x10;
    write_bytes(files[0], bytes, bytes.size());
    PromptCacheStore fresh(opts_for(dir.path, 16, 0));
    Session s2(m, pool);
    REQUIRE(s2.eval(std::span<const int32_t>(sys).first(50)).ok());  // a live prefix the failed load must keep
    auto r2 = prefill_with_cache(&fresh, s2, next, 0);
    REQUIRE(r2.ok());
    CHECK(r2->cached_tokens == 48);  // the live prefix, cut back to the block where the load began
    CHECK(fresh.stats().files_rejected == 1);
    CHECK_THAT(fresh.stats().last_rejection, Catch::Contains("tail"));
    CHECK(same_bits(s2.logits(), ref));
  }
}

TEST_CASE("window layers without a store: the live prefix is kept within the rings' reach, else re-prefilled",
          "[prompt_cache]") {
  auto m = load_model("gemma3-tiny-q8_0.gguf");  // rings of 128 slots, window 8
  ThreadPool pool(2);
  const int32_t nv = m->hparams().n_vocab;
  const auto first = random_tokens(300, 31, nv);
  const auto tail = random_tokens(20, 32, nv);
  for (size_t keep : {size_t(290), size_t(100)}) {  // 290 - 7 >= 300 - 128; 100 - 7 is not
    INFO("keep " << keep);
    Session s(m, pool);
    REQUIRE(s.eval(first).ok());
    const auto prompt = concat(std::vector<int32_t>(first.begin(), first.begin() + long(keep)), tail);
    auto r = prefill_with_cache(nullptr, s, prompt, 0);
    REQUIRE(r.ok());
    CHECK(r->cached_tokens == (keep == 290 ? 290u : 0u));
    CHECK(r->evaluated_tokens == prompt.size() - r->cached_tokens);
    CHECK(s.n_past() == int32_t(prompt.size()));
    CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, prompt)));
  }
}

// ---- issue 15: hostile cache directories ---------------------------------------------------------

namespace {

// The "<model fingerprint>-" prefix this model's files carry: only such names are judged (and
// opened) by a store, so the hostile entries below must use it.
std::string model_file_prefix(const std::shared_ptr<const Model>& m, ThreadPool& pool, const TempDir& dir) {
  {
    PromptCacheStore st(opts_for(dir.path, 16, 0));
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, random_tokens(40, 900, m->hparams().n_vocab), 40).ok());
  }
  auto f = dir.files(".pkv");
  REQUIRE(f.size() == 1);
  const std::string name = fs::path(f[0]).filename().string();
  fs::remove(f[0]);
  return name.substr(0, name.find('-') + 1);
}

}  // namespace

TEST_CASE("a FIFO named like a cache file never blocks restore or store", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const std::string fifo = dir.path + "/" + model_file_prefix(m, pool, dir) + "00000000000000aa.pkv";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::vector<std::string> logged;
  std::mutex log_mu;
  PromptCacheOptions o = opts_for(dir.path, 16, 0);
  o.log = [&](PromptCacheLogLevel, std::string_view msg) {
    std::lock_guard<std::mutex> lk(log_mu);
    logged.emplace_back(msg);
  };
  PromptCacheStore st(o);
  const auto p = random_tokens(40, 901, m->hparams().n_vocab);
  // Before the fix the open() of the FIFO waited for a writer forever: run the work on a thread and,
  // if it does not finish, open the FIFO's writing end once so that the thread (and the test) end.
  std::atomic<bool> done{false};
  std::thread worker([&] {
    Session s(m, pool);
    (void)prefill_with_cache(&st, s, p, p.size());
    (void)st.restore(s, p);
    done = true;
  });
  for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool finished = done;
  if (!finished) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  worker.join();
  REQUIRE(finished);
  CHECK(fs::is_fifo(fifo));  // not ours: left alone
  CHECK(st.stats().files_ignored == 1);
  CHECK(st.stats().files_rejected == 0);
  CHECK(st.stats().files_written == 1);
  CHECK(st.stats().disk_hits + st.stats().live_hits >= 1);
  std::lock_guard<std::mutex> lk(log_mu);
  CHECK(std::count_if(logged.begin(), logged.end(), [](const std::string& l) {
          return l.find("not a regular file") != std::string::npos;
        }) == 1);
  for (const auto& l : logged) CHECK(l.rfind("prompt cache: ", 0) == 0);
}

TEST_CASE("a directory named like a cache file is reported once, not on every scan", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const std::string sub = dir.path + "/" + model_file_prefix(m, pool, dir) + "00000000000000bb.pkv";
  REQUIRE(fs::create_directory(sub));
  std::vector<std::string> logged;
  PromptCacheOptions o = opts_for(dir.path, 16, 0);
  o.log = [&](PromptCacheLogLevel, std::string_view msg) { logged.emplace_back(msg); };
  PromptCacheStore st(o);
  // The directory's mtime is recent, so every restore rescans it.
  for (uint32_t i = 0; i < 4; ++i) {
    Session s(m, pool);
    CHECK(st.restore(s, random_tokens(40, 910 + i, m->hparams().n_vocab)) == 0);
  }
  CHECK(fs::is_directory(sub));
  CHECK(st.stats().files_rejected == 0);
  CHECK(st.stats().files_ignored == 1);
  CHECK(logged.size() == 1);
}

TEST_CASE("a cache directory removed while in use is created again on the next write", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  const std::string cache = dir.path + "/cache";
  PromptCacheStore st(opts_for(cache, 16, 0));
  const auto a = random_tokens(40, 920, m->hparams().n_vocab), b = random_tokens(40, 921, m->hparams().n_vocab);
  {
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, a, a.size()).ok());
  }
  REQUIRE(st.stats().files_written == 1);
  fs::remove_all(cache);
  {
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, b, b.size()).ok());
  }
  CHECK(st.stats().files_written == 2);
  REQUIRE(fs::is_directory(cache));
  PromptCacheStore fresh(opts_for(cache, 16, 0));
  Session s(m, pool);
  CHECK(fresh.restore(s, b) == 32);
}

TEST_CASE("a full filesystem evicts the least recently used files and retries once", "[prompt_cache]") {
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 5; ++i) prompts.push_back(random_tokens(40, 930 + i, m->hparams().n_vocab));
  uint64_t one = 0;
  {
    PromptCacheStore st(opts_for(dir.path, 16, 0));
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, prompts[0], 40).ok());
    one = dir.pkv_bytes();
    REQUIRE(one > 0);
  }
  // A "filesystem" with room for 2.5 files, far below the store's own budget (1 GB): writes past
  // it fail with ENOSPC, as on a full disk.
  uint64_t capacity = one * 2 + one / 2;
  PromptCacheOptions o = opts_for(dir.path, 16, 0);
  o.max_disk_bytes = uint64_t(1) << 30;
  o.write_fault = [&](uint64_t file_bytes) { return dir.pkv_bytes() + file_bytes > capacity ? ENOSPC : 0; };
  PromptCacheStore st(o);
  for (size_t i = 1; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes for LRU
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, prompts[i], 40).ok());
  }
  CHECK(st.stats().files_written == 4);
  CHECK(st.stats().disk_full >= 1);
  CHECK(dir.pkv_bytes() <= capacity);
  CHECK(dir.files(".tmp").empty());
  PromptCacheStore probe(opts_for(dir.path, 16, 0));
  for (size_t i = 0; i < 5; ++i) {
    Session s(m, pool);
    INFO("prompt " << i);
    CHECK(probe.restore(s, prompts[i]) == (i >= 3 ? 32u : 0u));  // the two newest survive
  }

  SECTION("still full after evicting: writing pauses instead of failing every request") {
    capacity = 0;  // nothing fits any more
    Session s(m, pool);
    REQUIRE(prefill_with_cache(&st, s, random_tokens(40, 940, m->hparams().n_vocab), 40).ok());
    const uint64_t full_after_first = st.stats().disk_full;
    Session s2(m, pool);
    REQUIRE(prefill_with_cache(&st, s2, random_tokens(40, 941, m->hparams().n_vocab), 40).ok());
    CHECK(st.stats().disk_full == full_after_first);  // the second store did not even try
    CHECK(st.stats().files_written == 4);
    CHECK(dir.files(".tmp").empty());
  }
}

TEST_CASE("inside_write stops the writer inside each write: temporary partly written, final name absent",
          "[prompt_cache]") {
  // The hook picolm-loadtest's kill -9 rounds hold the writer in (through the provider's
  // PICOLM_TEST_HOLD_CACHE_WRITE): what a kill there leaves must be a partial temporary only.
  auto m = load_model("stories260K.gguf");
  ThreadPool pool(2);
  TempDir dir;
  PromptCacheOptions o = opts_for(dir.path, 16, 0);
  int calls = 0;
  o.inside_write = [&](std::string_view temp_path, uint64_t file_bytes) {
    ++calls;
    const std::string temp(temp_path);
    INFO(temp);
    CHECK(fs::path(temp).parent_path() == fs::path(dir.path));
    CHECK(fs::path(temp).filename().string().front() == '.');
    CHECK(temp.ends_with(".tmp"));
    REQUIRE(fs::is_regular_file(temp));
    CHECK(fs::file_size(temp) > 0);
    CHECK(fs::file_size(temp) < file_bytes);  // the header only: KV blocks, fsync and rename follow
    CHECK(dir.files(".pkv").empty());
  };
  PromptCacheStore st(o);
  Session s(m, pool);
  REQUIRE(prefill_with_cache(&st, s, random_tokens(40, 990, m->hparams().n_vocab), 40).ok());
  CHECK(calls == 1);
  CHECK(st.stats().files_written == 1);
  CHECK(dir.files(".pkv").size() == 1);
  CHECK(dir.files(".tmp").empty());
}

TEST_CASE("hybrids: entries carry the recurrent state; a damaged state is never used; live snapshots",
          "[prompt_cache]") {
  auto m = load_model("qwen35-tiny-q8_0.gguf");  // 3 delta-net layers (state), 1 attention layer (K/V)
  ThreadPool pool(2);
  TempDir dir;
  const int32_t block = 16;
  const auto sys = random_tokens(100, 1, m->hparams().n_vocab);
  const auto prompt = concat(sys, random_tokens(12, 2, m->hparams().n_vocab));
  const auto ref = full_prefill_logits(m, pool, prompt);
  {
    PromptCacheStore st(opts_for(dir.path, block, 0));  // disk only
    Session s(m, pool);
    auto r = prefill_with_cache(&st, s, prompt, sys.size());
    REQUIRE(r.ok());
    CHECK(r->stored_tokens == 96);
    CHECK(same_bits(s.logits(), ref));
    // Snapshots where the evaluation stood: the stored length and the prompt's end.
    CHECK(s.state_snapshot_positions() == std::vector<int32_t>{96, int32_t(prompt.size())});
  }
  REQUIRE(dir.files(".pkv").size() == 1);
  const std::string path = dir.files(".pkv")[0];
  const auto good = read_bytes(path);
  Session probe(m, pool);
  // header + tokens + block sums + layer table + sums, the attention layer's K/V, hash + state.
  CHECK(good.size() == meta_bytes(good) + 96 * 2 * probe.kv_bytes_per_position_per_layer() + 8 +
                           probe.recurrent_state_bytes());
  {  // after a restart: the file alone gives the prefix, bit-identical logits
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    auto r = prefill_with_cache(&st, s, prompt, sys.size());
    REQUIRE(r.ok());
    CHECK(r->cached_tokens == 96);
    CHECK(st.stats().disk_hits == 1);
    CHECK(same_bits(s.logits(), ref));
  }
  // A flipped byte in the state (the file's end) or in the K/V: rejected, deleted, cold prefill.
  for (size_t off : {good.size() - 1, good.size() - 4000, good.size() - probe.recurrent_state_bytes() - 5,
                     meta_bytes(good) + 10}) {
    INFO("flip at " << off << " of " << good.size());
    auto bad = good;
    bad[off] ^= 0x10;
    write_bytes(path, bad, bad.size());
    PromptCacheStore st(opts_for(dir.path, block, 0));
    Session s(m, pool);
    PrefillWithCacheOptions po;
    po.defer_store = true;
    auto r = prefill_with_cache(&st, s, prompt, sys.size(), po);
    REQUIRE(r.ok());
    CHECK(r->cached_tokens == 0);
    CHECK(st.stats().files_rejected == 1);
    CHECK(!fs::exists(path));
    CHECK(same_bits(s.logits(), ref));
  }
  {  // No store: the live session goes back to its snapshot at the stable prefix for a new tail.
    Session s(m, pool);
    REQUIRE(prefill_with_cache(nullptr, s, prompt, sys.size()).ok());
    CHECK(s.state_snapshot_positions() == std::vector<int32_t>{int32_t(sys.size()), int32_t(prompt.size())});
    const auto other = concat(sys, random_tokens(9, 5, m->hparams().n_vocab));
    auto r = prefill_with_cache(nullptr, s, other, sys.size());
    REQUIRE(r.ok());
    CHECK(r->cached_tokens == sys.size());
    CHECK(same_bits(s.logits(), full_prefill_logits(m, pool, other)));
  }
}

// phi3 LongRoPE: a session whose context exceeds the original one rotates its keys with the long
// factors (phi3-tiny: original context 128), so cache files of a short-factor session must not be
// reused there (a run with another --ctx-size), and the other way round; sessions on the same side
// share them. (The RAM tier serves one process, whose slots all have one context size.)
TEST_CASE("phi3 LongRoPE: files are reused only by sessions on the same side of the original context", "[prompt_cache]") {
  auto m = Model::load(std::string(PICOLM_TEST_DATA_DIR) + "/models/phi3-tiny-q8_0.gguf");
  REQUIRE(m.ok());
  REQUIRE(m.value()->hparams().rope_long_ctx == 128);
  ThreadPool pool(1);
  const std::string dir = "/tmp/picolm_test_longrope_" + std::to_string(::getpid());
  PromptCacheOptions o;
  o.dir = dir;
  o.max_ram_bytes = 0;  // disk tier only
  PromptCacheStore store(o);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(int32_t(1 + (i * 37) % 500));
  Session a(m.value(), pool, SessionOptions{128, 64});
  REQUIRE(a.eval(prompt).ok());
  REQUIRE(store.store(a, 32) == 32);
  Session short_ctx(m.value(), pool, SessionOptions{96, 64}), long_ctx(m.value(), pool, SessionOptions{256, 64});
  CHECK(store.restore(long_ctx, prompt) == 0);
  CHECK(store.restore(short_ctx, prompt) == 32);
  // And a long-factor entry is not offered to a short-factor session.
  Session b(m.value(), pool, SessionOptions{200, 64});
  std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
  REQUIRE(b.eval(other).ok());
  REQUIRE(store.store(b, 32) == 32);
  Session c(m.value(), pool, SessionOptions{128, 64}), d(m.value(), pool, SessionOptions{129, 64});
  CHECK(store.restore(c, other) == 0);
  CHECK(store.restore(d, other) == 32);
  CHECK(store.stats().disk_hits == 2);
  std::filesystem::remove_all(dir);
}
