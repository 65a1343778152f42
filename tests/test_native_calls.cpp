// Native tool-call syntaxes that are not JSON (issue 20): Qwen3.5's XML parameters and LFM2's
// Python-style calls.
//   - the grammars accept what the formats write and refuse what breaks the schema or the syntax;
//   - the provider reads the calls back (tool_format.h) into the JSON arguments they stand for;
//   - property: random walks under both grammars with real vocabularies (Qwen's 152k BPE, Llama's
//     32k SentencePiece), for the PicoClaw-like tools and the JSON-Schema-Test-Suite schemas that
//     these formats can write, and the 512-token vocabulary of the qwen35 / lfm2 tiny models) are
//     read back by the provider and checked by an independent oracle
//     (tests/validate_native_calls.py: Python's own parser for the Python format, a regex reading
//     for the XML, jsonschema for the arguments);
//   - the templates' own example calls and the calls our renderers write into past turns are
//     accepted token by token, as the real tokenizer splits them.
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

#include "calls/call_syntax.h"
#include "chat_template.h"
#include "grammar/grammar.h"
#include "grammar_walk.h"
#include "schema_suite.h"
#include "tool_format.h"
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
   "days":{"type":"integer","minimum":1,"maximum":10},"detailed":{"type":"boolean"},
   "tags":{"type":"array","items":{"type":"string"}},"extra":{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]},
   "opts":{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]}},
   "required":["city"]}}},
 {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}])";

std::shared_ptr<const grammar::Grammar> tool_grammar(const std::string& tools, grammar::ToolCallFormat format, bool parallel,
                                                     const std::string& forced = "") {
  grammar::ToolListOptions o;
  o.format = format;
  o.parallel = parallel;
  o.forced_tool = forced;
  o.schema.whitespace = grammar::Whitespace::Natural;  // as the provider compiles calls
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

std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

}  // namespace

TEST_CASE("Qwen3.5 XML-parameter grammar: what the format writes, nothing the schema refuses", "[grammar]") {
  const auto g = tool_grammar(kTools, grammar::ToolCallFormat::QwenXml, false);
  const auto gp = tool_grammar(kTools, grammar::ToolCallFormat::QwenXml, true);
  const std::vector<std::string> good = {
      xml_call("get_weather", {{"city", "Paris"}}),
      xml_call("get_weather", {{"city", "Saint-\nDenis, <b> & </param </parameter"}, {"unit", "celsius"}}),
      xml_call("get_weather", {{"city", ""}, {"days", "3"}, {"detailed", "True"}}),
      xml_call("get_weather", {{"city", "\n"}, {"detailed", "false"}, {"tags", "[\"a\", \"b\"]"}, {"extra", "abc"}}),
      xml_call("get_weather", {{"city", "x"}, {"extra", "None"}, {"opts", "{\"a\": true}"}}),
      xml_call("get_weather", {{"city", "x"}, {"extra", "null"}}),
      xml_call("get_weather", {{"city", "é 😀 中文"}, {"tags", "[]"}}),
      xml_call("get_time", {}),
  };
  for (const auto& t : good) {
    INFO(t);
    CHECK(accepts(g, t));
    CHECK(accepts(gp, t));
  }
  const std::string two = xml_call("get_weather", {{"city", "Paris"}}) + "\n" + xml_call("get_time", {});
  CHECK(accepts(gp, two));
  CHECK_FALSE(accepts(g, two));  // one call unless parallel
  const std::vector<std::string> bad = {
      xml_call("get_weather", {}),                                         // city is required
      xml_call("get_weather", {{"unit", "celsius"}}),                      // city is required
      xml_call("get_wether", {{"city", "Paris"}}),                         // unknown tool
      xml_call("get_weather", {{"city", "Paris"}, {"country", "FR"}}),     // unknown parameter
      xml_call("get_weather", {{"city", "Paris"}, {"days", "11"}}),        // above maximum
      xml_call("get_weather", {{"city", "Paris"}, {"days", "three"}}),     // not an integer
      xml_call("get_weather", {{"city", "Paris"}, {"unit", "kelvin"}}),    // not in the enum
      xml_call("get_weather", {{"city", "Paris"}, {"extra", "abcd"}}),     // longer than maxLength
      xml_call("get_weather", {{"city", "a</parameter>b"}}),               // the close inside a value
      xml_call("get_weather", {{"city", "Paris"}, {"opts", "{\"b\": 1}"}}),  // nested required missing
      xml_call("get_weather", {{"city", "Paris"}, {"detailed", "yes"}}),
      xml_call("get_weather", {{"city", "Paris"}, {"tags", "['a']"}}),     // nested values are JSON
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis</parameter>\n</function>\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
  };
  for (const auto& t : bad) {
    INFO(t);
    CHECK_FALSE(accepts(g, t));
  }
}

TEST_CASE("LFM2 Python-call grammar: keyword arguments with Python literals", "[grammar]") {
  const auto g = tool_grammar(kTools, grammar::ToolCallFormat::PythonList, false);
  const auto gp = tool_grammar(kTools, grammar::ToolCallFormat::PythonList, true);
  const std::string open = "<|tool_call_start|>[", close = "]<|tool_call_end|>";
  const std::vector<std::string> good = {
      "get_weather(city=\"Paris\")",
      "get_weather(city=\"Saint \\\"Denis\\\"\\n\", unit=\"celsius\", days=3, detailed=True)",
      "get_weather(city=\"\\u00e9\", tags=[\"a\", \"b\"], extra=None, opts={\"a\": False})",
      "get_weather(city=\"x\",days=10)",
      "get_time()",
  };
  for (const auto& t : good) {
    INFO(t);
    CHECK(accepts(g, open + t + close));
    CHECK(accepts(gp, open + t + close));
  }
  const std::string two = open + "get_weather(city=\"Paris\"), get_time()" + close;
  CHECK(accepts(gp, two));
  CHECK_FALSE(accepts(g, two));
  const std::vector<std::string> bad = {
      "get_weather()", "get_weather(unit=\"celsius\")", "get_weather(city=\"Paris\", detailed=true)",
      "get_weather(city=\"Paris\", extra=null)", "get_weather(city='Paris')", "get_weather(city=\"Paris\", country=\"FR\")",
      "get_weather(city=\"Paris\", days=0)", "get_weather(\"Paris\")", "get_weather(city=\"Paris\", opts={\"a\": true})",
      "get_wether(city=\"Paris\")",
  };
  for (const auto& t : bad) {
    INFO(t);
    CHECK_FALSE(accepts(g, open + t + close));
  }
  CHECK_FALSE(accepts(g, "[get_time()]"));  // the tags are part of the format
  // A bare list when the wrapper is configured away.
  grammar::ToolListOptions o;
  o.format = grammar::ToolCallFormat::PythonList;
  o.list_open.clear();
  o.list_close.clear();
  auto bare = grammar::compile_tool_list(kTools, o);
  REQUIRE(bare.ok());
  CHECK(accepts(bare.grammar, "[get_time()]"));
  // Names these formats cannot write are refused, naming them.
  auto r = grammar::compile_tool_list(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"max-results":{"type":"integer"}},"required":["max-results"]}}}])",
      o);
  CHECK_FALSE(r.ok());
  CHECK(r.error_text().find("max-results") != std::string::npos);
  o.format = grammar::ToolCallFormat::QwenXml;
  CHECK(grammar::compile_tool_list(
            R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"max-results":{"type":"integer"}},"required":["max-results"]}}}])",
            o)
            .ok());
}

TEST_CASE("native calls read back into JSON arguments", "[unit]") {
  auto one = [](const CallSyntax& style, const std::string& text, const char* tools = kTools) {
    auto calls = parse_native_tool_calls(style, text, tools);
    REQUIRE(calls.size() == 1);
    return calls[0];
  };
  ToolCall c = one(kQwenXmlSyntax, xml_call("get_weather", {{"city", "Saint-\nDenis \"x\""}, {"days", "3"}, {"detailed", "True"},
                                                                  {"tags", "[\"a\", \"é\"]"}, {"extra", "None"}, {"opts", "{\"a\": false}"}}));
  CHECK(c.name == "get_weather");
  CHECK(c.arguments_json ==
        R"({"city":"Saint-\nDenis \"x\"","days":3,"detailed":true,"tags":["a","é"],"extra":null,"opts":{"a":false}})");
  // A string parameter keeps text that looks like another type; an anyOf with null reads null.
  c = one(kQwenXmlSyntax, xml_call("get_weather", {{"city", "42"}, {"extra", "null"}}));
  CHECK(c.arguments_json == R"({"city":"42","extra":null})");
  c = one(kQwenXmlSyntax, xml_call("get_weather", {{"city", "\"quoted\""}, {"extra", "abc"}}));
  CHECK(c.arguments_json == R"({"city":"\"quoted\"","extra":"abc"})");
  // Values that begin or end with newlines keep all but the syntax's own.
  c = one(kQwenXmlSyntax, xml_call("get_weather", {{"city", "\na\n"}}));
  CHECK(c.arguments_json == R"({"city":"\na\n"})");
  c = one(kQwenXmlSyntax, "thinking aloud first\n\n" + xml_call("get_time", {}));
  CHECK(c.arguments_json == "{}");
  // $ref'd parameter types.
  const char* ref_tools =
      R"([{"type":"function","function":{"name":"f","parameters":{"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"k":{"$ref":"#/$defs/n"},"s":{"oneOf":[{"type":"string"},{"type":"array"}]}}}}}])";
  c = one(kQwenXmlSyntax, xml_call("f", {{"k", "7"}, {"s", "[1, 2]"}}), ref_tools);
  CHECK(c.arguments_json == R"({"k":7,"s":[1,2]})");
  c = one(kQwenXmlSyntax, xml_call("f", {{"s", "[1, 2"}}), ref_tools);
  CHECK(c.arguments_json == R"({"s":"[1, 2"})");

  c = one(kPythonListSyntax,
          "<|tool_call_start|>[get_weather(city=\"Saint \\\"D\\\"\\n\\u00e9\\ud83d\\ude00\", days=3, detailed=True, extra=None, "
          "tags=['x', \"y\"], opts={\"a\": False, 'b': (1, 2.50, -0.5e3)})]<|tool_call_end|>");
  CHECK(c.name == "get_weather");
  CHECK(c.arguments_json ==
        "{\"city\":\"Saint \\\"D\\\"\\né😀\",\"days\":3,\"detailed\":true,\"extra\":null,\"tags\":[\"x\",\"y\"],"
        "\"opts\":{\"a\":false,\"b\":[1,2.50,-0.5e3]}}");
  // JSON's \/ (allowed by the string grammar) reads as "/", an escaped backslash stays one.
  c = one(kPythonListSyntax, "<|tool_call_start|>[get_weather(city=\"a\\/b\\\\/c\")]<|tool_call_end|>");
  CHECK(c.arguments_json == R"({"city":"a/b\\/c"})");
  auto calls = parse_native_tool_calls(kPythonListSyntax,
                                       "Sure.<|tool_call_start|>[get_time(), get_weather(city=\"Paris\")]<|tool_call_end|>Done.", kTools);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].name == "get_time");
  CHECK(calls[0].arguments_json == "{}");
  CHECK(calls[1].arguments_json == R"({"city":"Paris"})");
  CHECK(parse_native_tool_calls(kPythonListSyntax, "[get_time()]", kTools).size() == 1);  // a bare list
  // Cut off: complete calls kept, the open one dropped.
  calls = parse_native_tool_calls(kPythonListSyntax, "<|tool_call_start|>[get_time(), get_weather(city=\"Par", kTools);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].name == "get_time");
  calls = parse_native_tool_calls(kQwenXmlSyntax,
                                  xml_call("get_time", {}) + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPa", kTools);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].name == "get_time");
  CHECK(parse_native_tool_calls(kQwenXmlSyntax, "no calls here", kTools).empty());
}

// ---------------------------------------------------------------------------------------------
// Property test.

namespace {

struct NativeCase {
  std::string label;
  std::string format;  // "qwen-xml" | "python"
  std::string tools;
  bool parallel = false;
  std::string forced;
  std::shared_ptr<const grammar::Grammar> grammar;
};

// Suite schemas that can be a tool's parameters in both formats (object instances, names the
// formats can write), as a one-tool list; thinned evenly to `max`.
std::vector<std::string> suite_tool_lists(size_t max) {
  const auto files = grammar_tests::list_suite_files(kShared + "/json-schema-test-suite/tests/draft2020-12");
  REQUIRE(files.size() > 10);
  std::vector<std::string> all;
  for (const auto& path : files) {
    std::vector<grammar_tests::SuiteGroup> groups;
    std::string err;
    REQUIRE(grammar_tests::load_suite_file(path, groups, err));
    for (const auto& g : groups) {
      bool object_instance = false;
      for (const auto& t : g.tests) object_instance = object_instance || (t.valid && !t.data.empty() && t.data[0] == '{');
      if (!object_instance) continue;
      const std::string tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":" + g.schema + "}}]";
      bool ok = true;
      for (auto f : {grammar::ToolCallFormat::QwenXml, grammar::ToolCallFormat::PythonList}) {
        grammar::ToolListOptions o;
        o.format = f;
        ok = ok && grammar::compile_tool_list(tools, o).ok();
      }
      if (ok) all.push_back(tools);
    }
  }
  INFO("suite schemas usable as native tool parameters: " << all.size());
  REQUIRE(all.size() >= 15);
  std::vector<std::string> picked;
  const size_t n = std::min(all.size(), max);
  for (size_t i = 0; i < n; ++i) picked.push_back(all[i * all.size() / n]);
  return picked;
}

std::vector<NativeCase> native_cases() {
  const std::string picoclaw = read_file(kShared + "/tool-lists/picoclaw-like-tools.json");
  std::vector<NativeCase> cases;
  for (const char* format : {"qwen-xml", "python"}) {
    const auto f = std::string(format) == "python" ? grammar::ToolCallFormat::PythonList : grammar::ToolCallFormat::QwenXml;
    for (bool parallel : {false, true}) {
      NativeCase c{std::string(format) + "/picoclaw" + (parallel ? "/parallel" : ""), format, picoclaw, parallel, "", nullptr};
      c.grammar = tool_grammar(picoclaw, f, parallel);
      cases.push_back(c);
    }
    NativeCase forced{std::string(format) + "/picoclaw/forced-cron", format, picoclaw, false, "cron", nullptr};
    forced.grammar = tool_grammar(picoclaw, f, false, "cron");
    cases.push_back(forced);
    int i = 0;
    for (const auto& tools : suite_tool_lists(30)) {
      NativeCase c{std::string(format) + "/suite#" + std::to_string(i++), format, tools, false, "", nullptr};
      c.grammar = tool_grammar(tools, f, false);
      cases.push_back(c);
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("random walks under the Qwen3.5 and LFM2 call grammars read back into valid calls", "[grammar]") {
  struct NamedVocab {
    std::string name;
    tools::VocabBundle bundle;
    std::unique_ptr<tools::WalkVocabulary> wv;
  };
  std::vector<NamedVocab> vocabs;
  // The 512-token vocabulary is the one of the random-weight qwen35-tiny / lfm2-tiny models.
  for (const auto& [name, path] : {std::pair{"qwen3-152k", kShared + "/models/qwen3-bpe-q4km.gguf"},
                                   std::pair{"llama-spm-32k", kShared + "/vocab/ggml-vocab-llama-spm.gguf"},
                                   std::pair{"tiny-512", kShared + "/models/qwen35-tiny-q8_0.gguf"}}) {
    auto v = tools::load_vocab_bundle(path);
    INFO(path << ": " << (v ? "" : v.error()));
    REQUIRE(v.ok());
    auto wv = std::make_unique<tools::WalkVocabulary>(v->vocab);
    vocabs.push_back({name, std::move(*v), std::move(wv)});
  }
  const auto cases = native_cases();
  std::ostringstream jsonl;
  std::vector<std::string> labels;  // validator id -> what was walked
  std::map<std::string, int> status_count;
  std::vector<std::string> problems;
  int n_calls = 0, n_walks = 0, n_closed = 0;
  std::map<std::string, std::string> examples;  // format -> one walk's text and calls, for the log
  uint64_t seed = 2000;
  for (const auto& c : cases) {
    const bool picoclaw = c.label.find("picoclaw") != std::string::npos;
    for (const auto& nv : vocabs) {
      // The suite schemas walk once with the 152k vocabulary only; the tool lists 4 times with each.
      if (!picoclaw && nv.name != "qwen3-152k") continue;
      for (int s = 0; s < (picoclaw ? 4 : 1); ++s) {
        tools::WalkOptions wo;
        wo.seed = seed++;
        wo.max_tokens = 768;
        wo.rollback_check = 0.05;
        // A raw XML string ends only at "\n</parameter>", which the walk's closing heuristics (made
        // for JSON) rarely pick: every walk switches to the closing mask after a random prefix, as
        // the provider does when a token budget runs out. It must then finish within its bound.
        wo.close_after = static_cast<int>(20 + wo.seed * 7919 % 160);
        wo.closing_slack = static_cast<int>(wo.seed % 3);
        const tools::WalkResult w = tools::random_walk(c.grammar, *nv.wv, wo);
        ++n_walks;
        status_count[tools::walk_status_name(w.status)]++;
        if (w.closing_used >= 0) {
          ++n_closed;
          if (w.closing_used > w.closing_budget) {
            problems.push_back("closing mode used " + std::to_string(w.closing_used) + " tokens, allowed " +
                               std::to_string(w.closing_budget) + ": " + c.label + " [" + nv.name + "]");
          }
        }
        if (w.status != tools::WalkStatus::Finished) {
          problems.push_back(std::string(tools::walk_status_name(w.status)) + " " + c.label + " [" + nv.name + "]: " + w.detail +
                             "\n    text: " + w.text);
          continue;
        }
        const auto calls = parse_native_tool_calls(c.format == "python" ? kPythonListSyntax : kQwenXmlSyntax,
                                                   w.text, c.tools);
        n_calls += static_cast<int>(calls.size());
        if (examples.count(c.format) == 0 && c.parallel) {
          examples[c.format] = w.text + "\n    read back:";
          for (const auto& call : calls) examples[c.format] += " " + call.name + " " + call.arguments_json;
        }
        std::string rec = "{\"id\":" + std::to_string(labels.size()) + ",\"format\":\"" + c.format +
                          "\",\"parallel\":" + (c.parallel ? "true" : "false") + ",\"forced_tool\":";
        json_string(c.forced, rec);
        rec += ",\"list_open\":\"<|tool_call_start|>\",\"list_close\":\"<|tool_call_end|>\",\"tools\":" +
               grammar_tests::json_compact(c.tools) + ",\"text_hex\":\"" + hex(w.text) + "\",\"parsed\":[";
        for (size_t k = 0; k < calls.size(); ++k) {
          if (k) rec += ",";
          rec += "{\"name\":";
          json_string(calls[k].name, rec);
          rec += ",\"arguments\":";
          json_string(calls[k].arguments_json, rec);
          rec += "}";
        }
        rec += "]}\n";
        jsonl << rec;
        labels.push_back(c.label + " [" + nv.name + "]\n    text: " + w.text);
      }
    }
  }
  std::vector<std::string> verdicts;
  for (auto& v : test_oracle::run_python_oracle("validate_native_calls.py", jsonl.str(), labels.size(), "native_calls"))
    verdicts.push_back(v.ok ? "ok" : v.error);
  int n_invalid = 0;
  for (size_t id = 0; id < verdicts.size(); ++id) {
    REQUIRE(!verdicts[id].empty());  // the oracle answered for every reply
    if (verdicts[id] == "ok") continue;
    ++n_invalid;
    problems.push_back("INVALID " + labels[id] + "\n    " + verdicts[id]);
  }
  for (size_t i = 0; i < problems.size() && i < 30; ++i) std::printf("%s\n", problems[i].c_str());
  for (const auto& [format, text] : examples) std::printf("example %s:\n%s\n", format.c_str(), text.c_str());
  std::printf("native calls: %d walks (%zu cases, %d reached closing mode), %zu read back into %d calls, %d invalid; ",
              n_walks, cases.size(), n_closed, verdicts.size(), n_calls, n_invalid);
  for (const auto& [k, v] : status_count) std::printf("%s %d; ", k.c_str(), v);
  std::printf("\n");
  CHECK(problems.empty());
  CHECK(n_walks >= 80);
  CHECK(n_calls >= static_cast<int>(verdicts.size()));  // every reply holds at least one call
}

// ---------------------------------------------------------------------------------------------
// The formats' own examples, as the real tokenizer splits them.

namespace {

// Replays the tokenizer's tokenization of `text` (special tokens parsed) through a fresh matcher:
// every token must be in the mask and accepted, then end-of-generation.
void replay(const std::shared_ptr<const grammar::Grammar>& g, const tools::VocabBundle& b, const std::string& text) {
  INFO("text: " << text);
  const std::vector<int32_t> ids = b.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
  std::string spelled;
  for (int32_t id : ids) spelled += b.vocab->token(id);
  REQUIRE(spelled == text);  // a byte-level BPE spells every text exactly
  grammar::Matcher m(g, b.vocab);
  std::vector<uint32_t> mask((b.vocab->size() + 31) / 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::fill(mask.begin(), mask.end(), 0u);
    m.fill_mask(mask.data());
    const int32_t id = ids[i];
    INFO("token " << i << " \"" << b.vocab->token(id) << "\" after \"" << m.text() << "\"");
    REQUIRE(((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) == 1u);
    REQUIRE(m.accept_token(id));
  }
  REQUIRE(m.accept_token(b.vocab->eog_ids().front()));
}

}  // namespace

TEST_CASE("template examples and rendered past calls are accepted token by token", "[grammar]") {
  auto loaded = tools::load_vocab_bundle(kShared + "/models/qwen3-bpe-q4km.gguf");
  REQUIRE(loaded.ok());
  const tools::VocabBundle& b = *loaded;
  const std::string picoclaw = read_file(kShared + "/tool-lists/picoclaw-like-tools.json");

  // Qwen3.5's template shows this call in its system prompt.
  const std::string tmpl = read_file(kShared + "/templates/Qwen3.5-4B.jinja");
  const std::string example =
      "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
      "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
      "</parameter>\n</function>\n</tool_call>";
  std::string escaped;  // the example as the template's Jinja string literal spells it
  for (char ch : example) escaped += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  REQUIRE(tmpl.find(escaped) != std::string::npos);
  const std::string example_tools =
      R"([{"type":"function","function":{"name":"example_function_name","parameters":{"type":"object","properties":{"example_parameter_1":{"type":"string"},"example_parameter_2":{"type":"string"}},"required":["example_parameter_1"]}}}])";
  replay(tool_grammar(example_tools, grammar::ToolCallFormat::QwenXml, false), b, example);
  // LFM2's model card call.
  const std::string lfm_tools =
      R"([{"type":"function","function":{"name":"get_candidate_status","parameters":{"type":"object","properties":{"candidate_id":{"type":"string"}},"required":["candidate_id"]}}}])";
  replay(tool_grammar(lfm_tools, grammar::ToolCallFormat::PythonList, false), b,
         "<|tool_call_start|>[get_candidate_status(candidate_id=\"12345\")]<|tool_call_end|>");

  // Past calls as our renderers write them into the prompt (what the model sees it wrote).
  const std::vector<ToolCall> calls = {
      {"c1", "read_file", R"({"path": "/tmp/notes.txt", "offset": 10})"},
      {"c2", "message", R"({"content": "Hi \"you\",\nsee you at 5 ✓", "media": [{"type": "image", "path": "/tmp/a.png"}]})"},
      {"c3", "write_file", R"({"path": "a.txt", "content": "line 1\nline 2\n", "overwrite": true})"},
      {"c4", "get_time", "{}"},
      {"c5", "web_search", R"({"query": "picoclaw release", "count": 3, "range": "w"})"},
  };
  const auto xml_g = tool_grammar(picoclaw, grammar::ToolCallFormat::QwenXml, true);
  const auto py_g = tool_grammar(picoclaw, grammar::ToolCallFormat::PythonList, true);
  for (const auto& call : calls) {
    ChatMessage user, turn;
    user.role = "user";
    user.content = "go";
    turn.role = "assistant";
    turn.tool_calls = {call};
    RenderOptions ro;
    ro.add_generation_prompt = false;
    const std::vector<ChatMessage> conv = {user, turn};
    const ChatRenderResult r = render_chat(TemplateFamily::Qwen35, conv, ro);
    REQUIRE(r.ok);
    const size_t from = r.text.find("<tool_call>"), to = r.text.rfind("</tool_call>");
    REQUIRE(from != std::string::npos);
    const std::string xml = r.text.substr(from, to + 12 - from);
    replay(xml_g, b, xml);
    // Read back: the same arguments.
    const auto back = parse_native_tool_calls(kQwenXmlSyntax, xml, picoclaw);
    REQUIRE(back.size() == 1);
    std::string want;
    REQUIRE(python_tojson(call.arguments_json, want));
    std::string got;
    REQUIRE(python_tojson(back[0].arguments_json, got));
    CHECK(got == want);

    std::string py;
    REQUIRE(format_python_tool_calls(std::vector<ToolCall>{call}, py));
    replay(py_g, b, py);
    const auto back_py = parse_native_tool_calls(kPythonListSyntax, py, picoclaw);
    REQUIRE(back_py.size() == 1);
    got.clear();
    REQUIRE(python_tojson(back_py[0].arguments_json, got));
    CHECK(got == want);
  }
  // Both calls of a parallel turn.
  std::string py;
  REQUIRE(format_python_tool_calls(calls, py));
  replay(py_g, b, py);
  CHECK(parse_native_tool_calls(kPythonListSyntax, py, picoclaw).size() == calls.size());
}
