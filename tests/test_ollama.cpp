// Ollama's native API (issue 30 item 7), black-box over loopback: the server runs in-process on an
// ephemeral port, httplib::Client talks to it. Tool-call arguments and `format` outputs are checked
// by python3-jsonschema (tests/validate_tool_args.py, tests/validate_instances.py), not by the
// grammar that made them; NDJSON streams are read line by line and compared with the whole answer.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ollama.h"
#include "server.h"
#include "server_fixture.h"

using namespace picolm;
namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
const std::string kQwen = kShared + "/models/qwen2-bpe-q4km.gguf";    // Qwen2.5 template: <tool_call> JSON
const std::string kQwen3 = kShared + "/models/qwen3-bpe-q4km.gguf";   // Qwen3: <think>, <tool_call>
const std::string kStories = kShared + "/models/stories260K.gguf";     // tiny, no chat template

using server_fixture::client;
using server_fixture::Json;
using server_fixture::Started;
const std::string& kTools = server_fixture::kHouseTools;

Started start_server(const std::string& model, int n_ctx, const std::string& api_key = "") {
  REQUIRE(fs::exists(model));  // a missing input fails the test
  ServerOptions o;
  o.api_key = api_key;
  o.engine.model_path = model;
  o.engine.threads = 1;
  o.engine.n_ctx = n_ctx;
  o.engine.cache_ram_mb = 64;
  o.engine.timeout_sec = 300.0;
  return server_fixture::start(std::move(o));
}

Started& qwen() {
  static Started s = start_server(kQwen, 2048);
  return s;
}
Started& qwen3() {
  static Started s = start_server(kQwen3, 2048);
  return s;
}

std::string str(dom::element e) { return std::string(std::string_view(e)); }

// An Ollama error: {"error": "text"} and nothing else.
std::string error_text(const std::string& body) {
  Json j(body);
  INFO(body);
  REQUIRE(j.root.type() == dom::element_type::OBJECT);
  REQUIRE(dom::object(j.root).size() == 1);
  dom::element e;
  REQUIRE(!j.root["error"].get(e));
  REQUIRE(e.type() == dom::element_type::STRING);
  return str(e);
}

// The lines of an NDJSON body, each parsed; every line ends with "\n".
std::vector<std::unique_ptr<Json>> ndjson(const std::string& body) {
  INFO(body);
  REQUIRE(!body.empty());
  REQUIRE(body.back() == '\n');
  std::vector<std::unique_ptr<Json>> lines;
  size_t at = 0;
  while (at < body.size()) {
    const size_t nl = body.find('\n', at);
    lines.push_back(std::make_unique<Json>(body.substr(at, nl - at)));
    at = nl + 1;
  }
  return lines;
}

// Every instance validates against its schema (python3-jsonschema via validate_instances.py).
void validate_instances(const std::vector<std::pair<std::string, std::string>>& schema_and_text) {
  REQUIRE(!schema_and_text.empty());
  const fs::path dir = fs::temp_directory_path() / ("picolm_test_ollama_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "in.jsonl", out = dir / "out.jsonl";
  {
    std::ofstream f(in);
    int id = 0;
    for (const auto& [schema, text] : schema_and_text) {
      std::string hex;
      char buf[3];
      for (unsigned char ch : text) {
        std::snprintf(buf, sizeof buf, "%02x", ch);
        hex += buf;
      }
      f << R"({"id":)" << id++ << R"(,"kind":"schema","schema":)" << schema << R"(,"text_hex":")" << hex << "\"}\n";
    }
  }
  const std::string cmd = "/usr/bin/python3 '" + std::string(PICOLM_SOURCE_DIR) + "/tests/validate_instances.py' '" +
                          in.string() + "' > '" + out.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  const std::string report = ss.str();
  INFO(report);
  CHECK(rc == 0);
  CHECK(report.find("\"ok\": false") == std::string::npos);
  CHECK(report.find("\"ok\": true") != std::string::npos);
  fs::remove_all(dir);
}

const std::string kFormat =
    R"({"type":"object","properties":{"room":{"type":"string","enum":["kitchen","bedroom","hall"]},"on":{"type":"boolean"},"level":{"type":"integer","minimum":0,"maximum":10}},"required":["room","on","level"],"additionalProperties":false})";

std::string chat_body(const std::string& extra) {
  return R"({"model":"picolm","messages":[{"role":"system","content":"You control a house."},{"role":"user","content":"Turn on the kitchen light"}])" +
         (extra.empty() ? "" : "," + extra) + "}";
}

}  // namespace

TEST_CASE("ollama: a conversation with calls and results becomes the chat request", "[ollama]") {
  OllamaRequest r;
  ApiError err;
  // Home Assistant's shape: tool results with neither tool_call_id nor tool_name; arguments as objects.
  const std::string body = R"({"model":"m","messages":[
    {"role":"user","content":"lights"},
    {"role":"assistant","content":"","thinking":"two calls","tool_calls":[
      {"function":{"name":"set_light","arguments":{"room":"hall","on":true}}},
      {"function":{"name":"set_volume","arguments":{"level":3}}}]},
    {"role":"tool","content":"{\"ok\":2}","tool_name":"set_volume"},
    {"role":"tool","content":"{\"ok\":1}"},
    {"role":"user","content":"thanks"}],
    "tools":)" + kTools + R"(,"format":"json","think":false,"keep_alive":"300s",
    "options":{"num_ctx":8192,"num_predict":-1,"temperature":0.5,"top_k":20,"seed":7,"stop":["END"],"num_thread":4}})";
  REQUIRE(parse_ollama_chat_request(body, r, err));
  INFO(err.message);
  CHECK(r.chat.stream);  // Ollama's default
  CHECK(!r.load_only);
  REQUIRE(r.chat.messages.size() == 5);
  const auto& a = r.chat.messages[1];
  REQUIRE(a.tool_calls.size() == 2);
  CHECK(a.reasoning_content == std::optional<std::string>("two calls"));
  CHECK(a.tool_calls[0].name == "set_light");
  CHECK(a.tool_calls[0].arguments_json == R"({"room":"hall","on":true})");
  CHECK(a.tool_calls[0].id.size() == 9);  // Mistral's template wants 9 alphanumerics
  CHECK(a.tool_calls[0].id != a.tool_calls[1].id);
  // By name, then by position.
  CHECK(r.chat.messages[2].tool_call_id == a.tool_calls[1].id);
  CHECK(r.chat.messages[2].name == "set_volume");
  CHECK(r.chat.messages[3].tool_call_id == a.tool_calls[0].id);
  CHECK(r.chat.messages[3].name == "set_light");
  CHECK(r.chat.tools.size() == 3);
  CHECK(r.chat.response_format == ResponseFormat::JsonObject);
  CHECK(r.chat.enable_thinking == std::optional<bool>(false));
  CHECK(r.num_ctx == std::optional<int64_t>(8192));
  CHECK(!r.chat.max_tokens);
  CHECK(r.chat.temperature == std::optional<double>(0.5));
  CHECK(r.chat.top_k == std::optional<int64_t>(20));
  CHECK(r.chat.seed == std::optional<uint64_t>(7));
  CHECK(r.chat.stop == std::vector<std::string>{"END"});

  // The same conversation sent again gets the same ids (the prompt cache keeps its prefix).
  OllamaRequest again;
  REQUIRE(parse_ollama_chat_request(body, again, err));
  CHECK(again.chat.messages[1].tool_calls[0].id == a.tool_calls[0].id);

  OllamaRequest schema;
  REQUIRE(parse_ollama_chat_request(R"({"messages":[{"role":"user","content":"x"}],"format":)" + kFormat +
                                        R"(,"stream":false,"think":"high","options":{"num_predict":5}})",
                                    schema, err));
  CHECK(schema.chat.response_format == ResponseFormat::JsonSchema);
  CHECK(!schema.chat.stream);
  CHECK(schema.chat.max_tokens == std::optional<int64_t>(5));
  CHECK(schema.chat.reasoning_effort == std::optional<ReasoningEffort>(ReasoningEffort::High));

  OllamaRequest gen;
  REQUIRE(parse_ollama_generate_request(R"({"model":"m","system":"Be brief.","prompt":"Hi","raw":false})", gen, err));
  CHECK(gen.generate);
  REQUIRE(gen.chat.messages.size() == 2);
  CHECK(gen.chat.messages[0].role == "system");
  CHECK(gen.chat.messages[1].content == "Hi");

  OllamaRequest load;
  REQUIRE(parse_ollama_chat_request(R"({"model":"m"})", load, err));
  CHECK(load.load_only);
}

TEST_CASE("ollama: bad requests are refused with a message naming the field", "[ollama]") {
  struct Case { std::string body, param, words; bool generate = false; };
  const std::vector<Case> cases = {
      {R"({"messages":[{"role":"user","content":"x"}],"format":"xml"})", "format", "\"json\" or a JSON Schema"},
      {R"({"messages":[{"role":"user","content":"x"}],"format":{"type":"object","properties":{"a":{"type":"strin"}}}})", "format", ""},
      {R"({"messages":[{"role":"user","content":"x","images":["aGk="]}]})", "messages[0].images", "does not support image input"},
      {R"({"messages":[{"role":"user","content":"x"}],"options":{"mirostat":2}})", "options.mirostat", "not supported"},
      {R"({"messages":[{"role":"user","content":"x"}],"options":{"temperature":"hot"}})", "options.temperature", "a number"},
      {R"({"messages":[{"role":"user","content":"x"}],"options":{"num_predict":0}})", "options.num_predict", "at least 1"},
      {R"({"messages":[{"role":"user","content":"x"}],"think":"maybe"})", "think", "true, false"},
      {R"({"messages":[{"role":"user","content":"x"}],"keep_alive":[1]})", "keep_alive", "duration"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", "unknown role"},
      {R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"arguments":{}}}]}]})",
       "messages[0].tool_calls[0].function.name", "required"},
      {R"({"prompt":"x","raw":true})", "raw", "not supported", true},
      {R"({"prompt":"x","suffix":"y"})", "suffix", "not supported", true},
      {R"({"prompt":"x","images":["aGk="]})", "images", "does not support image input", true},
      {R"({"prompt":"x","context":[1,2,3]})", "context", "/api/chat", true},
  };
  for (const auto& c : cases) {
    OllamaRequest r;
    ApiError err;
    const bool ok = c.generate ? parse_ollama_generate_request(c.body, r, err) : parse_ollama_chat_request(c.body, r, err);
    INFO(c.body << " -> " << err.message);
    // The schema of the second case is only rejected by Engine::prepare (it compiles the grammar).
    if (c.words.empty()) continue;
    CHECK(!ok);
    CHECK(err.status == 400);
    CHECK(err.param == c.param);
    CHECK(err.message.find(c.words) != std::string::npos);
  }
}

TEST_CASE("ollama: version, tags, ps and show describe the served model", "[ollama][server]") {
  Started& s = qwen3();
  auto c = client(s.port);
  auto res = c->Get("/api/version");
  REQUIRE(res);
  CHECK(res->status == 200);
  {
    Json j(res->body);
    dom::element v;
    REQUIRE(!j.root["version"].get(v));
    CHECK(!str(v).empty());
  }

  res = c->Get("/");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "Ollama is running");

  res = c->Get("/api/tags");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  {
    Json j(res->body);
    dom::array models = j.root["models"];
    REQUIRE(models.size() == 1);
    dom::element m = models.at(0);
    CHECK(str(m["name"]) == "qwen3-bpe-q4km");
    CHECK(str(m["model"]) == "qwen3-bpe-q4km");
    CHECK(int64_t(m["size"]) == static_cast<int64_t>(fs::file_size(kQwen3)));
    const std::string digest = str(m["digest"]);
    CHECK(digest.size() == 64);
    CHECK(digest.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(str(m["modified_at"]).size() >= 20);
    CHECK(str(m["details"]["format"]) == "gguf");
    CHECK(str(m["details"]["family"]) == "qwen3");
    CHECK(!str(m["details"]["parameter_size"]).empty());
    CHECK(str(m["details"]["quantization_level"]) == "Q4_K_M");  // general.file_type, named as llama.cpp does
  }

  res = c->Get("/api/ps");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  {
    Json j(res->body);
    dom::array models = j.root["models"];
    REQUIRE(models.size() == 1);
    CHECK(str(models.at(0)["name"]) == "qwen3-bpe-q4km");
    CHECK(int64_t(models.at(0)["context_length"]) == 2048);
    CHECK(!str(models.at(0)["expires_at"]).empty());
  }

  res = c->Post("/api/show", R"({"model":"qwen3-bpe-q4km"})", "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  {
    Json j(res->body);
    std::vector<std::string> caps;
    for (dom::element e : dom::array(j.root["capabilities"])) caps.push_back(str(e));
    CHECK(caps == std::vector<std::string>{"completion", "tools", "thinking"});
    CHECK(str(j.root["details"]["family"]) == "qwen3");
    CHECK(str(j.root["model_info"]["general.architecture"]) == "qwen3");
    CHECK(int64_t(j.root["model_info"]["general.parameter_count"]) > 0);
    CHECK(str(j.root["template"]).find("<tool_call>") != std::string::npos);
    CHECK(str(j.root["parameters"]).find("num_ctx 2048") != std::string::npos);
  }
  res = c->Post("/api/show", "not json", "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(!error_text(res->body).empty());
}

TEST_CASE("ollama: errors on /api/* are {\"error\": text}", "[ollama][server]") {
  Started& s = qwen();
  auto c = client(s.port);
  auto res = c->Post("/api/pull", R"({"model":"llama3.2"})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 404);
  CHECK(error_text(res->body).find("/api/chat") != std::string::npos);
  res = c->Get("/api/nothing");
  REQUIRE(res);
  CHECK(res->status == 404);
  error_text(res->body);
  res = c->Get("/api/chat");
  REQUIRE(res);
  CHECK(res->status == 405);
  CHECK(error_text(res->body).find("POST") != std::string::npos);
  res = c->Post("/api/chat", R"({"messages":[{"role":"user","content":"x"}],"format":"xml"})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(error_text(res->body).find("format") != std::string::npos);
  res = c->Post("/api/chat", "{", "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(error_text(res->body).find("not valid JSON") != std::string::npos);
  // From Engine::prepare (the grammar compiler), renamed to Ollama's field.
  res = c->Post("/api/chat", chat_body(R"("stream":false,"format":{"type":"object","properties":{"a":{"type":"strin"}}})"),
                "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  const std::string text = error_text(res->body);
  CHECK(text.find("response_format") == std::string::npos);
  // As Ollama: think on a model that cannot think.
  res = c->Post("/api/chat", chat_body(R"("stream":false,"think":true)"), "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(error_text(res->body).find("does not support thinking") != std::string::npos);
  // The OpenAI paths keep their own shape.
  res = c->Get("/v1/nothing");
  REQUIRE(res);
  CHECK(res->status == 404);
  CHECK(res->body.find("\"message\"") != std::string::npos);
}

TEST_CASE("ollama: the server's own errors (401, 503 while loading or failed) are {\"error\": text} too", "[ollama][server]") {
  {
    Started s = start_server(kStories, 512, "sekret");
    auto c = client(s.port);
    auto res = c->Get("/api/tags");
    REQUIRE(res);
    CHECK(res->status == 401);
    CHECK(error_text(res->body).find("API key") != std::string::npos);
    httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
    res = c->Get("/api/tags", auth);
    REQUIRE(res);
    CHECK(res->status == 200);
    res = c->Post("/api/chat", auth, R"({"messages":[{"role":"user","content":"x"}],"stream":false,"options":{"num_predict":2}})",
                  "application/json");
    REQUIRE(res);
    INFO(res->body);
    CHECK(res->status == 200);
    s.server->stop();
  }
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.engine.model_path = "/nonexistent/model.gguf";
  Server server(o);
  auto port = server.start();
  REQUIRE(port.ok());
  CHECK(!server.wait_loaded(std::chrono::seconds(30)).ok());
  auto c = client(port.value());
  auto res = c->Post("/api/chat", R"({"messages":[{"role":"user","content":"x"}]})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 503);
  CHECK(error_text(res->body).find("failed to load") != std::string::npos);
  res = c->Get("/api/ps");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == R"({"models":[]})");
  server.stop();
}

TEST_CASE("ollama: /api/chat with tools, format and streaming", "[ollama][server]") {
  Started& s = qwen();
  auto c = client(s.port);

  SECTION("calls validate against their tools; a call round trip continues the conversation") {
    server_fixture::CallSets sets{{kTools, {}}};
    for (int seed = 1; seed <= 3; ++seed) {
      auto res = c->Post("/api/chat",
                         chat_body(R"("tools":)" + kTools + R"(,"tool_choice":"required","stream":false,"options":{"seed":)" +
                                   std::to_string(seed) + R"(,"temperature":1.0,"num_predict":200})"),
                         "application/json");
      REQUIRE(res);
      INFO(res->body);
      REQUIRE(res->status == 200);
      CHECK(res->get_header_value("Content-Type").find("application/json") == 0);
      Json j(res->body);
      CHECK(str(j.root["model"]) == "picolm");  // the name asked for
      CHECK(bool(j.root["done"]));
      CHECK(str(j.root["done_reason"]) == "stop");
      CHECK(int64_t(j.root["prompt_eval_count"]) > 0);
      CHECK(int64_t(j.root["eval_count"]) > 0);
      CHECK(int64_t(j.root["total_duration"]) > 0);
      CHECK(str(j.root["message"]["role"]) == "assistant");
      dom::array calls = j.root["message"]["tool_calls"];
      REQUIRE(calls.size() >= 1);
      for (dom::element call : calls) {
        dom::element args = call["function"]["arguments"];
        REQUIRE(args.type() == dom::element_type::OBJECT);  // an object, not a JSON string
        sets[0].second.emplace_back(str(call["function"]["name"]), simdjson::minify(args));
      }
      // The call and a result without an id go back in Ollama's shape.
      const std::string call_json = simdjson::minify(calls.at(0));
      auto next = c->Post("/api/chat",
                          R"({"model":"picolm","stream":false,"tools":)" + kTools +
                              R"(,"options":{"num_predict":8,"seed":1},"messages":[{"role":"user","content":"Lights"},)"
                              R"({"role":"assistant","content":"","tool_calls":[)" + call_json + R"(]},)"
                              R"({"role":"tool","content":"{\"ok\":true}"}]})",
                          "application/json");
      REQUIRE(next);
      INFO(next->body);
      CHECK(next->status == 200);
    }
    server_fixture::validate_tool_calls(sets);
  }

  SECTION("streamed calls: a line of their own before the last line, arguments as objects that validate") {
    server_fixture::CallSets sets{{kTools, {}}};
    for (int seed = 4; seed <= 5; ++seed) {
      auto res = c->Post("/api/chat",
                         chat_body(R"("tools":)" + kTools + R"(,"tool_choice":"required","options":{"seed":)" +
                                   std::to_string(seed) + R"(,"temperature":1.0,"num_predict":200})"),
                         "application/json");
      REQUIRE(res);
      INFO(res->body);
      REQUIRE(res->status == 200);
      auto lines = ndjson(res->body);
      REQUIRE(lines.size() >= 2);
      int call_lines = 0;
      for (size_t i = 0; i < lines.size(); ++i) {
        dom::element l = lines[i]->root;
        CHECK(bool(l["done"]) == (i + 1 == lines.size()));
        dom::element calls;
        if (l["message"]["tool_calls"].get(calls)) continue;
        ++call_lines;
        CHECK(i + 2 == lines.size());  // right before the last line
        for (dom::element call : dom::array(calls)) {
          dom::element args = call["function"]["arguments"];
          REQUIRE(args.type() == dom::element_type::OBJECT);
          sets[0].second.emplace_back(str(call["function"]["name"]), simdjson::minify(args));
        }
      }
      CHECK(call_lines == 1);
    }
    server_fixture::validate_tool_calls(sets);
  }

  SECTION("format: a JSON Schema, whole and streamed as NDJSON; the stream adds up to the whole answer") {
    std::vector<std::pair<std::string, std::string>> outputs;
    for (int seed = 1; seed <= 3; ++seed) {
      const std::string opts = R"("options":{"seed":)" + std::to_string(seed) + R"(,"temperature":0})";
      auto whole = c->Post("/api/chat", chat_body(R"("format":)" + kFormat + R"(,"stream":false,)" + opts),
                           "application/json");
      REQUIRE(whole);
      INFO(whole->body);
      REQUIRE(whole->status == 200);
      Json w(whole->body);
      const std::string content = str(w.root["message"]["content"]);
      outputs.emplace_back(kFormat, content);

      auto streamed = c->Post("/api/chat", chat_body(R"("format":)" + kFormat + "," + opts), "application/json");
      REQUIRE(streamed);
      INFO(streamed->body);
      REQUIRE(streamed->status == 200);
      CHECK(streamed->get_header_value("Content-Type") == "application/x-ndjson");
      auto lines = ndjson(streamed->body);
      REQUIRE(lines.size() >= 2);
      std::string joined;
      for (size_t i = 0; i < lines.size(); ++i) {
        dom::element l = lines[i]->root;
        CHECK(str(l["model"]) == "picolm");
        CHECK(str(l["created_at"]).back() == 'Z');
        CHECK(str(l["message"]["role"]) == "assistant");
        const bool last = i + 1 == lines.size();
        CHECK(bool(l["done"]) == last);
        joined += str(l["message"]["content"]);
        if (last) {
          CHECK(str(l["done_reason"]) == "stop");
          CHECK(int64_t(l["eval_count"]) == int64_t(w.root["eval_count"]));
          CHECK(int64_t(l["prompt_eval_count"]) == int64_t(w.root["prompt_eval_count"]));
          dom::element d;
          CHECK(!l["total_duration"].get(d));
          CHECK(!l["eval_duration"].get(d));
          CHECK(!l["prompt_eval_duration"].get(d));
          CHECK(!l["load_duration"].get(d));
        }
      }
      CHECK(joined == content);
      outputs.emplace_back(kFormat, joined);
    }
    auto json_mode = c->Post("/api/chat", chat_body(R"("format":"json","stream":false,"options":{"num_predict":60,"seed":3})"),
                             "application/json");
    REQUIRE(json_mode);
    REQUIRE(json_mode->status == 200);
    Json jm(json_mode->body);
    if (str(jm.root["done_reason"]) == "stop") outputs.emplace_back("{\"type\":\"object\"}", str(jm.root["message"]["content"]));
    validate_instances(outputs);
  }

  SECTION("options: num_predict ends with length; num_ctx above the server's context is capped, not refused") {
    auto res = c->Post("/api/chat", chat_body(R"("stream":false,"options":{"num_predict":3,"num_ctx":131072,"seed":1})"),
                       "application/json");
    REQUIRE(res);
    INFO(res->body);
    REQUIRE(res->status == 200);
    Json j(res->body);
    CHECK(str(j.root["done_reason"]) == "length");
    CHECK(int64_t(j.root["eval_count"]) == 3);
  }

  SECTION("no messages: the load answer, nothing generated") {
    auto res = c->Post("/api/chat", R"({"model":"picolm","messages":[],"keep_alive":-1})", "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    Json j(res->body);
    CHECK(bool(j.root["done"]));
    CHECK(str(j.root["done_reason"]) == "load");
  }

  SECTION("/api/generate: prompt and system, whole and streamed") {
    const std::string body = R"({"model":"picolm","system":"Be brief.","prompt":"Say hi","options":{"num_predict":12,"seed":5,"temperature":0})";
    auto whole = c->Post("/api/generate", body + R"(,"stream":false})", "application/json");
    REQUIRE(whole);
    INFO(whole->body);
    REQUIRE(whole->status == 200);
    Json w(whole->body);
    CHECK(bool(w.root["done"]));
    CHECK(int64_t(w.root["eval_count"]) > 0);
    const std::string response = str(w.root["response"]);
    auto streamed = c->Post("/api/generate", body + "}", "application/json");
    REQUIRE(streamed);
    REQUIRE(streamed->status == 200);
    auto lines = ndjson(streamed->body);
    std::string joined;
    for (auto& l : lines) joined += str(l->root["response"]);
    CHECK(joined == response);
    CHECK(bool(lines.back()->root["done"]));
  }
}

TEST_CASE("ollama: think switches the thinking on and off; the thinking arrives in message.thinking", "[ollama][server]") {
  Started& s = qwen3();
  auto c = client(s.port);
  auto on = c->Post("/api/chat", chat_body(R"("think":true,"stream":false,"options":{"num_predict":40,"seed":2})"),
                    "application/json");
  REQUIRE(on);
  INFO(on->body);
  REQUIRE(on->status == 200);
  Json j(on->body);
  dom::element thinking;
  REQUIRE(!j.root["message"]["thinking"].get(thinking));
  CHECK(!str(thinking).empty());

  auto streamed = c->Post("/api/chat", chat_body(R"("think":true,"options":{"num_predict":40,"seed":2})"), "application/json");
  REQUIRE(streamed);
  REQUIRE(streamed->status == 200);
  std::string joined;
  for (auto& l : ndjson(streamed->body)) {
    dom::element t;
    if (!l->root["message"]["thinking"].get(t)) joined += str(t);
  }
  CHECK(joined == str(thinking));

  auto off = c->Post("/api/chat", chat_body(R"("think":false,"stream":false,"options":{"num_predict":20,"seed":2})"),
                     "application/json");
  REQUIRE(off);
  INFO(off->body);
  REQUIRE(off->status == 200);
  Json k(off->body);
  CHECK(k.root["message"]["thinking"].error() == simdjson::NO_SUCH_FIELD);
}
