// picolm-provider: the OpenAI-compatible HTTP server. See provider/server.h for the endpoints.
#include <malloc.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "cli_common.h"
#include "prompt_cache.h"
#include "server.h"

using namespace picolm;

namespace {

void usage(FILE* out) {
  std::fprintf(out,
      "usage: picolm-provider [-m MODEL | --hf OWNER/REPO/FILE.gguf] [options]\n"
      "  -m, --model FILE        GGUF model (default: the built-in demo model, <bindir>/../demo/picolm-demo.gguf)\n"
      "  --hf OWNER/REPO/FILE    download the model from $HF_ENDPOINT (default https://huggingface.co) into\n"
      "                          $PICOLM_MODELS (default ~/.cache/picolm/models), or reuse it from there;\n"
      "                          resumes an interrupted download; HF_TOKEN for gated repositories\n"
      "  --list-models           print recommended models for --hf and exit\n"
      "  --host ADDR             listen address (default 127.0.0.1)\n"
      "  --port N                port (default 8080; 0 = any free port)\n"
      "  -j, --threads N         engine threads (default: physical cores)\n"
      "  -c, --ctx-size N        context size of each slot (default: min(training context, 4096))\n"
      "  -np, --parallel N       slots: requests generating at once, each with its own KV cache of\n"
      "                          --ctx-size tokens, evaluated together in one batch per step (default 0 =\n"
      "                          as many as fit in half the available RAM, at most 4; printed at start)\n"
      "  --prefill-chunk N       prompt tokens per step for a new request while others stream (default 32)\n"
      "  --context-overflow drop-oldest|error\n"
      "                          a conversation whose prompt and reply do not fit the context: drop its\n"
      "                          oldest turns, keeping the system prompt and the last user turn, and say\n"
      "                          so in the response (default drop-oldest), or answer 400\n"
      "  --repack auto|on|off    repack the weights at load for the fast kernels (default auto: on where\n"
      "                          the CPU has them and the model is under half the RAM)\n"
      "  --api-key KEY           require Authorization: Bearer KEY\n"
      "  --cors ORIGIN[,ORIGIN]  let browser pages from these origins call the API ('*' = any): answers\n"
      "                          preflight OPTIONS, Access-Control-Allow-Origin on every response (default off)\n"
      "  --chat-template NAME    override the detected chat template (chatml, qwen2.5, hermes, llama3.1,\n"
      "                          llama3.2, zephyr, mistral-nemo, gemma2, phi3.5, deepseek-r1, qwen3, smollm3,\n"
      "                          gemma3, qwen3.5, lfm2, lfm2.5, gemma4, phi4-mini, granite4): render that\n"
      "                          family's reference template\n"
      "  --chat-template-file FILE  render this Jinja chat template instead of the GGUF's own (its family\n"
      "                          is detected from the text; unrecognised: calls through the JSON envelope)\n"
      "  --reasoning auto|on|off thinking when a request does not say (enable_thinking, thinking,\n"
      "                          reasoning or reasoning_effort); auto = the template's default\n"
      "                          (Qwen3, SmolLM3 think). Reasoning is returned in reasoning_content\n"
      "  --jump-forward on|off|step\n"
      "                          where the grammar forces the next bytes (tool-call keys, a tool name once\n"
      "                          its prefix is unique, closing braces), write them in the model's own tokens\n"
      "                          and evaluate them as one batch (default on); step: the same tokens one per\n"
      "                          step (for comparison); off: sample every token\n"
      "  --volatile-context on|off\n"
      "                          move the volatile lines of a system message (a clock, a date, a sender:\n"
      "                          lines that change while the rest stays) into a <current_context> note on\n"
      "                          the latest message, so the system prompt, tools and history stay cached\n"
      "                          (default on; off renders the messages as sent)\n"
      "  --log-level LEVEL       debug|info|warn|error (default info); debug logs each evaluated prompt\n"
      "  --max-queue N           requests waiting for a free slot before 429 (default 16)\n"
      "  --timeout SEC           per-request limit incl. queue wait, then finish_reason length (default 110)\n"
      "  --max-body-mb N         largest request body (default 8)\n"
      "  --cache-dir DIR         prompt cache on disk (default $XDG_CACHE_HOME/picolm or ~/.cache/picolm;\n"
      "                          'none' keeps the cache in RAM only)\n"
      "  --cache-max-mb N        disk budget of the prompt cache (default 1024)\n"
      "  --cache-ram-mb N        RAM budget of the prompt cache (default 256)\n"
      "  --grammar-cache-mb N    compiled JSON-schema/tool grammars kept in RAM (default 64)\n"
      "  --property-order schema|any\n"
      "                          order of generated object properties: the schema's (default; cheaper\n"
      "                          masks, the order templates show) or any (docs/GRAMMAR.md)\n"
      "  --warm FILE             a chat request (JSON) whose prompt is prefilled at start-up\n"
      "  --model-id NAME         the id /v1/models reports (default: the file name)\n"
      "  --instance-id NAME      this replica's name in log lines, /health, /metrics and the X-Picolm-Instance\n"
      "                          header (default HOST:PORT, the host name for 0.0.0.0)\n"
      "  --drain-timeout SEC     on SIGTERM/SIGINT: /health and new requests answer 503 while accepted ones\n"
      "                          finish, for at most SEC seconds, then the rest is cancelled (default 60;\n"
      "                          0 = stop at once; a second signal also stops at once)\n"
      "  --version               print version, git commit and the CPU features in use, and exit\n"
      "  -h, --help\n");
}

bool to_long(const char* s, long lo, long hi, long& out) {
  char* end = nullptr;
  out = std::strtol(s, &end, 10);
  return end && *end == '\0' && end != s && out >= lo && out <= hi;
}

std::string default_model_path(const char* argv0) {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) exe = std::filesystem::absolute(argv0, ec);
  return (exe.parent_path() / ".." / "demo" / "picolm-demo.gguf").lexically_normal().string();
}

// PICOLM_TEST_HOLD_CACHE_WRITE=DIR, for fault tests only (picolm-loadtest's kill phase): lets a
// test stop the prompt cache's writer inside a write, so that its kill -9 lands there every time
// instead of racing the write. Inert unless DIR/arm exists when a cache file is being written. Then
// DIR/arm holds N, the writes to let pass first: while N > 0 the file is rewritten with N - 1;
// at N = 0 it is removed, DIR/held appears (atomically, holding the temporary file's path) and the
// writer waits, its temporary file partly written (the header) and not renamed, until DIR/held is
// removed. The protocol lives in the file system, so the hook keeps no state of its own.
std::function<void(std::string_view, uint64_t)> hold_cache_write_hook(std::string dir) {
  return [dir = std::move(dir)](std::string_view temp_path, uint64_t) {
    const std::string arm = dir + "/arm", held = dir + "/held";
    auto write_atomically = [](const std::string& path, const std::string& text) {
      const std::string tmp = path + ".provider-new";  // not the name a test writes its arm file by
      FILE* f = std::fopen(tmp.c_str(), "w");
      if (!f) return false;
      const bool ok = std::fputs(text.c_str(), f) >= 0;
      return std::fclose(f) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0;
    };
    FILE* f = std::fopen(arm.c_str(), "r");
    if (!f) return;  // not armed
    long pass = 0;
    if (std::fscanf(f, "%ld", &pass) != 1) pass = 0;
    std::fclose(f);
    if (pass > 0) {
      write_atomically(arm, std::to_string(pass - 1));
      return;
    }
    std::remove(arm.c_str());
    if (!write_atomically(held, std::string(temp_path) + "\n")) {
      spdlog::warn("PICOLM_TEST_HOLD_CACHE_WRITE: cannot create {}; not holding", held);
      return;
    }
    spdlog::warn("PICOLM_TEST_HOLD_CACHE_WRITE: holding the write of {} until {} is removed", temp_path, held);
    while (::access(held.c_str(), F_OK) == 0) {
      const timespec ten_ms{0, 10'000'000};
      ::nanosleep(&ten_ms, nullptr);
    }
  };
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // glibc gives every thread that allocates under contention a heap arena of its own, up to 8 per
  // core, and keeps each arena's high-water mark: after a connection flood, many connection
  // threads that once parsed a large body held 1.1 GB between them (issue 28). Two arenas (the
  // engine worker and the HTTP threads rarely allocate at once) keep what stays resident to the
  // budgets printed at start-up (docs/RELIABILITY.md "Memory"). Set before any thread starts.
  mallopt(M_ARENA_MAX, 2);
#endif
  // Logs go to stderr; stdout carries only the "listening on HOST:PORT" line (for scripts).
  spdlog::set_default_logger(spdlog::stderr_color_mt("picolm"));
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows raw model output
  ServerOptions o;
  o.engine.max_queue = 16;
  bool cache_dir_given = false;
  std::string hf;
  long drain_timeout_sec = 60;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "picolm-provider: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&](long lo, long hi) -> long {
      const char* v = val();
      long n = 0;
      if (!to_long(v, lo, hi, n)) {
        std::fprintf(stderr, "picolm-provider: %s: '%s' is not a number in [%ld, %ld]\n", k.c_str(), v, lo, hi);
        std::exit(2);
      }
      return n;
    };
    if (k == "-h" || k == "--help") { usage(stdout); return 0; }
    else if (k == "--version") { std::fputs(cli::version_text("picolm-provider").c_str(), stdout); return 0; }
    else if (k == "--list-models") { cli::print_recommended_models(stdout); return 0; }
    else if (k == "--hf") hf = val();
    else if (k == "-m" || k == "--model") o.engine.model_path = val();
    else if (k == "--host") o.host = val();
    else if (k == "--port") o.port = static_cast<int>(num(0, 65535));
    else if (k == "-j" || k == "--threads") o.engine.threads = static_cast<int>(num(1, 1024));
    else if (k == "-c" || k == "--ctx-size") o.engine.n_ctx = static_cast<int>(num(0, 1 << 24));
    else if (k == "-np" || k == "--parallel") o.engine.parallel = static_cast<int>(num(0, 256));
    else if (k == "--prefill-chunk") o.engine.prefill_chunk = static_cast<int>(num(2, 1 << 16));
    else if (k == "--context-overflow") {
      const char* v = val();
      const auto c = parse_context_overflow(v);
      if (!c) {
        std::fprintf(stderr, "picolm-provider: --context-overflow takes drop-oldest or error, not '%s'\n", v);
        return 2;
      }
      o.engine.context_overflow = *c;
    }
    else if (k == "--repack") {
      const char* v = val();
      const auto r = parse_repack(v);
      if (!r) {
        std::fprintf(stderr, "picolm-provider: --repack takes auto, on or off, not '%s'\n", v);
        return 2;
      }
      o.engine.repack = *r;
    }
    else if (k == "--api-key") o.api_key = val();
    else if (k == "--cors") {
      const std::string v = val();
      for (size_t start = 0; start <= v.size();) {
        const size_t comma = std::min(v.find(',', start), v.size());
        if (comma > start) o.cors_origins.push_back(v.substr(start, comma - start));
        start = comma + 1;
      }
      if (o.cors_origins.empty()) {
        std::fprintf(stderr, "picolm-provider: --cors takes ORIGIN[,ORIGIN] ('*' = any)\n");
        return 2;
      }
    }
    else if (k == "--chat-template") o.engine.chat_template = val();
    else if (k == "--chat-template-file") o.engine.chat_template_file = val();
    else if (k == "--reasoning") {
      const char* v = val();
      const auto r = reasoning_mode_from_name(v);
      if (!r) {
        std::fprintf(stderr, "picolm-provider: --reasoning takes auto, on or off, not '%s'\n", v);
        return 2;
      }
      o.engine.reasoning = *r;
    }
    else if (k == "--jump-forward") {
      const char* v = val();
      const auto j = parse_jump_forward(v);
      if (!j) {
        std::fprintf(stderr, "picolm-provider: --jump-forward takes on, off or step, not '%s'\n", v);
        return 2;
      }
      o.engine.jump_forward = *j;
    }
    else if (k == "--volatile-context") {
      const std::string v = val();
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "picolm-provider: --volatile-context takes on or off, not '%s'\n", v.c_str());
        return 2;
      }
      o.engine.volatile_context = v == "on";
    }
    else if (k == "--log-level") {
      const std::string v = val();
      const spdlog::level::level_enum lv = spdlog::level::from_str(v);
      if (lv == spdlog::level::off && v != "off") {
        std::fprintf(stderr, "picolm-provider: --log-level takes debug, info, warn or error, not '%s'\n", v.c_str());
        return 2;
      }
      spdlog::set_level(lv);
    }
    else if (k == "--max-queue") o.engine.max_queue = static_cast<size_t>(num(0, 1 << 20));
    else if (k == "--timeout") o.engine.timeout_sec = static_cast<double>(num(1, 1 << 24));
    else if (k == "--max-body-mb") o.max_body_bytes = static_cast<size_t>(num(1, 4096)) << 20;
    else if (k == "--cache-dir") {
      o.engine.cache_dir = val();
      cache_dir_given = true;
    }
    else if (k == "--cache-max-mb") o.engine.cache_max_mb = static_cast<size_t>(num(0, 1 << 24));
    else if (k == "--cache-ram-mb") o.engine.cache_ram_mb = static_cast<size_t>(num(0, 1 << 24));
    else if (k == "--grammar-cache-mb") o.engine.grammar_cache_mb = static_cast<size_t>(num(0, 1 << 20));
    else if (k == "--property-order") {
      const std::string v = val();
      if (v != "schema" && v != "any") {
        std::fprintf(stderr, "picolm-provider: --property-order takes schema or any, not '%s'\n", v.c_str());
        return 2;
      }
      o.engine.property_order = v == "any" ? grammar::PropertyOrder::Any : grammar::PropertyOrder::Schema;
    }
    else if (k == "--warm") o.warm_file = val();
    else if (k == "--model-id") o.engine.model_id = val();
    else if (k == "--instance-id") o.instance_id = val();
    else if (k == "--drain-timeout") drain_timeout_sec = num(0, 1 << 24);
    else {
      std::fprintf(stderr, "picolm-provider: unknown option '%s'\n", k.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (!o.warm_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.warm_file, ec)) {
      std::fprintf(stderr, "picolm-provider: --warm takes a chat request file (JSON); '%s' is not a regular file\n",
                   o.warm_file.c_str());
      return 2;
    }
  }
  if (!cache_dir_given) o.engine.cache_dir = PromptCacheStore::default_dir();
  if (const char* hold = std::getenv("PICOLM_TEST_HOLD_CACHE_WRITE"); hold && *hold)
    o.engine.cache_inside_write = hold_cache_write_hook(hold);
  if (o.engine.cache_dir == "none") o.engine.cache_dir.clear();
  if (!hf.empty()) {
    if (!o.engine.model_path.empty()) {
      std::fprintf(stderr, "picolm-provider: give -m or --hf, not both\n");
      return 2;
    }
    auto path = cli::fetch_hf_model("picolm-provider", hf);
    if (!path) {
      std::fprintf(stderr, "picolm-provider: %s\n", path.error().c_str());
      return 1;
    }
    o.engine.model_path = *path;
  }
  if (o.engine.model_path.empty()) {
    o.engine.model_path = default_model_path(argv[0]);
    if (!std::filesystem::exists(o.engine.model_path)) {
      std::fprintf(stderr, "picolm-provider: no -m MODEL given and the built-in demo model %s is missing\n",
                   o.engine.model_path.c_str());
      return 2;
    }
    spdlog::info("no -m given: serving the built-in demo model {} (random weights: noise text, valid tool calls)",
                 o.engine.model_path);
  }

  // SIGPIPE: a client that disconnects mid-stream must end its request, not the process.
  // SIGINT/SIGTERM: handled synchronously below (sigwait) so shutdown runs in normal code.
  signal(SIGPIPE, SIG_IGN);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // threads started from here on inherit the mask

  Server server(o);
  auto port = server.start();
  if (!port.ok()) {
    spdlog::error("{}", port.error());
    return 1;
  }
  // Every line from here on names the replica, so the logs of several can be merged.
  std::string id_pattern;
  for (char c : server.instance_id()) id_pattern += c == '%' ? std::string("%%") : std::string(1, c);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [picolm " + id_pattern + "] [%^%l%$] %v");
  // "listening on HOST:PORT" is printed once, on stdout, where scripts that ask for --port 0 read
  // it; the log line says the rest without repeating it (issue 15 item 10).
  spdlog::info("picolm-provider: OpenAI API at http://{}:{}/v1 (model loading: /health says 503 until ready)",
               o.host, port.value());
  std::printf("listening on %s:%d\n", o.host.c_str(), port.value());
  std::fflush(stdout);

  std::atomic<bool> load_failed{false};
  std::thread load_watch([&server, &load_failed] {
    Status st = server.wait_loaded();
    if (!st.ok() && st.error() != "stopped") {
      spdlog::error("exiting: {}", st.error());
      load_failed = true;
      kill(getpid(), SIGTERM);
    }
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  if (!load_failed) {
    // Graceful drain (rolling restarts behind a proxy): /health and new requests answer 503, so the
    // proxy sends them elsewhere, while the requests already taken finish within the bound.
    server.begin_drain();
    spdlog::info("signal {}: draining: {} request(s) to finish (at most {} s; a second signal stops at once)", sig,
                 server.in_flight(), drain_timeout_sec);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain_timeout_sec);
    while (!server.wait_drained(std::chrono::milliseconds(100))) {
      const timespec poll_now{0, 0};
      if (sigtimedwait(&sigs, nullptr, &poll_now) > 0) {
        spdlog::warn("second signal: stopping now, cancelling {} request(s)", server.in_flight());
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::warn("drain timeout ({} s): cancelling {} request(s)", drain_timeout_sec, server.in_flight());
        break;
      }
    }
  }
  spdlog::info("shutting down");
  server.stop();
  load_watch.join();
  spdlog::info("stopped");
  return load_failed ? 1 : 0;
}
