// Unique keys (issue 29 item 2): no generated object repeats a key, for free-form keys too
// (additionalProperties, propertyNames), in every argument syntax: JSON objects, Qwen3.5's XML
// parameters and LFM2's Python keyword arguments.
//   - check (a matcher fed bytes) refuses a repeated key, also spelled with escapes, and keeps
//     objects apart (the same key in a nested object is fine);
//   - the mask refuses the byte that would close a repeated key, rollback restores what was
//     written, and the shortest completion writes a new key where the shortest one repeats;
//   - property: random walks (152k Qwen BPE and 32k Llama SentencePiece vocabularies) under
//     schemas whose key languages are small, so that repeats are likely, are checked by an
//     independent oracle (tests/validate_unique_keys.py: Python's json with an object_pairs_hook
//     that reports a repeated key, Python's ast for the Python calls, a regex reading of the XML;
//     then jsonschema).
#include <catch2/catch.hpp>

#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar_walk.h"
#include "vocab_loader.h"
#include "python_oracle.h"

using namespace picolm;
using test_oracle::hex;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;

enum class Syntax { JsonCompact, JsonNatural, QwenXml, Python };
const char* syntax_name(Syntax s) {
  switch (s) {
    case Syntax::JsonCompact: return "json-compact";
    case Syntax::JsonNatural: return "json-natural";
    case Syntax::QwenXml: return "qwen-xml";
    case Syntax::Python: return "python";
  }
  return "?";
}

// The schema as JSON, or as the parameters of the one tool `f` in the native formats.
std::shared_ptr<const grammar::Grammar> compile(const std::string& schema, Syntax syntax,
                                                grammar::PropertyOrder order = grammar::PropertyOrder::Schema) {
  grammar::CompileResult r;
  if (syntax == Syntax::JsonCompact || syntax == Syntax::JsonNatural) {
    grammar::CompileOptions o;
    o.property_order = order;
    if (syntax == Syntax::JsonNatural) {
      o.whitespace = grammar::Whitespace::Natural;
      o.max_indent = 2;
    }
    r = grammar::compile_json_schema(schema, o);
  } else {
    grammar::ToolListOptions o;
    o.format = syntax == Syntax::QwenXml ? grammar::ToolCallFormat::QwenXml : grammar::ToolCallFormat::PythonList;
    o.schema.whitespace = grammar::Whitespace::Natural;  // as the provider compiles calls
    o.schema.python_literals = syntax == Syntax::Python;
    o.schema.property_order = order;
    r = grammar::compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":)" + schema + "}}]", o);
  }
  INFO(schema << " as " << syntax_name(syntax) << ": " << r.error_text());
  REQUIRE(r.ok());
  return r.grammar;
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::Matcher m(g, tools::byte_vocabulary());
  return m.accept_bytes(text) && m.is_complete();
}

bool byte_allowed(const grammar::Matcher& m, char c) {
  std::vector<uint32_t> mask(256 / 32 + 1);
  m.fill_mask(mask.data());
  const auto b = static_cast<unsigned char>(c);
  return (mask[b / 32] >> (b % 32)) & 1u;
}

std::string xml_call(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=f>\n";
  for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

std::string py_call(const std::string& kwargs) { return "<|tool_call_start|>[f(" + kwargs + ")]<|tool_call_end|>"; }

const char* kFreeInt = R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":2})";
const char* kFreeAny = R"({"type":"object","additionalProperties":true})";
// Tool parameters default to additionalProperties: false, also in nested objects: say it.
const char* kFreeNested =
    R"({"type":"object","additionalProperties":{"type":"object","additionalProperties":{"type":"integer"}}})";

}  // namespace

TEST_CASE("unique keys: check refuses a repeated key in every syntax", "[grammar]") {
  const auto json = compile(kFreeInt, Syntax::JsonCompact);
  CHECK(accepts(json, R"({"x":1,"y":2})"));
  CHECK_FALSE(accepts(json, R"({"x":1,"x":2})"));          // the issue's reproducer
  CHECK_FALSE(accepts(json, R"({"x":1,"y":2,"x":3})"));
  CHECK_FALSE(accepts(json, R"({"x":1,"\u0078":2})"));     // the same key, escaped
  CHECK_FALSE(accepts(json, R"({"\ud83d\ude00":1,"😀":2})"));  // a surrogate pair is the character
  CHECK(accepts(json, R"({"x":1,"\u0079":2})"));

  const auto any = compile(kFreeAny, Syntax::JsonNatural);
  CHECK(accepts(any, R"({"a": {"b": 1}, "b": [{"b": 1, "c": {"b": 2}}]})"));  // objects are apart
  CHECK_FALSE(accepts(any, R"({"a": {"b": 1, "b": 2}})"));
  CHECK_FALSE(accepts(any, R"({"a": [{"q": 1}, {"q": 1, "q": 2}]})"));
  CHECK_FALSE(accepts(any, R"({"a": {"b": 1}, "a": 2})"));
  CHECK(accepts(any, R"({"a": {}, "b": {}})"));

  // Listed and free keys together: a free key never takes a listed name (the grammar), and free
  // keys never repeat each other (the key sets).
  const auto mixed = compile(R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
                             Syntax::JsonCompact);
  CHECK(accepts(mixed, R"({"id":1,"x":true,"y":false})"));
  CHECK_FALSE(accepts(mixed, R"({"id":1,"x":true,"x":false})"));
  CHECK_FALSE(accepts(mixed, R"({"id":1,"id":2})"));

  // check by value (check_instance) too: a parser keeps one of the values of a repeated key, so the
  // search for another spelling must not turn {"a":1,"c":"x","a":2} into the valid {"a":2,"c":"x"}.
  const auto listed = compile(
      R"({"type":"object","properties":{"a":{"type":"integer"},"c":{"type":"string"}},"required":["a","c"],"additionalProperties":false})",
      Syntax::JsonCompact);
  const auto by_value = [&](const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
    return grammar::check_instance(g, tools::byte_vocabulary(), text);
  };
  CHECK(by_value(listed, R"({"c":"x","a":2})").accepted);  // another order: accepted by value
  const auto rep = by_value(listed, R"({"a":1,"c":"x","a":2})");
  CHECK_FALSE(rep.accepted);
  CHECK(rep.detail.find("repeats the key 'a'") != std::string::npos);
  CHECK_FALSE(by_value(json, R"({"y":2,"x":1,"x":3})").accepted);
  CHECK_FALSE(by_value(listed, R"({"c":"x","\u0061":1,"a":2})").accepted);  // escaped spelling of the same key

  const auto xml = compile(kFreeInt, Syntax::QwenXml);
  CHECK(accepts(xml, xml_call({{"x", "1"}, {"y", "2"}})));
  CHECK_FALSE(accepts(xml, xml_call({{"x", "1"}, {"x", "2"}})));
  const auto xml_nested = compile(kFreeNested, Syntax::QwenXml);
  CHECK(accepts(xml_nested, xml_call({{"a", R"({"k": 1, "j": 2})"}, {"k", R"({"k": 1})"}})));
  CHECK_FALSE(accepts(xml_nested, xml_call({{"a", R"({"k": 1, "k": 2})"}})));
  CHECK_FALSE(accepts(xml_nested, xml_call({{"a", "{}"}, {"b", "{}"}, {"a", "{}"}})));
  const auto xml_any = compile(kFreeAny, Syntax::QwenXml);  // values of any type; arrays hold any objects
  CHECK(accepts(xml_any, xml_call({{"a", R"([{"k": 1, "j": 2}])"}, {"k", "text"}})));
  CHECK_FALSE(accepts(xml_any, xml_call({{"a", R"([{"k": 1, "k": 2}])"}})));

  const auto py = compile(kFreeInt, Syntax::Python);
  CHECK(accepts(py, py_call("x=1, y=2")));
  CHECK_FALSE(accepts(py, py_call("x=1, x=2")));
  CHECK_FALSE(accepts(py, py_call("x=1, y=2, x=3")));
  const auto py_nested = compile(kFreeNested, Syntax::Python);
  CHECK(accepts(py_nested, py_call(R"(a={"k": 1, "j": 2}, k={"k": 1})")));
  CHECK_FALSE(accepts(py_nested, py_call(R"(a={"k": 1, "k": 2})")));
  const auto py_any = compile(kFreeAny, Syntax::Python);
  CHECK(accepts(py_any, py_call(R"(a=[{"k": 1, "j": [{"k": True}]}], k=None)")));
  CHECK_FALSE(accepts(py_any, py_call(R"(a=[{"k": 1, "k": 2}])")));
  CHECK_FALSE(accepts(py_any, py_call(R"(a=1, a=2)")));
}

TEST_CASE("unique keys: the mask refuses only the byte that would close a repeated key", "[grammar]") {
  const auto bytes = tools::byte_vocabulary();
  {
    grammar::Matcher m(compile(kFreeInt, Syntax::JsonCompact), bytes);
    REQUIRE(m.accept_bytes(R"({"xy":1,"x)"));
    CHECK(byte_allowed(m, '"'));  // "x" is new
    REQUIRE(m.accept_bytes("y"));
    CHECK_FALSE(byte_allowed(m, '"'));  // "xy" was written
    CHECK(byte_allowed(m, 'z'));        // ... but it may go on
    CHECK_FALSE(m.accept_bytes("\""));
    REQUIRE(m.accept_bytes("z\":2"));  // "xyz"
    // Rollback undoes the key sets with the state: back inside "xy", which repeats; back at the
    // start, nothing was written.
    m.rollback(1);
    CHECK(m.text() == R"({"xy":1,"xy)");
    CHECK_FALSE(byte_allowed(m, '"'));
    REQUIRE(m.accept_bytes("z\":2,\"xyz"));
    CHECK_FALSE(byte_allowed(m, '"'));  // "xyz" is written now
    m.rollback(1);
    m.rollback(10);
    REQUIRE(m.accept_bytes(R"({"xy)"));
    CHECK(byte_allowed(m, '"'));
  }
  {
    grammar::Matcher m(compile(kFreeInt, Syntax::Python), bytes);
    REQUIRE(m.accept_bytes(py_call("ab=1, a").substr(0, std::string("<|tool_call_start|>[f(ab=1, a").size())));
    CHECK(byte_allowed(m, '='));
    REQUIRE(m.accept_bytes("b"));
    CHECK_FALSE(byte_allowed(m, '='));
  }
  {
    grammar::Matcher m(compile(kFreeInt, Syntax::QwenXml), bytes);
    REQUIRE(m.accept_bytes("<tool_call>\n<function=f>\n<parameter=k>\n1\n</parameter>\n<parameter=k"));
    CHECK_FALSE(byte_allowed(m, '>'));
    CHECK(byte_allowed(m, 'k'));
  }
}

TEST_CASE("unique keys: the shortest completion writes a new key where the shortest one repeats", "[grammar]") {
  const auto bytes = tools::byte_vocabulary();
  const auto g = compile(R"({"type":"object","propertyNames":{"enum":["a","b"]},"additionalProperties":{"type":"integer"},"minProperties":2})",
                         Syntax::JsonCompact);
  grammar::Matcher m(g, bytes);
  REQUIRE(m.accept_bytes(R"({"a":1,)"));
  CHECK(m.shortest_completion() == R"("b":0})");
  CHECK(m.min_completion_bytes() == m.shortest_completion().size());
  CHECK(m.min_completion_tokens() == static_cast<int>(m.shortest_completion().size()));
  REQUIRE(m.accept_bytes("\""));
  CHECK(m.shortest_completion() == R"(b":0})");
  // Closing mode follows it to a valid end.
  grammar::Matcher c(g, bytes);
  REQUIRE(c.accept_bytes(R"({"b":7,")"));
  std::vector<uint32_t> mask(256 / 32 + 1);
  for (int left = c.min_completion_tokens(); left > 0; --left) {
    std::fill(mask.begin(), mask.end(), 0u);
    c.fill_mask_closing(mask.data(), left);
    int pick = -1;
    for (int b = 0; b < 256 && pick < 0; ++b)
      if ((mask[b / 32] >> (b % 32)) & 1u) pick = b;
    REQUIRE(pick >= 0);
    REQUIRE(c.accept_token(pick));
  }
  CHECK(c.text() == R"({"b":7,"a":0})");
  CHECK(c.is_complete());

  // Two names cannot make three members: with unique keys the schema has no instance.
  const auto unsat = grammar::compile_json_schema(R"({"type":"object","propertyNames":{"enum":["a","b"]},"minProperties":3})");
  CHECK_FALSE(unsat.ok());
  // From a fresh matcher: three free keys, all different.
  const auto three = compile(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":3})", Syntax::JsonCompact);
  grammar::Matcher f(three, bytes);
  const std::string comp = f.shortest_completion();
  CHECK(accepts(three, comp));
  CHECK(f.min_completion_bytes() == comp.size());
  const auto py = compile(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":3})", Syntax::Python);
  grammar::Matcher p(py, bytes);
  CHECK(accepts(py, p.shortest_completion()));
}

TEST_CASE("unique keys: the oracle reports repeated keys in every syntax", "[grammar]") {
  // The property test below is only as good as its oracle: it must fail on a repeated key.
  const std::string schema = kFreeAny;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"json", R"({"x":1,"x":2})"},
      {"json", R"({"a":{"b":1,"b":2}})"},
      {"json", R"({"x":1,"\u0078":2})"},
      {"qwen-xml", xml_call({{"x", "1"}, {"x", "2"}})},
      {"qwen-xml", xml_call({{"a", R"({"k":1,"k":2})"}})},
      {"python", py_call("x=1, x=2")},
      {"python", py_call(R"(a={"k": 1, "k": 2})")},
  };
  const std::vector<std::pair<std::string, std::string>> good = {
      {"json", R"({"x":1,"y":{"x":2}})"}, {"qwen-xml", xml_call({{"x", "1"}, {"y", "2"}})}, {"python", py_call("x=1, y=2")}};
  std::ostringstream jsonl;
  int id = 0;
  for (const auto* list : {&bad, &good})
    for (const auto& [syntax, text] : *list)
      jsonl << "{\"id\":" << id++ << ",\"syntax\":\"" << syntax << "\",\"schema\":" << schema
            << ",\"list_open\":\"<|tool_call_start|>\",\"list_close\":\"<|tool_call_end|>\",\"text_hex\":\"" << hex(text)
            << "\"}\n";
  const auto verdicts = test_oracle::run_python_oracle("validate_unique_keys.py", jsonl.str(), static_cast<size_t>(id), "unique_oracle");
  std::vector<int> ok;
  for (const auto& v : verdicts) ok.push_back(v.ok ? 1 : 0);
  for (size_t i = 0; i < ok.size(); ++i) {
    INFO("record " << i);
    CHECK(ok[i] == (i < bad.size() ? 0 : 1));
  }
}

// Random walks of every schema in every syntax with both vocabularies (kSeeds each), checked by
// the oracle; returns per schema how many valid walks wrote its listed top-level properties in
// schema order ([0]) and in another order ([1]), as the oracle read them.
std::map<std::string, std::array<int, 2>> walk_and_validate(const std::vector<std::string>& schemas,
                                                               grammar::PropertyOrder order, int kSeeds,
                                                               uint64_t seed) {
  const std::vector<Syntax> syntaxes = {Syntax::JsonCompact, Syntax::JsonNatural, Syntax::QwenXml, Syntax::Python};
  struct NamedVocab {
    std::string name;
    tools::VocabBundle bundle;
    std::unique_ptr<tools::WalkVocabulary> wv;
  };
  std::vector<NamedVocab> vocabs;
  for (const auto& [name, path] : {std::pair{"qwen2-152k", kShared + "/models/qwen2-bpe-q4km.gguf"},
                                   std::pair{"llama-spm-32k", kShared + "/vocab/ggml-vocab-llama-spm.gguf"}}) {
    auto v = tools::load_vocab_bundle(path);
    INFO(path << ": " << (v ? "" : v.error()));
    REQUIRE(v.ok());
    auto wv = std::make_unique<tools::WalkVocabulary>(v->vocab);
    vocabs.push_back({name, std::move(*v), std::move(wv)});
  }
  const auto bytes = tools::byte_vocabulary();
  std::ostringstream jsonl;
  std::vector<std::string> labels;  // validator id -> what was walked
  std::vector<const std::string*> label_schema;
  std::vector<std::string> problems;
  std::map<std::string, int> status_count, per_syntax;
  std::map<std::string, std::array<int, 2>> orders;
  int n_walks = 0, n_closed = 0;
  for (const auto& schema : schemas) {
    for (Syntax syntax : syntaxes) {
      const auto g = compile(schema, syntax, order);
      for (const auto& nv : vocabs) {
        for (int s = 0; s < kSeeds; ++s) {
          tools::WalkOptions wo;
          wo.seed = seed++;
          wo.max_tokens = 600;
          wo.rollback_check = 0.1;  // rollback must restore the key sets with the state
          // Half the walks switch to the closing mask after a random prefix (all XML walks: a raw
          // string ends only at "\n</parameter>", which the walk's JSON heuristics rarely pick).
          if (syntax == Syntax::QwenXml || s % 2 == 1) {
            wo.close_after = static_cast<int>(wo.seed * 7919 % 40);
            wo.closing_slack = static_cast<int>(wo.seed % 3);
          }
          const tools::WalkResult w = tools::random_walk(g, *nv.wv, wo);
          ++n_walks;
          status_count[tools::walk_status_name(w.status)]++;
          const std::string label = std::string(syntax_name(syntax)) + " [" + nv.name + "] seed " +
                                    std::to_string(wo.seed) + " " + schema + "\n    text: " + w.text;
          if (w.closing_used >= 0) {
            ++n_closed;
            if (w.closing_used > w.closing_budget)
              problems.push_back("closing mode used " + std::to_string(w.closing_used) + " tokens, allowed " +
                                 std::to_string(w.closing_budget) + ": " + label);
          }
          if (w.status != tools::WalkStatus::Finished) {
            problems.push_back(std::string(tools::walk_status_name(w.status)) + " " + label + "\n    " + w.detail);
            continue;
          }
          if (!accepts(g, w.text)) {  // check (a fresh matcher) agrees with the mask
            problems.push_back("a fresh matcher refuses " + label);
            continue;
          }
          const bool json = syntax == Syntax::JsonCompact || syntax == Syntax::JsonNatural;
          jsonl << "{\"id\":" << labels.size() << ",\"syntax\":\""
                << (json ? "json" : syntax == Syntax::QwenXml ? "qwen-xml" : "python") << "\",\"schema\":" << schema
                << ",\"list_open\":\"<|tool_call_start|>\",\"list_close\":\"<|tool_call_end|>\",\"text_hex\":\""
                << hex(w.text) << "\"}\n";
          labels.push_back(label);
          label_schema.push_back(&schema);
          per_syntax[syntax_name(syntax)]++;
        }
      }
    }
  }
  std::vector<std::string> verdicts;
  long n_keys = 0;
  simdjson::dom::parser parser;
  for (const auto& v : test_oracle::run_python_oracle("validate_unique_keys.py", jsonl.str(), labels.size(), "unique_keys")) {
    verdicts.push_back(v.ok ? "ok" : v.error);
    if (!v.ok) continue;
    simdjson::dom::element e = parser.parse(v.line);
    n_keys += int64_t(e["keys"]);
    orders[*label_schema[verdicts.size() - 1]][bool(e["schema_order"]) ? 0 : 1]++;
  }
  int n_invalid = 0;
  for (size_t id = 0; id < verdicts.size(); ++id) {
    REQUIRE(!verdicts[id].empty());  // the oracle answered for every instance
    if (verdicts[id] == "ok") continue;
    ++n_invalid;
    problems.push_back("INVALID " + labels[id] + "\n    " + verdicts[id]);
  }
  for (size_t i = 0; i < problems.size() && i < 30; ++i) std::printf("%s\n", problems[i].c_str());
  std::printf("unique keys (%s order): %d walks (%d reached closing mode), %zu validated, %d invalid, %ld keys read; ",
              order == grammar::PropertyOrder::Any ? "any" : "schema", n_walks,
              n_closed, verdicts.size(), n_invalid, n_keys);
  for (const auto& [k, v] : status_count) std::printf("%s %d; ", k.c_str(), v);
  for (const auto& [k, v] : per_syntax) std::printf("%s %d; ", k.c_str(), v);
  std::printf("\n");
  CHECK(problems.empty());
  CHECK(verdicts.size() >= size_t(schemas.size()) * syntaxes.size() * vocabs.size() * kSeeds * 9 / 10);
  for (Syntax s : syntaxes) CHECK(per_syntax[syntax_name(s)] >= int(schemas.size()) * 2 * kSeeds * 9 / 10);
  return orders;
}

TEST_CASE("random objects with free-form keys never repeat a key (JSON, Qwen3.5 XML, LFM2 Python)", "[grammar]") {
  // Small key languages (propertyNames) and minProperties, so that a walk without the key sets
  // would often repeat a key; nested objects to keep objects apart; any values (the `true`
  // schema's objects have free keys of their own).
  const std::vector<std::string> schemas = {
      R"({"type":"object","propertyNames":{"enum":["a","b","c","d"]},"additionalProperties":{"type":"integer"},"minProperties":3})",
      R"({"type":"object","propertyNames":{"enum":["a","b"]},"additionalProperties":{"type":"integer"},"minProperties":2})",
      R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"propertyNames":{"pattern":"^(id|[xy][0-9]?)$"},"additionalProperties":{"type":"boolean"},"minProperties":3,"maxProperties":6})",
      R"({"type":"object","propertyNames":{"maxLength":1},"additionalProperties":{"type":["integer","boolean","null"]},"minProperties":2,"maxProperties":8})",
      R"({"type":"object","properties":{"n":{"type":"object","propertyNames":{"enum":["p","q","r"]},"additionalProperties":{"type":"integer"},"minProperties":2}},"required":["n"],"propertyNames":{"enum":["n","p","q"]},"additionalProperties":{"type":"integer"},"minProperties":2})",
      R"({"type":"object","propertyNames":{"pattern":"^[a-c]$"},"additionalProperties":{"type":"object","additionalProperties":{"type":"integer"},"maxProperties":3},"minProperties":1})",
      R"({"type":"object","propertyNames":{"enum":["u","v","w"]},"additionalProperties":true,"minProperties":2})",
  };
  const auto orders = walk_and_validate(schemas, grammar::PropertyOrder::Schema, 40, 29000);  // 2,240 walks
  for (const auto& [schema, n] : orders) CHECK(n[1] == 0);  // schema order kept
}

TEST_CASE("any property order: random objects validate, keep keys unique and come in several orders", "[grammar]") {
  // Listed properties, required and optional, with no, bounded and free extra keys, nested
  // objects, min/maxProperties: under PropertyOrder::Any every walk must still validate (all
  // required keys, no repeat, bounds) and each schema's listed properties must come both in
  // schema order and in another order.
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"string","maxLength":3},"d":{"type":"null"}},"required":["a","c"],"additionalProperties":false})",
      R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"},"z":{"type":"integer"}},"additionalProperties":false,"minProperties":2})",
      R"({"type":"object","properties":{"id":{"type":"integer"},"on":{"type":"boolean"}},"required":["id"],"propertyNames":{"pattern":"^(id|on|[pq])$"},"additionalProperties":{"type":"integer"},"maxProperties":3})",
      R"({"type":"object","properties":{"p":{"type":"object","properties":{"u":{"type":"integer"},"v":{"type":"boolean"}},"required":["u","v"],"additionalProperties":false},"q":{"type":"integer"}},"required":["p","q"],"additionalProperties":false})",
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"type":"integer"}},"required":["name"],"propertyNames":{"pattern":"^(name|[a-z][0-9]?)$"},"additionalProperties":{"type":"boolean"},"maxProperties":4})",
  };
  const auto orders = walk_and_validate(schemas, grammar::PropertyOrder::Any, 24, 29500);  // 960 walks
  for (const auto& schema : schemas) {
    INFO(schema);
    const auto it = orders.find(schema);
    REQUIRE(it != orders.end());
    std::printf("listed properties in schema order %d, in another order %d: %s\n", it->second[0], it->second[1],
                schema.c_str());
    CHECK(it->second[0] >= 1);
    CHECK(it->second[1] >= 1);
  }
}
