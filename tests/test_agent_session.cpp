// tools/agent_session.h (issue 27): the PicoClaw-layout session is what PicoClaw sends: one system
// message "static\n\n---\n\n## Current Time\n...", a clock advancing per turn, a history that grows
// with tool calls and results, valid JSON throughout.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <string>
#include <vector>

#include "agent_session.h"

namespace dom = simdjson::dom;
using picolm::tools::AgentSessionOptions;
using picolm::tools::AgentTurn;
using picolm::tools::make_agent_session;

namespace {
struct Parsed {
  std::string system;
  std::vector<std::string> roles;
  size_t tool_calls = 0;
  size_t tools = 0;
  std::string tool_choice;
  int64_t max_tokens = -1;
};

Parsed parse(const AgentTurn& t) {
  dom::parser parser;
  dom::element doc;
  INFO(t.request_json.substr(0, 200));
  REQUIRE(parser.parse(t.request_json).get(doc) == simdjson::SUCCESS);
  Parsed p;
  dom::array messages;
  REQUIRE(doc["messages"].get(messages) == simdjson::SUCCESS);
  for (dom::element m : messages) {
    std::string_view role;
    REQUIRE(m["role"].get(role) == simdjson::SUCCESS);
    p.roles.emplace_back(role);
    if (role == "system") {
      std::string_view content;
      REQUIRE(m["content"].get(content) == simdjson::SUCCESS);
      p.system = std::string(content);
    }
    dom::array calls;
    if (m["tool_calls"].get(calls) == simdjson::SUCCESS) {
      for (dom::element c : calls) {
        std::string_view args;
        REQUIRE(c["function"]["arguments"].get(args) == simdjson::SUCCESS);
        dom::parser inner;
        dom::element parsed_args;
        CHECK(inner.parse(std::string(args)).get(parsed_args) == simdjson::SUCCESS);  // arguments are JSON text
        ++p.tool_calls;
      }
    }
  }
  dom::array tools;
  REQUIRE(doc["tools"].get(tools) == simdjson::SUCCESS);
  p.tools = tools.size();
  std::string_view choice;
  REQUIRE(doc["tool_choice"].get(choice) == simdjson::SUCCESS);
  p.tool_choice = std::string(choice);
  REQUIRE(doc["max_tokens"].get(p.max_tokens) == simdjson::SUCCESS);
  return p;
}

// "2026-11-26 09:44 (Thursday)" -> minutes since that day's midnight (the session stays in one day).
int minute_of_day(const std::string& system) {
  const std::string key = "## Current Time\n";
  const size_t at = system.find(key);
  REQUIRE(at != std::string::npos);
  const std::string line = system.substr(at + key.size(), 27);
  REQUIRE(line.substr(0, 11) == "2026-11-26 ");
  return std::stoi(line.substr(11, 2)) * 60 + std::stoi(line.substr(14, 2));
}
}  // namespace

TEST_CASE("agent session: PicoClaw's layout, a clock 3 minutes per turn, a growing history", "[agent_session]") {
  AgentSessionOptions o;
  const auto turns = make_agent_session(o);
  REQUIRE(turns.size() == 8);
  const std::string& fixed = picolm::tools::agent_static_prompt();
  // ~2,200 tokens with Qwen3's vocabulary (8,500 bytes: ~3.9 bytes a token).
  CHECK(fixed.size() > 7500);
  CHECK(fixed.size() < 12000);
  size_t prev_messages = 0, prev_calls = 0;
  for (size_t k = 0; k < turns.size(); ++k) {
    INFO("turn " << k + 1);
    const Parsed p = parse(turns[k]);
    CHECK(p.system.rfind(fixed + "\n\n---\n\n## Current Time\n", 0) == 0);
    CHECK(p.system.find("\n\n## Runtime\nlinux arm64, Go 1.25.3\n\n## Current Session\nChannel: telegram\nChat ID: "
                        "581234907\n\n## Current Sender\nCurrent sender: Anna (ID: 581234907)") != std::string::npos);
    CHECK(minute_of_day(p.system) == 9 * 60 + 44 + 3 * static_cast<int>(k));
    CHECK(p.roles.front() == "system");
    CHECK(p.roles.back() == "user");
    CHECK(p.tools >= 10);
    CHECK(p.tool_choice == "auto");
    CHECK(p.max_tokens == 16);
    CHECK(p.roles.size() > prev_messages);
    if (k > 0) CHECK(p.tool_calls > prev_calls);  // each finished exchange adds its tool calls
    prev_messages = p.roles.size();
    prev_calls = p.tool_calls;
    // Every current value is in the system message; no earlier one is.
    for (const std::string& v : turns[k].current_values) CHECK(p.system.find(v) != std::string::npos);
    for (const std::string& v : turns[k].earlier_values) CHECK(p.system.find(v) == std::string::npos);
    CHECK(turns[k].earlier_values.size() == (k == 0 ? 0u : k));  // the older minutes
  }
  // Deterministic.
  CHECK(make_agent_session(o)[5].request_json == turns[5].request_json);
}

TEST_CASE("agent session: frozen clock, where the block sits, a changing sender, a summary", "[agent_session]") {
  AgentSessionOptions o;
  o.clock_frozen = true;
  o.max_tokens = 8;
  auto turns = make_agent_session(o);
  for (const auto& t : turns) {
    CHECK(minute_of_day(parse(t).system) == 9 * 60 + 44);
    CHECK(t.earlier_values.empty());
  }

  o = {};
  o.at = AgentSessionOptions::DynamicAt::Start;
  CHECK(parse(make_agent_session(o)[2]).system.rfind("## Current Time\n2026-11-26 09:50 (Thursday)\n", 0) == 0);
  o.at = AgentSessionOptions::DynamicAt::Middle;
  {
    const std::string s = parse(make_agent_session(o)[2]).system;
    const size_t at = s.find("## Current Time\n");
    REQUIRE(at != std::string::npos);
    CHECK(s.find("## SOUL.md") < at);
    CHECK(s.find("<skills>") > at);
  }

  o = {};
  o.sender_changes = true;
  o.with_summary = true;
  o.turns = 10;  // past the 8 scripted exchanges: the user messages stay distinct
  turns = make_agent_session(o);
  REQUIRE(turns.size() == 10);
  const Parsed second = parse(turns[1]);
  CHECK(second.system.find("Current sender: Miguel (ID: 604417322)") != std::string::npos);
  CHECK(second.system.find("Current sender: Anna") == std::string::npos);
  CHECK(second.system.find("\n\n---\n\nCONTEXT_SUMMARY: ") != std::string::npos);
  bool anna_earlier = false;
  for (const auto& v : turns[1].earlier_values) anna_earlier = anna_earlier || v == "Current sender: Anna (ID: 581234907)";
  CHECK(anna_earlier);
  for (const auto& t : turns) {
    const std::string s = parse(t).system;
    for (const std::string& v : t.current_values) CHECK(s.find(v) != std::string::npos);
    for (const std::string& v : t.earlier_values) CHECK(s.find(v) == std::string::npos);
  }
  CHECK(turns[8].request_json.find("(2)\"}]") != std::string::npos);
}
