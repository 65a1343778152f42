// Issue 30 item 5: tool-call arguments streamed as they are generated, in every call format
// (Hermes/Qwen <tool_call> JSON, Llama bare JSON, the JSON envelope, Qwen3.5 XML parameters and
// LFM2 Python calls, the last two streamed as the JSON they become), on chat completions
// (delta.tool_calls[i].function.arguments after a first chunk with id and name) and the Responses
// API (response.function_call_arguments.delta).
//
// Black-box over loopback with the random-weight shared models and a tool whose string argument
// must be 60+ characters: every call of 50+ characters arrives in at least two pieces, the pieces
// concatenate to the final arguments (the non-streamed reply of the same seed, and the Responses
// API's .done event), and they validate with python3-jsonschema.
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

const std::string kParams =
    R"({"type":"object","properties":{"text":{"type":"string","minLength":60,"maxLength":90},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["text","n"]})";
const std::string kTools = R"([{"type":"function","function":{"name":"write_note","description":"Write a note","parameters":)" +
                           kParams + "}}]";
const std::string kResponsesTools = R"([{"type":"function","name":"write_note","description":"Write a note","parameters":)" +
                                    kParams + "}]";

struct Format {
  const char* label;
  const char* model;
  const char* chat_template;
};

const Format kFormats[] = {
    {"hermes (qwen2.5 <tool_call> JSON)", "qwen2-bpe-q4km.gguf", ""},
    {"llama3.2 bare JSON", "qwen2-bpe-q4km.gguf", "llama3.2"},
    {"envelope (chatml)", "qwen2-bpe-q4km.gguf", "chatml"},
    {"qwen3.5 XML parameters", "qwen35-tiny-q4km.gguf", "qwen3.5"},
    {"lfm2 python calls", "lfm2-tiny-q4km.gguf", "lfm2"},
};

struct StreamedCall {
  std::string id, name, arguments;
  int pieces = 0;  // argument chunks with a non-empty piece
};

// The SSE data lines of a body, parsed.
std::vector<std::string> data_lines(const std::string& sse) {
  std::vector<std::string> out;
  std::istringstream in(sse);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("data: ", 0) == 0 && line != "data: [DONE]") out.push_back(line.substr(6));
  return out;
}

std::map<int64_t, StreamedCall> chat_stream_calls(const std::string& sse) {
  std::map<int64_t, StreamedCall> calls;
  for (const std::string& data : data_lines(sse)) {
    dom::parser p;
    dom::element e;
    INFO(data);
    REQUIRE(!p.parse(data).get(e));
    dom::array ch;
    if (e["choices"].get(ch) || ch.size() == 0) continue;
    dom::array tcs;
    if (ch.at(0)["delta"]["tool_calls"].get(tcs)) continue;
    for (dom::element tc : tcs) {
      StreamedCall& c = calls[int64_t(tc["index"])];
      dom::element v;
      if (!tc["id"].get(v)) {
        CHECK(c.id.empty());  // the id and name come once, first
        c.id = std::string(std::string_view(v));
        c.name = std::string(std::string_view(tc["function"]["name"]));
      } else {
        CHECK(!c.id.empty());  // pieces only after the call's first chunk
      }
      if (!tc["function"]["arguments"].get(v) && !std::string_view(v).empty()) {
        c.arguments += std::string(std::string_view(v));
        ++c.pieces;
      }
    }
  }
  return calls;
}

class Validator {
 public:
  void add(const std::string& text, const std::string& label) {
    lines_ += R"({"text":)" + json_quote(text) + R"(,"label":)" + json_quote(label) + "}\n";
    ++count_;
  }
  void check() {
    REQUIRE(count_ > 0);
    const fs::path dir = fs::temp_directory_path() / ("picolm_test_sc_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path in = dir / "batch.jsonl", script = dir / "validate.py", out = dir / "out.txt";
    std::ofstream(in) << lines_;
    std::string schema = kParams;
    schema.insert(1, R"("additionalProperties":false,)");
    std::ofstream(script) << "import json, sys\nfrom jsonschema import Draft202012Validator\nschema = json.loads(" +
                                 json_quote(schema) + R"PY()
bad = n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    rec = json.loads(line)
    n += 1
    try:
        Draft202012Validator(schema).validate(json.loads(rec["text"]))
    except Exception as e:
        bad += 1
        print("INVALID %s: %s\n  text: %s" % (rec["label"], str(e)[:300], rec["text"][:400]))
print("checked", n, "bad", bad)
sys.exit(1 if bad else 0)
)PY";
    const std::string cmd = "/usr/bin/python3 " + script.string() + " " + in.string() + " > " + out.string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::stringstream ss;
    ss << std::ifstream(out).rdbuf();
    INFO(ss.str());
    CHECK(rc == 0);
    CHECK(ss.str().find("checked " + std::to_string(count_) + " bad 0") != std::string::npos);
    fs::remove_all(dir);
  }

 private:
  std::string lines_;
  int count_ = 0;
};

}  // namespace

TEST_CASE("streamed calls: arguments arrive in pieces that concatenate to the final arguments, every format",
          "[server][tools]") {
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
    int long_calls = 0;
    for (int seed = 1; seed <= 4; ++seed) {
      const std::string label = std::string(f.label) + " seed " + std::to_string(seed);
      const std::string body = R"({"messages":[{"role":"user","content":"Write a long note."}],"tools":)" + kTools +
                               R"(,"tool_choice":"required","temperature":1.0,"max_tokens":200,"seed":)" +
                               std::to_string(seed);
      auto whole = cli->Post("/v1/chat/completions", body + "}", "application/json");
      REQUIRE(whole);
      REQUIRE(whole->status == 200);
      server_fixture::Json j(whole->body);
      dom::array final_calls = j.root["choices"].at(0)["message"]["tool_calls"];
      auto res = cli->Post("/v1/chat/completions", body + R"(,"stream":true})", "application/json");
      REQUIRE(res);
      REQUIRE(res->status == 200);
      INFO(label << "\n" << whole->body << "\n" << res->body);
      const auto calls = chat_stream_calls(res->body);
      REQUIRE(calls.size() == final_calls.size());
      REQUIRE(!calls.empty());
      size_t i = 0;
      for (dom::element fc : final_calls) {
        const StreamedCall& c = calls.at(int64_t(i++));
        const std::string final_args{std::string_view(fc["function"]["arguments"])};
        CHECK(c.name == std::string_view(fc["function"]["name"]));
        CHECK(c.arguments == final_args);  // the same seed: the same call, in pieces
        if (c.arguments.size() >= 50) {
          ++long_calls;
          CHECK(c.pieces >= 2);
        }
        v.add(c.arguments, label + " chat stream");
      }

      // The Responses API: .delta events per call item concatenate to its .done arguments.
      const std::string rbody = R"({"input":"Write a long note.","tools":)" + kResponsesTools +
                                R"(,"tool_choice":"required","temperature":1.0,"max_output_tokens":200,"stream":true,"seed":)" +
                                std::to_string(seed) + "}";
      auto rres = cli->Post("/v1/responses", rbody, "application/json");
      REQUIRE(rres);
      REQUIRE(rres->status == 200);
      INFO(rres->body);
      std::map<std::string, std::string> deltas, done;
      std::map<std::string, int> pieces;
      for (const std::string& data : data_lines(rres->body)) {
        dom::parser p;
        dom::element e;
        REQUIRE(!p.parse(data).get(e));
        const std::string_view type = e["type"];
        if (type == "response.function_call_arguments.delta") {
          const std::string id{std::string_view(e["item_id"])};
          CHECK(done.count(id) == 0);
          deltas[id] += std::string(std::string_view(e["delta"]));
          ++pieces[id];
        } else if (type == "response.function_call_arguments.done") {
          done[std::string(std::string_view(e["item_id"]))] = std::string(std::string_view(e["arguments"]));
        }
      }
      REQUIRE(!done.empty());
      for (const auto& [id, args] : done) {
        CHECK(deltas[id] == args);
        if (args.size() >= 50) CHECK(pieces[id] >= 2);
        v.add(args, label + " responses stream");
      }
    }
    INFO(f.label);
    CHECK(long_calls > 0);  // the minLength makes every call long: the test sees what it is about
  }
  v.check();
}

