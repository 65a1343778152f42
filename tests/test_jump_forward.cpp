// Jump-forward decoding (issue 17 item 3), black-box over loopback: at temperature 0 the replies
// with --jump-forward on (forced runs evaluated as one batch item) are byte-identical to `step`
// (the same canonical forced tokens, one per step), alone and with several slots busy; every call
// validates (python3-jsonschema, not the grammar that made them); `on` evaluates fewer decode
// steps; `off` (every token sampled) still validates.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server.h"
#include "server_fixture.h"

using namespace picolm;
namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());  // a missing input fails the test
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using server_fixture::client;
using server_fixture::kHouseTools;
using server_fixture::Started;

Started start_server(const std::string& model, JumpForward jump, int parallel) {
  REQUIRE(fs::exists(model));
  ServerOptions o;
  o.engine.model_path = model;
  o.engine.threads = 1;
  o.engine.n_ctx = 2048;
  o.engine.parallel = parallel;
  o.engine.cache_ram_mb = 0;  // every request prefills alike in every mode
  o.engine.timeout_sec = 300.0;
  o.engine.jump_forward = jump;
  return server_fixture::start(std::move(o));
}

std::string str(dom::element e) { return std::string(std::string_view(e)); }

struct Reply {
  int status = 0;  // -1: no response
  std::string body;
  // Parsed (status 200):
  std::string content;  // "" when null
  std::vector<std::pair<std::string, std::string>> calls;  // (name, arguments)
  std::string finish;
  int64_t completion_tokens = 0;
};

// No assertions: runs on client threads too.
Reply post(int port, const std::string& body) {
  Reply r;
  auto res = client(port)->Post("/v1/chat/completions", body, "application/json");
  if (!res) {
    r.status = -1;
    return r;
  }
  r.status = res->status;
  r.body = res->body;
  return r;
}

void parse(Reply& r) {
  INFO(r.body);
  REQUIRE(r.status == 200);
  dom::parser parser;
  dom::element root;
  REQUIRE(!parser.parse(r.body).get(root));
  dom::element msg = root["choices"].at(0)["message"], v;
  if (!msg["content"].get(v) && v.is_string()) r.content = str(v);
  if (!msg["tool_calls"].get(v) && v.is_array())
    for (dom::element tc : dom::array(v)) r.calls.emplace_back(str(tc["function"]["name"]), str(tc["function"]["arguments"]));
  r.finish = str(root["choices"].at(0)["finish_reason"]);
  r.completion_tokens = int64_t(root["usage"]["completion_tokens"]);
}

double metric(int port, const std::string& name) {
  auto res = client(port)->Get("/metrics");
  REQUIRE(res);
  std::istringstream in(res->body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  FAIL("metric " << name << " missing");
  return -1;
}

const char* const kRecordSchema =
    R"({"type":"object","properties":{"kind":{"const":"record"},"count":{"type":"integer","minimum":0,"maximum":99},"done":{"type":"boolean"}},"required":["kind","count","done"],"additionalProperties":false})";

struct Request {
  std::string tools;  // "" = a response_format request
  std::string body;
};

std::string chat(const std::string& user, const std::string& extra) {
  return R"({"model":"x","messages":[{"role":"system","content":"You are a helpful agent."},{"role":"user","content":")" +
         user + R"("}],"temperature":0,)" + extra + "}";
}

std::vector<Request> requests() {
  const std::string picoclaw = read_text(kShared + "/tool-lists/picoclaw-like-tools.json");
  std::vector<Request> out;
  const char* users[] = {"What is the weather in Oslo?", "List the files in /tmp", "Turn on the kitchen light"};
  for (const char* u : users) {
    out.push_back({picoclaw, chat(u, R"("tools":)" + picoclaw + R"(,"tool_choice":"required","max_tokens":160)")});
    out.push_back({kHouseTools, chat(u, R"("tools":)" + kHouseTools + R"(,"tool_choice":"required","max_tokens":80)")});
  }
  // A named tool: the envelope and the name are forced from the first token.
  out.push_back({picoclaw, chat("Weather please", R"("tools":)" + picoclaw +
                                    R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"max_tokens":100)")});
  // Parallel calls.
  out.push_back({kHouseTools, chat("Lights and volume", R"("tools":)" + kHouseTools +
                                       R"(,"tool_choice":"required","parallel_tool_calls":true,"max_tokens":120)")});
  // response_format: required keys in order, a constant.
  out.push_back({"", chat("A record", R"("max_tokens":80,"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":)" +
                                          std::string(kRecordSchema) + "}}")});
  // logprobs: forced tokens are reported too (logprob 0, themselves as the only top entry).
  out.push_back({kHouseTools, chat("Volume up", R"("tools":)" + kHouseTools +
                                        R"(,"tool_choice":"required","logprobs":true,"top_logprobs":2,"max_tokens":60)")});
  // A tight budget: the jump must leave the closing mode room to finish.
  out.push_back({picoclaw, chat("Edit a file", R"("tools":)" + picoclaw +
                                    R"(,"tool_choice":{"type":"function","function":{"name":"edit_file"}},"max_tokens":40)")});
  return out;
}

struct ModeRun {
  std::vector<Reply> alone, together;
  double steps = 0, forced = 0, tokens = 0;  // metric deltas over the `alone` requests
};

ModeRun run_mode(const std::string& model, JumpForward jump, const std::vector<Request>& reqs, bool together) {
  Started s = start_server(model, jump, 3);
  ModeRun r;
  const double steps0 = metric(s.port, "picolm_decode_steps_total");
  const double forced0 = metric(s.port, "picolm_jump_forward_tokens_total");
  const double tokens0 = metric(s.port, "picolm_completion_tokens_total");
  for (const Request& q : reqs) {
    r.alone.push_back(post(s.port, q.body));
    parse(r.alone.back());
  }
  r.steps = metric(s.port, "picolm_decode_steps_total") - steps0;
  r.forced = metric(s.port, "picolm_jump_forward_tokens_total") - forced0;
  r.tokens = metric(s.port, "picolm_completion_tokens_total") - tokens0;
  if (together) {
    // Three at a time, admitted together, so forced runs share batches with other slots' tokens.
    for (size_t b = 0; b < reqs.size(); b += 3) {
      const size_t n = std::min<size_t>(3, reqs.size() - b);
      s.engine->set_paused(true);
      std::vector<Reply> got(n);
      std::vector<std::thread> threads;
      for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { got[i] = post(s.port, reqs[b + i].body); });
      bool queued = false;
      for (int k = 0; k < 6000 && !queued; ++k) {
        queued = s.engine->queue_depth() == n;
        if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      s.engine->set_paused(false);
      for (auto& t : threads) t.join();
      REQUIRE(queued);
      for (auto& g : got) {
        parse(g);
        r.together.push_back(std::move(g));
      }
    }
  }
  return r;
}

void check_and_validate(const std::vector<Request>& reqs, const std::vector<Reply>& replies) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> sets;
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << ": " << replies[i].body);
    if (reqs[i].tools.empty()) {
      // The response_format answer validates against its schema: given to the validator as the
      // arguments of a tool whose parameters are that schema.
      CHECK(replies[i].finish == "stop");
      sets.push_back({R"([{"type":"function","function":{"name":"record","parameters":)" + std::string(kRecordSchema) + "}}]",
                      {{"record", replies[i].content}}});
    } else {
      CHECK(replies[i].calls.size() >= 1);
      CHECK(replies[i].finish == "tool_calls");
      sets.push_back({reqs[i].tools, replies[i].calls});
    }
  }
  server_fixture::validate_tool_calls(sets);
}

}  // namespace

TEST_CASE("jump-forward: on and step give byte-identical replies; on takes fewer steps", "[server][jump]") {
  signal(SIGPIPE, SIG_IGN);
  // Qwen2.5's template and vocabulary in full; Qwen3 (thinking first, then the answer's grammar)
  // for on / step alone, to keep the test's time down.
  for (const char* name : {"qwen2-bpe-q4km.gguf", "qwen3-bpe-q4km.gguf"}) {
    const bool full = std::string(name) == "qwen2-bpe-q4km.gguf";
    const std::string model = kShared + "/models/" + name;
    INFO(name);
    const std::vector<Request> reqs = requests();
    const ModeRun step = run_mode(model, JumpForward::Step, reqs, false);
    const ModeRun on = run_mode(model, JumpForward::On, reqs, full);
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i << "\nstep: " << step.alone[i].body << "\non:   " << on.alone[i].body);
      CHECK(on.alone[i].content == step.alone[i].content);
      CHECK(on.alone[i].calls == step.alone[i].calls);
      CHECK(on.alone[i].finish == step.alone[i].finish);
      CHECK(on.alone[i].completion_tokens == step.alone[i].completion_tokens);
      // logprobs (null unless asked): the same entries, sampled and forced.
      const auto logprobs = [](const std::string& body) {
        const size_t from = body.find("\"logprobs\":");
        return from == std::string::npos ? std::string() : body.substr(from, body.find("\"finish_reason\"", from) - from);
      };
      CHECK(logprobs(on.alone[i].body) == logprobs(step.alone[i].body));
      if (reqs[i].body.find("\"logprobs\":true") != std::string::npos) {
        // One entry per completion token; the forced ones (the call's opening at least) with logprob 0.
        const std::string lp = logprobs(on.alone[i].body);
        size_t entries = 0;
        for (size_t p = lp.find("\"bytes\""); p != std::string::npos; p = lp.find("\"bytes\"", p + 1)) ++entries;
        INFO(lp);
        CHECK(lp.find("\"logprob\":0,") != std::string::npos);
        CHECK(entries > 0);
      }
      if (!full) continue;
      // Several slots busy: the same bytes.
      CHECK(on.together[i].content == on.alone[i].content);
      CHECK(on.together[i].calls == on.alone[i].calls);
    }
    check_and_validate(reqs, on.alone);
    // The same tokens, the same forced ones; on evaluates each forced run in one step.
    CHECK(on.tokens == step.tokens);
    CHECK(on.forced == step.forced);
    CHECK(step.forced > 0);
    CHECK(step.steps == step.tokens);  // one evaluation per token
    CHECK(on.steps < step.steps - double(reqs.size()));  // at least a run saved per request
    WARN(name << ": tokens " << on.tokens << ", forced " << on.forced << ", decode steps on " << on.steps << " step "
              << step.steps);

    if (!full) continue;
    // Off: every token sampled; still valid.
    const ModeRun off = run_mode(model, JumpForward::Off, reqs, false);
    check_and_validate(reqs, off.alone);
    CHECK(off.forced == 0);
    CHECK(off.steps == off.tokens);
  }
}
