// Chat-template render time for a PicoClaw-sized conversation (issue 31): the agent session of
// tools/agent_session.h (its ~3,000-token system prompt, PicoClaw's tool list, the history after
// N turns of tool calls, results and answers) rendered with render_chat for each family named.
// Prints the median and minimum time per render over the rounds. Uses only render_chat(family, ...)
// so the same source measures any revision of the renderer.
//
//   picolm-renderbench [--turns 20] [--rounds 200] [FAMILY...]   (default: qwen3 qwen3.5 qwen2.5 hermes llama3.1 lfm2)
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent_session.h"
#include "chat_template.h"

using namespace picolm;

namespace {

std::string str(simdjson::simdjson_result<simdjson::dom::element> e) {
  std::string_view v;
  return e.get_string().get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}

// The last turn's messages and tools, as the provider's OpenAI layer reads them.
bool read_request(const std::string& body, std::vector<ChatMessage>& messages, std::string& tools_json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body).get(root)) return false;
  simdjson::dom::array msgs;
  if (root["messages"].get_array().get(msgs)) return false;
  for (simdjson::dom::element m : msgs) {
    ChatMessage cm;
    cm.role = str(m["role"]);
    cm.content = str(m["content"]);
    cm.tool_call_id = str(m["tool_call_id"]);
    simdjson::dom::array calls;
    if (!m["tool_calls"].get_array().get(calls))
      for (simdjson::dom::element c : calls)
        cm.tool_calls.push_back({str(c["id"]), str(c["function"]["name"]), str(c["function"]["arguments"])});
    messages.push_back(std::move(cm));
  }
  simdjson::dom::element tools;
  if (!root["tools"].get(tools)) tools_json = simdjson::minify(tools);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int turns = 20, rounds = 200;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--turns" && i + 1 < argc) turns = std::atoi(argv[++i]);
    else if (k == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else names.push_back(k);
  }
  if (names.empty()) names = {"qwen3", "qwen3.5", "qwen2.5", "hermes", "llama3.1", "lfm2"};
  tools::AgentSessionOptions so;
  so.turns = turns;
  const auto session = tools::make_agent_session(so);
  std::vector<ChatMessage> messages;
  std::string tools_json;
  if (session.empty() || !read_request(session.back().request_json, messages, tools_json)) {
    std::fprintf(stderr, "picolm-renderbench: cannot read the session's last request\n");
    return 1;
  }
  std::printf("conversation: %zu messages, system prompt %zu bytes, tools %zu bytes; %d rounds\n", messages.size(),
              messages.empty() ? size_t(0) : messages[0].content.size(), tools_json.size(), rounds);
  for (const auto& name : names) {
    const auto family = family_from_name(name);
    if (!family) {
      std::fprintf(stderr, "picolm-renderbench: unknown family %s\n", name.c_str());
      return 2;
    }
    RenderOptions ro;
    ro.tools_json = tools_json;
    ro.date_string = "26 Nov 2026";
    std::vector<double> us;
    size_t bytes = 0;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const ChatRenderResult out = render_chat(*family, messages, ro);
      const auto t1 = std::chrono::steady_clock::now();
      if (!out.ok) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), out.error.c_str());
        return 1;
      }
      bytes = out.text.size();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("%-10s prompt %7zu bytes  median %8.1f us  min %8.1f us\n", name.c_str(), bytes, us[us.size() / 2], us.front());
  }
  return 0;
}
