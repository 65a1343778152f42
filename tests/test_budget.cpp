// Issue 13, provider side: every constrained request ends valid within its token budget.
//
// Black-box over loopback, as tests/test_server.cpp: the provider runs in-process on an ephemeral
// port with the random-weight Qwen2.5-vocabulary model (the adversary: it wanders inside long
// strings and keeps opening parallel calls). For tool_choice required / named, streaming and not,
// the PicoClaw-like tool list and the house tools, 50+ seeds each and max_tokens from the minimum
// the server announces (its 400 names it) up to 400: 100% of replies hold >= 1 complete call,
// finish_reason "tool_calls", completion_tokens <= max_tokens, and every call's arguments validate
// with python3-jsonschema (one process for all records). json_schema replies at every max_tokens
// from the minimum up parse and validate.
// Without a model: random walks that pick uniformly among the allowed tokens (an adversary that
// never closes a string by itself and keeps opening parallel calls) under AnswerBudget end complete
// within every budget; TriggerGuard masks exactly the tokens that would form the trigger.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "openai.h"
#include "server.h"
#include "server_fixture.h"
#include "token_budget.h"
#include "vocab_loader.h"

using namespace picolm;
namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
const std::string kQwen = kShared + "/models/qwen2-bpe-q4km.gguf";
const std::string kPicoclawTools = kShared + "/tool-lists/picoclaw-like-tools.json";

// The house tools of tests/test_server.cpp plus one with free strings and an array, so closing has
// strings to end and arrays to close.
const std::string kHouseTools = R"([
 {"type":"function","function":{"name":"set_light","description":"Switch a light","parameters":{"type":"object","properties":{"room":{"type":"string","enum":["kitchen","bedroom","hall"]},"on":{"type":"boolean"}},"required":["room","on"]}}},
 {"type":"function","function":{"name":"set_volume","description":"Set the volume","parameters":{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":10}},"required":["level"]}}},
 {"type":"function","function":{"name":"remember","description":"Store notes","parameters":{"type":"object","properties":{"title":{"type":"string"},"lines":{"type":"array","items":{"type":"string"},"minItems":1},"when":{"type":"object","properties":{"day":{"type":"integer","minimum":1,"maximum":31},"note":{"type":"string"}},"required":["day","note"]}},"required":["title","lines","when"]}}}
])";

std::string read_file(const std::string& path) {
  REQUIRE(fs::exists(path));  // a missing input fails the test
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

std::string minify(const std::string& json) {
  dom::parser p;
  dom::element e;
  REQUIRE(!p.parse(json).get(e));
  return simdjson::minify(e);
}

std::vector<std::string> tool_names(const std::string& tools_json) {
  dom::parser p;
  dom::element e;
  REQUIRE(!p.parse(tools_json).get(e));
  std::vector<std::string> names;
  for (dom::element t : dom::array(e)) names.emplace_back(std::string_view(t["function"]["name"]));
  return names;
}

struct Started {
  std::unique_ptr<Server> server;
  int port = 0;
};

Started& qwen() {
  static Started s = [] {
    REQUIRE(fs::exists(kQwen));
    ServerOptions o;
    o.engine.model_path = kQwen;
    o.engine.threads = 1;  // the test machines are shared
    o.engine.n_ctx = 4096;
    o.engine.cache_ram_mb = 128;  // the two tool lists' prompts are restored, not prefilled again
    o.engine.timeout_sec = 300.0;
    o.host = "127.0.0.1";
    o.port = 0;
    Started st;
    st.server = std::make_unique<Server>(o);
    auto port = st.server->start();
    REQUIRE(port.ok());
    st.port = port.value();
    Status ok = st.server->wait_loaded(std::chrono::seconds(120));
    INFO((ok.ok() ? std::string() : ok.error()));
    REQUIRE(ok.ok());
    return st;
  }();
  return s;
}

std::unique_ptr<httplib::Client> client() {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", qwen().port);
  c->set_read_timeout(300, 0);
  c->set_write_timeout(30, 0);
  return c;
}

using server_fixture::json_quote;
const auto quote = json_quote;

// Collects (schema, instance text) records; check() validates them all with python3-jsonschema in
// one process. The instance is sent as text so that text which does not parse is a failure too.
class Validator {
 public:
  void add(const std::string& schema, const std::string& instance_text, const std::string& label) {
    lines_ += R"({"schema":)" + minify(schema) + R"(,"text":)" + quote(instance_text) + R"(,"label":)" +
              quote(label) + "}\n";
    ++count_;
  }
  int count() const { return count_; }
  void check() {
    REQUIRE(count_ > 0);
    fs::path dir = fs::temp_directory_path() / ("picolm_test_budget_" + std::to_string(getpid()));
    fs::create_directories(dir);
    fs::path in = dir / "batch.jsonl", script = dir / "validate.py", out = dir / "out.txt";
    std::ofstream(in) << lines_;
    std::ofstream(script) << R"PY(
import json, sys
from jsonschema import Draft202012Validator
bad = n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    rec = json.loads(line)
    n += 1
    try:
        inst = json.loads(rec["text"])
        Draft202012Validator(rec["schema"]).validate(inst)
    except Exception as e:
        bad += 1
        print("INVALID %s: %s\n  text: %s" % (rec["label"], str(e)[:300], rec["text"][:400]))
print("checked", n, "bad", bad)
sys.exit(1 if bad else 0)
)PY";
    std::string cmd = "/usr/bin/python3 " + script.string() + " " + in.string() + " > " + out.string() + " 2>&1";
    int rc = std::system(cmd.c_str());
    std::string report = read_file(out.string());
    INFO(report);
    CHECK(rc == 0);
    CHECK(report.find("checked " + std::to_string(count_) + " bad 0") != std::string::npos);
    fs::remove_all(dir);
    lines_.clear();
    count_ = 0;
  }

 private:
  std::string lines_;
  int count_ = 0;
};

// The tool's parameters as the provider compiles them: closed objects.
std::string tool_schema(const std::string& tools_json, const std::string& name) {
  dom::parser p;
  dom::element e;
  REQUIRE(!p.parse(tools_json).get(e));
  for (dom::element t : dom::array(e)) {
    if (std::string_view(t["function"]["name"]) != name) continue;
    dom::element params;
    if (t["function"]["parameters"].get(params)) return R"({"type":"object","additionalProperties":false})";
    std::string s = simdjson::minify(params);
    // Tool parameters are closed by default (additionalProperties false) at the top level.
    if (s.find("\"additionalProperties\"") == std::string::npos && s.size() > 2)
      s = R"({"additionalProperties":false,)" + s.substr(1);
    return s;
  }
  FAIL("unknown tool " << name);
  return "";
}

struct Reply {
  int status = 0;
  std::string body;  // non-streamed: the response; streamed: the SSE text
  std::string finish;
  std::string content;
  bool content_null = true;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments text
  int64_t completion_tokens = -1;
};

Reply post_chat(const std::string& body, bool stream) {
  auto c = client();
  std::string b = body;
  if (stream) {
    b.pop_back();
    b += R"(,"stream":true,"stream_options":{"include_usage":true}})";
  }
  auto res = c->Post("/v1/chat/completions", b, "application/json");
  REQUIRE(res);
  Reply r;
  r.status = res->status;
  r.body = res->body;
  if (r.status != 200) return r;
  dom::parser p;
  if (!stream) {
    dom::element j;
    INFO(res->body);
    REQUIRE(!p.parse(res->body).get(j));
    dom::element ch = j["choices"].at(0);
    r.finish = std::string(std::string_view(ch["finish_reason"]));
    dom::element msg = ch["message"], tcs;
    if (!msg["content"].is_null()) {
      r.content_null = false;
      r.content = std::string(std::string_view(msg["content"]));
    }
    if (!msg["tool_calls"].get(tcs)) {
      for (dom::element tc : dom::array(tcs))
        r.calls.emplace_back(std::string(std::string_view(tc["function"]["name"])),
                             std::string(std::string_view(tc["function"]["arguments"])));
    }
    r.completion_tokens = int64_t(j["usage"]["completion_tokens"]);
    return r;
  }
  std::istringstream in(res->body);
  std::string line;
  bool done = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    REQUIRE(line.rfind("data: ", 0) == 0);
    std::string data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    dom::element j;
    INFO(data);
    REQUIRE(!p.parse(data).get(j));
    dom::element usage;
    if (!j["usage"].get(usage) && !usage.is_null()) r.completion_tokens = int64_t(usage["completion_tokens"]);
    dom::array choices = j["choices"];
    if (choices.size() == 0) continue;
    dom::element ch = choices.at(0), delta = ch["delta"], v;
    if (!delta["content"].get(v) && v.is_string()) {
      r.content_null = false;
      r.content += std::string(std::string_view(v));
    }
    if (!delta["tool_calls"].get(v)) {
      for (dom::element tc : dom::array(v)) {
        size_t idx = size_t(int64_t(tc["index"]));
        if (r.calls.size() <= idx) r.calls.resize(idx + 1);
        dom::element f = tc["function"], x;
        if (!f["name"].get(x)) r.calls[idx].first += std::string(std::string_view(x));
        if (!f["arguments"].get(x)) r.calls[idx].second += std::string(std::string_view(x));
      }
    }
    if (!ch["finish_reason"].is_null()) r.finish = std::string(std::string_view(ch["finish_reason"]));
  }
  CHECK(done);
  return r;
}

// The minimum the server names in its 400 for a budget below the shortest answer.
int64_t announced_minimum(const Reply& r) {
  INFO(r.body);
  REQUIRE(r.status == 400);
  std::smatch m;
  REQUIRE(std::regex_search(r.body, m, std::regex("at least ([0-9]+)")));
  CHECK(r.body.find("\"param\":\"max_tokens\"") != std::string::npos);
  return std::stoll(m[1].str());
}

std::string chat_body(const std::string& extra, const std::string& user) {
  return R"({"model":"x","messages":[{"role":"system","content":"You are a helpful agent."},{"role":"user","content":)" +
         quote(user) + "}]," + extra + "}";
}

// max_tokens values from the minimum up to 400: dense near the minimum (where closing starts at
// once and every token counts), sparse above.
std::vector<int64_t> budget_schedule(int64_t min) {
  std::vector<int64_t> s;
  for (int64_t d : {0, 1, 2, 3, 4, 5, 7, 9, 12, 16, 24, 32}) s.push_back(min + d);
  for (int64_t v : {64, 96, 128, 192, 256, 320, 400})
    if (v > min + 32) s.push_back(v);
  return s;
}

}  // namespace

TEST_CASE("budget: a budget below the shortest answer is refused up front, naming the minimum", "[server][budget]") {
  signal(SIGPIPE, SIG_IGN);
  const std::string tools = minify(read_file(kPicoclawTools));
  const std::string base = R"("tools":)" + tools + R"(,"tool_choice":"required","seed":1,"max_tokens":)";
  Reply r = post_chat(chat_body(base + "1", "list the files"), false);
  const int64_t min = announced_minimum(r);
  // The tags alone are several tokens; a whole call is far below the default budget.
  CHECK(min > 5);
  CHECK(min < 200);
  CHECK(announced_minimum(post_chat(chat_body(base + std::to_string(min - 1), "list the files"), false)) == min);
  Reply ok = post_chat(chat_body(base + std::to_string(min), "list the files"), false);
  INFO(ok.body);
  REQUIRE(ok.status == 200);
  CHECK(ok.finish == "tool_calls");
  CHECK(ok.calls.size() == 1);
  CHECK(ok.completion_tokens <= min);

  // /tool_call: the same minimum, the same guarantee.
  auto c = client();
  auto res = c->Post("/tool_call",
                     R"({"prompt":"list the files","tools":)" + tools + R"(,"seed":2,"max_tokens":)" +
                         std::to_string(min - 1) + "}",
                     "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  res = c->Post("/tool_call",
                R"({"prompt":"list the files","tools":)" + tools + R"(,"seed":2,"max_tokens":)" + std::to_string(min) + "}",
                "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  dom::parser p;
  dom::element j;
  REQUIRE(!p.parse(res->body).get(j));
  CHECK(dom::array(j["tool_calls"]).size() == 1);
  CHECK(std::string_view(j["finish_reason"]) == "tool_calls");

  // response_format: the shortest instance of the schema.
  const std::string schema =
      R"({"type":"object","properties":{"answer":{"type":"string"},"items":{"type":"array","items":{"type":"integer"},"minItems":2}},"required":["answer","items"]})";
  const std::string rf = R"("response_format":{"type":"json_schema","json_schema":{"name":"r","schema":)" + schema +
                         R"(}},"seed":1,"max_tokens":)";
  const int64_t jmin = announced_minimum(post_chat(chat_body(rf + "2", "answer"), false));
  Reply jr = post_chat(chat_body(rf + std::to_string(jmin), "answer"), false);
  INFO(jr.body);
  REQUIRE(jr.status == 200);
  CHECK(jr.finish == "stop");
  Validator v;
  v.add(schema, jr.content, "json_schema at its minimum");
  v.check();
}

TEST_CASE("budget: required and named calls are complete and valid at every budget (property)", "[server][budget]") {
  signal(SIGPIPE, SIG_IGN);
  struct ToolList {
    std::string label, json, user;
  };
  const std::vector<ToolList> lists = {
      {"picoclaw", minify(read_file(kPicoclawTools)), "Look up the weather in Paris and save it to notes.txt"},
      {"house", minify(kHouseTools), "Turn on the kitchen light and remember it"},
  };
  constexpr int kSeeds = 52;  // per (tool list, choice, streaming)
  Validator v;
  int replies = 0, parallel_replies = 0, multi_call_replies = 0;
  for (const auto& tl : lists) {
    const std::vector<std::string> names = tool_names(tl.json);
    for (bool named : {false, true}) {
      // The minimum of each choice, as the server announces it.
      std::vector<int64_t> mins;
      for (size_t k = 0; k < (named ? names.size() : 1); ++k) {
        const std::string choice = named ? R"({"type":"function","function":{"name":")" + names[k] + R"("}})"
                                         : std::string(R"("required")");
        mins.push_back(announced_minimum(post_chat(
            chat_body(R"("tools":)" + tl.json + R"(,"tool_choice":)" + choice + R"(,"max_tokens":1)", tl.user), false)));
      }
      for (bool stream : {false, true}) {
        for (int seed = 1; seed <= kSeeds; ++seed) {
          const size_t k = named ? size_t(seed) % names.size() : 0;
          const std::vector<int64_t> sched = budget_schedule(mins[k]);
          const int64_t max_tokens = sched[size_t(seed * 7 + (stream ? 3 : 0)) % sched.size()];
          const bool parallel = seed % 2 == 0;
          const std::string choice = named ? R"({"type":"function","function":{"name":")" + names[k] + R"("}})"
                                           : std::string(R"("required")");
          const std::string body = chat_body(R"("tools":)" + tl.json + R"(,"tool_choice":)" + choice +
                                                 R"(,"parallel_tool_calls":)" + (parallel ? "true" : "false") +
                                                 R"(,"temperature":1.0,"seed":)" + std::to_string(seed) +
                                                 R"(,"max_tokens":)" + std::to_string(max_tokens),
                                             tl.user);
          Reply r = post_chat(body, stream);
          const std::string label = tl.label + (named ? " named " + names[k] : " required") +
                                    (stream ? " stream" : "") + " seed " + std::to_string(seed) + " max_tokens " +
                                    std::to_string(max_tokens);
          INFO(label << "\n" << r.body);
          REQUIRE(r.status == 200);
          CHECK(r.finish == "tool_calls");
          REQUIRE(!r.calls.empty());
          if (!parallel) CHECK(r.calls.size() == 1);
          CHECK(r.completion_tokens >= 1);
          CHECK(r.completion_tokens <= max_tokens);
          for (const auto& [name, args] : r.calls) {
            if (named) CHECK(name == names[k]);
            v.add(tool_schema(tl.json, name), args, label + " call " + name);
          }
          ++replies;
          if (parallel) ++parallel_replies;
          if (r.calls.size() > 1) ++multi_call_replies;
        }
      }
    }
  }
  WARN("budget property: " << replies << " replies (" << parallel_replies << " parallel allowed, "
                           << multi_call_replies << " with several calls), " << v.count() << " calls validated");
  CHECK(replies == int(lists.size()) * 2 * 2 * kSeeds);
  v.check();
}

TEST_CASE("budget: json_schema replies parse and validate at every max_tokens from the minimum up", "[server][budget]") {
  signal(SIGPIPE, SIG_IGN);
  // Free strings, a nested required object, an array with a minimum: what a cut reply breaks.
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"name":{"type":"string"},"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id","note"]},"minItems":1},"ok":{"type":"boolean"}},"required":["name","items"]})",
      R"({"type":"object","properties":{"answer":{"type":"string","enum":["yes","no"]},"score":{"type":"integer","minimum":0,"maximum":5},"why":{"type":"string","maxLength":200}},"required":["answer","score","why"],"additionalProperties":false})",
  };
  Validator v;
  int replies = 0;
  for (size_t si = 0; si < schemas.size(); ++si) {
    const std::string rf = R"("response_format":{"type":"json_schema","json_schema":{"name":"r","schema":)" +
                           schemas[si] + R"(}},"temperature":1.0,)";
    const int64_t min = announced_minimum(post_chat(chat_body(rf + R"("max_tokens":1)", "answer in JSON"), false));
    std::vector<int64_t> budgets;
    for (int64_t t = min; t <= min + 40; ++t) budgets.push_back(t);  // every value near the minimum
    for (int64_t t = min + 48; t <= 400; t += 44) budgets.push_back(t);
    budgets.push_back(400);
    for (size_t i = 0; i < budgets.size(); ++i) {
      const bool stream = i % 2 == 1;
      Reply r = post_chat(chat_body(rf + R"("seed":)" + std::to_string(100 + i) + R"(,"max_tokens":)" +
                                        std::to_string(budgets[i]),
                                    "answer in JSON"),
                          stream);
      const std::string label = "schema " + std::to_string(si) + " max_tokens " + std::to_string(budgets[i]) +
                                (stream ? " stream" : "");
      INFO(label << "\n" << r.body);
      REQUIRE(r.status == 200);
      CHECK(r.finish == "stop");
      CHECK(r.completion_tokens <= budgets[i]);
      v.add(schemas[si], r.content, label);
      ++replies;
    }
  }
  // json_object: any object, closed in time.
  for (int64_t t : {4, 5, 6, 8, 12, 20, 60}) {
    Reply r = post_chat(chat_body(R"("response_format":{"type":"json_object"},"temperature":1.0,"seed":7,"max_tokens":)" +
                                      std::to_string(t),
                                  "answer in JSON"),
                        false);
    INFO(r.body);
    if (r.status == 400) continue;  // below the shortest object: refused, not cut
    REQUIRE(r.status == 200);
    CHECK(r.finish == "stop");
    v.add(R"({"type":"object"})", r.content, "json_object max_tokens " + std::to_string(t));
    ++replies;
  }
  WARN("budget json: " << replies << " replies validated");
  v.check();
}

TEST_CASE("budget: without max_tokens a required call gets the default budget, not the context", "[server][budget]") {
  signal(SIGPIPE, SIG_IGN);
  // One free string and nothing else: a random-weight model would write it to the end of the context.
  const std::string tools =
      R"([{"type":"function","function":{"name":"say","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}}])";
  Validator v;
  for (bool stream : {false, true}) {
    Reply r = post_chat(chat_body(R"("tools":)" + tools + R"(,"tool_choice":"required","temperature":1.5,"seed":5)",
                                  "say something long"),
                        stream);
    INFO(r.body);
    REQUIRE(r.status == 200);
    CHECK(r.finish == "tool_calls");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.completion_tokens <= 1024);
    v.add(tool_schema(tools, "say"), r.calls[0].second, "default budget");
  }
  v.check();
}

namespace {

// A uniformly random allowed token (-1 when none is allowed).
int32_t pick_uniform(const std::vector<uint32_t>& mask, std::mt19937_64& rng) {
  size_t total = 0;
  for (uint32_t w : mask) total += size_t(__builtin_popcount(w));
  if (total == 0) return -1;
  size_t k = std::uniform_int_distribution<size_t>(0, total - 1)(rng);
  for (size_t i = 0; i < mask.size(); ++i) {
    const size_t c = size_t(__builtin_popcount(mask[i]));
    if (k >= c) {
      k -= c;
      continue;
    }
    uint32_t w = mask[i];
    for (; k > 0; --k) w &= w - 1;
    return int32_t(i * 32 + size_t(__builtin_ctz(w)));
  }
  return -1;
}

}  // namespace

TEST_CASE("budget: adversarial random walks under AnswerBudget end complete within every budget", "[budget]") {
  auto vocab_r = tools::load_grammar_vocab(kQwen);
  REQUIRE(vocab_r.ok());
  auto vocab = vocab_r.value();
  const std::string picoclaw = minify(read_file(kPicoclawTools));
  const std::string house = minify(kHouseTools);
  enum class Kind { Hermes, Envelope, Bare, Schema };
  struct Case {
    std::string label;
    Kind kind;
    std::string tools_or_schema;
    grammar::CompileResult compiled;
  };
  std::vector<Case> cases;
  auto tool_case = [&](const std::string& label, Kind kind, const std::string& tools, bool parallel,
                       const std::string& forced) {
    grammar::ToolListOptions to;
    to.schema.whitespace = grammar::Whitespace::Flexible;  // as the provider compiles them
    to.schema.max_whitespace_run = 1;
    to.parallel = parallel;
    to.forced_tool = forced;
    if (kind == Kind::Hermes) to.format = grammar::ToolCallFormat::Hermes;
    if (kind == Kind::Envelope) {
      to.format = grammar::ToolCallFormat::Envelope;
      to.allow_text = true;
    }
    if (kind == Kind::Bare) {
      to.format = grammar::ToolCallFormat::JsonObject;
      to.arguments_key = "parameters";
    }
    cases.push_back({label, kind, tools, grammar::compile_tool_list(tools, to)});
  };
  tool_case("picoclaw hermes parallel", Kind::Hermes, picoclaw, true, "");
  tool_case("picoclaw hermes named write_file", Kind::Hermes, picoclaw, false, "write_file");
  tool_case("house hermes parallel", Kind::Hermes, house, true, "");
  tool_case("house hermes named remember", Kind::Hermes, house, false, "remember");
  tool_case("picoclaw envelope parallel", Kind::Envelope, picoclaw, true, "");
  tool_case("picoclaw bare llama3", Kind::Bare, picoclaw, false, "");
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id","note"]},"minItems":1}},"required":["name","items"]})";
  cases.push_back({"json_schema", Kind::Schema, schema, grammar::compile_json_schema(schema)});

  constexpr int kWalks = 144;  // per case
  Validator v;
  int walks = 0, closed_early = 0;
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  for (auto& c : cases) {
    INFO(c.label << ": " << c.compiled.error_text());
    REQUIRE(c.compiled.ok());
    const int64_t min = tokens_to_finish(grammar::Matcher(c.compiled.grammar, vocab));
    REQUIRE(min > 0);
    const std::vector<int64_t> sched = budget_schedule(min);
    for (int w = 0; w < kWalks; ++w) {
      const int64_t budget = sched[size_t(w) % sched.size()];
      std::mt19937_64 rng(uint64_t(w) * 1000003u + c.label.size());
      grammar::Matcher m(c.compiled.grammar, vocab);
      AnswerBudget ab;
      int64_t generated = 0;
      bool ended = false;
      while (generated < budget) {
        const int64_t left = budget - generated;
        ab.fill_mask(m, left, mask.data());
        int32_t id = pick_uniform(mask, rng);
        REQUIRE(id >= 0);  // never a dead end
        REQUIRE(m.accept_token(id));
        const bool eog = std::find(vocab->eog_ids().begin(), vocab->eog_ids().end(), id) != vocab->eog_ids().end();
        if (!eog && ab.overshoots(m, left - 1)) {
          m.rollback(1);
          ab.fill_mask(m, left, mask.data());
          id = pick_uniform(mask, rng);
          REQUIRE(id >= 0);
          REQUIRE(m.accept_token(id));
        }
        if (std::find(vocab->eog_ids().begin(), vocab->eog_ids().end(), id) != vocab->eog_ids().end() ||
            m.is_terminated()) {
          ended = true;
          break;
        }
        ++generated;
      }
      const std::string label = c.label + " walk " + std::to_string(w) + " budget " + std::to_string(budget);
      INFO(label << "\n" << m.text());
      CHECK(m.is_complete());
      CHECK(generated <= budget);
      if (ended && generated < budget) ++closed_early;
      ++walks;
      const std::string& text = m.text();
      if (c.kind == Kind::Schema) {
        v.add(c.tools_or_schema, text, label);
      } else if (c.kind == Kind::Envelope) {
        std::vector<GeneratedToolCall> calls;
        std::optional<std::string> content;
        CHECK(parse_envelope(text, calls, content));
        for (const auto& call : calls) v.add(tool_schema(c.tools_or_schema, call.name), call.arguments_json, label);
      } else {
        auto calls = c.kind == Kind::Hermes ? parse_tagged_tool_calls(text, "<tool_call>", "</tool_call>")
                                            : parse_bare_tool_calls(text);
        REQUIRE(!calls.empty());
        if (c.kind == Kind::Hermes) {
          // Every call that was opened was finished: as many calls as open tags.
          size_t opened = 0;
          for (size_t p = text.find("<tool_call>"); p != std::string::npos; p = text.find("<tool_call>", p + 1)) ++opened;
          CHECK(calls.size() == opened);
        }
        for (const auto& call : calls) v.add(tool_schema(c.tools_or_schema, call.name), call.arguments_json, label);
      }
    }
  }
  WARN("budget walks: " << walks << " walks, " << closed_early << " ended before their budget, " << v.count()
                        << " records validated");
  v.check();
}

TEST_CASE("budget: TriggerGuard masks exactly the tokens that would form the trigger", "[budget]") {
  // Every single byte (so any completion can be spelled), a few multi-byte pieces around the
  // trigger, and an end-of-generation token.
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.emplace_back(1, char(b));
  const int32_t kTag = 256, kTo = 257, kRest = 258, kXlt = 259, kHello = 260, kTool = 261, kEog = 262;
  for (const char* t : {"<tool_call>", "<to", "ol_call>", "x<", "hello", "tool"}) toks.emplace_back(t);
  toks.emplace_back("");
  auto vocab = grammar::Vocabulary::create(toks, {kEog});
  grammar::ToolListOptions to;
  to.format = grammar::ToolCallFormat::Hermes;
  auto compiled = grammar::compile_tool_list(minify(kHouseTools), to);
  REQUIRE(compiled.ok());
  TriggerGuard guard("<tool_call>", false, compiled.grammar, vocab);
  const int64_t reserve = guard.reserve();
  // The shortest house call after the tag, plus the tag, the margin and the tag's length.
  REQUIRE(reserve > int64_t(std::string("<tool_call>").size()) + 10);

  std::vector<uint32_t> mask((toks.size() + 31) / 32);
  auto allowed = [&](int32_t id) { return (mask[size_t(id) / 32] >> (id % 32)) & 1; };
  CHECK_FALSE(guard.fill_mask("", reserve + 1, mask.data(), mask.size()));  // room for a call: no mask

  REQUIRE(guard.fill_mask("Sure. ", reserve, mask.data(), mask.size()));
  for (int32_t id : {int32_t('<'), kTag, kTo, kXlt}) CHECK_FALSE(allowed(id));
  for (int32_t id : {int32_t('h'), int32_t('t'), kRest, kHello, kTool, kEog}) CHECK(allowed(id));

  // A partial trigger at the end of the text: what would continue it is masked, the rest is not.
  REQUIRE(guard.fill_mask("Sure. <to", 3, mask.data(), mask.size()));
  for (int32_t id : {int32_t('o'), kRest, int32_t('<'), kTag}) CHECK_FALSE(allowed(id));
  for (int32_t id : {int32_t('x'), int32_t('t'), kHello, kTool}) CHECK(allowed(id));

  // Bare-JSON calls: '{' opens a call only before any text.
  grammar::ToolListOptions bo;
  bo.format = grammar::ToolCallFormat::JsonObject;
  bo.arguments_key = "parameters";
  auto bare = grammar::compile_tool_list(minify(kHouseTools), bo);
  REQUIRE(bare.ok());
  TriggerGuard at_start("{", true, bare.grammar, vocab);
  REQUIRE(at_start.reserve() > 0);
  REQUIRE(at_start.fill_mask(" ", 2, mask.data(), mask.size()));
  CHECK_FALSE(allowed('{'));
  CHECK(allowed('a'));
  CHECK_FALSE(at_start.fill_mask("Hello {", 2, mask.data(), mask.size()));
}
