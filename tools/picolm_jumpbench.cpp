// picolm-jumpbench: time per tool call with jump-forward decoding off, step and on (issue 17
// item 3).
//
// One Engine (the provider's scheduler, no HTTP), one slot. Each request is a chat with the given
// tools, tool_choice required, temperature 0; its mode is set on the job (Job::jump_forward), so
// the three modes run interleaved in one process on one model: per round and prompt, off, step and
// on in a rotating order. The slot keeps its KV between requests, so after the first request of a
// prompt only the prompt's last token is evaluated again: the time is the call's decode, as for an
// agent whose system prompt and tools are cached. Reported per mode: median wall time per call
// (submit to finish), decode steps, tokens and forced tokens per call; and whether `on` and `step`
// gave the same calls (they must, at temperature 0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "metrics.h"
#include "openai.h"
#include "scheduler.h"

using namespace picolm;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void usage() {
  std::fprintf(stderr,
               "usage: picolm-jumpbench -m MODEL --tools FILE [-j THREADS] [--rounds N] [--max-tokens N]\n"
               "                        [--chat-template NAME] [--prompt TEXT]...   (defaults: 3 rounds, 64 tokens)\n"
               "  Times tool calls (tool_choice required, temperature 0) with --jump-forward off, step and on,\n"
               "  interleaved in one process. Default prompts: five PicoClaw-like requests.\n");
}

struct Sample {
  double wall_ms = 0, decode_ms = 0;
  int64_t tokens = 0, steps = 0, forced = 0;
  std::string calls;  // name(arguments);... for the identity check
};

}  // namespace

int main(int argc, char** argv) {
  EngineOptions eo;
  eo.parallel = 1;
  eo.cache_ram_mb = 0;
  eo.n_ctx = 4096;
  std::string tools_path;
  int rounds = 3, max_tokens = 64;
  std::vector<std::string> prompts;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "-m") eo.model_path = val();
    else if (k == "--tools") tools_path = val();
    else if (k == "-j") eo.threads = std::atoi(val());
    else if (k == "--rounds") rounds = std::max(1, std::atoi(val()));
    else if (k == "--max-tokens") max_tokens = std::max(16, std::atoi(val()));
    else if (k == "--chat-template") eo.chat_template = val();
    else if (k == "--prompt") prompts.push_back(val());
    else {
      usage();
      return 2;
    }
  }
  if (eo.model_path.empty() || tools_path.empty()) {
    usage();
    return 2;
  }
  std::ifstream tf(tools_path);
  if (!tf) {
    std::fprintf(stderr, "picolm-jumpbench: cannot read %s\n", tools_path.c_str());
    return 1;
  }
  std::stringstream ts;
  ts << tf.rdbuf();
  const std::string tools = ts.str();
  if (prompts.empty())
    prompts = {"What is the weather in Oslo?", "List the files in /tmp", "Read the file notes.txt",
               "Search the web for the latest picoclaw release", "Remind me every day at 9 to drink water"};

  Metrics metrics;
  auto created = Engine::create(eo, metrics);
  if (!created.ok()) {
    std::fprintf(stderr, "picolm-jumpbench: %s\n", created.error().c_str());
    return 1;
  }
  Engine& engine = *created.value();
  std::printf("model %s, template family %d, tools %s, %d prompts x %d rounds, max_tokens %d\n",
              engine.description().c_str(), int(engine.family()), tools_path.c_str(), int(prompts.size()), rounds,
              max_tokens);

  const JumpForward modes[3] = {JumpForward::Off, JumpForward::Step, JumpForward::On};
  const char* mode_names[3] = {"off", "step", "on"};
  auto run = [&](const std::string& prompt, JumpForward mode, Sample& out) -> bool {
    std::string body = R"({"model":"x","messages":[{"role":"system","content":"You are PicoClaw, a helpful agent. Use the tools."},{"role":"user","content":")" +
                       prompt + R"("}],"temperature":0,"tool_choice":"required","parallel_tool_calls":false,"max_tokens":)" +
                       std::to_string(max_tokens) + R"(,"tools":)" + tools + "}";
    ChatRequest req;
    ApiError err;
    if (!parse_chat_request(body, req, err)) {
      std::fprintf(stderr, "picolm-jumpbench: bad request: %s\n", err.message.c_str());
      return false;
    }
    auto job = engine.prepare(req, err);
    if (!job) {
      std::fprintf(stderr, "picolm-jumpbench: %s\n", err.message.c_str());
      return false;
    }
    job->jump_forward = mode;
    const int64_t steps0 = metrics.decode_steps(), forced0 = metrics.jump_forward_tokens();
    const auto t0 = Clock::now();
    if (!engine.submit(job)) return false;
    std::vector<Delta> ignored;
    while (!job->wait(std::chrono::milliseconds(1000), ignored)) ignored.clear();
    out.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (job->failed()) {
      std::fprintf(stderr, "picolm-jumpbench: %s\n", job->error().c_str());
      return false;
    }
    const Completion& c = job->result();
    out.decode_ms = c.timings.predicted_ms;
    out.tokens = c.completion_tokens;
    out.steps = metrics.decode_steps() - steps0;
    out.forced = metrics.jump_forward_tokens() - forced0;
    out.calls.clear();
    for (const auto& call : c.tool_calls) out.calls += call.name + "(" + call.arguments_json + ");";
    return true;
  };

  // Warm-up (untimed): every prompt once, which also puts its prompt in the slot's KV.
  Sample s;
  for (const auto& p : prompts)
    if (!run(p, JumpForward::Off, s)) return 1;

  std::vector<Sample> samples[3];
  int identical = 0, compared = 0;
  for (int r = 0; r < rounds; ++r)
    for (size_t p = 0; p < prompts.size(); ++p) {
      std::string calls[3];
      for (int k = 0; k < 3; ++k) {
        const int m = (k + r + int(p)) % 3;  // rotate which mode goes first
        if (!run(prompts[p], modes[m], s)) return 1;
        samples[m].push_back(s);
        calls[m] = s.calls;
      }
      ++compared;
      identical += calls[1] == calls[2] ? 1 : 0;
      if (r == 0) std::printf("prompt %zu: %s\n", p, calls[2].c_str());
    }

  std::printf("\n| mode | median ms/call | median decode ms/call | decode steps/call | tokens/call | forced tokens/call |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  double off_ms = 0;
  for (int m = 0; m < 3; ++m) {
    std::vector<double> wall, dec, steps, toks, forced;
    for (const Sample& x : samples[m]) {
      wall.push_back(x.wall_ms);
      dec.push_back(x.decode_ms);
      steps.push_back(double(x.steps));
      toks.push_back(double(x.tokens));
      forced.push_back(double(x.forced));
    }
    auto mean = [](const std::vector<double>& v) {
      double t = 0;
      for (double x : v) t += x;
      return v.empty() ? 0.0 : t / double(v.size());
    };
    const double w = median(wall);
    if (m == 0) off_ms = w;
    std::printf("| %s | %.1f%s | %.1f | %.1f | %.1f | %.1f |\n", mode_names[m], w,
                m == 0 ? "" : (" (" + std::to_string(int(100.0 * w / off_ms + 0.5)) + "% of off)").c_str(), median(dec),
                mean(steps), mean(toks), mean(forced));
  }
  std::printf("\non and step gave identical calls in %d of %d comparisons\n", identical, compared);
  return identical == compared ? 0 : 3;
}
