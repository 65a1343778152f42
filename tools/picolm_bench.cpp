// picolm-bench: prompt-processing (pp) and token-generation (tg) speed of a GGUF model, as
// llama-bench measures them, plus memory and a memory-bandwidth probe for the decode roofline.
//
//   pp: p random tokens in ONE eval() call on a fresh session (n_batch defaults to p).
//   tg: n single-token eval() calls on a fresh session, starting at position 0.
//   tg with --seqs N: N fresh sessions (one shared workspace) step together, one eval_batch of N
//       single tokens per step, n steps; aggregate tokens/s = N * n / time (parallel slots).
// Each is repeated r times after one untimed warm-up (which also faults the model's pages in);
// we report the median and the min/max in tokens per second.
//
// Memory, from /proc/self/status (Linux):
//   peak_rss_mb: VmHWM, the peak resident set (model pages that were touched + anonymous memory).
//   private_mb:  RssAnon, the resident anonymous memory (KV cache, scratch, heap, thread stacks,
//                and the repacked weights when the model was repacked: repacked_mb) sampled while
//                the last session is alive; the model's mmap is file-backed and shared with the
//                page cache, so it is not in this number (file_mb: RssFile).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "model.h"

using namespace picolm;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// User + system CPU seconds of this process (all threads).
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// A field of /proc/self/status in kB (-1 if absent).
long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') return std::atol(line.c_str() + n + 1);
  return -1;
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

// Read bandwidth: every thread sums its slice of a buffer far larger than the caches; best of
// several passes. 64-bit adds over 8 independent lanes let the compiler issue wide loads, so the
// loop is memory-bound rather than add-bound. Also returns the best bytes per CPU-second x threads
// (a memory-bound loop is charged CPU time while it stalls, so this estimates the bandwidth with
// the cores to oneself on a shared machine).
struct Bandwidth {
  double wall_gbs = 0, cpu_gbs = 0;
};

Bandwidth probe_read_bandwidth(ThreadPool& pool, size_t bytes) {
  const size_t n = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  const int nt = pool.size();
  // Touch from the threads that will read (first-touch placement).
  pool.parallel_for(nt, [&](int task, int) {
    const size_t b = n * task / nt, e = n * (task + 1) / nt;
    for (size_t i = b; i < e; ++i) buf[i] = i;
  });
  std::vector<uint64_t> sink(nt);
  Bandwidth best;
  for (int pass = 0; pass < 10; ++pass) {
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    pool.parallel_for(nt, [&](int task, int) {
      const size_t b = n * task / nt, e = n * (task + 1) / nt;
      uint64_t acc[8] = {};
      size_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += buf[i + k];
      for (; i < e; ++i) acc[0] += buf[i];
      uint64_t s = 0;
      for (uint64_t a : acc) s += a;
      sink[task] = s;
    });
    const double dt = seconds_since(t0), dc = cpu_seconds() - c0;
    const double gb = static_cast<double>(n * sizeof(uint64_t)) / 1e9;
    best.wall_gbs = std::max(best.wall_gbs, gb / dt);
    best.cpu_gbs = std::max(best.cpu_gbs, gb * nt / std::max(dc, 1e-9));
  }
  uint64_t s = 0;
  for (uint64_t x : sink) s += x;
  if (s == 42) std::fprintf(stderr, " ");  // keeps the sums observable
  return best;
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-bench -m MODEL [options]\n"
               "  -m, --model FILE    GGUF model\n"
               "  -t, --threads N     threads (default: physical cores)\n"
               "  -p N                prompt tokens for pp (default 512; 0 skips pp)\n"
               "  -n N                generated tokens for tg (default 64; 0 skips tg)\n"
               "  -r N                repetitions (default 5)\n"
               "  -b N                prefill micro-batch (default: p)\n"
               "  -c N                context of the sessions (default: max(p, n) + 16); the FP16 KV cache\n"
               "                      for all of it is allocated and counted in private memory\n"
               "  --exact             F32 activations (reference path)\n"
               "  --repack MODE       auto|on|off: weights repacked at load (default auto: on when the\n"
               "                      CPU has packed kernels and the model is under half the RAM)\n"
               "  --seqs LIST         also tg with N sequences decoding together (eval_batch), for each N\n"
               "                      of a comma-separated list (e.g. 1,2,4): aggregate and per-sequence tok/s\n"
               "  --bandwidth         also probe memory read bandwidth (512 MiB buffer)\n"
               "  --json              one JSON object on stdout\n"
               "Kernels: env PICOLM_KERNELS=scalar|avx2|avx512 overrides the automatic choice.\n");
}

struct Args {
  std::string model;
  int threads = 0, p = 512, n = 64, r = 5, batch = 0, ctx = 0;
  bool json = false, bandwidth = false, exact = false;
  Repack repack = Repack::Auto;
  std::vector<int> seqs;  // --seqs
};

bool parse_int(const char* s, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (!end || end == s || *end != '\0' || v < 0 || v > 1000000) return false;
  out = static_cast<int>(v);
  return true;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto num = [&](int& out) {
      if (i + 1 >= argc || !parse_int(argv[i + 1], out)) {
        std::fprintf(stderr, "picolm-bench: %s needs a non-negative integer\n", k.c_str());
        return false;
      }
      ++i;
      return true;
    };
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    } else if ((k == "-m" || k == "--model") && i + 1 < argc) {
      a.model = argv[++i];
    } else if (k == "-t" || k == "--threads") {
      if (!num(a.threads)) return 2;
    } else if (k == "-p") {
      if (!num(a.p)) return 2;
    } else if (k == "-n") {
      if (!num(a.n)) return 2;
    } else if (k == "-r") {
      if (!num(a.r)) return 2;
    } else if (k == "-b") {
      if (!num(a.batch)) return 2;
    } else if (k == "-c") {
      if (!num(a.ctx)) return 2;
    } else if (k == "--json") {
      a.json = true;
    } else if (k == "--bandwidth") {
      a.bandwidth = true;
    } else if (k == "--exact") {
      a.exact = true;
    } else if (k == "--seqs" && i + 1 < argc) {
      const std::string v = argv[++i];
      size_t b = 0;
      while (b <= v.size()) {
        const size_t e = std::min(v.find(',', b), v.size());
        int n = 0;
        if (!parse_int(v.substr(b, e - b).c_str(), n) || n < 1 || n > 256) {
          std::fprintf(stderr, "picolm-bench: --seqs takes a list of counts 1..256, not '%s'\n", v.c_str());
          return 2;
        }
        a.seqs.push_back(n);
        b = e + 1;
      }
    } else if (k == "--repack" && i + 1 < argc) {
      const std::string v = argv[++i];
      const auto r = parse_repack(v);
      if (!r) {
        std::fprintf(stderr, "picolm-bench: --repack takes auto, on or off, not '%s'\n", v.c_str());
        return 2;
      }
      a.repack = *r;
    } else {
      std::fprintf(stderr, "picolm-bench: unknown argument '%s'\n", k.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (a.model.empty()) {
    usage(stderr);
    return 2;
  }
  if (a.threads <= 0) a.threads = ThreadPool::default_threads();
  if (a.r <= 0) a.r = 1;

  ThreadPool pool(a.threads);
  const auto t_load = Clock::now();
  ModelOptions mo;
  mo.activations = a.exact ? ActivationMode::Exact : ActivationMode::Quantized;
  mo.repack = a.repack;
  mo.pool = &pool;
  auto loaded = Model::load(a.model, mo);
  if (!loaded) {
    std::fprintf(stderr, "picolm-bench: %s\n", loaded.error().c_str());
    return 1;
  }
  std::shared_ptr<const Model> model = loaded.value();
  const double load_s = seconds_since(t_load);
  const HParams& hp = model->hparams();
  const double packed_mb = static_cast<double>(model->packed_bytes()) / (1024.0 * 1024.0);

  // Weight bytes one decoded token reads: every layer matrix and the output head once, one row
  // of token_embd (the output head is token_embd itself when tied), norms and biases.
  // With repacked weights a matrix is read from its panels instead (the same bytes; Q6_K +0.95%).
  const bool repacked = model->packed_bytes() > 0;
  auto matrix_bytes = [&](const GgufTensor& t) -> uint64_t {
    const size_t p = repacked && t.ne.size() == 2
                         ? packed_bytes(best_kernels(), t.type, static_cast<int64_t>(t.ne[1]), static_cast<int64_t>(t.ne[0]))
                         : 0;
    return p > 0 ? p : t.n_bytes;
  };
  uint64_t weight_bytes_per_token = 0, model_bytes = 0;
  for (const GgufTensor& t : model->gguf().tensors()) {
    model_bytes += t.n_bytes;
    if (t.name == "token_embd.weight") weight_bytes_per_token += t.row_bytes() + (hp.tied_output ? matrix_bytes(t) : 0);
    // Stacked experts (MoE): a token reads n_expert_used of the n_expert slices.
    else if (t.ne.size() == 3 && hp.n_expert > 0 && t.ne[2] == uint64_t(hp.n_expert))
      weight_bytes_per_token += t.n_bytes / uint64_t(hp.n_expert) * uint64_t(hp.n_expert_used);
    else weight_bytes_per_token += matrix_bytes(t);
  }

  // Random token ids (as llama-bench does), deterministic.
  uint64_t rs = 0x243f6a8885a308d3ull;
  auto rand_tok = [&]() {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return static_cast<int32_t>(rs % static_cast<uint64_t>(hp.n_vocab));
  };
  std::vector<int32_t> prompt(static_cast<size_t>(a.p));
  for (int32_t& t : prompt) t = rand_tok();

  SessionOptions so;
  so.n_ctx = a.ctx > 0 ? a.ctx : std::max(a.p, a.n) + 16;
  if (so.n_ctx < std::max(a.p, a.n) + 4) {
    std::fprintf(stderr, "picolm-bench: -c %d is too small for -p %d / -n %d\n", a.ctx, a.p, a.n);
    return 2;
  }
  so.n_batch = a.batch > 0 ? a.batch : std::max(a.p, 1);
  long private_kb = 0;
  auto sample_private = [&]() { private_kb = std::max(private_kb, status_kb("RssAnon")); };

  // Each run also records tokens per CPU-second x threads: what the run would reach if it had
  // its cores to itself. Only an estimate (spinning and cache sharing skew it), used to read
  // numbers taken on a busy machine; cpu_util says how busy.
  std::vector<double> pp_cpu, tg_cpu;
  auto run_pp = [&]() -> double {
    Session s(model, pool, so);
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    Status st = s.eval(prompt);
    const double dt = seconds_since(t0);
    if (!st) {
      std::fprintf(stderr, "picolm-bench: eval failed: %s\n", st.error().c_str());
      std::exit(1);
    }
    pp_cpu.push_back(a.p * a.threads / std::max(1e-9, cpu_seconds() - c0));
    sample_private();
    return a.p / dt;
  };
  auto run_tg = [&](int n) -> double {
    Session s(model, pool, so);
    int32_t tok = rand_tok();
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      Status st = s.eval(std::span<const int32_t>(&tok, 1));
      if (!st) {
        std::fprintf(stderr, "picolm-bench: eval failed: %s\n", st.error().c_str());
        std::exit(1);
      }
      tok = rand_tok();
    }
    const double dt = seconds_since(t0);
    tg_cpu.push_back(n * a.threads / std::max(1e-9, cpu_seconds() - c0));
    sample_private();
    return n / dt;
  };

  // N sequences decoding together: N fresh sessions sharing one workspace, each step one
  // eval_batch of one random token per sequence; returns aggregate tokens/s.
  double seq_cpu = 0;  // the last run_tg_seqs' tokens per CPU-second x threads
  double seq_kv_mb = 0, seq_ws_mb = 0;  // KV cache per sequence; the shared workspace (largest)
  auto run_tg_seqs = [&](int n_seqs, int n) -> double {
    SessionOptions sso = so;
    sso.workspace = make_eval_workspace();
    std::vector<std::unique_ptr<Session>> ss;
    for (int i = 0; i < n_seqs; ++i) ss.push_back(std::make_unique<Session>(model, pool, sso));
    std::vector<int32_t> toks(static_cast<size_t>(n_seqs));
    std::vector<SeqBatch> items(static_cast<size_t>(n_seqs));
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int step = 0; step < n; ++step) {
      for (int i = 0; i < n_seqs; ++i) {
        toks[size_t(i)] = rand_tok();
        items[size_t(i)] = {ss[size_t(i)].get(), std::span<const int32_t>(&toks[size_t(i)], 1), false};
      }
      Status st = eval_batch(items);
      if (!st) {
        std::fprintf(stderr, "picolm-bench: eval_batch failed: %s\n", st.error().c_str());
        std::exit(1);
      }
    }
    const double dt = seconds_since(t0);
    seq_cpu = double(n_seqs) * n * a.threads / std::max(1e-9, cpu_seconds() - c0);
    seq_kv_mb = double(ss[0]->kv_bytes()) / (1024.0 * 1024.0);
    seq_ws_mb = std::max(seq_ws_mb, double(ss[0]->workspace_bytes()) / (1024.0 * 1024.0));
    sample_private();
    return double(n_seqs) * n / dt;
  };

  // Warm-up: faults the weights in and sizes the scratch buffers.
  if (a.p > 0) {
    Session s(model, pool, so);
    std::vector<int32_t> w(prompt.begin(), prompt.begin() + std::min(a.p, 32));
    (void)s.eval(w);
  }
  run_tg(std::min(a.n > 0 ? a.n : 4, 4));

  // CPU utilisation of the timed runs: on a shared machine, well below 1.0 means other processes
  // took our cores and the speeds are underestimates.
  pp_cpu.clear();
  tg_cpu.clear();
  std::vector<double> pp, tg;
  const double cpu0 = cpu_seconds();
  const auto wall0 = Clock::now();
  for (int i = 0; i < a.r; ++i) {
    if (a.p > 0) pp.push_back(run_pp());
    if (a.n > 0) tg.push_back(run_tg(a.n));
  }
  const double cpu_util = (cpu_seconds() - cpu0) / (seconds_since(wall0) * a.threads);
  // --seqs: the counts interleaved run by run (N = 1, 2, 4, 1, 2, 4, ...), so that a change in the
  // machine's load touches every count alike.
  std::vector<std::vector<double>> seq_runs(a.seqs.size()), seq_runs_cpu(a.seqs.size());
  if (!a.seqs.empty() && a.n > 0) {
    for (int n_seqs : a.seqs) run_tg_seqs(n_seqs, std::min(a.n, 4));  // warm-up: scratch of each size
    for (int i = 0; i < a.r; ++i)
      for (size_t j = 0; j < a.seqs.size(); ++j) {
        seq_runs[j].push_back(run_tg_seqs(a.seqs[j], a.n));
        seq_runs_cpu[j].push_back(seq_cpu);
      }
  }
  const Stats spp = stats(pp), stg = stats(tg), spp_cpu = stats(pp_cpu), stg_cpu = stats(tg_cpu);
  const double peak_rss_mb = status_kb("VmHWM") / 1024.0;
  const double private_mb = private_kb / 1024.0;
  // The session's FP16 KV cache (K and V of every layer with K/V of its own: n_ctx positions, or a
  // sliding-window layer's ring; each layer's own row width): allocated and written at construction,
  // so all of it is resident and private. Hybrid models: the recurrent layers' state instead of K/V
  // (counted with it). Measured on a session made with the benchmark's options.
  const Session probe(model, pool, so);
  const double state_mb = double(probe.recurrent_state_bytes()) / (1024.0 * 1024.0);
  const double kv_mb = double(probe.kv_bytes()) / (1024.0 * 1024.0) + state_mb;
  int n_kv_layers = 0;  // layers with K/V of their own
  for (int32_t l = 0; l < model->hparams().n_layer; ++l) n_kv_layers += probe.kv_row_bytes(l) > 0;
  const double file_mb = status_kb("RssFile") / 1024.0;
  Bandwidth bwr;
  if (a.bandwidth) bwr = probe_read_bandwidth(pool, size_t(512) << 20);
  const double bw = bwr.wall_gbs;
  const char* kernels = best_kernels().name;
  const double gb_per_tok = static_cast<double>(weight_bytes_per_token) / 1e9;

  if (a.json) {
    std::printf("{\"model\":\"%s\",\"description\":\"%s\",\"kernels\":\"%s\",\"activations\":\"%s\",\"threads\":%d,"
                "\"p\":%d,\"n\":%d,\"r\":%d,\"n_batch\":%d,"
                "\"pp_tok_s\":%.3f,\"pp_min\":%.3f,\"pp_max\":%.3f,"
                "\"tg_tok_s\":%.3f,\"tg_min\":%.3f,\"tg_max\":%.3f,"
                "\"n_ctx\":%d,\"kv_cache_mb\":%.1f,\"repacked_mb\":%.1f,\"pack_s\":%.3f,\"private_over_kv_mb\":%.1f,"
                "\"peak_rss_mb\":%.1f,\"private_mb\":%.1f,\"file_rss_mb\":%.1f,\"load_s\":%.3f,"
                "\"model_bytes\":%llu,\"weight_bytes_per_token\":%llu,\"cpu_util\":%.3f,"
                "\"pp_tok_per_cpu_s\":%.3f,\"tg_tok_per_cpu_s\":%.3f",
                json_escape(a.model).c_str(), json_escape(model->description()).c_str(), kernels,
                a.exact ? "exact" : "quantized", a.threads, a.p, a.n, a.r, so.n_batch, spp.median, spp.min, spp.max,
                stg.median, stg.min, stg.max, so.n_ctx, kv_mb, packed_mb, model->pack_seconds(), private_mb - kv_mb - packed_mb, peak_rss_mb, private_mb, file_mb, load_s,
                static_cast<unsigned long long>(model_bytes), static_cast<unsigned long long>(weight_bytes_per_token), cpu_util,
                spp_cpu.median, stg_cpu.median);
    if (!seq_runs.empty()) {
      std::printf(",\"tg_seqs\":[");
      for (size_t j = 0; j < seq_runs.size(); ++j) {
        const Stats st = stats(seq_runs[j]);
        std::printf("%s{\"seqs\":%d,\"tok_s\":%.3f,\"min\":%.3f,\"max\":%.3f,\"per_seq_tok_s\":%.3f,"
                    "\"tok_per_cpu_s\":%.3f}",
                    j ? "," : "", a.seqs[j], st.median, st.min, st.max, st.median / a.seqs[j],
                    stats(seq_runs_cpu[j]).median);
      }
      std::printf("],\"seq_kv_mb\":%.2f,\"seq_workspace_mb\":%.2f", seq_kv_mb, seq_ws_mb);
    }
    if (a.bandwidth)
      std::printf(",\"bandwidth_gb_s\":%.2f,\"bandwidth_cpu_gb_s\":%.2f,\"tg_roofline_tok_s\":%.2f,"
                "\"tg_fraction_of_roofline\":%.3f",
                bw, bwr.cpu_gbs, bw / gb_per_tok, stg.median * gb_per_tok / bw);
    std::printf("}\n");
    return 0;
  }
  std::printf("model:    %s\n          %s\n", a.model.c_str(), model->description().c_str());
  std::printf("kernels:  %s (%s activations), %d thread(s), load %.2f s, CPU utilisation %.0f%%\n", kernels,
              a.exact ? "exact" : "quantized", a.threads, load_s, 100.0 * cpu_util);
  if (a.p > 0)
    std::printf("pp%-5d   %9.2f tok/s  (min %.2f, max %.2f, %d runs, n_batch %d)\n", a.p, spp.median, spp.min, spp.max,
                a.r, so.n_batch);
  if (a.n > 0)
    std::printf("tg%-5d   %9.2f tok/s  (min %.2f, max %.2f, %d runs)\n", a.n, stg.median, stg.min, stg.max, a.r);
  for (size_t j = 0; j < seq_runs.size(); ++j) {
    const Stats st = stats(seq_runs[j]);
    std::printf("tg%-5d x%-3d %7.2f tok/s aggregate, %.2f per sequence  (min %.2f, max %.2f, %d runs)\n", a.n,
                a.seqs[j], st.median, st.median / a.seqs[j], st.min, st.max, a.r);
    if (cpu_util < 0.9)
      std::printf("              per CPU-second x threads: %.2f tok/s aggregate (estimate)\n",
                  stats(seq_runs_cpu[j]).median);
  }
  if (!seq_runs.empty())
    std::printf("              memory: KV %.2f MiB per sequence, one shared workspace %.2f MiB\n", seq_kv_mb,
                seq_ws_mb);
  if (cpu_util < 0.9)
    std::printf("busy machine: per CPU-second x threads: pp %.2f tok/s, tg %.2f tok/s (estimate)\n", spp_cpu.median,
                stg_cpu.median);
  std::printf("memory:   peak RSS %.1f MiB, private (RssAnon) %.1f MiB, file-backed RSS %.1f MiB\n", peak_rss_mb,
              private_mb, file_mb);
  if (packed_mb > 0)
    std::printf("          repacked weights %.1f MiB (packed in %.2f s at load)\n", packed_mb, model->pack_seconds());
  std::printf("          KV cache (n_ctx %d, FP16, %d layers) %.1f MiB%s; private beyond it%s %.1f MiB\n", so.n_ctx,
              n_kv_layers, kv_mb, state_mb > 0 ? " incl. the recurrent state" : "",
              packed_mb > 0 ? " and the repacked weights" : "", private_mb - kv_mb - packed_mb);
  if (state_mb > 0) std::printf("          recurrent state %.2f MiB per sequence\n", state_mb);
  std::printf("decode:   %.1f MB of weights read per token", gb_per_tok * 1e3);
  if (a.n > 0) std::printf(" -> %.2f GB/s effective", stg.median * gb_per_tok);
  std::printf("\n");
  if (a.bandwidth)
    std::printf("memory read bandwidth (%d threads): %.2f GB/s -> tg roofline %.1f tok/s (measured %.0f%% of it)\n",
                a.threads, bw, bw / gb_per_tok, 100.0 * stg.median * gb_per_tok / bw);
  if (a.bandwidth)
    std::printf("  per CPU-second x threads: %.2f GB/s -> roofline %.1f tok/s (estimate for a quiet machine)\n",
                bwr.cpu_gbs, bwr.cpu_gbs / gb_per_tok);
  return 0;
}
