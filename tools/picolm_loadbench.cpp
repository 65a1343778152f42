// picolm-loadbench: the provider under concurrent clients (parallel slots, issue 14). Starts the
// server in-process on a loopback port and measures, through real HTTP streams:
//  - aggregate decode tokens/s with 1, 2, 4... concurrent clients (each streams max_tokens tokens;
//    aggregate = all clients' tokens / the span from the first client's first token to the last
//    client's last token), and each stream's own rate;
//  - time to first token of a new request alone, and while 3 other streams are generating.
// Prompts start with a distinct number so no request reuses another's KV; the prompt cache is off.
// Results go to stdout as Markdown; progress to stderr.
#include <signal.h>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server.h"

using namespace picolm;

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string join(const std::vector<double>& v, const char* fmt) {
  std::string out;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, fmt, x);
    out += (out.empty() ? "" : ", ") + std::string(buf);
  }
  return out;
}

struct StreamTiming {
  bool ok = false;
  Clock::time_point sent, first, last;  // request sent, first content delta, end of stream
  int64_t tokens = 0;                   // usage.completion_tokens
};

// A prompt of about `words` words that starts with `tag` (distinct tags share no KV prefix).
std::string prompt_text(int tag, int words) {
  static const char* kWords[] = {"the", "little", "dog", "ran", "across", "a", "green", "field", "while", "birds",
                                 "sang", "in", "tall", "trees", "near", "river"};
  std::string s = std::to_string(tag) + ":";
  for (int i = 0; i < words; ++i) s += std::string(" ") + kWords[(i * 7 + tag) % 16];
  return s;
}

// stop: the client hangs up once it is set; started: incremented at the first content delta.
StreamTiming stream(int port, int tag, int prompt_words, int max_tokens, const std::atomic<bool>* stop = nullptr,
                    std::atomic<int>* started = nullptr) {
  StreamTiming t;
  const std::string body = R"({"messages":[{"role":"user","content":")" + prompt_text(tag, prompt_words) +
                           R"("}],"max_tokens":)" + std::to_string(max_tokens) + R"(,"temperature":1.0,"seed":)" +
                           std::to_string(tag) + R"(,"stream":true,"stream_options":{"include_usage":true}})";
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string tail;  // the usage chunk may be split across reads: keep the last bytes
  bool first = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    const std::string chunk(data, len);
    // The first non-empty content delta (the role chunk carries "content":"").
    bool has_text = false;
    const std::string key = "\"content\":\"";
    for (size_t at = chunk.find(key); !has_text && at != std::string::npos; at = chunk.find(key, at + 1))
      has_text = at + key.size() < chunk.size() && chunk[at + key.size()] != '"';
    if (!first && has_text) {
      first = true;
      t.first = Clock::now();
      if (started) ++*started;
    }
    tail += chunk;
    if (tail.size() > 4096) tail.erase(0, tail.size() - 4096);
    return !(stop && stop->load());
  };
  t.sent = Clock::now();
  auto res = c.send(req);
  t.last = Clock::now();
  const size_t at = tail.rfind("\"completion_tokens\":");
  if (at != std::string::npos) t.tokens = std::strtoll(tail.c_str() + at + 20, nullptr, 10);
  t.ok = res && res->status == 200 && first && t.tokens > 0;
  if (!first) t.first = t.last;
  return t;
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-loadbench -m MODEL [options]\n"
               "  -j, --threads N     engine threads (default 2)\n"
               "  -np, --parallel N   slots (default 4)\n"
               "  -c, --ctx-size N    context per slot (default 1024)\n"
               "  -n N                tokens each client streams (default 64)\n"
               "  --clients LIST      concurrent clients per round, comma-separated (default 1,2,4)\n"
               "  --prompt N          prompt words (default 40)\n"
               "  --runs N            rounds of each measurement; medians reported (default 3)\n"
               "  --prefill-chunk N   prompt tokens per step beside running streams (default: the provider's)\n");
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  spdlog::set_level(spdlog::level::warn);
  ServerOptions o;
  o.engine.threads = 2;
  o.engine.parallel = 4;
  o.engine.n_ctx = 1024;
  o.engine.cache_ram_mb = 0;
  o.engine.cache_dir.clear();
  o.engine.max_queue = 64;
  o.engine.timeout_sec = 3600;
  o.host = "127.0.0.1";
  o.port = 0;
  int n_tokens = 64, prompt_words = 40, runs = 3;
  std::vector<int> clients = {1, 2, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "picolm-loadbench: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    const int n = std::atoi(v.c_str());
    if (k == "-m" || k == "--model") o.engine.model_path = v;
    else if (k == "-j" || k == "--threads") o.engine.threads = n;
    else if (k == "-np" || k == "--parallel") o.engine.parallel = n;
    else if (k == "-c" || k == "--ctx-size") o.engine.n_ctx = n;
    else if (k == "-n") n_tokens = n;
    else if (k == "--prompt") prompt_words = n;
    else if (k == "--runs") runs = n;
    else if (k == "--prefill-chunk") o.engine.prefill_chunk = n;
    else if (k == "--clients") {
      clients.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) clients.push_back(std::atoi(item.c_str()));
    } else {
      std::fprintf(stderr, "picolm-loadbench: unknown option '%s'\n", k.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (o.engine.model_path.empty() || n_tokens < 2 || runs < 1 || clients.empty() || o.engine.parallel < 1) {
    usage(stderr);
    return 2;
  }
  Server server(o);
  auto port = server.start();
  if (!port.ok()) {
    std::fprintf(stderr, "picolm-loadbench: %s\n", port.error().c_str());
    return 1;
  }
  if (Status st = server.wait_loaded(); !st.ok()) {
    std::fprintf(stderr, "picolm-loadbench: %s\n", st.error().c_str());
    return 1;
  }
  auto engine = server.engine();
  std::fprintf(stderr, "model %s, %d threads, %d slots x %d context, %d tokens per client\n",
               engine->description().c_str(), o.engine.threads, engine->slots(), engine->n_ctx(), n_tokens);
  int tag = 1;
  (void)stream(port.value(), tag++, prompt_words, 4);  // warm-up: page in the weights

  // ---- aggregate decode rate ----
  std::printf("| clients | aggregate tok/s | per-stream tok/s | aggregate vs 1 client | runs (aggregate) |\n");
  std::printf("|---|---|---|---|---|\n");
  double single = 0;
  for (int nc : clients) {
    std::vector<double> agg, per;
    for (int r = 0; r < runs; ++r) {
      std::vector<StreamTiming> t(static_cast<size_t>(nc));
      std::vector<std::thread> th;
      engine->set_paused(true);  // all clients enter the slots together
      for (int c = 0; c < nc; ++c) {
        const int my = tag++;
        th.emplace_back([&, c, my] { t[static_cast<size_t>(c)] = stream(port.value(), my, prompt_words, n_tokens); });
      }
      while (engine->queue_depth() < static_cast<size_t>(nc)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      engine->set_paused(false);
      for (auto& x : th) x.join();
      Clock::time_point first = t[0].first, last = t[0].last;
      int64_t tokens = 0;
      std::vector<double> rates;
      for (const auto& s : t) {
        if (!s.ok) {
          std::fprintf(stderr, "picolm-loadbench: a stream failed\n");
          return 1;
        }
        first = std::min(first, s.first);
        last = std::max(last, s.last);
        tokens += s.tokens;
        // The first token is timed by its arrival; the rest are the stream's decode rate.
        rates.push_back(double(s.tokens - 1) / std::max(seconds(s.first, s.last), 1e-9));
      }
      agg.push_back(double(tokens - nc) / std::max(seconds(first, last), 1e-9));
      per.push_back(median(rates));
      std::fprintf(stderr, "  %d clients, run %d: %.1f tok/s aggregate, %.1f per stream\n", nc, r + 1, agg.back(),
                   per.back());
    }
    const double a = median(agg);
    if (nc == 1) single = a;
    std::printf("| %d | **%.1f** | %.1f | %s | %s |\n", nc, a, median(per),
                single > 0 ? (std::to_string(a / single).substr(0, 4) + "x").c_str() : "-",
                join(agg, "%.1f").c_str());
  }

  // ---- time to first token: alone, and while 3 others stream ----
  std::vector<double> alone, busy;
  for (int r = 0; r < runs; ++r) {
    const StreamTiming a = stream(port.value(), tag++, prompt_words, 4);
    alone.push_back(seconds(a.sent, a.first) * 1000.0);
    const int others = std::min(3, engine->slots() - 1);
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    std::vector<std::thread> th;
    const int long_tokens = std::max(n_tokens, engine->n_ctx() - 200);  // they outlast the measurement
    for (int c = 0; c < others; ++c) {
      const int my = tag++;
      th.emplace_back([&, my] { (void)stream(port.value(), my, prompt_words, long_tokens, &stop, &started); });
    }
    // Wait until every background stream generates, then time a new request.
    while (started < others) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const StreamTiming b = stream(port.value(), tag++, prompt_words, 4);
    busy.push_back(seconds(b.sent, b.first) * 1000.0);
    stop = true;
    for (auto& x : th) x.join();
    std::fprintf(stderr, "  TTFT run %d: alone %.0f ms, beside %d streams %.0f ms\n", r + 1, alone.back(), others,
                 busy.back());
  }
  std::printf("\n| time to first token (%d-word prompt) | ms | runs |\n|---|---|---|\n", prompt_words);
  std::printf("| alone | **%.0f** | %s |\n", median(alone), join(alone, "%.0f").c_str());
  std::printf("| while 3 others stream | **%.0f** | %s |\n", median(busy), join(busy, "%.0f").c_str());
  server.stop();
  return 0;
}
