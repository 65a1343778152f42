// Matcher::forced_continuation (jump-forward decoding, issue 17 item 3): exact forced strings at
// chosen points of real tool lists, and a property test against a brute-force oracle: at every
// point of random completed instances the forced bytes are what the instance continues with, each
// of them is the only byte the grammar accepts there, and the run is maximal.
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"

using namespace picolm::grammar;

namespace {

std::string read_text(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  INFO(path);
  REQUIRE(f != nullptr);  // a missing input fails the test
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

const std::string& picoclaw_tools() {
  static const std::string text = read_text(std::string(PICOLM_SHARED_DIR) + "/tool-lists/picoclaw-like-tools.json");
  return text;
}

// Token i < 256 is the single byte i; then multi-byte tokens; the last id is EOG.
std::shared_ptr<const Vocabulary> byte_vocab(std::vector<std::string> extra = {}) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
  for (auto& e : extra) toks.push_back(e);
  toks.push_back("");  // EOG
  const int32_t eog = int32_t(toks.size() - 1);
  return Vocabulary::create(std::move(toks), {eog});
}

// The grammar the provider compiles for native Hermes / Qwen2.5 calls (scheduler.cpp, prepare).
std::shared_ptr<const Grammar> hermes_tools(const std::string& tools, bool parallel, std::string forced_tool = {}) {
  ToolListOptions o;
  o.format = ToolCallFormat::Hermes;
  o.parallel = parallel;
  o.forced_tool = std::move(forced_tool);
  o.schema.whitespace = Whitespace::Natural;
  o.schema.max_indent = -1;
  auto r = compile_tool_list(tools, o);
  INFO(r.error_text());
  REQUIRE(r.ok());
  return r.grammar;
}

// The bytes the grammar accepts next (brute force over all 256), and whether it is complete.
std::vector<uint8_t> options_after(Matcher& m) {
  std::vector<uint8_t> out;
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    if (m.accept_bytes(std::string_view(&c, 1))) {
      out.push_back(uint8_t(b));
      m.rollback(1);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("forced continuation: exact strings on the PicoClaw-like tools", "[grammar]") {
  auto vocab = byte_vocab();
  auto forced_after = [&](const std::shared_ptr<const Grammar>& g, const std::string& prefix) {
    Matcher m(g, vocab);
    INFO("prefix: " << prefix);
    REQUIRE(m.accept_bytes(prefix));
    return m.forced_continuation();
  };

  SECTION("compact JSON object calls: long forced runs") {
    ToolListOptions o;
    o.format = ToolCallFormat::JsonObject;
    auto r = compile_tool_list(picoclaw_tools(), o);
    REQUIRE(r.ok());
    auto g = r.grammar;
    CHECK(forced_after(g, "") == "{\"name\":\"");
    // Several tools start with "e" (edit_file, exec), "w" (web_fetch, web_search, write_file).
    CHECK(forced_after(g, "{\"name\":\"e") == "");
    CHECK(forced_after(g, "{\"name\":\"web_") == "");
    // A unique prefix: the rest of the name, the arguments key and the first required key.
    CHECK(forced_after(g, "{\"name\":\"ed") == "it_file\",\"arguments\":{\"path\":\"");
    CHECK(forced_after(g, "{\"name\":\"get_w") == "eather\",\"arguments\":{\"city\":\"");
    // get_time has no required property: the object may close at once or take "timezone".
    CHECK(forced_after(g, "{\"name\":\"get_t") == "ime\",\"arguments\":{");
    // Required properties in order: after the path's value the next key is forced.
    CHECK(forced_after(g, "{\"name\":\"edit_file\",\"arguments\":{\"path\":\"a.txt\"") == ",\"old_text\":\"");
    // After the last value the closings are forced, up to the end.
    CHECK(forced_after(g, "{\"name\":\"list_dir\",\"arguments\":{\"path\":\"/tmp\"") == "}}");
    // A string is free: nothing forced inside it.
    CHECK(forced_after(g, "{\"name\":\"list_dir\",\"arguments\":{\"path\":\"/t") == "");
    // Terminated: nothing.
    CHECK(forced_after(g, "{\"name\":\"list_dir\",\"arguments\":{\"path\":\"/\"}}") == "");
    // The cap.
    Matcher m(g, vocab);
    REQUIRE(m.accept_bytes("{\"name\":\"ed"));
    CHECK(m.forced_continuation(5) == "it_fi");
    CHECK(m.forced_continuation(0).empty());
  }

  SECTION("Hermes calls with the provider's natural whitespace: runs stop at each optional space") {
    auto g = hermes_tools(picoclaw_tools(), false);
    CHECK(forced_after(g, "") == "<tool_call>\n{");  // then '"' or ' '
    CHECK(forced_after(g, "<tool_call>\n{\"") == "name\":");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"e") == "");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"ed") == "it_file\",");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"edit_file\", ") == "\"arguments\":");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"edit_file\", \"arguments\": ") == "{");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"edit_file\", \"arguments\": {\"path\": \"a\", ") ==
          "\"old_text\":");
    CHECK(forced_after(g, "<tool_call>\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \"/\"}") == "");
    // The last closing brace: the rest of the block is forced, and then only the end may follow.
    const std::string closed = "<tool_call>\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \"/\"}}";
    CHECK(forced_after(g, closed) == "\n</tool_call>");
    Matcher m(g, vocab);
    REQUIRE(m.accept_bytes(closed + "\n</tool_call>"));
    CHECK(m.is_terminated());
    CHECK(m.forced_continuation().empty());

    // A named tool_choice: the name is forced once its quote is written.
    auto named = hermes_tools(picoclaw_tools(), false, "get_weather");
    CHECK(forced_after(named, "<tool_call>\n{\"name\": ") == "\"get_weather\",");

    // Parallel calls: after a call's closing tag another call may start; the run stops there.
    auto par = hermes_tools(picoclaw_tools(), true);
    CHECK(forced_after(par, closed) == "\n</tool_call>");
    Matcher p(par, vocab);
    REQUIRE(p.accept_bytes(closed + "\n</tool_call>"));
    CHECK(p.is_complete());
    CHECK_FALSE(p.is_terminated());
    CHECK(p.forced_continuation().empty());
  }
}

TEST_CASE("forced continuation: schemas (JsonObject, Envelope, response_format)", "[grammar]") {
  auto vocab = byte_vocab();
  {
    // Compact JSON object of a schema with required properties in a fixed order.
    auto r = compile_json_schema(
        R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"const":"xyz"}},"required":["a","b","c"],"additionalProperties":false})");
    REQUIRE(r.ok());
    Matcher m(r.grammar, vocab);
    CHECK(m.forced_continuation() == "{\"a\":");
    REQUIRE(m.accept_bytes("{\"a\":12"));
    CHECK(m.forced_continuation().empty());  // more digits or the comma
    REQUIRE(m.accept_bytes(","));
    CHECK(m.forced_continuation() == "\"b\":");
    REQUIRE(m.accept_bytes("\"b\":t"));
    CHECK(m.forced_continuation() == "rue,\"c\":\"xyz\"}");
    REQUIRE(m.accept_bytes("rue,\"c\":\"xyz\"}"));
    CHECK(m.is_complete());
    CHECK(m.forced_continuation().empty());
  }
  {
    ToolListOptions o;
    o.format = ToolCallFormat::Envelope;
    auto r = compile_tool_list(picoclaw_tools(), o);
    REQUIRE(r.ok());
    Matcher m(r.grammar, vocab);
    CHECK(m.forced_continuation() == "{\"tool_calls\":[{\"name\":\"");
  }
}

TEST_CASE("forced continuation equals a brute-force oracle on random completed instances", "[grammar]") {
  struct Case {
    const char* what;
    std::shared_ptr<const Grammar> g;
  };
  std::vector<Case> cases;
  cases.push_back({"hermes", hermes_tools(picoclaw_tools(), false)});
  cases.push_back({"hermes parallel", hermes_tools(picoclaw_tools(), true)});
  {
    ToolListOptions o;
    o.format = ToolCallFormat::JsonObject;
    o.parallel = true;
    auto r = compile_tool_list(picoclaw_tools(), o);
    REQUIRE(r.ok());
    cases.push_back({"json object compact", r.grammar});
  }
  {
    ToolListOptions o;
    o.format = ToolCallFormat::Envelope;
    o.allow_text = true;
    auto r = compile_tool_list(picoclaw_tools(), o);
    REQUIRE(r.ok());
    cases.push_back({"envelope", r.grammar});
  }
  {
    ToolListOptions o;
    o.format = ToolCallFormat::QwenXml;
    auto r = compile_tool_list(picoclaw_tools(), o);
    REQUIRE(r.ok());
    cases.push_back({"qwen xml", r.grammar});
  }
  // Multi-byte tokens that cross structure, so walks reach deep states quickly.
  auto vocab = byte_vocab({"\"", "\", \"", "\": ", "{\"name\": \"", "abc", "\\n", "123", "true", "\"}}", "edit_file",
                           "web_", "get_", "</tool_call>", "<tool_call>\n", "\"path\": \"", "/tmp"});
  const size_t words = (vocab->size() + 31) / 32;
  std::mt19937 rng(17);
  int positions = 0, forced_positions = 0, oracle_checks = 0;
  for (const Case& c : cases) {
    for (int walk = 0; walk < 12; ++walk) {
      // A random prefix under the mask, then the canonical completion: a complete instance.
      Matcher m(c.g, vocab);
      std::vector<uint32_t> mask(words);
      const int steps = int(rng() % 40);
      for (int s = 0; s < steps && !m.is_complete(); ++s) {
        m.fill_mask(mask.data());
        std::vector<int32_t> allowed;
        for (size_t id = 0; id + 1 < vocab->size(); ++id)  // never EOG
          if ((mask[id / 32] >> (id % 32)) & 1) allowed.push_back(int32_t(id));
        if (allowed.empty()) break;
        REQUIRE(m.accept_token(allowed[rng() % allowed.size()]));
      }
      const std::string text = m.text() + m.shortest_completion();
      INFO(c.what << " instance: " << text);
      Matcher w(c.g, vocab);
      for (size_t i = 0; i <= text.size(); ++i) {
        const std::string f = w.forced_continuation();
        ++positions;
        // What this instance continues with starts with the forced bytes.
        INFO("at " << i << " forced: " << f);
        CHECK(text.compare(i, f.size(), f) == 0);
        if (!f.empty()) ++forced_positions;
        // Exactness on every 4th position: each forced byte is the only byte accepted there and the
        // instance is not complete before it; after the run, two or more bytes or completion.
        if (i % 4 == 0) {
          ++oracle_checks;
          for (size_t k = 0; k < f.size(); ++k) {
            CHECK_FALSE(w.is_complete());
            const auto opts = options_after(w);
            REQUIRE(opts.size() == 1);
            CHECK(opts[0] == uint8_t(f[k]));
            REQUIRE(w.accept_bytes(f.substr(k, 1)));
          }
          const bool complete = w.is_complete();
          const size_t n_opts = options_after(w).size();
          CHECK((complete || n_opts >= 2));
          w.rollback(int(f.size()));
          REQUIRE(w.text() == text.substr(0, i));
        }
        if (i < text.size()) REQUIRE(w.accept_bytes(text.substr(i, 1)));
      }
      CHECK(w.is_complete());
    }
  }
  // The walks did reach forced runs (the envelope, names, keys, closings).
  CHECK(forced_positions > positions / 20);
  CHECK(oracle_checks > 200);
}
