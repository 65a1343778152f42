// Set-up shared by the black-box server tests (test_server, test_slots, test_jump_forward): an
// in-process Server on an ephemeral loopback port, an HTTP client for it, a JSON reply holder and
// a tool list whose arguments are finite by construction.
#pragma once
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>
#include <memory>
#include <string>

#include "server.h"

namespace server_fixture {

// Tools whose arguments are finite by construction (enums, booleans, bounded integers, short
// strings), so that even a random-weight model completes a call in a few dozen tokens.
inline const std::string kHouseTools = R"([
 {"type":"function","function":{"name":"set_light","description":"Switch a light","parameters":{"type":"object","properties":{"room":{"type":"string","enum":["kitchen","bedroom","hall"]},"on":{"type":"boolean"}},"required":["room","on"]}}},
 {"type":"function","function":{"name":"set_volume","description":"Set the volume","parameters":{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":10}},"required":["level"]}}},
 {"type":"function","function":{"name":"note","parameters":{"type":"object","properties":{"tag":{"type":"string","maxLength":3,"pattern":"^[a-z]*$"}},"required":["tag"],"additionalProperties":false}}}
])";

struct Started {
  std::unique_ptr<picolm::Server> server;
  int port = 0;
  std::shared_ptr<picolm::Engine> engine;
};

// Starts a server with `o` on 127.0.0.1, an ephemeral port, and waits for its model; fails the
// test if either does not happen.
inline Started start(picolm::ServerOptions o) {
  o.host = "127.0.0.1";
  o.port = 0;
  Started s;
  s.server = std::make_unique<picolm::Server>(o);
  auto port = s.server->start();
  REQUIRE(port.ok());
  s.port = port.value();
  picolm::Status st = s.server->wait_loaded(std::chrono::seconds(120));
  INFO((st.ok() ? std::string() : st.error()));
  REQUIRE(st.ok());
  s.engine = s.server->engine();
  REQUIRE(s.engine);
  return s;
}

inline std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  // As long as the engine's own request timeout in the tests (600 s): a request under the
  // sanitizers on a busy CI machine may take minutes, and the verdict must not depend on that.
  c->set_read_timeout(600, 0);
  c->set_write_timeout(30, 0);
  return c;
}

// A parsed JSON body; fails the test if it does not parse.
struct Json {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  explicit Json(const std::string& text) {
    auto err = parser.parse(text).get(root);
    INFO(text);
    REQUIRE(!err);
  }
};

// `s` as a JSON string literal (quotes, backslashes and control bytes escaped), for the lines the
// tests hand to the Python validators.
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Tool calls grouped by the tool list they were made under: (tools JSON, [(name, arguments text)]).
using CallSets = std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>;

// Validates every call's arguments with python3-jsonschema (tests/validate_tool_args.py, one
// process for all), not with the grammar that made them. Fails the test if there is no call.
inline void validate_tool_calls(const CallSets& sets) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("picolm_test_calls_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "calls.jsonl", out = dir / "out.txt";
  std::ofstream lines(in);
  int n = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    const fs::path tools = dir / ("tools" + std::to_string(i) + ".json");
    std::ofstream(tools) << sets[i].first;
    for (const auto& [name, args] : sets[i].second) {
      lines << R"({"tools":)" << json_quote(tools.string()) << R"(,"name":)" << json_quote(name)
            << R"(,"arguments_text":)" << json_quote(args) << "}\n";
      ++n;
    }
  }
  lines.close();
  REQUIRE(n > 0);
  const std::string cmd = "/usr/bin/python3 '" + std::string(PICOLM_SOURCE_DIR) + "/tests/validate_tool_args.py' '" +
                          in.string() + "' > '" + out.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  INFO(ss.str());
  CHECK(rc == 0);
  fs::remove_all(dir);
}

}  // namespace server_fixture
