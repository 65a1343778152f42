// Issue 30 item 1: response_format (text.format) beside tools under tool_choice auto. A reply is
// either tool calls or a text answer that follows the schema, both under one grammar, complete
// within max_tokens, for every native call format (Hermes/Qwen <tool_call> JSON, Llama bare JSON,
// Qwen3.5 XML parameters, LFM2 Python calls), the JSON envelope, and a thinking model.
//
// Black-box over loopback with the random-weight shared models (the adversary: which branch a
// reply takes is up to a model with no preference; top_k, top_p and min_p off and a high temperature
// spread its first choice over the few tokens that open either branch), many seeds per format:
// every call's arguments
// and every answer validate with python3-jsonschema (one process for all records), no reply is cut
// off, and both branches occur for every format (a format that never answers, or never calls,
// fails: the test would otherwise not see the branch it is about).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "server.h"
#include "server_fixture.h"

using namespace picolm;
namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
using server_fixture::json_quote;

// Short, finite answers: a random-weight model finishes them in a few dozen tokens.
const std::string kAnswerSchema =
    R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},"score":{"type":"integer","minimum":0,"maximum":9},"sunny":{"type":"boolean"}},"required":["city","score"],"additionalProperties":false})";

std::string read_text(const fs::path& p) {
  std::stringstream ss;
  ss << std::ifstream(p).rdbuf();
  return ss.str();
}

// The tool's parameters as the provider compiles them: closed objects at the top level.
std::string tool_schema(const std::string& tools_json, const std::string& name) {
  dom::parser p;
  dom::element e;
  REQUIRE(!p.parse(tools_json).get(e));
  for (dom::element t : dom::array(e)) {
    if (std::string_view(t["function"]["name"]) != name) continue;
    std::string s = simdjson::minify(t["function"]["parameters"]);
    if (s.find("\"additionalProperties\"") == std::string::npos) s = R"({"additionalProperties":false,)" + s.substr(1);
    return s;
  }
  FAIL("the reply called an unknown tool: " << name);
  return "";
}

// (schema, instance text, label) records, validated together by python3-jsonschema.
class Validator {
 public:
  void add(const std::string& schema, const std::string& text, const std::string& label) {
    lines_ += R"({"schema":)" + schema + R"(,"text":)" + json_quote(text) + R"(,"label":)" + json_quote(label) + "}\n";
    ++count_;
  }
  void check() {
    REQUIRE(count_ > 0);
    const fs::path dir = fs::temp_directory_path() / ("picolm_test_sbt_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path in = dir / "batch.jsonl", script = dir / "validate.py", out = dir / "out.txt";
    std::ofstream(in) << lines_;
    std::ofstream(script) << R"PY(
import json, sys
from jsonschema import Draft202012Validator
bad = n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    rec = json.loads(line)
    n += 1
    try:
        Draft202012Validator(rec["schema"]).validate(json.loads(rec["text"]))
    except Exception as e:
        bad += 1
        print("INVALID %s: %s\n  text: %s" % (rec["label"], str(e)[:300], rec["text"][:400]))
print("checked", n, "bad", bad)
sys.exit(1 if bad else 0)
)PY";
    const std::string cmd = "/usr/bin/python3 " + script.string() + " " + in.string() + " > " + out.string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string report = read_text(out);
    INFO(report);
    CHECK(rc == 0);
    CHECK(report.find("checked " + std::to_string(count_) + " bad 0") != std::string::npos);
    fs::remove_all(dir);
  }

 private:
  std::string lines_;
  int count_ = 0;
};

struct Format {
  const char* label;
  const char* model;     // in ../shared/models
  const char* chat_template;  // "" = the GGUF's
  bool thinking;
};

// Every call format the provider constrains, and the envelope.
const Format kFormats[] = {
    {"hermes (qwen2.5 <tool_call> JSON)", "qwen2-bpe-q4km.gguf", "", false},
    {"llama3.2 bare JSON", "qwen2-bpe-q4km.gguf", "llama3.2", false},
    {"envelope (chatml)", "qwen2-bpe-q4km.gguf", "chatml", false},
    {"qwen3 thinking, <tool_call> JSON", "qwen3-bpe-q4km.gguf", "", true},
    {"qwen3.5 XML parameters", "qwen35-tiny-q4km.gguf", "qwen3.5", false},
    {"lfm2 python calls", "lfm2-tiny-q4km.gguf", "lfm2", false},
};

std::string request(const Format& f, uint64_t seed, bool stream, bool json_object) {
  const std::string format = json_object ? R"({"type":"json_object"})"
                                         : R"({"type":"json_schema","json_schema":{"name":"weather","strict":true,"schema":)" +
                                               kAnswerSchema + "}}";
  std::string body = R"({"messages":[{"role":"system","content":"Answer in JSON or call a tool."},)"
                     R"({"role":"user","content":"Weather in Paris? Or switch the kitchen light on."}],"tools":)" +
                     server_fixture::kHouseTools + R"(,"response_format":)" + format +
                     R"(,"temperature":2.0,"top_k":0,"top_p":1,"min_p":0,"max_tokens":96,"seed":)" + std::to_string(seed);
  if (f.thinking) body += R"(,"chat_template_kwargs":{"enable_thinking":true})";
  if (stream) body += R"(,"stream":true)";
  return body + "}";
}

struct Reply {
  std::string content;  // "" when null
  bool has_content = false;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::string finish;
};

Reply parse_reply(const std::string& body) {
  server_fixture::Json j(body);
  dom::element msg = j.root["choices"].at(0)["message"];
  Reply r;
  r.finish = std::string(std::string_view(j.root["choices"].at(0)["finish_reason"]));
  dom::element c;
  if (!msg["content"].get(c) && c.is_string()) {
    r.content = std::string(std::string_view(c));
    r.has_content = true;
  }
  dom::array calls;
  if (!msg["tool_calls"].get(calls))
    for (dom::element t : calls)
      r.calls.emplace_back(std::string(std::string_view(t["function"]["name"])),
                           std::string(std::string_view(t["function"]["arguments"])));
  return r;
}

// The streamed content deltas of a chat-completions SSE body, concatenated.
std::string streamed_content(const std::string& sse) {
  std::string out;
  std::istringstream in(sse);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    dom::parser p;
    dom::element e;
    REQUIRE(!p.parse(line.substr(6)).get(e));
    dom::array ch;
    if (e["choices"].get(ch) || ch.size() == 0) continue;
    dom::element c;
    if (!ch.at(0)["delta"]["content"].get(c) && c.is_string()) out += std::string(std::string_view(c));
  }
  return out;
}

}  // namespace

TEST_CASE("schema beside tools: every reply is a valid call or a valid answer, in every call format", "[server][tools]") {
  constexpr int kSeeds = 32;
  Validator v;
  for (const Format& f : kFormats) {
    const std::string model = kShared + "/models/" + f.model;
    REQUIRE(fs::exists(model));  // a missing model fails the test
    ServerOptions o;
    o.engine.model_path = model;
    o.engine.threads = 1;
    o.engine.n_ctx = 2048;
    o.engine.cache_ram_mb = 64;
    o.engine.timeout_sec = 300.0;
    o.engine.chat_template = f.chat_template;
    server_fixture::Started s = server_fixture::start(std::move(o));
    auto cli = server_fixture::client(s.port);
    int answers = 0, call_replies = 0;
    for (int seed = 1; seed <= kSeeds; ++seed) {
      const bool json_object = seed % 6 == 0;
      auto res = cli->Post("/v1/chat/completions", request(f, static_cast<uint64_t>(seed), false, json_object),
                           "application/json");
      REQUIRE(res);
      INFO(f.label << " seed " << seed << ": " << res->body);
      REQUIRE(res->status == 200);
      const Reply r = parse_reply(res->body);
      const std::string label = std::string(f.label) + " seed " + std::to_string(seed);
      CHECK(r.finish != "length");  // the grammar's closing guarantee: never cut off
      if (!r.calls.empty()) {
        ++call_replies;
        CHECK(r.finish == "tool_calls");
        for (const auto& [name, args] : r.calls) v.add(tool_schema(server_fixture::kHouseTools, name), args, label + " call");
      } else {
        REQUIRE(r.has_content);
        ++answers;
        v.add(json_object ? R"({"type":"object"})" : kAnswerSchema, r.content, label + " answer");
      }
    }
    INFO(f.label << ": " << answers << " answers, " << call_replies << " call replies");
    CHECK(answers > 0);
    CHECK(call_replies > 0);

    // Streamed: an answer streams as content and equals the final answer's text.
    int streamed_answers = 0;
    for (int seed = 1; seed <= kSeeds && streamed_answers < 2; ++seed) {
      auto plain = cli->Post("/v1/chat/completions", request(f, static_cast<uint64_t>(seed), false, false), "application/json");
      REQUIRE(plain);
      const Reply r = parse_reply(plain->body);
      if (!r.calls.empty()) continue;
      auto res = cli->Post("/v1/chat/completions", request(f, static_cast<uint64_t>(seed), true, false), "application/json");
      REQUIRE(res);
      REQUIRE(res->status == 200);
      const std::string text = streamed_content(res->body);
      INFO(f.label << " streamed seed " << seed << ": " << res->body);
      CHECK(text == r.content);  // the same seed: the same reply, streamed
      v.add(kAnswerSchema, text, std::string(f.label) + " streamed seed " + std::to_string(seed));
      ++streamed_answers;
    }
    CHECK(streamed_answers > 0);
  }
  v.check();
}

TEST_CASE("schema beside tools: the Responses API's text.format applies to the text answer", "[server][tools]") {
  const std::string model = kShared + "/models/qwen2-bpe-q4km.gguf";
  REQUIRE(fs::exists(model));
  ServerOptions o;
  o.engine.model_path = model;
  o.engine.threads = 1;
  o.engine.n_ctx = 2048;
  o.engine.timeout_sec = 300.0;
  server_fixture::Started s = server_fixture::start(std::move(o));
  auto cli = server_fixture::client(s.port);
  // Responses tools are flat: {"type":"function","name","parameters"}.
  const std::string tools =
      R"([{"type":"function","name":"set_volume","parameters":{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":10}},"required":["level"]}}])";
  const std::string tool_params =
      R"({"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":10}},"required":["level"],"additionalProperties":false})";
  Validator v;
  int answers = 0, calls = 0;
  for (int seed = 1; seed <= 24; ++seed) {
    const std::string body =
        R"({"input":"Weather in Paris? Or turn it up.","tools":)" + tools +
        R"(,"text":{"format":{"type":"json_schema","name":"weather","strict":true,"schema":)" + kAnswerSchema +
        R"(}},"temperature":2.0,"top_k":0,"top_p":1,"min_p":0,"max_output_tokens":96,"seed":)" + std::to_string(seed) + "}";
    auto res = cli->Post("/v1/responses", body, "application/json");
    REQUIRE(res);
    INFO("seed " << seed << ": " << res->body);
    REQUIRE(res->status == 200);
    server_fixture::Json j(res->body);
    CHECK(std::string_view(j.root["status"]) == "completed");
    for (dom::element item : dom::array(j.root["output"])) {
      const std::string_view type = item["type"];
      if (type == "function_call") {
        ++calls;
        CHECK(std::string_view(item["name"]) == "set_volume");
        v.add(tool_params, std::string(std::string_view(item["arguments"])), "responses call seed " + std::to_string(seed));
      } else if (type == "message") {
        ++answers;
        v.add(kAnswerSchema, std::string(std::string_view(item["content"].at(0)["text"])),
              "responses answer seed " + std::to_string(seed));
      }
    }
  }
  INFO(answers << " answers, " << calls << " calls");
  CHECK(answers > 0);
  CHECK(calls > 0);
  v.check();
}
