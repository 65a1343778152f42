// picolm-agentbench (issue 27): replays a PicoClaw-layout agent session (tools/agent_session.h)
// against an OpenAI-compatible server over loopback HTTP, streaming, and prints per turn the prompt
// tokens, the cached tokens, the uncached share, the time to the first token, the total time and
// the replica that answered. --url talks to a running server (picolm-provider, HAProxy in front of
// replicas, llama.cpp's llama-server); --provider starts picolm-provider on a free loopback port
// (and restarts it with --restart-after, keeping its --cache-dir).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent_session.h"
#include "child_process.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using picolm::tools::AgentSessionOptions;
using picolm::tools::ChildOptions;
using picolm::tools::ChildProcess;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-agentbench (--url URL | --provider BIN -m MODEL [-- PROVIDER ARGS...]) [options]\n"
               "  --url URL             an OpenAI-compatible server: http://127.0.0.1:PORT (picolm-provider,\n"
               "                        HAProxy in front of replicas, llama.cpp's llama-server)\n"
               "  --provider BIN        start this picolm-provider on a free loopback port, stop it at the end;\n"
               "                        arguments after '--' go to it (e.g. -- -j 2 -c 8192)\n"
               "  -m, --model FILE      the model for --provider\n"
               "  --cache-dir DIR       --provider's prompt cache (default: a new directory under $TMPDIR or\n"
               "                        /tmp, removed at the end)\n"
               "  --restart-after N     with --provider: restart it after turn N (SIGTERM, then the same\n"
               "                        arguments and --cache-dir)\n"
               "  --turns N             turns of the session (default 8)\n"
               "  --minutes N           minutes the clock line advances per turn (default 3)\n"
               "  --frozen-clock        every turn shows the first turn's minute (the cache's best case)\n"
               "  --dynamic-at end|middle|start\n"
               "                        where the dynamic block sits in the system message (default end:\n"
               "                        PicoClaw's layout)\n"
               "  --sender-changes      the sender line alternates between two people (a group chat)\n"
               "  --summary             a CONTEXT_SUMMARY part after the dynamic block\n"
               "  --max-tokens N        max_tokens of each request (default 16)\n"
               "  --model-name NAME     the request's \"model\" (default local)\n"
               "  --timeout SEC         per-request read timeout (default 600)\n"
               "  --json                one JSON object per turn and one summary object, on stdout\n"
               "  --print-requests      print the session's request bodies, one per line, and exit\n"
               "Per turn: prompt tokens, cached tokens (usage.prompt_tokens_details.cached_tokens, else\n"
               "llama.cpp's timings.cache_n), uncached share (prompt - cached) / prompt, time to the first\n"
               "streamed token, total time, and the replica (X-Picolm-Instance header). The summary line has\n"
               "the median uncached share of turns 2..N. Exit status 1 if any turn failed.\n");
}

struct Options {
  std::string url, provider, model, cache_dir;
  std::vector<std::string> provider_args;
  int restart_after = 0;
  int timeout_sec = 600;
  bool json = false, print_requests = false;
  AgentSessionOptions session;
};

// ---- picolm-provider as a child process ---------------------------------------------------------

class Provider {
 public:
  // Starts BIN -m MODEL --host 127.0.0.1 --port 0 --cache-dir DIR ARGS...; the port comes from its
  // "listening on 127.0.0.1:PORT" stdout line, its stderr goes to `log`.
  bool start(const Options& o, const std::string& cache_dir, const std::string& log, std::string& why) {
    ChildOptions c;
    c.argv = {o.provider, "--host", "127.0.0.1", "--port", "0", "--cache-dir", cache_dir};
    if (!o.model.empty()) c.argv.insert(c.argv.end(), {"-m", o.model});
    c.argv.insert(c.argv.end(), o.provider_args.begin(), o.provider_args.end());
    c.stderr_log = log;
    child_ = std::make_unique<ChildProcess>();
    if (!child_->start(c, why)) return false;
    const auto within = std::chrono::minutes(10);  // a large model loads for a while
    port_ = child_->listening_port(within, why);
    if (port_ > 0 && child_->wait_healthy(port_, within, why)) return true;
    why += " (" + o.provider + "'s log: " + log + ")";
    stop();
    return false;
  }
  // SIGTERM (the provider drains: nothing is in flight between turns), then wait for it.
  void stop() {
    if (child_) child_->stop(SIGTERM);
    child_.reset();
  }
  ~Provider() { stop(); }
  int port() const { return port_; }

 private:
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
};

// ---- one streamed turn ----------------------------------------------------------------------------

struct TurnResult {
  int status = 0;           // HTTP status, 0 if no answer
  std::string error;        // what went wrong, "" if the turn was answered
  int64_t prompt_tokens = -1, cached_tokens = -1;
  double ttft_ms = 0, total_ms = 0;
  std::string replica;      // X-Picolm-Instance
  std::string finish_reason;
};

// Reads one SSE event's JSON ("data: {...}"): the first token's time, usage, llama.cpp's timings.
void read_event(simdjson::dom::parser& parser, const std::string& data, bool& first_seen, Clock::time_point& first,
                TurnResult& r) {
  simdjson::dom::element ev;
  if (parser.parse(data).get(ev) != simdjson::SUCCESS) return;
  simdjson::dom::array choices;
  if (ev["choices"].get(choices) == simdjson::SUCCESS && choices.size() > 0) {
    simdjson::dom::element c0 = choices.at(0);
    simdjson::dom::object delta;
    // A chunk that carries generated text, reasoning or a tool call: the first token has arrived.
    // (A role-only chunk does not count; some servers send one before the prefill ends.)
    if (!first_seen && c0["delta"].get(delta) == simdjson::SUCCESS) {
      bool has_token = false;
      for (const char* k : {"content", "reasoning_content"}) {
        std::string_view s;
        has_token = has_token || (delta[k].get(s) == simdjson::SUCCESS && !s.empty());
      }
      simdjson::dom::array calls;
      has_token = has_token || (delta["tool_calls"].get(calls) == simdjson::SUCCESS && calls.size() > 0);
      if (has_token) {
        first_seen = true;
        first = Clock::now();
      }
    }
    std::string_view fr;
    if (c0["finish_reason"].get(fr) == simdjson::SUCCESS) r.finish_reason = std::string(fr);
  }
  simdjson::dom::object usage;
  if (ev["usage"].get(usage) == simdjson::SUCCESS) {
    int64_t v = 0;
    if (usage["prompt_tokens"].get(v) == simdjson::SUCCESS) r.prompt_tokens = v;
    if (usage["prompt_tokens_details"]["cached_tokens"].get(v) == simdjson::SUCCESS) r.cached_tokens = v;
  }
  // llama.cpp's server: timings.cache_n (reused) and prompt_n (evaluated).
  simdjson::dom::object timings;
  if (ev["timings"].get(timings) == simdjson::SUCCESS) {
    int64_t cache_n = 0, prompt_n = 0;
    const bool has_cache = timings["cache_n"].get(cache_n) == simdjson::SUCCESS;
    const bool has_prompt = timings["prompt_n"].get(prompt_n) == simdjson::SUCCESS;
    if (has_cache && r.cached_tokens < 0) r.cached_tokens = cache_n;
    if (has_cache && has_prompt && r.prompt_tokens < 0) r.prompt_tokens = cache_n + prompt_n;
  }
}

TurnResult run_turn(const std::string& host, int port, const std::string& body, int timeout_sec) {
  TurnResult r;
  httplib::Client c(host, port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(timeout_sec, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string buffer, error_body;
  simdjson::dom::parser parser;
  bool first_seen = false, got_data = false;
  Clock::time_point first;
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    r.replica = res.get_header_value("X-Picolm-Instance");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (r.status != 200) {
      error_body.append(data, len);
      return true;
    }
    buffer.append(data, len);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      for (size_t at = 0; at < event.size();) {
        size_t nl = event.find('\n', at);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(at, nl - at);
        at = nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) != 0) continue;
        std::string payload = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
        if (payload == "[DONE]") continue;
        got_data = true;
        read_event(parser, payload, first_seen, first, r);
      }
    }
    return true;
  };
  const auto sent = Clock::now();
  auto res = c.send(req);
  const auto done = Clock::now();
  r.total_ms = ms_between(sent, done);
  r.ttft_ms = first_seen ? ms_between(sent, first) : r.total_ms;
  if (!res) {
    r.error = "no answer (" + httplib::to_string(res.error()) + ")";
  } else if (r.status != 200) {
    r.error = "HTTP " + std::to_string(r.status) + ": " + error_body.substr(0, 200);
  } else if (!got_data) {
    r.error = "no streamed events";
  } else if (r.prompt_tokens < 0) {
    r.error = "no usage in the stream";
  }
  return r;
}

// http://HOST:PORT[/] -> host, port. Plain HTTP only (loopback benchmarks).
bool parse_url(const std::string& url, std::string& host, int& port) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return false;
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find('/') != std::string::npos) return false;
  host = rest.substr(0, colon);
  port = std::atoi(rest.c_str() + colon + 1);
  return !host.empty() && port > 0 && port < 65536;
}

std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o;
  o.session.stream = true;
  auto need = [&](int& i) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "picolm-agentbench: %s needs a value\n", argv[i]);
      std::exit(2);
    }
    return argv[++i];
  };
  auto number = [&](int& i, int lo, int hi) {
    const char* name = argv[i];
    const char* v = need(i);
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || n < lo || n > hi) {
      std::fprintf(stderr, "picolm-agentbench: %s wants a number from %d to %d, got '%s'\n", name, lo, hi, v);
      std::exit(2);
    }
    return static_cast<int>(n);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    } else if (k == "--url") o.url = need(i);
    else if (k == "--provider") o.provider = need(i);
    else if (k == "-m" || k == "--model") o.model = need(i);
    else if (k == "--cache-dir") o.cache_dir = need(i);
    else if (k == "--restart-after") o.restart_after = number(i, 1, 1 << 20);
    else if (k == "--turns") o.session.turns = number(i, 1, 1000);
    else if (k == "--minutes") o.session.minutes_between_turns = number(i, 0, 100000);
    else if (k == "--frozen-clock") o.session.clock_frozen = true;
    else if (k == "--dynamic-at") {
      const std::string v = need(i);
      if (v == "end") o.session.at = AgentSessionOptions::DynamicAt::End;
      else if (v == "middle") o.session.at = AgentSessionOptions::DynamicAt::Middle;
      else if (v == "start") o.session.at = AgentSessionOptions::DynamicAt::Start;
      else {
        std::fprintf(stderr, "picolm-agentbench: --dynamic-at wants end, middle or start, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (k == "--sender-changes") o.session.sender_changes = true;
    else if (k == "--summary") o.session.with_summary = true;
    else if (k == "--max-tokens") o.session.max_tokens = number(i, 1, 1 << 20);
    else if (k == "--model-name") o.session.model = need(i);
    else if (k == "--timeout") o.timeout_sec = number(i, 1, 86400);
    else if (k == "--json") o.json = true;
    else if (k == "--print-requests") o.print_requests = true;
    else if (k == "--") {
      o.provider_args.assign(argv + i + 1, argv + argc);
      break;
    } else {
      std::fprintf(stderr, "picolm-agentbench: unknown option %s (see --help)\n", k.c_str());
      return 2;
    }
  }

  const auto turns = picolm::tools::make_agent_session(o.session);
  if (o.print_requests) {
    for (const auto& t : turns) std::printf("%s\n", t.request_json.c_str());
    return 0;
  }
  if (o.url.empty() == o.provider.empty()) {
    std::fprintf(stderr, "picolm-agentbench: give either --url or --provider (see --help)\n");
    return 2;
  }
  if (o.restart_after > 0 && o.provider.empty()) {
    std::fprintf(stderr, "picolm-agentbench: --restart-after needs --provider\n");
    return 2;
  }

  std::string host = "127.0.0.1";
  int port = 0;
  Provider provider;
  std::string work_dir;  // ours to remove: the default cache directory and the provider's log
  if (!o.url.empty()) {
    if (!parse_url(o.url, host, port)) {
      std::fprintf(stderr, "picolm-agentbench: --url wants http://HOST:PORT, got '%s'\n", o.url.c_str());
      return 2;
    }
  } else {
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
                       "/picolm-agentbench.XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "picolm-agentbench: cannot create a directory from %s\n", tmpl.c_str());
      return 1;
    }
    work_dir = tmpl;
    if (o.cache_dir.empty()) o.cache_dir = work_dir + "/cache";
    std::string why;
    if (!provider.start(o, o.cache_dir, work_dir + "/provider.log", why)) {
      std::fprintf(stderr, "picolm-agentbench: %s\n", why.c_str());
      return 1;  // the log stays for reading
    }
    port = provider.port();
  }

  if (!o.json)
    std::printf("%4s %7s %7s %8s %10s %10s  %s\n", "turn", "prompt", "cached", "uncached", "ttft_ms", "total_ms",
                "replica");
  bool failed = false;
  std::vector<double> shares;  // uncached share of turns 2..N
  for (size_t k = 0; k < turns.size(); ++k) {
    const TurnResult r = run_turn(host, port, turns[k].request_json, o.timeout_sec);
    const bool ok = r.error.empty();
    failed = failed || !ok;
    const double share = ok && r.prompt_tokens > 0 && r.cached_tokens >= 0
                             ? double(r.prompt_tokens - r.cached_tokens) / double(r.prompt_tokens)
                             : -1;
    if (k > 0 && share >= 0) shares.push_back(share);
    if (o.json) {
      std::printf("{\"turn\":%zu,\"ok\":%s,\"status\":%d,\"prompt_tokens\":%lld,\"cached_tokens\":%lld,"
                  "\"uncached_share\":%s,\"ttft_ms\":%s,\"total_ms\":%s,\"replica\":%s,\"finish_reason\":%s",
                  k + 1, ok ? "true" : "false", r.status, static_cast<long long>(r.prompt_tokens),
                  static_cast<long long>(r.cached_tokens), share >= 0 ? json_number(share).c_str() : "null",
                  json_number(r.ttft_ms).c_str(), json_number(r.total_ms).c_str(),
                  picolm::tools::json_string(r.replica).c_str(), picolm::tools::json_string(r.finish_reason).c_str());
      if (!ok) std::printf(",\"error\":%s", picolm::tools::json_string(r.error).c_str());
      std::printf("}\n");
    } else if (ok) {
      std::printf("%4zu %7lld %7lld %8s %10.1f %10.1f  %s\n", k + 1, static_cast<long long>(r.prompt_tokens),
                  static_cast<long long>(r.cached_tokens), share >= 0 ? json_number(share).c_str() : "-", r.ttft_ms,
                  r.total_ms, r.replica.empty() ? "-" : r.replica.c_str());
    } else {
      std::printf("%4zu FAILED: %s\n", k + 1, r.error.c_str());
    }
    std::fflush(stdout);
    if (o.restart_after > 0 && static_cast<int>(k + 1) == o.restart_after && k + 1 < turns.size()) {
      provider.stop();
      std::string why;
      if (!provider.start(o, o.cache_dir, work_dir + "/provider.log", why)) {
        std::fprintf(stderr, "picolm-agentbench: restart after turn %zu: %s\n", k + 1, why.c_str());
        return 1;
      }
      port = provider.port();
      if (!o.json) std::printf("     (provider restarted, same --cache-dir)\n");
    }
  }
  const double med = median(shares);
  if (o.json) {
    std::printf("{\"summary\":true,\"turns\":%zu,\"failed\":%s,\"median_uncached_share_turns_2_to_n\":%s}\n",
                turns.size(), failed ? "true" : "false", med >= 0 ? json_number(med).c_str() : "null");
  } else {
    std::printf("median uncached share, turns 2..%zu: %s%s\n", turns.size(), med >= 0 ? json_number(med).c_str() : "-",
                failed ? " (some turns FAILED)" : "");
  }
  provider.stop();
  if (!work_dir.empty() && !failed) {
    std::error_code ec;
    fs::remove_all(work_dir, ec);
  }
  return failed ? 1 : 0;
}
