// Parallel slots (issue 14, provider half), black-box over loopback: concurrent requests give the
// bytes they give alone (temperature 0), tool calls from concurrent slots validate (python3-
// jsonschema, not the grammar that made them), a slot freed by a disconnect is reused by a queued
// request while another keeps generating, a request cancelled in the queue counts no prefill (issue
// 15 item 9), and a conversation longer than the context drops its oldest whole turns.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <atomic>
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
#include "test_util.h"

using namespace picolm;
namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K.gguf";
const std::string kQwen = kShared + "/models/qwen2-bpe-q4km.gguf";

using server_fixture::client;
using server_fixture::Json;
using server_fixture::Started;
const std::string& kTools = server_fixture::kHouseTools;

Started start_server(const std::string& model, int n_ctx, int parallel,
                     ContextOverflow overflow = ContextOverflow::DropOldest, size_t cache_ram_mb = 64) {
  REQUIRE(fs::exists(model));  // a missing input file fails the test
  ServerOptions o;
  o.engine.model_path = model;
  o.engine.threads = 1;
  o.engine.n_ctx = n_ctx;
  o.engine.parallel = parallel;
  o.engine.max_queue = 16;
  o.engine.cache_ram_mb = cache_ram_mb;
  o.engine.timeout_sec = 300.0;
  o.engine.context_overflow = overflow;
  Started s = server_fixture::start(std::move(o));
  REQUIRE(s.engine->slots() == parallel);
  return s;
}

std::string str(dom::element e) { return std::string(std::string_view(e)); }

std::string chat_body(const std::string& extra, const std::string& user) {
  return R"({"model":"x","messages":[{"role":"system","content":"You control a house."},{"role":"user","content":")" +
         user + R"("}])" + (extra.empty() ? "" : "," + extra) + "}";
}

std::string metrics_text(int port) {
  auto res = client(port)->Get("/metrics");
  REQUIRE(res);
  return res->body;
}

// The value of the metric line that starts with `name` followed by a space ("" when absent).
std::string metric_line(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return line.substr(name.size() + 1);
  return "";
}

double metric(int port, const std::string& name) {
  const std::string v = metric_line(metrics_text(port), name);
  return v.empty() ? -1.0 : std::stod(v);
}

struct CallSeen {
  std::string name, arguments;
  bool operator==(const CallSeen& o) const { return name == o.name && arguments == o.arguments; }
};

// An SSE stream reassembled: content, tool calls, finish reason.
struct StreamResult {
  int status = 0;
  std::string content;
  std::vector<CallSeen> calls;
  std::string finish;
  bool done = false;
};

StreamResult parse_stream(const std::string& sse) {
  StreamResult r;
  std::istringstream in(sse);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    REQUIRE(line.rfind("data: ", 0) == 0);
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      r.done = true;
      continue;
    }
    Json j(data);
    dom::array choices = j.root["choices"];
    if (choices.size() == 0) continue;
    dom::element c = choices.at(0);
    dom::element delta = c["delta"], v;
    if (!delta["content"].get(v) && v.is_string()) r.content += str(v);
    if (!delta["tool_calls"].get(v)) {
      for (dom::element tc : dom::array(v)) {
        const size_t idx = size_t(int64_t(tc["index"]));
        if (r.calls.size() <= idx) r.calls.resize(idx + 1);
        dom::element f = tc["function"], x;
        if (!f["name"].get(x)) r.calls[idx].name += str(x);
        if (!f["arguments"].get(x)) r.calls[idx].arguments += str(x);
      }
    }
    if (!c["finish_reason"].is_null()) r.finish = str(c["finish_reason"]);
  }
  return r;
}

struct Raw {
  int status = 0;  // -1: no response
  std::string body;
};

// No assertions here: it runs on client threads (Catch2 assertions are for the main thread).
Raw post_stream_raw(int port, std::string body) {
  body.pop_back();
  body += R"(,"stream":true})";
  auto res = client(port)->Post("/v1/chat/completions", body, "application/json");
  return res ? Raw{res->status, res->body} : Raw{-1, ""};
}

StreamResult parsed(const Raw& raw) {
  StreamResult r;
  if (raw.status == 200) r = parse_stream(raw.body);
  r.status = raw.status;
  return r;
}

StreamResult post_stream(int port, std::string body) { return parsed(post_stream_raw(port, std::move(body))); }

// Waits (bounded) until `pred` holds; false if it never did.
template <class Pred>
bool eventually(Pred pred, int ms = 30000) {
  for (int i = 0; i < ms / 5; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Runs the bodies all at once: admission is paused until every one is queued, so they enter the
// slots together and are evaluated in the same batches.
std::vector<StreamResult> run_together(Started& s, const std::vector<std::string>& bodies) {
  s.engine->set_paused(true);
  std::vector<Raw> raw(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] { raw[i] = post_stream_raw(s.port, bodies[i]); });
  const bool queued = eventually([&] { return s.engine->queue_depth() == bodies.size(); });
  s.engine->set_paused(false);
  for (auto& t : threads) t.join();
  REQUIRE(queued);
  std::vector<StreamResult> out;
  for (const Raw& r : raw) out.push_back(parsed(r));
  return out;
}

// Collects tool calls and validates their arguments with python3-jsonschema.
class Validator {
 public:
  void add_tool_call(const std::string& name, const std::string& arguments_text) {
    calls_.emplace_back(name, arguments_text);
  }
  int count() const { return static_cast<int>(calls_.size()); }
  void check(const std::string& tools_json) {
    REQUIRE(!calls_.empty());
    server_fixture::validate_tool_calls({{tools_json, calls_}});
  }

 private:
  std::vector<std::pair<std::string, std::string>> calls_;
};

}  // namespace

TEST_CASE("4 concurrent streams give the bytes each gives alone (temperature 0)", "[server][slots]") {
  signal(SIGPIPE, SIG_IGN);
  Started s = start_server(kQwen, 2048, 4);
  // Different prompts, lengths and output modes, so the slots prefill and finish at different steps.
  const std::vector<std::string> bodies = {
      chat_body(R"("max_tokens":40,"temperature":0)", "Tell me a story about a dog"),
      chat_body(R"("max_tokens":25,"temperature":0)",
                "Once upon a time there was a little cat who lived in a big house by the sea with her family"),
      chat_body(R"("max_tokens":60,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["n","ok"]}}})",
                "Give me a number"),
      chat_body(R"("tools":)" + kTools + R"(,"tool_choice":"required","parallel_tool_calls":false,"max_tokens":120,"temperature":0)",
                "Turn on the kitchen light"),
  };
  std::vector<StreamResult> alone;
  for (const auto& b : bodies) alone.push_back(post_stream(s.port, b));
  const std::string before = metrics_text(s.port);
  const double steps_before = std::stod(metric_line(before, "picolm_batch_sequences_count"));
  const double single_before = std::stod(metric_line(before, "picolm_batch_sequences_bucket{le=\"1\"}"));

  std::vector<StreamResult> together = run_together(s, bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    INFO("request " << i);
    REQUIRE(alone[i].status == 200);
    REQUIRE(together[i].status == 200);
    CHECK(alone[i].done);
    CHECK(together[i].done);
    CHECK((!alone[i].content.empty() || !alone[i].calls.empty()));  // something was generated
    CHECK(together[i].content == alone[i].content);
    CHECK(together[i].calls == alone[i].calls);
    CHECK(together[i].finish == alone[i].finish);
  }
  CHECK(alone[3].calls.size() == 1);
  // They really ran side by side: steps evaluated more than one sequence.
  const std::string after = metrics_text(s.port);
  const double steps = std::stod(metric_line(after, "picolm_batch_sequences_count")) - steps_before;
  const double single = std::stod(metric_line(after, "picolm_batch_sequences_bucket{le=\"1\"}")) - single_before;
  CHECK(steps > 0);
  CHECK(single < steps);
  CHECK(std::stod(metric_line(after, "picolm_batch_sequences_bucket{le=\"4\"}")) -
            std::stod(metric_line(before, "picolm_batch_sequences_bucket{le=\"2\"}")) >
        0);
  CHECK(metric_line(after, "picolm_slots_total") == "4");
  // The worker frees a slot just after its reply is complete, so the gauge may lag the reply.
  CHECK(eventually([&] { return metric(s.port, "picolm_slots_busy") == 0; }));
  // Tokens were generated in more than one slot.
  int slots_used = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string v = metric_line(after, "picolm_slot_completion_tokens_total{slot=\"" + std::to_string(i) + "\"}");
    REQUIRE(!v.empty());
    slots_used += std::stod(v) > 0 ? 1 : 0;
  }
  CHECK(slots_used == 4);
}

TEST_CASE("tool calls from concurrent slots all validate", "[server][slots]") {
  signal(SIGPIPE, SIG_IGN);
  Started s = start_server(kQwen, 2048, 4);
  // 8 requests for 4 slots: half wait in the queue and are admitted as others finish.
  std::vector<std::string> bodies;
  for (int i = 0; i < 8; ++i) {
    const char* choice = i % 2 ? R"("auto")" : R"("required")";
    bodies.push_back(chat_body(R"("tools":)" + kTools + R"(,"tool_choice":)" + choice +
                                   R"(,"parallel_tool_calls":true,"max_tokens":200,"temperature":1.0,"seed":)" +
                                   std::to_string(100 + i),
                               "Turn on the kitchen light and set the volume"));
  }
  std::vector<StreamResult> results = run_together(s, bodies);
  Validator v;
  int required_calls = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    REQUIRE(results[i].status == 200);
    CHECK(results[i].done);
    if (i % 2 == 0) {
      CHECK(!results[i].calls.empty());
      required_calls += static_cast<int>(results[i].calls.size());
    }
    for (const auto& c : results[i].calls) v.add_tool_call(c.name, c.arguments);
  }
  CHECK(required_calls >= 4);
  v.check(kTools);
}

TEST_CASE("a slot freed by a client disconnect is reused at once by a queued request", "[server][slots]") {
  signal(SIGPIPE, SIG_IGN);
  Started s = start_server(kQwen, 4096, 2);
  // Two long streams fill both slots (a random-weight model almost never ends by itself).
  const std::string long_body =
      R"({"messages":[{"role":"user","content":"Tell me a long story"}],"max_tokens":4000,"temperature":1.0,"seed":7,"stream":true})";
  std::atomic<bool> stop_a{false}, stop_b{false}, a_done{false}, b_done{false};
  std::atomic<int> a_chunks{0}, b_chunks{0};
  auto streamer = [&](std::atomic<bool>& stop, std::atomic<int>& chunks, std::atomic<bool>& done) {
    auto c = client(s.port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = long_body;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++chunks;
      return !stop.load();  // false: the client hangs up
    };
    (void)c->send(req);
    done = true;
  };
  std::thread a(streamer, std::ref(stop_a), std::ref(a_chunks), std::ref(a_done));
  std::thread b(streamer, std::ref(stop_b), std::ref(b_chunks), std::ref(b_done));
  REQUIRE(eventually([&] { return a_chunks > 2 && b_chunks > 2; }));
  CHECK(metric(s.port, "picolm_slots_busy") == 2);

  // A third request waits in the queue: no slot is free.
  std::atomic<int> c_status{0};
  std::atomic<bool> c_done{false};
  std::thread c([&] {
    auto cl = client(s.port);
    auto res = cl->Post("/v1/chat/completions", chat_body(R"("max_tokens":8,"temperature":0)", "Hello"),
                        "application/json");
    c_status = res ? res->status : -1;
    c_done = true;
  });
  REQUIRE(eventually([&] { return s.engine->queue_depth() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(s.engine->queue_depth() == 1);  // still waiting while both slots stream
  CHECK(!c_done);

  // A hangs up: its slot goes to the queued request, which completes while B still streams.
  stop_a = true;
  REQUIRE(eventually([&] { return c_done.load(); }, 60000));
  CHECK(c_status == 200);
  CHECK(!b_done);
  const int b_before = b_chunks;
  REQUIRE(eventually([&] { return b_chunks > b_before + 2; }));  // B kept generating after C
  CHECK(metric(s.port, "picolm_requests_cancelled_total") >= 1);

  stop_b = true;
  a.join();
  b.join();
  c.join();
  REQUIRE(eventually([&] { return metric(s.port, "picolm_slots_busy") == 0; }));
  CHECK(metric(s.port, "picolm_requests_cancelled_total") == 2);
}

TEST_CASE("a request cancelled while queued counts no prompt tokens (issue 15 item 9)", "[server][slots]") {
  signal(SIGPIPE, SIG_IGN);
  Started s = start_server(kStories, 512, 1);
  s.engine->set_paused(true);
  std::atomic<bool> answered{false};
  std::thread t([&] {
    auto c = client(s.port);
    c->set_read_timeout(1, 0);  // gives up while the request is still queued
    auto res = c->Post("/v1/chat/completions", chat_body(R"("max_tokens":8)", "Once upon a time"),
                       "application/json");
    answered = static_cast<bool>(res);
  });
  REQUIRE(eventually([&] { return s.engine->queue_depth() == 1; }));
  t.join();
  CHECK(!answered);
  // The HTTP thread notices the closed connection (it polls every 100 ms) and cancels the job.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  s.engine->set_paused(false);
  REQUIRE(eventually([&] { return metric(s.port, "picolm_requests_cancelled_total") == 1; }));
  CHECK(metric(s.port, "picolm_prompt_tokens_total") == 0);
  CHECK(metric(s.port, "picolm_completion_tokens_total") == 0);
  CHECK(metric(s.port, "picolm_prefill_seconds_total") < 0.05);
  // And the server still serves, counting that one's prompt.
  auto res = client(s.port)->Post("/v1/chat/completions", chat_body(R"("max_tokens":4)", "Once upon a time"),
                                  "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(metric(s.port, "picolm_prompt_tokens_total") > 0);
}

namespace {

// A chat of `turns` turns, each: user, assistant tool call, tool result, assistant text (4
// messages), after a system prompt, then the last user message.
std::string long_chat(int turns, const std::string& extra) {
  std::string m = R"([{"role":"system","content":"You control a house. Answer briefly."})";
  for (int i = 0; i < turns; ++i) {
    const std::string n = std::to_string(i);
    m += R"(,{"role":"user","content":"Turn )" + n +
         R"(: please switch the kitchen light and tell me a little about the weather in the garden today"})";
    m += R"(,{"role":"assistant","content":null,"tool_calls":[{"id":"call_)" + n +
         R"(","type":"function","function":{"name":"set_light","arguments":"{\"room\":\"kitchen\",\"on\":true}"}}]})";
    m += R"(,{"role":"tool","tool_call_id":"call_)" + n + R"(","content":"{\"ok\":true,\"turn\":)" + n + R"(}"})";
    m += R"(,{"role":"assistant","content":"Done, the kitchen light is on and the garden is sunny."})";
  }
  m += R"(,{"role":"user","content":"And the hall?"}])";
  return R"({"messages":)" + m + R"(,"tools":)" + kTools + "," + extra + "}";
}

}  // namespace

TEST_CASE("a conversation longer than the context drops its oldest whole turns", "[server][slots]") {
  signal(SIGPIPE, SIG_IGN);
  const int n_ctx = 1024;
  const std::string body = long_chat(12, R"("max_tokens":64,"temperature":0)");

  SECTION("drop-oldest (default): the system prompt and the last turns are kept, the drop is reported") {
    Started s = start_server(kQwen, n_ctx, 1);
    auto res = client(s.port)->Post("/v1/chat/completions", body, "application/json");
    REQUIRE(res);
    INFO(res->body);
    REQUIRE(res->status == 200);
    Json j(res->body);
    const int64_t dropped = int64_t(j.root["picolm"]["dropped_messages"]);
    CHECK(dropped > 0);
    CHECK(dropped % 4 == 0);  // whole turns: a call never without its result, or a result without its call
    CHECK(dropped < 12 * 4);  // not more than needed: a few turns fit
    CHECK(res->get_header_value("X-Picolm-Dropped-Messages") == std::to_string(dropped));
    const int64_t prompt = int64_t(j.root["usage"]["prompt_tokens"]);
    CHECK(prompt + 64 <= n_ctx);
    // Not many more turns than needed: the cut moves in steps of about a quarter of the context, so
    // the room left over is less than that plus one turn. A turn's tokens: a 2-turn chat's prompt
    // minus a 1-turn chat's (turns 0-9 tokenize alike but for their digit).
    int64_t turn_tokens = 0;
    for (int turns : {1, 2}) {
      auto r = client(s.port)->Post("/v1/chat/completions", long_chat(turns, R"("max_tokens":1)"), "application/json");
      REQUIRE(r);
      REQUIRE(r->status == 200);
      Json u(r->body);
      turn_tokens = int64_t(u.root["usage"]["prompt_tokens"]) - turn_tokens;
    }
    CHECK(turn_tokens > 20);
    CHECK(prompt + 64 + n_ctx / 4 + turn_tokens > n_ctx);

    // The next request of that chat (one more turn) keeps the same cut, so everything before its
    // last turns comes from the prompt cache instead of being evaluated again.
    auto next = client(s.port)->Post("/v1/chat/completions", long_chat(13, R"("max_tokens":64,"temperature":0)"),
                                     "application/json");
    REQUIRE(next);
    REQUIRE(next->status == 200);
    Json jn(next->body);
    CHECK(int64_t(jn.root["picolm"]["dropped_messages"]) == dropped);
    CHECK(int64_t(jn.root["usage"]["prompt_tokens_details"]["cached_tokens"]) > prompt - 2 * turn_tokens);

    // Streamed: the header says it too, and the usage chunk carries the field.
    std::string sbody = long_chat(12, R"("max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true})");
    auto sres = client(s.port)->Post("/v1/chat/completions", sbody, "application/json");
    REQUIRE(sres);
    REQUIRE(sres->status == 200);
    CHECK(sres->get_header_value("X-Picolm-Dropped-Messages") == std::to_string(dropped));
    CHECK(sres->body.find(R"("picolm":{"dropped_messages":)" + std::to_string(dropped) + "}") != std::string::npos);

    // A conversation that fits drops nothing and says nothing.
    auto small = client(s.port)->Post("/v1/chat/completions", long_chat(1, R"("max_tokens":16,"temperature":0)"),
                                      "application/json");
    REQUIRE(small);
    REQUIRE(small->status == 200);
    CHECK(small->get_header_value("X-Picolm-Dropped-Messages").empty());
    CHECK(small->body.find("\"picolm\":{") == std::string::npos);
  }
  SECTION("error: the same conversation is refused") {
    Started s = start_server(kQwen, n_ctx, 1, ContextOverflow::Error);
    auto res = client(s.port)->Post("/v1/chat/completions", body, "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
    Json j(res->body);
    CHECK(str(j.root["error"]["code"]) == "context_length_exceeded");
  }
}

namespace {

// A slot reused by a prompt that diverges from what it holds, with and without a prompt cache, and
// two sequences side by side: each reply equals the same request's on the fresh server.
void slot_reuse_replies_unchanged(const std::string& model) {
  signal(SIGPIPE, SIG_IGN);
  const std::string sys = "You control the lights of a big house by the sea with many rooms and a garden.";
  auto body = [&](const std::string& user) {  // run_together adds "stream":true
    return R"({"model":"x","temperature":0,"max_tokens":24,"messages":[{"role":"system","content":")" + sys +
           R"("},{"role":"user","content":")" + user + R"("}]})";
  };
  struct Reply {
    std::string content;
    int64_t cached = -1;
  };
  auto post = [&](int port, const std::string& b) {
    auto res = client(port)->Post("/v1/chat/completions", b, "application/json");
    REQUIRE(res);
    INFO(res->body);
    REQUIRE(res->status == 200);
    Json j(res->body);
    return Reply{str(j.root["choices"].at(0)["message"]["content"]),
                 int64_t(j.root["usage"]["prompt_tokens_details"]["cached_tokens"])};
  };
  {
    for (size_t ram_mb : {size_t(0), size_t(64)}) {
      INFO(model << ", prompt cache RAM " << ram_mb << " MiB");
      Started s = start_server(model, 1024, 2, ContextOverflow::DropOldest, ram_mb);
      const Reply a1 = post(s.port, body("Tell me a story about a dog"));
      CHECK(a1.cached == 0);
      CHECK(!a1.content.empty());
      // Into the same slot (it shares the system prompt): back to the snapshot at the stable prefix.
      const Reply b1 = post(s.port, body("Turn on the kitchen light please"));
      CHECK(b1.cached > 0);
      const Reply a2 = post(s.port, body("Tell me a story about a dog"));
      CHECK(a2.cached > 0);
      CHECK(a2.content == a1.content);
      const Reply b2 = post(s.port, body("Turn on the kitchen light please"));
      CHECK(b2.content == b1.content);
      // Side by side in one batch.
      const std::vector<std::string> bodies = {body("Tell me a story about a dog"),
                                               body("Turn on the kitchen light please")};
      const std::vector<StreamResult> together = run_together(s, bodies);
      REQUIRE(together.size() == 2);
      CHECK(together[0].status == 200);
      CHECK(together[1].status == 200);
      CHECK(together[0].content == a1.content);
      CHECK(together[1].content == b1.content);
    }
  }
}

}  // namespace

// Hybrid models (qwen35, lfm2): a recurrent state cannot be cut back, so a slot reused by a prompt
// that diverges from what it holds goes back to a state snapshot (the stable prefix's, which the
// prefill keeps) or to 0. Oracle: the same request's reply on the fresh server (cached 0). Without
// a prompt cache the reuse comes from the slot's own snapshots; with one, also from the store.
// Two hybrid sequences evaluated together give what each gives alone.
TEST_CASE("hybrid models: slot reuse goes back to a state snapshot, replies unchanged", "[server][slots]") {
  for (const char* file : {"qwen35-tiny-q8_0.gguf", "lfm2-tiny-q8_0.gguf"}) slot_reuse_replies_unchanged(kShared + "/models/" + file);
  // Issue 32's models from the repository's tests/models: the mixture-of-experts ones (qwen3moe
  // reuses K/V only, lfm2moe and qwen35moe are hybrids as well), granitehybrid (Mamba-2 state; its
  // MoE form too) and phi3 (an attention-only model: its slot reuse cuts the KV back).
  for (const char* file : {"qwen3moe-tiny-q4km.gguf", "lfm2moe-tiny-q4km.gguf", "qwen35moe-tiny-q4km.gguf",
                           "granitehybrid-tiny-q8_0.gguf", "granitehybrid-moe-tiny-q4km.gguf", "phi3-tiny-q8_0.gguf"})
    slot_reuse_replies_unchanged(std::string(PICOLM_TEST_DATA_DIR) + "/models/" + file);
}

// gemma4: sliding-window and KV-sharing layers (the shared layers keep no K/V: the prompt cache and
// the slots store and restore only the others'), per-layer embeddings.
TEST_CASE("gemma4: slot reuse and the prompt cache, replies unchanged", "[server][slots][gemma4]") {
  slot_reuse_replies_unchanged(test_util::model_path("gemma4-tiny-q8_0.gguf"));
}

// gemma4's 26B-A4B layout: the MoE layers keep no state beyond their K/V (sliding and global).
TEST_CASE("gemma4 MoE: slot reuse and the prompt cache, replies unchanged", "[server][slots][gemma4][moe]") {
  slot_reuse_replies_unchanged(test_util::model_path("gemma4-moe-tiny-q4km.gguf"));
}

TEST_CASE("the default slot count fits the memory", "[slots]") {
  constexpr uint64_t MiB = 1 << 20;
  CHECK(default_slot_count(0, 0, 100 * MiB) == 1);                // unknown memory: one slot
  CHECK(default_slot_count(16384 * MiB, 256 * MiB, 100 * MiB) == kMaxDefaultSlots);
  CHECK(default_slot_count(1000 * MiB, 200 * MiB, 150 * MiB) == 2);  // (1000 - 200) / 2 / 150
  CHECK(default_slot_count(300 * MiB, 256 * MiB, 150 * MiB) == 1);   // never below one
  CHECK(default_slot_count(100 * MiB, 500 * MiB, 10 * MiB) == 1);    // reserve above what is available
}

TEST_CASE("picolm-provider: --parallel and --context-overflow are checked", "[slots][cli]") {
  const std::string bin = std::string(PICOLM_BIN_DIR) + "/picolm-provider";
  REQUIRE(access(bin.c_str(), X_OK) == 0);
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{"--context-overflow bogus", "--context-overflow takes drop-oldest or error, not 'bogus'"},
                        Case{"-np -1", "-np: '-1' is not a number in [0, 256]"},
                        Case{"--parallel x", "--parallel: 'x' is not a number in [0, 256]"},
                        Case{"--prefill-chunk 1", "--prefill-chunk: '1' is not a number in [2, 65536]"}}) {
    INFO(c.args);
    const std::string cmd = bin + " " + c.args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int st = pclose(p);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 2);
    CHECK(out.find(c.message) != std::string::npos);
  }
}
