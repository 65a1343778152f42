// picolm-budgetbench: what constrained decoding costs per token (issue 13's "decode slowdown of
// constrained vs unconstrained generation", and the closing mode's cost per token).
//
// One model, one session, the provider's decode step reproduced without HTTP:
//   plain:       logits -> sample -> eval
//   constrained: logits -> fill_mask -> sample under the mask -> accept_token ->
//                min_completion_bytes() (the provider's budget check, every token) -> eval;
//                min_completion_tokens() (asked by the provider only near the budget's end) is
//                timed on every 8th token and reported apart
//   closing:     as constrained, but every mask is the closing mask (fill_mask_closing): each call
//                is written along its shortest path, the most closing work per token there is.
// The grammar is the provider's for a tool list with tool_choice required (Hermes <tool_call>
// format, one optional whitespace byte); when a call ends (end-of-generation allowed and sampled)
// a fresh matcher starts the next one, so every token of the run is constrained. Modes run
// interleaved (plain, constrained, closing, plain, ...) r times after an untimed warm-up, each run
// on a fresh session from position 0, so they share the machine's state; medians are reported,
// with the grammar part of a token (mask, accept, query) timed separately in thread CPU time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "kernels/thread_pool.h"
#include "model.h"
#include "sampler.h"
#include "vocab_loader.h"

using namespace picolm;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of the calling thread: the grammar work runs on the decode thread only, and on a shared
// machine its wall time also counts the time the thread waited for a core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum class Mode { Plain, Constrained, Closing };
constexpr int kTokenQueryEvery = 8;
const char* mode_name(Mode m) {
  return m == Mode::Plain ? "plain" : m == Mode::Constrained ? "constrained" : "closing";
}

struct RunResult {
  double tok_per_s = 0;
  double grammar_us_per_tok = 0;  // mask + accept + query, per token (thread CPU time)
  double mask_us_per_tok = 0;     // the mask alone (normal or closing)
  double query_us_per_tok = 0;    // one min_completion_tokens() call (not in grammar_us_per_tok)
  double bytes_us_per_tok = 0;    // min_completion_bytes() alone
  double step_cpu_ms = 0;         // the decode thread's CPU time per token, all of it
  int calls = 0;                  // completed calls in the run
};

struct Bench {
  std::shared_ptr<Model> model;
  ThreadPool* pool = nullptr;
  std::shared_ptr<const grammar::Grammar> grammar;
  std::shared_ptr<const grammar::Vocabulary> vocab;
  std::vector<int32_t> prompt;
  int n = 128;
  uint64_t seed = 1;

  RunResult run(Mode mode, int rep) {
    SessionOptions so;
    so.n_ctx = static_cast<int32_t>(prompt.size()) + n + 16;
    Session session(model, *pool, so);
    Status st = session.eval(prompt);
    if (!st.ok()) {
      std::fprintf(stderr, "picolm-budgetbench: prefill failed: %s\n", st.error().c_str());
      std::exit(1);
    }
    SamplerParams sp;
    sp.seed = seed + static_cast<uint64_t>(rep);
    Sampler sampler(sp);
    const size_t n_vocab = static_cast<size_t>(model->hparams().n_vocab);
    std::vector<float> logits(n_vocab);
    std::vector<uint32_t> mask((n_vocab + 31) / 32);
    std::unique_ptr<grammar::Matcher> matcher;
    if (mode != Mode::Plain) matcher = std::make_unique<grammar::Matcher>(grammar, vocab);
    const Tokenizer& tok = model->tokenizer();
    RunResult r;
    double grammar_s = 0, mask_s = 0, query_s = 0, bytes_s = 0;
    int queries = 0;
    int64_t sink = 0;
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    for (int i = 0; i < n; ++i) {
      auto l = session.logits();
      std::copy(l.begin(), l.end(), logits.begin());
      int32_t id;
      if (mode == Mode::Plain) {
        id = sampler.sample(logits, nullptr);
      } else {
        const double g0 = thread_cpu_seconds();
        if (mode == Mode::Closing) matcher->fill_mask_closing(mask.data(), 0);  // 0: the fewest-token path
        else matcher->fill_mask(mask.data());
        const double dm = thread_cpu_seconds() - g0;
        mask_s += dm;
        grammar_s += dm;
        id = sampler.sample(logits, mask.data());
        const double g1 = thread_cpu_seconds();
        if (id < 0 || !matcher->accept_token(id)) {
          std::fprintf(stderr, "picolm-budgetbench: the grammar rejected a token it allowed\n");
          std::exit(1);
        }
        // The provider's budget check: the byte count every token, the token count only near the
        // end of the budget (here on every kTokenQueryEvery-th token, to time it).
        const double q0 = thread_cpu_seconds();
        sink += static_cast<int64_t>(matcher->min_completion_bytes());
        const double q1 = thread_cpu_seconds();
        bytes_s += q1 - q0;
        if (i % kTokenQueryEvery == 0) {
          sink += matcher->min_completion_tokens();
          query_s += thread_cpu_seconds() - q1;
          ++queries;
        }
        if (matcher->is_terminated() || tok.is_eog(id)) {
          ++r.calls;
          matcher = std::make_unique<grammar::Matcher>(grammar, vocab);
        }
        grammar_s += thread_cpu_seconds() - g1;
      }
      sampler.accept(id);
      // The KV content does not change the cost of a step; an end-of-generation id is evaluated
      // like any other token so every run does n steps at the same positions.
      st = session.eval(std::span<const int32_t>(&id, 1));
      if (!st.ok()) {
        std::fprintf(stderr, "picolm-budgetbench: decode failed: %s\n", st.error().c_str());
        std::exit(1);
      }
    }
    const double dt = seconds_since(t0);
    if (sink == -1) std::fprintf(stderr, " ");  // keeps the queries observable
    r.tok_per_s = n / dt;
    r.grammar_us_per_tok = 1e6 * grammar_s / n;
    r.mask_us_per_tok = 1e6 * mask_s / n;
    r.query_us_per_tok = queries ? 1e6 * query_s / queries : 0.0;
    r.bytes_us_per_tok = 1e6 * bytes_s / n;
    r.grammar_us_per_tok -= 1e6 * query_s / n;  // reported apart
    r.step_cpu_ms = 1e3 * (thread_cpu_seconds() - c0) / n;
    return r;
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-budgetbench -m MODEL --tools TOOLS.json [options]\n"
               "  -t N       threads (default: physical cores)\n"
               "  -n N       decoded tokens per run (default 128)\n"
               "  -r N       runs per mode, interleaved (default 5)\n"
               "  --seed N   sampler seed of the first run (default 1)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, tools_path;
  int threads = 0, n = 128, reps = 5;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const bool has = i + 1 < argc;
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    } else if (k == "-m" && has) {
      model_path = argv[++i];
    } else if (k == "--tools" && has) {
      tools_path = argv[++i];
    } else if (k == "-t" && has) {
      threads = std::atoi(argv[++i]);
    } else if (k == "-n" && has) {
      n = std::atoi(argv[++i]);
    } else if (k == "-r" && has) {
      reps = std::atoi(argv[++i]);
    } else if (k == "--seed" && has) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (model_path.empty() || tools_path.empty() || n <= 0 || reps <= 0) {
    usage(stderr);
    return 2;
  }
  const std::string tools = read_text(tools_path);
  if (tools.empty()) {
    std::fprintf(stderr, "picolm-budgetbench: cannot read %s\n", tools_path.c_str());
    return 1;
  }

  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  ModelOptions mo;
  mo.pool = &pool;
  auto loaded = Model::load(model_path, mo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "picolm-budgetbench: %s\n", loaded.error().c_str());
    return 1;
  }
  auto vocab = tools::load_grammar_vocab(model_path);
  if (!vocab.ok()) {
    std::fprintf(stderr, "picolm-budgetbench: %s\n", vocab.error().c_str());
    return 1;
  }
  // The provider's grammar for tool_choice required in the native <tool_call> format.
  grammar::ToolListOptions to;
  to.format = grammar::ToolCallFormat::Hermes;
  to.schema.whitespace = grammar::Whitespace::Flexible;
  to.schema.max_whitespace_run = 1;
  auto compiled = grammar::compile_tool_list(tools, to);
  if (!compiled.ok()) {
    std::fprintf(stderr, "picolm-budgetbench: %s\n", compiled.error_text().c_str());
    return 1;
  }

  Bench b;
  b.model = std::move(loaded.value());
  b.pool = &pool;
  b.grammar = compiled.grammar;
  b.vocab = vocab.value();
  b.n = n;
  b.seed = seed;
  b.prompt = b.model->tokenizer().encode("<|im_start|>user\nCall a tool.<|im_end|>\n<|im_start|>assistant\n", false, true);

  const Mode modes[] = {Mode::Plain, Mode::Constrained, Mode::Closing};
  for (Mode m : modes) (void)b.run(m, 1000);  // warm-up: pages, mask caches, first-matcher tables
  std::vector<RunResult> res[3];
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < 3; ++k) res[k].push_back(b.run(modes[k], r));

  std::printf("model %s, %d threads, %d tokens per run, %d runs per mode (interleaved)\n",
              b.model->description().c_str(), pool.size(), n, reps);
  double plain_med = 0, plain_cpu = 0;
  for (int k = 0; k < 3; ++k) {
    std::vector<double> tps, gus, mus, qus, bus, cpu;
    int calls = 0;
    for (const auto& x : res[k]) {
      tps.push_back(x.tok_per_s);
      gus.push_back(x.grammar_us_per_tok);
      mus.push_back(x.mask_us_per_tok);
      qus.push_back(x.query_us_per_tok);
      bus.push_back(x.bytes_us_per_tok);
      cpu.push_back(x.step_cpu_ms);
      calls += x.calls;
    }
    const double med = median(tps), med_cpu = median(cpu);
    if (k == 0) {
      plain_med = med;
      plain_cpu = med_cpu;
    }
    std::printf("%-12s tg %.2f tok/s (", mode_name(modes[k]), med);
    for (size_t i = 0; i < tps.size(); ++i) std::printf("%s%.2f", i ? ", " : "", tps[i]);
    std::printf("), decode thread CPU %.3f ms/tok", med_cpu);
    if (k > 0) {
      std::printf("\n             vs plain: tg %+.2f%%, decode thread CPU %+.2f%%; grammar %.1f us/tok CPU "
                  "(mask %.1f, min_completion_bytes %.2f); a min_completion_tokens call %.1f us; %d calls completed",
                  100.0 * (med / plain_med - 1.0), 100.0 * (med_cpu / plain_cpu - 1.0), median(gus), median(mus),
                  median(bus), median(qus), calls);
    }
    std::printf("\n");
  }
  return 0;
}
