// picolm-cachebench: time to first token (prefill until the logits of the last prompt token) for a
// long system prompt + short user turn, cold / RAM hit / disk hit after a restart / alternating
// between two system prompts. Token ids are random (the tokenizer plays no part in the timing).
// Results go to stdout as a Markdown table row; progress to stderr.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/thread_pool.h"
#include "model.h"
#include "prompt_cache.h"

using namespace picolm;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
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

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-cachebench -m MODEL [options]\n"
               "  --sys N        system prompt tokens (default 3000)\n"
               "  --sys2 N       second (summarisation) system prompt tokens (default 1000)\n"
               "  --user N       user turn tokens (default 30)\n"
               "  --runs N       runs of each hot measurement; the median is reported (default 5)\n"
               "  --block N      prompt-cache block size (default: the library's, 16)\n"
               "  --dir DIR      parent of the scratch cache directory (default: $TMPDIR or /tmp)\n"
               "  -j N           threads (default: physical cores)\n"
               "  --no-cold      do not compute the system prompts: declare their KV (zeros) as cached.\n"
               "                 Restore, store and the user turn cost the same (attention still runs\n"
               "                 over every cached position); only the cold column is not measured.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, parent = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  size_t n_sys = 3000, n_sys2 = 1000, n_user = 30;
  int runs = 5, block = PromptCacheOptions{}.block_tokens, threads = 0;
  bool measure_cold = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    }
    if (k == "--no-cold") {
      measure_cold = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "picolm-cachebench: %s needs a value\n", k.c_str());
      return 1;
    }
    const char* v = argv[++i];
    if (k == "-m") model_path = v;
    else if (k == "--sys") n_sys = size_t(std::atol(v));
    else if (k == "--sys2") n_sys2 = size_t(std::atol(v));
    else if (k == "--user") n_user = size_t(std::atol(v));
    else if (k == "--runs") runs = std::max(1, std::atoi(v));
    else if (k == "--block") block = std::max(1, std::atoi(v));
    else if (k == "--dir") parent = v;
    else if (k == "-j") threads = std::atoi(v);
    else {
      std::fprintf(stderr, "picolm-cachebench: unknown option '%s'\n", k.c_str());
      usage(stderr);
      return 1;
    }
  }
  if (model_path.empty() || n_sys == 0 || n_sys2 == 0 || n_user == 0) {
    usage(stderr);
    return 1;
  }
  auto loaded = Model::load(model_path);
  if (!loaded) {
    std::fprintf(stderr, "picolm-cachebench: %s\n", loaded.error().c_str());
    return 1;
  }
  std::shared_ptr<const Model> m = loaded.value();
  if (threads <= 0) threads = ThreadPool::default_threads();
  ThreadPool pool(threads);
  SessionOptions so;
  so.n_ctx = int32_t(std::max(n_sys, n_sys2) + n_user + 8);
  const int32_t nv = m->hparams().n_vocab;
  const auto sys1 = random_tokens(n_sys, 1, nv), sys2 = random_tokens(n_sys2, 2, nv);
  uint32_t turn_seed = 100;
  auto user_turn = [&] { return random_tokens(n_user, turn_seed++, nv); };

  std::string dir_tmpl = parent + "/picolm-cachebench-XXXXXX";
  if (!::mkdtemp(dir_tmpl.data())) {
    std::perror("picolm-cachebench: mkdtemp");
    return 1;
  }
  const std::string dir = dir_tmpl;
  PromptCacheOptions po;
  po.dir = dir;
  po.block_tokens = block;
  po.max_disk_bytes = uint64_t(64) << 30;
  po.max_ram_bytes = uint64_t(8) << 30;
  po.log = [](PromptCacheLogLevel l, std::string_view msg) {
    if (l == PromptCacheLogLevel::Warn) std::fprintf(stderr, "%.*s\n", int(msg.size()), msg.data());
  };
  PrefillWithCacheOptions defer;
  defer.defer_store = true;

  // The first request of a system prompt: a full prefill, or (--no-cold) declared KV + the user turn.
  auto first = [&](PromptCacheStore* st, Session& s, const std::vector<int32_t>& sys, const char* what) -> double {
    if (!measure_cold) {
      s.truncate(0);
      s.set_cached_tokens(sys);
      if (!s.eval(user_turn()).ok()) std::exit(1);
      return -1;
    }
    const auto t0 = Clock::now();
    // stable_len = the system prompt: a hybrid model's prefill stops there to keep the recurrent
    // state that store() writes with it (other models: no effect with defer_store).
    auto r = prefill_with_cache(st, s, concat(sys, user_turn()), sys.size(), defer);
    if (!r || r->cached_tokens != 0) {
      std::fprintf(stderr, "picolm-cachebench: %s failed\n", what);
      std::exit(1);
    }
    const double ms = ms_since(t0);
    std::fprintf(stderr, "  %-10s %6d cached + %5zu evaluated: %9.1f ms\n", what, 0, r->evaluated_tokens, ms);
    return ms;
  };
  // TTFT in ms: restore + prefill of the rest (what prefill_with_cache does), split so that the
  // restore part can be reported; checks the expected reuse.
  std::vector<double> restore_ram, restore_disk;
  auto ttft = [&](PromptCacheStore* st, Session& s, const std::vector<int32_t>& prompt, size_t want_cached,
                  const char* what, std::vector<double>* restore_ms = nullptr) -> double {
    const auto t0 = Clock::now();
    const size_t cached = st->restore(s, prompt);
    const double r_ms = ms_since(t0);
    const bool ok = s.eval(std::span<const int32_t>(prompt).subspan(cached)).ok();
    const double ms = ms_since(t0);
    if (!ok) std::exit(1);
    std::fprintf(stderr, "  %-10s %6zu cached + %5zu evaluated: %9.1f ms (restore %.1f ms)\n", what, cached,
                 prompt.size() - cached, ms, r_ms);
    if (cached != want_cached) {
      std::fprintf(stderr, "picolm-cachebench: %s reused %zu tokens, expected %zu\n", what, cached, want_cached);
      std::exit(1);
    }
    if (restore_ms) restore_ms->push_back(r_ms);
    return ms;
  };
  const size_t c1 = n_sys / size_t(block) * size_t(block), c2 = n_sys2 / size_t(block) * size_t(block);
  std::fprintf(stderr, "%s | %d threads | system %zu + user %zu tokens | cache dir %s\n", m->description().c_str(),
               threads, n_sys, n_user, dir.c_str());

  double cold = 0, store_ms = 0, cold2 = 0;
  std::vector<double> ram, disk, alt1, alt2;
  uint64_t file_bytes = 0;
  {
    PromptCacheStore st(po);
    Session s(m, pool, so);
    cold = first(&st, s, sys1, "cold");
    const auto t0 = Clock::now();
    st.store(s, n_sys);  // RAM snapshot + file write (fsync) of the system prompt's blocks
    store_ms = ms_since(t0);
    file_bytes = st.stats().disk_bytes;
    for (int r = 0; r < runs; ++r) {
      s.truncate(0);  // no live prefix: the snapshot in RAM must provide it
      ram.push_back(ttft(&st, s, concat(sys1, user_turn()), c1, "RAM hit", &restore_ram));
    }
    // Alternating with a second system prompt on one session, as the provider does.
    cold2 = first(&st, s, sys2, "cold sys2");
    st.store(s, n_sys2);
    for (int r = 0; r < runs; ++r) {
      alt1.push_back(ttft(&st, s, concat(sys1, user_turn()), c1, "alt sys1"));
      alt2.push_back(ttft(&st, s, concat(sys2, user_turn()), c2, "alt sys2"));
    }
  }
  for (int r = 0; r < runs; ++r) {
    PromptCacheStore st(po);  // a restarted process: empty RAM tier, files on disk (in the page cache)
    Session s(m, pool, so);
    disk.push_back(ttft(&st, s, concat(sys1, user_turn()), c1, "disk hit", &restore_disk));
  }
  // The same after dropping the files from the page cache (POSIX_FADV_DONTNEED on clean pages needs
  // no privileges): the device's read time is in the restore part.
  std::vector<double> disk_cold, restore_disk_cold;
  for (int r = 0; r < runs; ++r) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const int fd = ::open(e.path().c_str(), O_RDONLY);
      if (fd < 0) continue;
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    PromptCacheStore st(po);
    Session s(m, pool, so);
    disk_cold.push_back(ttft(&st, s, concat(sys1, user_turn()), c1, "disk cold", &restore_disk_cold));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);

  std::printf("| model | threads | cold | RAM hit (restore part) | disk hit after restart (restore part) | same, page cache dropped | alternating sys1 / sys2 | store (RAM+disk) | file |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  auto cold_str = [](double ms) { return ms < 0 ? std::string("not run") : std::to_string(int(ms + 0.5)) + " ms"; };
  std::printf("| %s | %d | %s | %.0f ms (%.1f ms) | %.0f ms (%.1f ms) | %.0f ms (%.1f ms) | %.0f / %.0f ms (cold sys2 %s) | %.0f ms | %.1f MB |\n",
              m->description().c_str(), threads, cold_str(cold).c_str(), median(ram), median(restore_ram),
              median(disk), median(restore_disk), median(disk_cold), median(restore_disk_cold), median(alt1),
              median(alt2), cold_str(cold2).c_str(), store_ms, double(file_bytes) / 1e6);
  return 0;
}
