// Gemma 4's native tool calls (issue 33): <|tool_call>call:NAME{key:VALUE,...}<tool_call|>.
//   - the grammar (ToolCallFormat::Gemma4) accepts what the format writes and refuses what breaks
//     the schema, the syntax or the uniqueness of keys;
//   - the provider's reader (gemma4_calls.h) turns calls into OpenAI arguments, whole or while
//     they are written (ToolCallStreamer), and refuses malformed ones;
//   - calls as the real template writes them into past turns (python3-jinja2) are accepted by the
//     grammar and read back to the arguments they were made from;
//   - property: 1,000+ calls sampled under the grammar's mask with Qwen's 152k vocabulary (plus
//     Gemma 4's <|tool_call>, <tool_call|> and <|"|> as single tokens, as its tokenizer has them)
//     and the 512-token vocabulary of the tiny models, with and without closing mode, read back by
//     the provider and checked by an independent oracle (tests/validate_gemma4_calls.py: its own
//     reader, which reports repeated keys, then jsonschema).
#include <catch2/catch.hpp>

#include <simdjson.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "call_stream.h"
#include "gemma4_calls.h"
#include "grammar/grammar.h"
#include "grammar_walk.h"
#include "schema_suite.h"
#include "vocab_loader.h"
#include "python_oracle.h"

using namespace picolm;
using test_oracle::hex;
using test_oracle::json_string;
using test_oracle::read_file;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;

const char* kTools = R"([
 {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
   "city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
   "days":{"type":"integer","minimum":1,"maximum":10},"Detailed":{"type":"boolean"},
   "tags":{"type":"array","items":{"type":"string"}},"extra":{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]},
   "opts":{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]}},
   "required":["city"]}}},
 {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}},
 {"type":"function","function":{"name":"set_env","parameters":{"type":"object","properties":{
   "vars":{"type":"object","additionalProperties":{"type":"string"}},"any":{"type":"array"}},"required":["vars"]}}},
 {"type":"function","function":{"name":"count","parameters":{"type":"object","additionalProperties":{"type":"integer"},
   "propertyNames":{"pattern":"^[a-c]{1,2}$"},"minProperties":2}}}])";

std::shared_ptr<const grammar::Grammar> gemma4_grammar(const std::string& tools, bool parallel, const std::string& forced = "") {
  grammar::ToolListOptions o;
  o.format = grammar::ToolCallFormat::Gemma4;
  o.parallel = parallel;
  o.forced_tool = forced;
  o.schema.whitespace = grammar::Whitespace::Natural;  // as the provider asks: Gemma 4 makes it compact
  o.schema.max_indent = -1;
  auto r = grammar::compile_tool_list(tools, o);
  INFO(r.error_text());
  REQUIRE(r.ok());
  return r.grammar;
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::Matcher m(g, tools::byte_vocabulary());
  return m.accept_bytes(text) && m.is_complete();
}

const std::string Q = "<|\"|>";
std::string str(const std::string& s) { return Q + s + Q; }
std::string call(const std::string& name, const std::string& args) { return "<|tool_call>call:" + name + args + "<tool_call|>"; }

}  // namespace

TEST_CASE("Gemma 4 call grammar: what the format writes, nothing the schema or the syntax refuses", "[grammar]") {
  const auto g = gemma4_grammar(kTools, false);
  const auto gp = gemma4_grammar(kTools, true);
  const std::vector<std::string> good = {
      call("get_weather", "{city:" + str("Paris") + "}"),
      // members in dictsort order (case-insensitive): city, days, Detailed, extra, opts, tags, unit
      call("get_weather", "{city:" + str("Saint-\nDenis, \"<b>\" \\ {x:1}") + ",days:3,Detailed:true,extra:null,opts:{a:false},tags:[" +
                              str("a") + "," + str("") + "],unit:" + str("celsius") + "}"),
      call("get_weather", "{city:" + str("") + ",extra:None}"),
      call("get_weather", "{city:" + str("é 😀 中文 <|x|> <tool_call|>") + ",extra:" + str("abc") + ",tags:[]}"),
      call("get_time", "{}"),
      call("set_env", "{vars:{}}"),
      call("set_env", "{any:[{k:[1,-2.5,{z:None}],q:" + str("x") + "},true,[]],vars:{A:" + str("1") + ",b_2:" + str("") + "}}"),
  };
  for (const auto& t : good) {
    INFO(t);
    CHECK(accepts(g, t));
    CHECK(accepts(gp, t));
  }
  const std::string two = call("get_weather", "{city:" + str("Paris") + "}") + call("get_time", "{}");
  CHECK(accepts(gp, two));
  CHECK_FALSE(accepts(g, two));  // one call unless parallel
  const std::vector<std::string> bad = {
      call("get_weather", "{}"),                                                     // city is required
      call("get_wether", "{city:" + str("Paris") + "}"),                             // unknown tool
      call("get_weather", "{city:" + str("Paris") + ",country:" + str("FR") + "}"),  // unknown parameter
      call("get_weather", "{days:3,city:" + str("Paris") + "}"),                     // not in dictsort order
      call("get_weather", "{city:" + str("Paris") + ",days:11}"),                    // above maximum
      call("get_weather", "{city:" + str("Paris") + ",days:3.5}"),                   // not an integer
      call("get_weather", "{city:" + str("Paris") + ",unit:" + str("kelvin") + "}"),  // not in the enum
      call("get_weather", "{city:" + str("Paris") + ",extra:" + str("abcd") + "}"),  // longer than maxLength
      call("get_weather", "{city:" + str("a" + Q + "b") + "}"),                      // the quote inside a string
      call("get_weather", "{city:\"Paris\"}"),                                       // a JSON string
      call("get_weather", "{\"city\":" + str("Paris") + "}"),                        // a quoted key
      call("get_weather", "{city: " + str("Paris") + "}"),                           // whitespace
      call("get_weather", "{city:" + str("Paris") + ",opts:{}}"),                    // nested required missing
      call("get_weather", "{city:" + str("Paris") + ",Detailed:True}"),              // Python's True
      call("set_env", "{vars:{a:" + str("1") + ",a:" + str("2") + "}}"),             // a repeated free key
      call("set_env", "{any:[{k:1,k:2}],vars:{}}"),                                  // a repeated key in any value
      call("set_env", "{vars:{a:1}}"),                                               // not a string
      "<|tool_call>call:get_time{}",                                                 // not closed
      "call:get_time{}<tool_call|>",                                                 // not opened
  };
  for (const auto& t : bad) {
    INFO(t);
    CHECK_FALSE(accepts(gp, t));
  }
  // The NUL byte has no raw spelling: refused.
  CHECK_FALSE(accepts(gp, call("get_weather", "{city:" + str(std::string("a\0b", 3)) + "}")));
  // A forced tool: only it.
  const auto gf = gemma4_grammar(kTools, false, "get_time");
  CHECK(accepts(gf, call("get_time", "{}")));
  CHECK_FALSE(accepts(gf, call("get_weather", "{city:" + str("Paris") + "}")));
  // Names and keys that cannot be written unquoted are refused when they must be written.
  grammar::ToolListOptions o;
  o.format = grammar::ToolCallFormat::Gemma4;
  CHECK_FALSE(grammar::compile_tool_list(R"([{"type":"function","function":{"name":"a b"}}])", o).ok());
  CHECK_FALSE(grammar::compile_tool_list(
                  R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a:b":{}},"required":["a:b"]}}}])", o)
                  .ok());
  // An optional one is left out.
  auto r = grammar::compile_tool_list(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a b":{},"c":{"type":"integer"}}}}}])", o);
  REQUIRE(r.ok());
  CHECK(accepts(r.grammar, call("f", "{c:1}")));
  CHECK_FALSE(accepts(r.grammar, call("f", "{a b:1}")));
  // Enum and const values in Gemma 4's spelling (object keys unquoted, strings quoted).
  auto e = grammar::compile_tool_list(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{
          "m":{"enum":[[1,"x",[]],null,"s"]},"c":{"const":"a<|\"|>b"}},"required":["m"]}}}])", o);
  REQUIRE(e.ok());
  CHECK(accepts(e.grammar, call("f", "{m:[1," + str("x") + ",[]]}")));
  CHECK_FALSE(accepts(e.grammar, call("f", "{c:" + str("a<|\"|>b") + ",m:null}")));  // a const that cannot be written
  CHECK(accepts(e.grammar, call("f", "{m:null}")));
  CHECK(accepts(e.grammar, call("f", "{m:None}")));
  CHECK(accepts(e.grammar, call("f", "{m:" + str("s") + "}")));
  CHECK_FALSE(accepts(e.grammar, call("f", "{m:[1,\"x\",[]]}")));
}

TEST_CASE("Gemma 4 calls never repeat a key: check, mask and shortest completion", "[grammar]") {
  const auto g = gemma4_grammar(kTools, false, "count");
  CHECK(accepts(g, call("count", "{a:1,bc:2}")));
  CHECK_FALSE(accepts(g, call("count", "{a:1,a:2}")));
  CHECK_FALSE(accepts(g, call("count", "{a:1,b:2,a:3}")));
  CHECK_FALSE(accepts(g, call("count", "{a:1}")));  // minProperties
  // The mask refuses a byte after which the key can only close as a repeat ("ab" is at its
  // longest), and the byte-level matcher agrees; a rollback restores the state.
  grammar::Matcher m(g, tools::byte_vocabulary());
  REQUIRE(m.accept_bytes("<|tool_call>call:count{ab:1,a"));
  std::vector<uint32_t> mask(256 / 32 + 1);
  m.fill_mask(mask.data());
  auto allowed = [&](char ch) { return ((mask[uint8_t(ch) / 32] >> (uint8_t(ch) % 32)) & 1u) == 1u; };
  CHECK(allowed(':'));  // "a" is new
  CHECK(allowed('c'));  // "ac" is new
  CHECK_FALSE(allowed('b'));  // "ab" repeats
  CHECK_FALSE(m.accept_bytes("b"));
  REQUIRE(m.accept_bytes("c:2,"));
  m.rollback(1);
  CHECK(m.text() == "<|tool_call>call:count{ab:1,a");
  // The shortest completion of "{a:1," is a second key other than "a".
  grammar::Matcher c(g, tools::byte_vocabulary());
  REQUIRE(c.accept_bytes("<|tool_call>call:count{a:1,"));
  const std::string rest = c.shortest_completion();
  INFO(rest);
  CHECK(rest.rfind("a:", 0) != 0);
  CHECK(accepts(g, c.text() + rest));
  CHECK(parse_gemma4_calls(c.text() + rest).ok());
}

TEST_CASE("Gemma 4 calls read back into JSON arguments", "[unit]") {
  {
    const auto r = parse_gemma4_calls(call("get_weather", "{city:" + str("Pa\"ris\\\n\t") + ",days:3,Detailed:true,extra:None,opts:{a:false},tags:[" +
                                                              str("a") + ",[],{}],x:-1.5e+3}") +
                                      "\n" + call("get_time", "{}"));
    INFO(r.error);
    REQUIRE(r.ok());
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].name == "get_weather");
    CHECK(r.calls[0].arguments_json ==
          R"({"city":"Pa\"ris\\\n\t","days":3,"Detailed":true,"extra":null,"opts":{"a":false},"tags":["a",[],{}],"x":-1.5e+3})");
    CHECK(r.calls[1].name == "get_time");
    CHECK(r.calls[1].arguments_json == "{}");
  }
  {
    // The template's escape_keys=True spelling and llama.cpp's optional spaces.
    const auto r = parse_gemma4_calls(call("f", "{ " + str("a b") + ": 1, c:[ 1, 2 ], d:{ e: " + str("é") + " } }"));
    INFO(r.error);
    REQUIRE(r.ok());
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments_json == R"({"a b":1,"c":[1,2],"d":{"e":"é"}})");
  }
  // The reference's own examples (llama.cpp 3f545be, tests/test-chat.cpp, Gemma 4 section).
  const std::vector<std::pair<std::string, std::string>> upstream = {
      {"get_time{city:<|\"|>San Francisco<|\"|>}", R"({"city":"San Francisco"})"},
      {"empty_args{}", "{}"},
      {"special_function{arg1:-7}", R"({"arg1":-7})"},
      {"amount{orig:3.14}", R"({"orig":3.14})"},
      {"toggle{enabled:false}", R"({"enabled":false})"},
      {"set_nullable{value:null}", R"({"value":null})"},
      {"todo_list{todos:[<|\"|>buy milk<|\"|>,<|\"|>walk dog<|\"|>]}", R"({"todos":["buy milk","walk dog"]})"},
      {"set_config{config:{theme:<|\"|>dark<|\"|>,count:3}}", R"({"config":{"theme":"dark","count":3}})"},
      {"todo_list{todos:[]}", R"({"todos":[]})"},
      {"set_config{config:{}}", R"({"config":{}})"},
      {"amount{orig:1.5e10}", R"({"orig":1.5e10})"},
  };
  for (const auto& [body, expected] : upstream) {
    const auto r = parse_gemma4_calls("<|tool_call>call:" + body + "<tool_call|>");
    INFO(body << ": " << r.error);
    REQUIRE(r.ok());
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == body.substr(0, body.find('{')));
    CHECK(r.calls[0].arguments_json == expected);
  }
  {
    const auto r = parse_gemma4_calls("Hello, world!\nWhat's up?<|tool_call>call:get_time{city:<|\"|>Paris<|\"|>}<tool_call|>", true);
    REQUIRE(r.ok());
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments_json == R"({"city":"Paris"})");
  }
  // Text around the calls: refused, or skipped when allowed.
  CHECK_FALSE(parse_gemma4_calls("ok " + call("f", "{}")).ok());
  {
    const auto r = parse_gemma4_calls("Sure. " + call("f", "{a:1}") + " done", true);
    CHECK(r.ok());
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments_json == R"({"a":1})");
  }
  // Malformed: each is an error; calls read whole before it are kept.
  const std::vector<std::string> bad = {
      call("f", "{a:1,a:2}"),                     // a repeated key
      call("f", "{a:{b:1,b:2}}"),                 // a repeated nested key
      call("f", "{a:01}"),                        // not a JSON number
      call("f", "{a:yes}"),                       // not a value
      call("f", "{a:\"x\"}"),                     // a JSON string
      call("f", "{a:1,}"),                        // no key after ','
      call("f", "{a:[1,]}"),                      // no value after ','
      call("f", "{a:1]"),                         // wrong close
      call("", "{}"),                             // no name
      call("f", "{a:" + Q + "x}"),                // string not closed
      "<|tool_call>call:f{a:1}",                  // cut off
      "<|tool_call>call:f{a:1}<tool_call",        // cut off in the close
      "<|tool_call>call:f{a:1}}<tool_call|>",     // one '}' too many
  };
  for (const auto& t : bad) {
    INFO(t);
    const auto r = parse_gemma4_calls(call("ok", "{}") + t);
    CHECK_FALSE(r.ok());
    CHECK(r.calls.size() == 1);
  }
  CHECK(parse_gemma4_calls(call("f", "{a:1,a:2}")).error.find("repeated key 'a'") != std::string::npos);
}

TEST_CASE("Gemma 4 calls stream their arguments as they are written", "[unit]") {
  const std::string text = "Let me check. " + call("get_weather", "{city:" + str("Saint-Étienne 😀 \"x\"") + ",days:10,opts:{a:true},tags:[" +
                                                                  str("a<|b") + "]}") +
                           call("get_time", "{}");
  const auto whole = parse_gemma4_calls(text, true);
  REQUIRE(whole.ok());
  REQUIRE(whole.calls.size() == 2);
  // Every split of the text into growing prefixes hands out pieces that concatenate to the final
  // arguments, each piece valid UTF-8 (a character is never cut).
  for (size_t step : {size_t(1), size_t(2), size_t(3), size_t(7)}) {
    ToolCallStreamer s(&kGemma4Syntax, kTools);
    std::vector<CallEvent> events;
    for (size_t n = step;; n += step) {
      s.update(std::string_view(text).substr(0, std::min(n, text.size())), events);
      if (n >= text.size()) break;
    }
    INFO("step " << step);
    REQUIRE(s.calls().size() == 2);
    std::vector<std::string> pieces(2);
    int starts = 0;
    for (const auto& e : events) {
      if (e.start) {
        CHECK(e.name == whole.calls[e.index].name);
        ++starts;
        continue;
      }
      pieces[e.index] += e.arguments;
      // no piece ends inside a UTF-8 character
      const auto last = static_cast<unsigned char>(e.arguments.back());
      CHECK((last < 0x80 || (last & 0xC0) == 0x80));
    }
    CHECK(starts == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(pieces[i] == whole.calls[i].arguments_json);
      CHECK(s.calls()[i].arguments == whole.calls[i].arguments_json);
      CHECK(s.calls()[i].complete);
    }
  }
  // The string streams before it ends.
  ToolCallStreamer s(&kGemma4Syntax, kTools);
  std::vector<CallEvent> events;
  s.update("<|tool_call>call:get_weather{city:<|\"|>Saint-Ét<|\"", events);
  REQUIRE(s.calls().size() == 1);
  CHECK(s.calls()[0].arguments == "{\"city\":\"Saint-Ét");
  CHECK_FALSE(s.calls()[0].complete);
}

TEST_CASE("Gemma 4 calls as its template writes them are accepted and read back", "[grammar]") {
  // Arguments for the PicoClaw-like tools and the tools above, rendered by python3-jinja2 through
  // the real template into a past assistant turn.
  const std::string picoclaw = read_file(kShared + "/tool-lists/picoclaw-like-tools.json");
  const std::string tmpl = kShared + "/templates/google-gemma-4-31B-it.jinja";
  (void)read_file(tmpl);
  const std::string calls_json = R"([
    {"name":"exec","arguments":{"command":"ls -la /tmp && echo \"done\"\n","timeout":30,"action":"run"}},
    {"name":"write_file","arguments":{"path":"notes/a b.md","content":"# Title\n\n- é, 😀, {x: 1}, [y], \\n <tag>\n"}},
    {"name":"web_search","arguments":{"query":"gemma 4 gguf","count":5}},
    {"name":"get_weather","arguments":{"unit":"celsius","city":"Paris","Detailed":false,"days":2,"tags":["a","b"],"opts":{"a":true},"extra":"abc"}},
    {"name":"get_weather","arguments":{"city":"x","extra":null}},
    {"name":"get_time","arguments":{}},
    {"name":"set_env","arguments":{"vars":{"b":"2","A":"1"},"any":[{"k":[1,2.5,true,null,{"z":"w"}]},"x"]}}
  ])";
  const bool picoclaw_call[] = {true, true, true, false, false, false, false};  // else kTools
  const auto dir = std::filesystem::temp_directory_path();
  const std::string in_path = (dir / ("picolm_gemma4_render_" + std::to_string(getpid()) + ".json")).string();
  const std::string out_path = in_path + ".out";
  {
    std::ofstream f(in_path, std::ios::binary);
    f << calls_json;
  }
  const std::string cmd = "/usr/bin/python3 '" + std::string(PICOLM_SOURCE_DIR) + "/tests/render_gemma4_calls.py' '" + tmpl + "' '" +
                          in_path + "' > '" + out_path + "'";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_file(out_path);
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
  REQUIRE(rc == 0);
  const auto g_picoclaw = gemma4_grammar(picoclaw, false);
  const auto g_mine = gemma4_grammar(kTools, false);
  std::istringstream lines(out);
  std::string line;
  simdjson::dom::parser parser;
  int n = 0;
  while (std::getline(lines, line)) {
    simdjson::dom::element e = parser.parse(line);
    const std::string text{std::string_view(e["text"])};
    const std::string expected{std::string_view(e["expected"])};
    INFO(text);
    REQUIRE(n < 7);
    CHECK(accepts(picoclaw_call[n] ? g_picoclaw : g_mine, text));
    const auto r = parse_gemma4_calls(text);
    INFO(r.error);
    REQUIRE(r.ok());
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments_json == expected);
    ++n;
  }
  CHECK(n == 7);
}

TEST_CASE("Gemma 4 calls in Gemma 4's own vocabulary: the tags are single tokens the grammar accepts", "[grammar]") {
  // tests/models/gemma4-vocab.gguf has Gemma 4's tokenizer type and its call tokens (<|tool_call>,
  // <tool_call|>, <|"|>); the server's vocabulary (provider/grammar_vocab.h, as vocab_loader builds
  // it) must keep their text, or the call grammar could never be satisfied by the model's tokens.
  auto bundle = tools::load_vocab_bundle(std::string(PICOLM_SOURCE_DIR) + "/tests/models/gemma4-vocab.gguf");
  REQUIRE(bundle.ok());
  const Tokenizer& tok = *bundle.value().tokenizer;
  const auto g = gemma4_grammar(kTools, true);
  const std::string text = call("get_weather", "{city:" + str("Paris") + ",days:3}") + call("get_time", "{}");
  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  int tags = 0;
  for (int32_t id : ids) {
    const std::string piece = tok.token_to_piece(id, true);
    tags += piece == "<|tool_call>" || piece == "<tool_call|>" || piece == Q;
  }
  CHECK(tags == 6);  // two calls: open and close each, and the two quotes of "Paris"
  grammar::Matcher m(g, bundle.value().vocab);
  for (int32_t id : ids) {
    INFO("token " << id << " " << tok.token_to_piece(id, true));
    REQUIRE(m.accept_token(id));
  }
  CHECK(m.is_complete());
  const auto r = parse_gemma4_calls(tok.decode(ids, true));
  REQUIRE(r.ok());
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].arguments_json == R"({"city":"Paris","days":3})");
}

TEST_CASE("Gemma 4's template is recognised by its call opener", "[unit]") {
  CHECK(is_gemma4_template(read_file(kShared + "/templates/google-gemma-4-31B-it.jinja")));
  for (const auto& entry : std::filesystem::directory_iterator(kShared + "/templates")) {
    const std::string name = entry.path().filename().string();
    if (name.find("gemma-4") != std::string::npos) continue;
    INFO(name);
    CHECK_FALSE(is_gemma4_template(read_file(entry.path().string())));
  }
}

TEST_CASE("random walks under the Gemma 4 call grammar read back into valid calls", "[grammar]") {
  struct NamedVocab {
    std::string name;
    std::shared_ptr<const grammar::Vocabulary> vocab;
    std::unique_ptr<tools::WalkVocabulary> wv;
  };
  std::vector<NamedVocab> vocabs;
  std::vector<tools::VocabBundle> bundles;
  // The 512-token vocabulary is the one of the random-weight tiny models; Qwen's 152k gets
  // Gemma 4's call tokens as single tokens, as Gemma 4's own tokenizer has them.
  for (const auto& [name, path] : {std::pair{"qwen3-152k+gemma4-tokens", kShared + "/models/qwen3-bpe-q4km.gguf"},
                                   std::pair{"tiny-512", kShared + "/models/qwen35-tiny-q8_0.gguf"}}) {
    auto v = tools::load_vocab_bundle(path);
    INFO(path << ": " << (v ? "" : v.error()));
    REQUIRE(v.ok());
    std::shared_ptr<const grammar::Vocabulary> vocab = v->vocab;
    if (std::string(name).find("gemma4") != std::string::npos) {
      std::vector<std::string> tokens;
      for (size_t id = 0; id < vocab->size(); ++id) tokens.push_back(vocab->token(int32_t(id)));
      for (const char* t : {"<|tool_call>", "<tool_call|>", "<|\"|>"}) tokens.push_back(t);
      vocab = grammar::Vocabulary::create(std::move(tokens), vocab->eog_ids());
    }
    vocabs.push_back({name, vocab, std::make_unique<tools::WalkVocabulary>(vocab)});
    bundles.push_back(std::move(*v));
  }
  struct Case {
    std::string label, tools, forced;
    bool parallel;
    std::shared_ptr<const grammar::Grammar> grammar;
  };
  std::vector<Case> cases;
  const std::string picoclaw = grammar_tests::json_compact(read_file(kShared + "/tool-lists/picoclaw-like-tools.json"));
  for (const auto& [label, tl] : {std::pair{"picoclaw", picoclaw}, std::pair{"test-tools", grammar_tests::json_compact(kTools)}}) {
    for (bool parallel : {false, true})
      cases.push_back({std::string(label) + (parallel ? " parallel" : ""), tl, "", parallel, gemma4_grammar(tl, parallel)});
  }
  cases.push_back({"picoclaw forced edit_file", picoclaw, "edit_file", false, gemma4_grammar(picoclaw, false, "edit_file")});
  cases.push_back({"test-tools forced set_env", grammar_tests::json_compact(kTools), "set_env", true,
                   gemma4_grammar(grammar_tests::json_compact(kTools), true, "set_env")});
  // Free keys from a language of 12 (propertyNames), so that walks often try to repeat one.
  cases.push_back({"test-tools forced count", grammar_tests::json_compact(kTools), "count", false,
                   gemma4_grammar(grammar_tests::json_compact(kTools), false, "count")});

  std::ostringstream jsonl;
  std::vector<std::string> labels;  // validator id -> what was walked
  std::map<std::string, int> status_count;
  std::vector<std::string> problems;
  int n_calls = 0, n_walks = 0, n_closed = 0, n_open = 0;
  std::string example;
  uint64_t seed = 3300;
  // 7 cases x 2 vocabularies x 96 walks. Every walk switches to the closing mask (as the provider
  // does when a token budget runs out) after a prefix, and must then finish within its bound:
  // half after 10-70 tokens, half after 150-180, by when most of them have finished by themselves
  // (the walk prefers closing tokens after its soft length).
  for (const auto& c : cases) {
    for (const auto& nv : vocabs) {
      for (int s = 0; s < 96; ++s) {
        tools::WalkOptions wo;
        wo.seed = seed++;
        wo.max_tokens = 512;
        wo.rollback_check = 0.05;
        wo.close_after = static_cast<int>((s % 2 ? 10 : 150) + wo.seed * 7919 % (s % 2 ? 60 : 30));
        wo.closing_slack = static_cast<int>(wo.seed % 3);
        const tools::WalkResult w = tools::random_walk(c.grammar, *nv.wv, wo);
        ++n_walks;
        status_count[tools::walk_status_name(w.status)]++;
        if (w.closing_used >= 0) {
          ++n_closed;
          if (w.closing_used > w.closing_budget)
            problems.push_back("closing mode used " + std::to_string(w.closing_used) + " tokens, allowed " +
                               std::to_string(w.closing_budget) + ": " + c.label + " [" + nv.name + "]");
        }
        if (w.closing_used < 0) ++n_open;
        if (w.status != tools::WalkStatus::Finished) {
          problems.push_back(std::string(tools::walk_status_name(w.status)) + " " + c.label + " [" + nv.name + "]: " + w.detail +
                             "\n    text: " + w.text);
          continue;
        }
        const auto read = parse_gemma4_calls(w.text);
        if (!read.ok()) problems.push_back("reader: " + read.error + ": " + c.label + "\n    text: " + w.text);
        n_calls += static_cast<int>(read.calls.size());
        if (example.empty() && read.calls.size() > 1) {
          example = w.text + "\n    read back:";
          for (const auto& rc : read.calls) example += " " + rc.name + " " + rc.arguments_json;
        }
        std::string rec = "{\"id\":" + std::to_string(labels.size()) + ",\"parallel\":" + (c.parallel ? "true" : "false") +
                          ",\"forced_tool\":";
        json_string(c.forced, rec);
        rec += ",\"tools\":" + c.tools + ",\"text_hex\":\"" + hex(w.text) + "\",\"parsed\":[";
        for (size_t k = 0; k < read.calls.size(); ++k) {
          if (k) rec += ",";
          rec += "{\"name\":";
          json_string(read.calls[k].name, rec);
          rec += ",\"arguments\":";
          json_string(read.calls[k].arguments_json, rec);
          rec += "}";
        }
        rec += "]}\n";
        jsonl << rec;
        labels.push_back(c.label + " [" + nv.name + "]\n    text: " + w.text);
      }
    }
  }
  std::vector<std::string> verdicts;
  for (auto& v : test_oracle::run_python_oracle("validate_gemma4_calls.py", jsonl.str(), labels.size(), "gemma4_calls"))
    verdicts.push_back(v.ok ? "ok" : v.error);
  int n_invalid = 0;
  for (size_t id = 0; id < verdicts.size(); ++id) {
    REQUIRE(!verdicts[id].empty());  // the oracle answered for every reply
    if (verdicts[id] == "ok") continue;
    ++n_invalid;
    problems.push_back("INVALID " + labels[id] + "\n    " + verdicts[id]);
  }
  for (size_t i = 0; i < problems.size() && i < 30; ++i) std::printf("%s\n", problems[i].c_str());
  std::printf("example:\n%s\n", example.c_str());
  std::printf("gemma4 calls: %d walks (%zu cases, %d reached closing mode, %d finished before), %zu replies read back into %d calls, %d invalid; ",
              n_walks, cases.size(), n_closed, n_open, verdicts.size(), n_calls, n_invalid);
  for (const auto& [k, v] : status_count) std::printf("%s %d; ", k.c_str(), v);
  std::printf("\n");
  CHECK(problems.empty());
  CHECK(n_closed >= n_walks / 4);  // both: calls finished in closing mode and without it
  CHECK(n_open >= n_walks / 5);
  CHECK(n_calls >= 1000);
  CHECK(verdicts.size() == size_t(n_walks));
}
