// Unit tests for the grammar engine: accept/reject lists per schema feature, rollback, mask
// consistency against brute force, end-of-generation rules, error reporting.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>
#include <thread>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

using namespace picolm::grammar;

namespace {

// Token i < 256 is the single byte i; then a few multi-byte tokens; the last id is EOG.
std::shared_ptr<const Vocabulary> byte_vocab(std::vector<std::string> extra = {}) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
  for (auto& e : extra) toks.push_back(e);
  toks.push_back("");  // EOG
  int32_t eog = int32_t(toks.size() - 1);
  return Vocabulary::create(std::move(toks), {eog});
}

std::shared_ptr<const Grammar> compile_ok(const std::string& schema, CompileOptions o = {}) {
  auto r = compile_json_schema(schema, o);
  INFO(schema << "\n" << r.error_text());
  REQUIRE(r.ok());
  return r.grammar;
}

bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  static auto vocab = byte_vocab();
  Matcher m(g, vocab);
  return m.accept_bytes(text) && m.is_complete();
}

void check(const std::string& schema, const std::vector<std::string>& good, const std::vector<std::string>& bad,
           CompileOptions o = {}) {
  auto g = compile_ok(schema, o);
  for (const auto& s : good) {
    INFO("schema " << schema << " should accept " << s);
    CHECK(matches(g, s));
  }
  for (const auto& s : bad) {
    INFO("schema " << schema << " should reject " << s);
    CHECK_FALSE(matches(g, s));
  }
}

std::vector<CompileError> errors_of(const std::string& schema) {
  auto r = compile_json_schema(schema);
  CHECK_FALSE(r.ok());
  return r.errors;
}

bool has_error(const std::vector<CompileError>& errs, const std::string& ptr, const std::string& kw) {
  for (const auto& e : errs)
    if (e.pointer == ptr && e.keyword == kw) return true;
  return false;
}

}  // namespace

TEST_CASE("primitive types", "[grammar]") {
  check(R"({"type":"null"})", {"null"}, {"nul", "nulll", "0", "\"null\""});
  check(R"({"type":"boolean"})", {"true", "false"}, {"tru", "1", "null"});
  check(R"({"type":["integer","null"]})", {"0", "-5", "123", "null"}, {"1.5", "01", "-0", "true", ""});
  check(R"({"type":"number"})", {"0", "-1.5", "1e-10", "2.5E-3", "10"}, {"01", "1.", ".5", "--1", "1e", "1e10"});
  check(R"({})", {"1", "\"x\"", "{\"a\":[1,{}]}", "null", "[]"}, {"", "{", "[1,]", "{\"a\"}"});
  check(R"(true)", {"1", "[true]"}, {"tru"});
}

TEST_CASE("strings: escapes, UTF-8, lengths in code points", "[grammar]") {
  check(R"({"type":"string"})",
        {"\"\"", "\"abc\"", "\"a\\\"b\"", "\"\\u00e9\"", "\"\\ud83d\\ude00\"", "\"\xc3\xa9\"", "\"\xf0\x9f\x98\x80\"",
         "\"\\n\\t\\/\""},
        {"\"abc", "abc", "\"\x01\"", "\"\\x\"", "\"\\ude00\"", "\"\\ud83d\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
         "\"\xc0\xaf\"", "\"\\u12\""});
  check(R"({"type":"string","minLength":2,"maxLength":3})",
        {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\u00e9x\"", "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\""},
        {"\"a\"", "\"abcd\"", "\"\"", "\"\xc3\xa9\""});
  check(R"({"type":"string","minLength":1})", {"\"a\"", "\"abcdefgh\""}, {"\"\""});
}

TEST_CASE("enum and const", "[grammar]") {
  check(R"({"enum":["a","b",1,null,{"x":1}]})", {"\"a\"", "\"b\"", "1", "null", "{\"x\":1}"},
        {"\"c\"", "2", "\"ab\""});
  check(R"({"const":"run"})", {"\"run\""}, {"\"ru\"", "\"runs\""});
  check(R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"});
}

TEST_CASE("objects", "[grammar]") {
  const std::string s =
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})";
  check(s, {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}", "{\"a\":1,\"zz\":true}"},
        {"{}", "{\"b\":\"x\"}", "{\"a\":\"1\"}", "{\"a\":1,\"a\":2}", "{\"a\":1,\"b\":2}"});
  CompileOptions strict;
  strict.additional_properties_default = false;
  check(s, {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}"}, {"{\"a\":1,\"zz\":true}"}, strict);
  check(R"({"type":"object","properties":{"a":{}},"additionalProperties":false})", {"{}", "{\"a\":[1]}"},
        {"{\"b\":1}", "{\"a\":1,\"b\":1}"});
  check(R"({"type":"object","additionalProperties":{"type":"integer"}})", {"{}", "{\"x\":1,\"y\":2}"},
        {"{\"x\":\"s\"}"});
  check(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
        {"{\"a\":1,\"b\":\"x\"}"}, {"{\"a\":1,\"b\":2}", "{\"a\":1,\"a\":\"x\"}", "{\"a\":1,\"\\u0061\":\"x\"}"});
}

TEST_CASE("unsatisfiable schema is refused", "[grammar]") {
  auto r = compile_json_schema(R"({"type":"object","required":["x"],"additionalProperties":false})");
  CHECK_FALSE(r.ok());
  CHECK_FALSE(compile_json_schema("false").ok());
}

TEST_CASE("arrays", "[grammar]") {
  check(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2,3]"},
        {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]"});
  check(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
        {"[]", "[\"a\"]", "[\"a\",1]"}, {"[\"a\",1,2]", "[1]"});
  check(R"({"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"boolean"}})",
        {"[\"a\",true,false]"}, {"[\"a\",1]"});
  check(R"({"type":"array"})", {"[]", "[1,\"a\",[]]"}, {"[", "[1 2]"});
}

TEST_CASE("integer bounds are exact", "[grammar]") {
  auto g = compile_ok(R"({"type":"integer","minimum":-15,"maximum":123})");
  for (int v = -200; v <= 300; ++v) {
    INFO(v);
    CHECK(matches(g, std::to_string(v)) == (v >= -15 && v <= 123));
  }
  auto g2 = compile_ok(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10.5})");
  for (int v = -20; v <= 30; ++v) CHECK(matches(g2, std::to_string(v)) == (v >= 1 && v <= 10));
  auto g3 = compile_ok(R"({"type":"integer","minimum":1})");
  CHECK(matches(g3, "1"));
  // No upper bound: generation stays within 15 digits (below 2^53, exact in JavaScript).
  CHECK(matches(g3, "999999999999999"));
  CHECK_FALSE(matches(g3, "99999999999999999999"));
  CHECK_FALSE(matches(g3, "0"));
  CHECK_FALSE(matches(g3, "-1"));
  auto g4 = compile_ok(R"({"type":"integer","multipleOf":3,"minimum":-10,"maximum":20})");
  for (int v = -30; v <= 30; ++v) CHECK(matches(g4, std::to_string(v)) == (v >= -10 && v <= 20 && v % 3 == 0));
}

TEST_CASE("number bounds never accept out-of-range values", "[grammar]") {
  auto g = compile_ok(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":3})");
  std::vector<std::pair<std::string, double>> cases;
  for (int i = -40; i <= 40; ++i) {
    for (const char* frac : {"", ".5", ".25", ".9", ".05"}) {
      // Built with += : GCC 12 -O3 gives a false -Wrestrict on the operator+ chain.
      std::string s = i < 0 ? "-" : "";
      s += std::to_string(std::abs(i) / 10);
      s += frac;
      cases.push_back({s, std::stod(s)});
    }
  }
  int accepted = 0;
  for (auto& [s, v] : cases) {
    bool ok = matches(g, s);
    if (ok) {
      ++accepted;
      INFO(s);
      CHECK((v >= -2.5 && v < 3));
    }
  }
  CHECK(accepted > 10);
  CHECK(matches(g, "2.999"));
  CHECK(matches(g, "-2"));
  CHECK(matches(g, "-1.5"));
  CHECK_FALSE(matches(g, "3"));
  CHECK_FALSE(matches(g, "-3"));
}

TEST_CASE("fractional bounds are exact for canonical spellings", "[grammar]") {
  check(R"({"type":"number","minimum":1.1})", {"1.1", "1.15", "1.2", "2", "1000.5"}, {"1.09", "1", "0.5", "-3"});
  check(R"({"type":"number","exclusiveMinimum":1.1})", {"1.11", "1.2"}, {"1.1", "1.09"});
  check(R"({"type":"number","maximum":-0.5})", {"-0.5", "-0.51", "-1", "-7.25"}, {"-0.49", "0", "0.5"});
  check(R"({"type":"number","minimum":0.25,"maximum":0.75})", {"0.25", "0.5", "0.75", "0.3"},
        {"0.2", "0.76", "0.751", "1", "0"});
  check(R"({"type":"number","exclusiveMinimum":0.25,"exclusiveMaximum":0.75})", {"0.26", "0.7499"}, {"0.25", "0.75"});
  check(R"({"type":"number","minimum":-1.5e1,"maximum":2.5E-1})", {"-15", "-14.99", "0.25", "0.1", "0"},
        {"-15.01", "0.26", "1"});
}

TEST_CASE("pattern and format", "[grammar]") {
  check(R"({"type":"string","pattern":"^[a-z]+[0-9]{2}$"})", {"\"ab12\"", "\"z00\""},
        {"\"12\"", "\"ab1\"", "\"Ab12\"", "\"ab123\""});
  check(R"({"type":"string","pattern":"foo"})", {"\"foo\"", "\"xfooy\"", "\"a\\\"foo\""}, {"\"fo\"", "\"\""});
  check(R"({"type":"string","pattern":"^a\\d?$","maxLength":1})", {"\"a\""}, {"\"a1\""});
  // Where ECMA-262 and Python's re disagree, only strings both accept are generated.
  check(R"({"type":"string","pattern":"^[^\\w]$"})", {"\"-\"", "\" \""}, {"\"a\"", "\"\xc3\xa9\"", "\"\u001c\""});
  check(R"({"type":"string","pattern":"^\\D$"})", {"\"x\""}, {"\"1\"", "\"\xd9\xa3\""});
  check(R"({"type":"string","pattern":"^.$"})", {"\"x\"", "\"\xc3\xa9\""}, {"\"\\n\"", "\"\\r\""});
  CHECK(has_error(errors_of(R"({"type":"string","pattern":"a{,3}"})"), "/pattern", "pattern"));
  check(R"({"type":"string","format":"date"})", {"\"2024-02-28\"", "\"1999-12-31\""},
        {"\"2024-13-01\"", "\"2024-02-30\"", "\"24-01-01\""});
  check(R"({"type":"string","format":"date-time"})", {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123+05:30\""},
        {"\"2024-01-02 03:04:05Z\"", "\"2024-01-02T25:04:05Z\""});
  check(R"({"type":"string","format":"uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""});
  check(R"({"type":"string","format":"ipv4"})", {"\"192.168.0.1\""}, {"\"256.1.1.1\"", "\"01.1.1.1\""});
  check(R"({"type":"string","format":"email"})", {"\"a.b@example.com\""}, {"\"ab\"", "\"a@\""});
  check(R"({"type":"string","format":"hostname"})", {"\"example.com\"", "\"localhost\""}, {"\"-a.com\""});
}

TEST_CASE("anyOf, allOf, oneOf, $ref", "[grammar]") {
  check(R"({"anyOf":[{"type":"string"},{"type":"null"}]})", {"\"x\"", "null"}, {"1"});
  check(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                    {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
        {"{\"a\":1,\"b\":\"x\"}"}, {"{\"a\":1}", "{\"b\":\"x\"}"});
  check(R"({"allOf":[{"type":"integer","minimum":0},{"maximum":5}]})", {"0", "5"}, {"6", "-1"});
  check(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {"\"a\"", "1"}, {"null"});
  check(R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},
                    {"type":"object","properties":{"k":{"const":"b"},"y":{"type":"string"}},"required":["k"]}]})",
        {"{\"k\":\"a\",\"x\":1}", "{\"k\":\"b\",\"y\":\"s\"}"}, {"{\"k\":\"c\"}"});
  check(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},
           "required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
        {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}"}, {"{\"v\":1,\"next\":{}}"});
  check(R"({"definitions":{"s":{"type":"string"}},"type":"array","items":{"$ref":"#/definitions/s"}})",
        {"[\"a\"]"}, {"[1]"});
  auto errs = errors_of(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})");
  CHECK(has_error(errs, "/oneOf", "oneOf"));
}

TEST_CASE("unsupported keywords: every one is named with its pointer", "[grammar]") {
  auto errs = errors_of(R"({"type":"object","properties":{"a":{"not":{"minLength":3}},
      "b":{"type":"array","uniqueItems":true}},"patternProperties":{"x":{}},"if":{},"then":{}})");
  CHECK(has_error(errs, "/properties/a/not", "not"));
  CHECK(has_error(errs, "/properties/b/uniqueItems", "uniqueItems"));
  CHECK(has_error(errs, "/patternProperties", "patternProperties"));
  CHECK(has_error(errs, "/if", "if"));
  CHECK(has_error(errs, "/then", "then"));
  CHECK(errs.size() == 5);
  auto r = compile_json_schema(R"({"properties":{"a/b":{"dependentRequired":{}}}})");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors[0].pointer == "/properties/a~1b/dependentRequired");
  CHECK(r.error_text().find("dependentRequired") != std::string::npos);
  CHECK(has_error(errors_of(R"({"$ref":"http://example.com/s.json"})"), "/$ref", "$ref"));
  CHECK(has_error(errors_of(R"({"type":"string","format":"color"})"), "/format", "format"));
  CHECK(has_error(errors_of(R"({"type":"string","pattern":"(a)\\1"})"), "/pattern", "pattern"));
  // Annotations are ignored.
  CHECK(compile_json_schema(R"({"title":"t","description":"d","default":1,"examples":[1],"$comment":"c",
      "deprecated":true,"readOnly":true,"$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer"})")
            .ok());
}

TEST_CASE("whitespace policy", "[grammar]") {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  check(s, {"{\"a\":[1,2]}"}, {"{ \"a\":[1,2]}", "{\"a\": [1,2]}"});
  CompileOptions flex;
  flex.whitespace = Whitespace::Flexible;
  check(s, {"{\"a\":[1,2]}", "{ \"a\" : [ 1 , 2 ] }", "{\n  \"a\": [1,\n 2]\n}"}, {"{\"a\":[1 2]}"}, flex);
  check(R"({"enum":[{"k":[1,2]}]})", {"{\"k\":[1,2]}", "{ \"k\" : [ 1, 2 ] }"}, {"{\"k\":[1 2]}"}, flex);

  // Natural: json.dumps separators, one line.
  CompileOptions nat;
  nat.whitespace = Whitespace::Natural;
  check(s, {"{\"a\":[1,2]}", "{\"a\": [1, 2]}", "{ \"a\": [ 1, 2 ] }", "{}", "{\"a\": []}"},
        {"{\"a\" : [1, 2]}", "{\"a\":  [1,2]}", "{\"a\": [1 , 2]}", "{\n\"a\": [1]}", "{\"a\": [1,\t2]}",
         "{\"a\": [1,  2]}"},
        nat);
  // Natural with newlines: indentation up to max_indent spaces.
  nat.max_indent = 4;
  check(s, {"{\n  \"a\": [\n    1,\n    2\n  ]\n}", "{\"a\": [1, 2]}", "{\n\"a\": [1]\n}"},
        {"{\n  \"a\": [\n      1\n  ]\n}", "{\n\n\"a\": [1]}", "{\n  \"a\":\n[1]}", "{\r\n\"a\": [1]}"}, nat);
  check(R"({"enum":[{"k":[1,2]}]})", {"{\"k\": [1, 2]}", "{\n  \"k\": [\n    1,\n    2\n  ]\n}"},
        {"{\"k\" : [1, 2]}"}, nat);
  check(R"({})", {"{\"x\": [1, {\"y\": null}], \"z\": {}}", "[\n  1,\n  \"a\"\n]"}, {"[1 ,2]", "{\"x\" :1}"}, nat);
  auto tools = compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                                 R"("properties":{"a":{"type":"integer"}}}}}])",
                                 [] {
                                   ToolListOptions t;
                                   t.format = ToolCallFormat::Hermes;
                                   t.schema.whitespace = Whitespace::Natural;
                                   return t;
                                 }());
  REQUIRE(tools.ok());
  CHECK(matches(tools.grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  CHECK_FALSE(matches(tools.grammar, "<tool_call>\n{\"name\" : \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
}

TEST_CASE("matcher: EOG only when complete, rollback restores state", "[grammar]") {
  auto g = compile_ok(R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})");
  auto vocab = byte_vocab({"{\"n\":", "12", "}"});
  int32_t eog = int32_t(vocab->size() - 1);
  int32_t open = 256, num = 257, close = 258;
  Matcher m(g, vocab);
  CHECK_FALSE(m.accept_token(eog));
  CHECK(m.accept_token(open));
  CHECK_FALSE(m.is_complete());
  CHECK(m.accept_token(num));
  CHECK_FALSE(m.accept_token(eog));
  CHECK_FALSE(m.accept_token('x'));
  CHECK(m.text() == "{\"n\":12");
  CHECK(m.accept_token(close));
  CHECK(m.is_complete());
  CHECK(m.is_terminated());
  CHECK_FALSE(m.accept_token('1'));
  CHECK(m.accept_token(eog));
  CHECK(m.is_terminated());
  m.rollback(2);
  CHECK(m.text() == "{\"n\":12");
  CHECK_FALSE(m.is_complete());
  CHECK(m.accept_token('3'));
  CHECK(m.accept_token(close));
  CHECK(m.text() == "{\"n\":123}");
  m.rollback(100);
  CHECK(m.text().empty());
  CHECK(m.accept_token(open));
}

namespace {
// Brute force: token allowed iff accept_token succeeds (which requires a live continuation: every
// rule of a built grammar is productive); EOG iff complete; empty tokens never.
void check_mask_consistency(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const Vocabulary>& vocab,
                            const std::string& path) {
  Matcher m(g, vocab);
  size_t n = vocab->size();
  std::vector<uint32_t> mask((n + 31) / 32);
  for (size_t step = 0; step <= path.size(); ++step) {
    m.fill_mask(mask.data());
    for (size_t id = 0; id < n; ++id) {
      bool in_mask = (mask[id / 32] >> (id % 32)) & 1;
      Matcher probe(g, vocab);
      REQUIRE(probe.accept_bytes(m.text()));
      bool ok = probe.accept_token(int32_t(id));
      INFO("prefix '" << m.text() << "' token " << id << " '" << vocab->token(int32_t(id)) << "'");
      CHECK(in_mask == ok);
      if (vocab->token(int32_t(id)).empty() && std::find(vocab->eog_ids().begin(), vocab->eog_ids().end(), int32_t(id)) == vocab->eog_ids().end())
        CHECK_FALSE(in_mask);
    }
    if (step < path.size()) REQUIRE(m.accept_bytes(path.substr(step, 1)));
  }
}
}  // namespace

TEST_CASE("mask equals brute force on a synthetic vocabulary", "[grammar]") {
  std::vector<std::string> extra = {"\"", "\",", "\":", "{\"", "\"}", "ab", "a\"", "\\", "\\n", "\\u00",
                                    "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "12", "-1", "true", "null",
                                    "}", "]", ",\"", "[1", "\"a", "xyz\"", "", "\x01", "\xff", ": ", " "};
  auto vocab = byte_vocab(extra);
  auto g = compile_ok(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":
      {"type":"integer","minimum":-3,"maximum":40}},"c":{"type":"string","maxLength":2},"d":{"enum":["x\"y",true]}},
      "required":["a"],"additionalProperties":false})");
  check_mask_consistency(g, vocab, "{\"a\":\"h\xc3\xa9\\n\\u00e9\",\"b\":[1,-3,40],\"c\":\"ab\",\"d\":\"x\\\"y\"}");
  auto g2 = compile_ok(R"({"type":"string","pattern":"^a+b?$"})");
  check_mask_consistency(g2, vocab, "\"aab\"");
  // Free text before a trigger exercises the self-loop fast path, also below the trie root.
  ToolListOptions to;
  to.format = ToolCallFormat::TriggeredText;
  to.trigger = "ab\"";
  to.allow_text = true;
  auto tr = compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"x":{"type":"integer"}}}}}])", to);
  REQUIRE(tr.ok());
  check_mask_consistency(tr.grammar, vocab, "xa\"aab\"{\"name\":\"f\",\"arguments\":{\"x\":12}}");
}

TEST_CASE("mask fast paths of counted chains equal brute force", "[grammar]") {
  // Long tokens of one class (the class-run and string-run skips), tokens that leave the class
  // half way, escapes, multi-byte characters and quotes, near and far from the chains' ends.
  std::vector<std::string> extra = {"aaaa", "aaaaaaaa", "aaaaaaaaaaaa", "abcdefghij", "abc\"", "ab\"}", "a b",
                                    "a\\n", "\\u00e9", "\xc3\xa9\xc3\xa9", "\xc3\xa9" "aa", "aa\xc3\xa9", "\"",
                                    "\"aaa", "aaaa\"", "0123", "zzzzzzzzzzzzzzzzzzzz", "a-b", "\t", "\\", "\\\""};
  auto vocab = byte_vocab(extra);
  struct Case {
    const char* schema;
    std::string path;
  };
  const Case cases[] = {
      {R"({"type":"string","maxLength":14})", "\"aaaaaaaaaaaaaa\""},
      {R"({"type":"string","minLength":6,"maxLength":20})", "\"ab\xc3\xa9\\n\\u00e9cdefghijkl\""},
      {R"({"type":"string","pattern":"^[a-z]{3,13}$"})", "\"abcdefghijklm\""},
      {R"({"type":"string","pattern":"^[\\s\\S]{12}$"})", "\"a b\\n\\\"cdefghi\""},
      {R"({"type":"string","pattern":"^([a-z][a-z])*$"})", "\"abcdefghij\""},
      {R"({"type":"string","pattern":"^x[^]{2,9}$"})", "\"x\xc3\xa9\\u00e9aaaaa\""},
      // Raw-character chains: ASCII of a class plus every non-ASCII character.
      {R"({"type":"string","pattern":"^[^x]{2,14}$"})", "\"a\xc3\xa9" "\\nbb\xc3\xa9\xc3\xa9 aaaa\""},
      {R"({"type":"string","pattern":"^[^<>]{1,12}$","maxLength":10})", "\"\xc3\xa9" "aaaaaaaa\""},
  };
  for (const Case& c : cases) {
    INFO(c.schema);
    check_mask_consistency(compile_ok(c.schema), vocab, c.path);
  }
}

TEST_CASE("tool lists", "[grammar]") {
  const std::string tools = R"([
    {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}},
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}}])";
  auto ok = [&](const ToolListOptions& o, const std::vector<std::string>& good, const std::vector<std::string>& bad) {
    auto r = compile_tool_list(tools, o);
    INFO(r.error_text());
    REQUIRE(r.ok());
    for (auto& s : good) { INFO(s); CHECK(matches(r.grammar, s)); }
    for (auto& s : bad) { INFO(s); CHECK_FALSE(matches(r.grammar, s)); }
  };
  const std::string c1 = R"({"name":"get_time","arguments":{}})";
  const std::string c2 = R"({"name":"get_weather","arguments":{"city":"Oslo","unit":"c"}})";
  ToolListOptions o;
  ok(o, {c1, c2}, {R"({"name":"get_time","arguments":{"city":"x"}})", R"({"name":"get_weather","arguments":{}})",
                   R"({"name":"nope","arguments":{}})", "[" + c1 + "]",
                   R"({"name":"get_weather","arguments":{"city":"Oslo","x":1}})"});
  o.parallel = true;
  ok(o, {c1, "[" + c1 + "," + c2 + "]"}, {"[]"});
  o.format = ToolCallFormat::JsonArray;
  o.parallel = false;
  ok(o, {"[" + c2 + "]"}, {c2, "[" + c1 + "," + c2 + "]"});
  // Between tags (Phi-4-mini: <|tool_call|>[...]<|/tool_call|>); the bare array then no longer matches.
  o.array_open = "<|tool_call|>";
  o.array_close = "<|/tool_call|>";
  o.parallel = true;
  ok(o, {"<|tool_call|>[" + c2 + "]<|/tool_call|>", "<|tool_call|>[" + c1 + "," + c2 + "]<|/tool_call|>"},
     {"[" + c2 + "]", "<|tool_call|>[" + c2 + "]", "[" + c2 + "]<|/tool_call|>", "<|tool_call|>[]<|/tool_call|>"});
  o.array_open.clear();
  o.array_close.clear();
  o.parallel = false;
  o.format = ToolCallFormat::Hermes;
  o.parallel = true;
  ok(o, {"<tool_call>\n" + c1 + "\n</tool_call>", "<tool_call>\n" + c1 + "\n</tool_call>\n<tool_call>\n" + c2 + "\n</tool_call>"},
     {c1});
  o.format = ToolCallFormat::TriggeredText;
  o.trigger = "<tool_call>";
  o.allow_text = true;
  o.parallel = false;
  ok(o, {"Sure. <tool_call>" + c1, "just text", "a < b <tool_call>" + c2, "<tool_call" + c1},
     {"x <tool_call>{}", "<tool_call>" + c1 + "<tool_call>" + c1});
  o.allow_text = false;
  ok(o, {"<tool_call>" + c1}, {"x<tool_call>" + c1, "<tool_call" + c1});
  o.allow_text = true;
  o.format = ToolCallFormat::Envelope;
  ok(o, {"{\"tool_calls\":[" + c1 + "]}", "{\"content\":\"hi\"}"}, {"{\"tool_calls\":[]}"});
  o.format = ToolCallFormat::JsonObject;
  o.forced_tool = "get_weather";
  ok(o, {c2}, {c1});
  o.forced_tool = "missing";
  CHECK_FALSE(compile_tool_list(tools, o).ok());
  // Arguments are always objects, even when the parameters schema has no "type".
  auto untyped = compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":
      {"properties":{"a":{"type":"integer"}}}}}])");
  REQUIRE(untyped.ok());
  CHECK(matches(untyped.grammar, R"({"name":"f","arguments":{"a":1}})"));
  CHECK_FALSE(matches(untyped.grammar, R"({"name":"f","arguments":5})"));
  CHECK_FALSE(matches(untyped.grammar, R"({"name":"f","arguments":{"b":1}})"));
  // Errors inside a tool name the tool's pointer.
  auto bad = compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"a":{"not":{}}}}}}])");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.errors[0].pointer == "/0/function/parameters/properties/a/not");
  CHECK(bad.errors[0].keyword == "not");
}

TEST_CASE("picoclaw tool list compiles and a random walk under the mask stays valid", "[grammar]") {
  std::string path = std::string(PICOLM_SHARED_DIR) + "/tool-lists/picoclaw-like-tools.json";
  FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  ToolListOptions o;
  o.parallel = true;
  GrammarCache cache;
  auto r = cache.tools(text, o);
  INFO(r.error_text());
  REQUIRE(r.ok());
  CHECK(cache.tools(text, o).grammar == r.grammar);
  auto vocab = byte_vocab({"\"", "\",\"", "\":", "{\"name\":\"", "abc", "\\n", "123", "true", "\"}}"});
  std::mt19937 rng(42);
  size_t words = (vocab->size() + 31) / 32;
  for (int run = 0; run < 20; ++run) {
    Matcher m(r.grammar, vocab);
    std::vector<uint32_t> mask(words);
    for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
      m.fill_mask(mask.data());
      std::vector<int32_t> allowed;
      for (size_t id = 0; id < vocab->size(); ++id)
        if ((mask[id / 32] >> (id % 32)) & 1) allowed.push_back(int32_t(id));
      REQUIRE(!allowed.empty());
      // Prefer closing structure late in the run so that walks finish.
      int32_t pick = allowed[rng() % allowed.size()];
      if (step > 200) {
        for (int32_t id : allowed)
          if (vocab->token(id) == "\"" || vocab->token(id) == "}" || vocab->token(id) == "]") pick = id;
      }
      REQUIRE(m.accept_token(pick));
    }
  }
}

TEST_CASE("random integer and number bounds: exact for integers, never out of range", "[grammar]") {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 25; ++iter) {
    int lo = int(rng() % 2000) - 1000, hi = lo + int(rng() % 1500);
    bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    std::string s = std::string(R"({"type":"integer",")") + (lo_ex ? "exclusiveMinimum" : "minimum") + "\":" +
                    std::to_string(lo) + ",\"" + (hi_ex ? "exclusiveMaximum" : "maximum") + "\":" + std::to_string(hi) + "}";
    auto r = compile_json_schema(s);
    bool empty = (lo_ex ? lo + 1 : lo) > (hi_ex ? hi - 1 : hi);
    if (empty) {
      CHECK_FALSE(r.ok());
      continue;
    }
    REQUIRE(r.ok());
    for (int k = 0; k < 300; ++k) {
      int v = lo - 50 + int(rng() % uint32_t(hi - lo + 100));
      bool want = (lo_ex ? v > lo : v >= lo) && (hi_ex ? v < hi : v <= hi);
      INFO(s << " value " << v);
      CHECK(matches(r.grammar, std::to_string(v)) == want);
    }
  }
  for (int iter = 0; iter < 20; ++iter) {  // many digits: values near and far from the bounds
    int64_t lo = int64_t(rng() % 100000000) - 50000000, hi = lo + int64_t(rng() % 900000000);
    auto r = compile_json_schema("{\"type\":\"integer\",\"minimum\":" + std::to_string(lo) + ",\"maximum\":" +
                                 std::to_string(hi) + "}");
    REQUIRE(r.ok());
    for (int k = 0; k < 200; ++k) {
      int64_t base = (k % 2) ? lo : hi;
      int64_t v = k < 100 ? base + int64_t(rng() % 2001) - 1000 : int64_t(rng() % 2000000000) - 1000000000;
      INFO(lo << ".." << hi << " value " << v);
      CHECK(matches(r.grammar, std::to_string(v)) == (v >= lo && v <= hi));
    }
  }
  for (int iter = 0; iter < 25; ++iter) {
    double lo = (int(rng() % 4000) - 2000) / 100.0, hi = lo + (rng() % 3000) / 100.0;
    bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    char buf[200];
    std::snprintf(buf, sizeof buf, R"({"type":"number","%s":%.2f,"%s":%.2f})", lo_ex ? "exclusiveMinimum" : "minimum", lo,
                  hi_ex ? "exclusiveMaximum" : "maximum", hi);
    auto r = compile_json_schema(buf);
    REQUIRE(r.ok());
    int accepted = 0;
    for (int k = 0; k < 300; ++k) {
      double v = lo - 2 + (rng() % uint32_t((hi - lo + 4) * 1000)) / 1000.0;
      char vb[64];
      std::snprintf(vb, sizeof vb, "%.3f", v);
      std::string text = vb;
      while (text.back() == '0') text.pop_back();
      if (text.back() == '.') text.pop_back();
      if (text == "-0") text = "0";
      double x = std::stod(text);
      // Canonical spellings (no trailing fraction zeros) are decided exactly.
      bool want = (lo_ex ? x > lo : x >= lo) && (hi_ex ? x < hi : x <= hi);
      bool got = matches(r.grammar, text);
      accepted += got;
      INFO(buf << " value " << text);
      CHECK(got == want);
      // The same value followed by fraction zeros (issue 29): the same verdict.
      const std::string zeros = text + (text.find('.') == std::string::npos ? ".0" : "00");
      INFO("with zeros: " << zeros);
      CHECK(matches(r.grammar, zeros) == want);
    }
  }
}

TEST_CASE("grammar cache returns the same grammar for the same text and options", "[grammar]") {
  GrammarCache cache;
  auto a = cache.schema(R"({"type":"integer"})");
  auto b = cache.schema(R"({"type":"integer"})");
  REQUIRE(a.ok());
  CHECK(a.grammar == b.grammar);
  CompileOptions flex;
  flex.whitespace = Whitespace::Flexible;
  CHECK(cache.schema(R"({"type":"integer"})", flex).grammar != a.grammar);
  // Natural grammars differ by max_indent: a cached one-line grammar must not serve indent 4.
  CompileOptions one_line, indented;
  one_line.whitespace = indented.whitespace = Whitespace::Natural;
  indented.max_indent = 4;
  const char* arr = R"({"type":"array"})";
  auto g1 = cache.schema(arr, one_line), g2 = cache.schema(arr, indented);
  REQUIRE(g1.ok());
  REQUIRE(g2.ok());
  CHECK(g1.grammar != g2.grammar);
  CHECK_FALSE(matches(g1.grammar, "[\n  1\n]"));
  CHECK(matches(g2.grammar, "[\n  1\n]"));
  auto bad = cache.schema(R"({"not":{}})");
  CHECK_FALSE(bad.ok());
  CHECK(bad.errors.size() == 1);
}

TEST_CASE("grammar text dump names the rules", "[grammar]") {
  auto g = compile_ok(R"({"enum":["ab"]})");
  std::string t = grammar_to_text(*g);
  CHECK(t.find("::=") != std::string::npos);
  CHECK(t.find("[a]") != std::string::npos);
}

TEST_CASE("unbounded numbers have capped digit runs (a small model cannot loop on digits)", "[grammar]") {
  check(R"({"type":"integer"})", {"0", "-7", "999999999999999", "-999999999999999"},
        {"1000000000000000", "-1000000000000000", "01"});
  // Numbers a client reads back as written: at most 15 significant digits; exponents negative
  // with at most two digits (a positive one writes an integer: 9e50 is beyond 2^53 in JavaScript).
  check(R"({"type":"number"})", {"1.5", "-0.125", "12345678.1234567", "0.123456789012345", "1e-99", "2.5E-7", "-9.5e-99"},
        {"1234567890123456", "1.1234567890123456", "123456789012345.123456789012345", "1e99", "1e308", "1e1000",
         "1e+666", "0.1234567890123456", "1e-100"});
}

// ---------------------------------------------------------------------------------------------
// Shortest completion and closing mode

namespace {

// Exact oracle: breadth-first search over the recognizer's states (deduplicated by the internal
// state key), one byte per edge, all 256 bytes. Returns the number of bytes of the shortest
// completion after `prefix`, or SIZE_MAX when the search exceeds `max_states`.
size_t bfs_completion_bytes(const std::shared_ptr<const Grammar>& g, const std::string& prefix,
                            size_t max_states = 20000) {
  static auto vocab = byte_vocab();
  Matcher start(g, vocab);
  REQUIRE(start.accept_bytes(prefix));
  if (start.is_complete()) return 0;
  std::set<std::string> seen{detail::MatcherTestAccess::state_key(start)};
  std::vector<std::pair<std::string, size_t>> queue{{"", 0}};
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const auto [suffix, dist] = queue[qi];
    Matcher m(g, vocab);
    REQUIRE(m.accept_bytes(prefix + suffix));
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, char(b));
      if (!m.accept_bytes(one)) continue;
      if (m.is_complete()) return dist + 1;
      if (seen.insert(detail::MatcherTestAccess::state_key(m)).second) queue.push_back({suffix + one, dist + 1});
      m.rollback(1);
      if (seen.size() > max_states) return SIZE_MAX;
    }
  }
  return SIZE_MAX;
}

// Random byte prefixes under the mask: uniform over allowed bytes, but half of the time from a
// few bytes that reach the interesting states (escapes, surrogates, numbers, structure).
std::vector<std::string> random_byte_prefixes(const std::shared_ptr<const Grammar>& g, uint64_t seed, int n,
                                              int max_len) {
  auto vocab = byte_vocab();
  std::mt19937_64 rng(seed);
  const std::string favored = "\\ud8Dc0a\"{}[],:1-.eE \n";
  std::vector<std::string> out;
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  for (int i = 0; i < n; ++i) {
    Matcher m(g, vocab);
    const int len = std::uniform_int_distribution<int>(0, max_len)(rng);
    for (int step = 0; step < len; ++step) {
      std::fill(mask.begin(), mask.end(), 0u);
      m.fill_mask(mask.data());
      std::vector<int> allowed, fav;
      for (int b = 0; b < 256; ++b)
        if ((mask[size_t(b) / 32] >> (b % 32)) & 1u) {
          allowed.push_back(b);
          if (favored.find(char(b)) != std::string::npos) fav.push_back(b);
        }
      if (allowed.empty()) break;
      const auto& pool = (!fav.empty() && rng() % 2) ? fav : allowed;
      REQUIRE(m.accept_bytes(std::string(1, char(pool[rng() % pool.size()]))));
    }
    out.push_back(m.text());
  }
  return out;
}

const char* kCompletionSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","minLength":3},"n":{"type":"integer","minimum":10},)"
    R"("tags":{"type":"array","items":{"enum":["xy","z"]},"minItems":2}},"required":["name","tags"]})",
    R"({"type":"string","pattern":"^[a-z]{2}-[0-9]{3}$"})",
    R"({"anyOf":[{"type":"number","minimum":1.25},{"type":"boolean"}]})",
    R"({"type":"string","minLength":2,"maxLength":4})",
    R"({"type":"array","items":{"type":"object","properties":{"k":{"const":"v"}},"required":["k"]},"maxItems":3})",
    R"({"type":"string","format":"date"})",
    R"({})",
    R"({"type":"string","pattern":"^[^a]{2,5}$"})",
};

}  // namespace

TEST_CASE("min_completion_bytes equals a breadth-first search over recognizer states", "[grammar]") {
  uint64_t seed = 7;
  int n_checked = 0, n_skipped = 0;
  for (const char* schema : kCompletionSchemas) {
    for (Whitespace ws : {Whitespace::Compact, Whitespace::Flexible}) {
      CompileOptions o;
      o.whitespace = ws;
      o.max_whitespace_run = 2;
      auto g = compile_ok(schema, o);
      auto vocab = byte_vocab();
      for (const std::string& prefix : random_byte_prefixes(g, seed++, 25, 24)) {
        Matcher m(g, vocab);
        REQUIRE(m.accept_bytes(prefix));
        const size_t want = bfs_completion_bytes(g, prefix);
        INFO(schema << "\nprefix: " << prefix);
        if (want == SIZE_MAX) {  // deep nesting in `{}`: too many states for the oracle
          ++n_skipped;
          continue;
        }
        CHECK(m.min_completion_bytes() == want);
        // The canonical completion has that length and completes the instance.
        const std::string comp = m.shortest_completion();
        CHECK(comp.size() == want);
        CHECK(m.accept_bytes(comp));
        CHECK(m.is_complete());
        CHECK(m.min_completion_bytes() == 0);
        ++n_checked;
      }
    }
  }
  CHECK(n_checked + n_skipped == 2 * 25 * int(std::size(kCompletionSchemas)));
  CHECK(n_skipped <= 10);
}

TEST_CASE("shortest completions are the expected canonical values", "[grammar]") {
  auto vocab = byte_vocab();
  auto from = [&](const std::string& schema, const std::string& prefix) {
    Matcher m(compile_ok(schema), vocab);
    REQUIRE(m.accept_bytes(prefix));
    return m.shortest_completion();
  };
  CHECK(from(kCompletionSchemas[0], "") == R"({"name":"aaa","tags":["z","z"]})");
  CHECK(from(kCompletionSchemas[0], R"({"name":"x\u00)") == R"(aaa","tags":["z","z"]})");  // \u00aa, 'a'

  CHECK(from(kCompletionSchemas[1], "\"q") == "a-000\"");
  CHECK(from(R"({"type":"string"})", "\"abc\\ud83d") == "\\udcaa\"");  // hex letters rank before digits
  CHECK(from(R"({"type":"integer","minimum":100})", "") == "100");
  CHECK(from(R"({"enum":["long","mid","s"]})", "") == "\"s\"");
  auto r = compile_tool_list(R"([{"type":"function","function":{"name":"get","parameters":{"type":"object",)"
                             R"("properties":{"q":{"type":"string"}},"required":["q"]}}}])",
                             [] {
                               ToolListOptions t;
                               t.format = ToolCallFormat::Hermes;
                               return t;
                             }());
  REQUIRE(r.ok());
  Matcher m(r.grammar, vocab);
  CHECK(m.shortest_completion() == "<tool_call>\n{\"name\":\"get\",\"arguments\":{\"q\":\"\"}}\n</tool_call>");
  REQUIRE(m.accept_bytes("<tool_call>\n{\"name\":\"get\",\"arguments\":{\"q\":\"hello"));
  CHECK(m.shortest_completion() == "\"}}\n</tool_call>");
  CHECK(m.min_completion_bytes() == 16);
}

TEST_CASE("closing mode finishes within min_completion_tokens and never dead-ends", "[grammar]") {
  // Byte tokens plus merges, so the token count differs from the byte count and several
  // tokenizations of a completion exist.
  auto vocab = byte_vocab({"\"}", "}}", "\":", "\"name\"", "aa", "aaaa", "\"]", "\"z\"", ",\"", "\",\"", "00",
                           "\n</", "tool_call>", "<tool_call>\n{\"", "ags", "\"t", "-0"});
  const int32_t eog = int32_t(vocab->size() - 1);
  std::vector<std::shared_ptr<const Grammar>> grammars;
  for (const char* s : kCompletionSchemas) grammars.push_back(compile_ok(s));
  {
    ToolListOptions t;
    t.format = ToolCallFormat::Hermes;
    t.parallel = true;
    auto r = compile_tool_list(R"([{"type":"function","function":{"name":"get","parameters":{"type":"object",)"
                               R"("properties":{"q":{"type":"string","minLength":5},"tags":{"type":"array",)"
                               R"("items":{"type":"string"},"minItems":1}},"required":["q","tags"]}}}])",
                               t);
    REQUIRE(r.ok());
    grammars.push_back(r.grammar);
  }
  std::mt19937_64 rng(11);
  std::vector<uint32_t> mask((vocab->size() + 31) / 32), full(mask.size());
  int n_runs = 0;
  for (const auto& g : grammars) {
    for (int run = 0; run < 40; ++run) {
      Matcher m(g, vocab);
      // A random prefix under the ordinary mask.
      const int prefix_len = int(rng() % 30);
      for (int i = 0; i < prefix_len; ++i) {
        std::fill(mask.begin(), mask.end(), 0u);
        m.fill_mask(mask.data());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < eog; ++id)
          if ((mask[size_t(id) / 32] >> (id % 32)) & 1u) allowed.push_back(id);
        if (allowed.empty()) break;
        REQUIRE(m.accept_token(allowed[rng() % allowed.size()]));
      }
      const int t0 = m.min_completion_tokens();
      REQUIRE(t0 >= 0);
      CHECK(size_t(t0) <= m.min_completion_bytes());  // every byte is a token here
      const int slack = run % 2 ? 0 : int(rng() % 4);
      int left = t0 + slack, used = 0;
      INFO("prefix: " << m.text() << "  T=" << t0 << " slack=" << slack);
      for (;;) {
        std::fill(mask.begin(), mask.end(), 0u);
        std::fill(full.begin(), full.end(), 0u);
        m.fill_mask_closing(mask.data(), left);
        m.fill_mask(full.data());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id <= eog; ++id)
          if ((mask[size_t(id) / 32] >> (id % 32)) & 1u) {
            allowed.push_back(id);
            CHECK(((full[size_t(id) / 32] >> (id % 32)) & 1u) == 1u);  // a subset of the ordinary mask
          }
        REQUIRE(!allowed.empty());  // never a dead end
        const int32_t pick = allowed[rng() % allowed.size()];
        const int before = m.min_completion_tokens();
        REQUIRE(m.accept_token(pick));
        if (pick == eog) break;
        ++used;
        --left;
        const int after = m.min_completion_tokens();
        CHECK(after <= std::max(left, before - 1));
        if (slack == 0) CHECK(after == before - 1);  // strictly on the plan: one token per step
        REQUIRE(used <= t0 + slack);
      }
      CHECK(m.is_terminated());
      CHECK(matches(g, m.text()));
      if (slack == 0) CHECK(used == t0);
      ++n_runs;
    }
  }
  CHECK(n_runs == 40 * int(grammars.size()));
}

TEST_CASE("closing mode: rollback and a deviating token recompute the completion", "[grammar]") {
  auto vocab = byte_vocab({"aa", "\"}"});
  auto g = compile_ok(R"({"type":"object","properties":{"s":{"type":"string","minLength":2}},"required":["s"]})");
  Matcher m(g, vocab);
  REQUIRE(m.accept_bytes("{\"s\":\""));
  CHECK(m.shortest_completion() == "aa\"}");
  CHECK(m.min_completion_tokens() == 2);  // "aa" + "\"}"
  REQUIRE(m.accept_bytes("x"));           // not on the plan
  CHECK(m.shortest_completion() == "a\"}");
  CHECK(m.min_completion_tokens() == 2);
  m.rollback(1);
  CHECK(m.shortest_completion() == "aa\"}");
  CHECK(m.min_completion_bytes() == 4);
  REQUIRE(m.accept_bytes("aa"));
  CHECK(m.min_completion_tokens() == 1);
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  m.fill_mask_closing(mask.data(), 1);
  int n = 0;
  for (size_t id = 0; id < vocab->size(); ++id) n += (mask[id / 32] >> (id % 32)) & 1u;
  CHECK(n == 1);  // only "\"}" finishes in one token
  m.fill_mask_closing(mask.data(), 5);
  n = 0;
  for (size_t id = 0; id < vocab->size(); ++id) n += (mask[id / 32] >> (id % 32)) & 1u;
  CHECK(n == 2);  // with room: '"' alone is allowed too
}

// ---------------------------------------------------------------------------------------------
// Keywords zod 4 and MCP tool lists emit: propertyNames, min/maxProperties, decimal multipleOf, not

TEST_CASE("propertyNames: zod records and string constraints on keys", "[grammar]") {
  // z.record(z.string(), z.number())
  check(R"({"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"number"}})",
        {"{}", "{\"a\":1}", "{\"a\":1,\"b c\":2.5}"}, {"{\"a\":\"x\"}", "[]", "{\"a\":1,}"});
  check(R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":{"type":"integer"}})",
        {"{\"ab\":1}", "{\"ab\":1,\"c\":2}"}, {"{\"Ab\":1}", "{\"\":1}", "{\"a1\":1}"});
  check(R"({"type":"object","propertyNames":{"enum":["x","y"]}})", {"{}", "{\"x\":1,\"y\":null}"},
        {"{\"z\":1}", "{\"xy\":1}"});
  check(R"({"type":"object","propertyNames":{"const":"k"}})", {"{\"k\":[]}"}, {"{\"j\":1}"});
  check(R"({"type":"object","propertyNames":{"minLength":2,"maxLength":3}})", {"{\"ab\":1}", "{\"abc\":1}", "{\"\u00e9\u00e9\":1}"},
        {"{\"a\":1}", "{\"abcd\":1}"});
  // Listed properties whose name fails propertyNames cannot appear.
  check(R"({"type":"object","properties":{"ok":{"type":"integer"},"BAD":{"type":"integer"}},
           "propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":false})",
        {"{\"ok\":1}", "{}"}, {"{\"BAD\":1}", "{\"ok\":1,\"BAD\":1}"});
  // ...and when required, the schema has no instance at all.
  CHECK_FALSE(compile_json_schema(R"({"type":"object","properties":{"BAD":{}},"required":["BAD"],
                                     "propertyNames":{"pattern":"^[a-z]+$"}})").ok());
  check(R"({"type":"object","propertyNames":false})", {"{}"}, {"{\"a\":1}"});
  check(R"({"type":"object","propertyNames":{"type":"integer"}})", {"{}"}, {"{\"1\":1}"});
  auto errs = errors_of(R"({"type":"object","propertyNames":{"format":"email"}})");
  CHECK(has_error(errs, "/propertyNames/format", "propertyNames"));
}

TEST_CASE("minProperties / maxProperties count listed and extra properties", "[grammar]") {
  check(R"({"type":"object","minProperties":1,"maxProperties":2})", {"{\"a\":1}", "{\"a\":1,\"b\":2}"},
        {"{}", "{\"a\":1,\"b\":2,\"c\":3}"});
  check(R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"additionalProperties":false,"minProperties":2})",
        {"{\"a\":1,\"b\":2}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"b\":2,\"c\":3}"}, {"{\"a\":1}", "{}"});
  check(R"({"type":"object","properties":{"a":{}},"required":["a"],"maxProperties":1})", {"{\"a\":1}"},
        {"{\"a\":1,\"b\":2}", "{}"});
  check(R"({"type":"object","maxProperties":0})", {"{}"}, {"{\"a\":1}"});
  CHECK_FALSE(compile_json_schema(R"({"type":"object","minProperties":3,"maxProperties":2})").ok());
  CHECK_FALSE(compile_json_schema(R"({"type":"object","properties":{"a":{},"b":{}},"required":["a","b"],"maxProperties":1})").ok());
  CHECK(has_error(errors_of(R"({"minProperties":-1})"), "/minProperties", "minProperties"));
}

namespace {
// n / 10^scale written canonically (no trailing fraction zeros, no "-0").
std::string decimal_text(long n, int scale) {
  std::string sign = n < 0 ? "-" : "";
  long a = std::labs(n), p = 1;
  for (int i = 0; i < scale; ++i) p *= 10;
  std::string s = sign + std::to_string(a / p);
  std::string f = std::to_string(a % p);
  f = std::string(size_t(scale) - f.size(), '0') + f;
  while (!f.empty() && f.back() == '0') f.pop_back();
  if (!f.empty()) s += "." + f;
  return s;
}
}  // namespace

TEST_CASE("fractional multipleOf is exact in decimal", "[grammar]") {
  // z.number().multipleOf(0.01): every x/1000 in [-3, 3], exact oracle on the integers.
  auto g = compile_ok(R"({"type":"number","multipleOf":0.01})");
  for (long n = -3000; n <= 3000; ++n) {
    const std::string t = decimal_text(n, 3);
    INFO(t);
    CHECK(matches(g, t) == (n % 10 == 0));
  }
  CHECK(matches(g, "123456.78"));
  CHECK(matches(g, "1.50"));  // trailing fraction zeros: the same value (issue 29)
  CHECK_FALSE(matches(g, "1.505"));
  CHECK_FALSE(matches(g, "1e-2"));
  auto g2 = compile_ok(R"({"type":"number","multipleOf":0.25,"minimum":-1.3,"exclusiveMaximum":2.5})");
  for (long n = -400; n <= 400; ++n) {
    const std::string t = decimal_text(n, 2);
    INFO(t);
    CHECK(matches(g2, t) == (n % 25 == 0 && n >= -130 && n < 250));
  }
  auto g3 = compile_ok(R"({"type":"number","multipleOf":0.001,"exclusiveMinimum":0.005,"maximum":0.0125})");
  for (long n = 0; n <= 200; ++n) {
    const std::string t = decimal_text(n, 4);
    INFO(t);
    CHECK(matches(g3, t) == (n % 10 == 0 && n > 50 && n <= 125));
  }
  check(R"({"type":"integer","multipleOf":0.5})", {"3", "-4", "0"}, {"3.5", "0.5"});
  check(R"({"allOf":[{"multipleOf":0.25},{"multipleOf":0.1}],"type":"number"})", {"1.5", "0.5", "2"},
        {"0.25", "0.1", "0.75"});
  check(R"({"enum":[0.3,0.35,1,"x"],"multipleOf":0.1})", {"0.3", "1", "\"x\""}, {"0.35"});
  check(R"({"type":"number","multipleOf":1.5})", {"3", "4.5", "-1.5"}, {"1", "2.25"});
  CHECK(has_error(errors_of(R"({"type":"number","multipleOf":0.0000000000001})"), "/multipleOf", "multipleOf"));
  CHECK(has_error(errors_of(R"({"type":"number","multipleOf":1e-20})"), "/multipleOf", "multipleOf"));
  CHECK(has_error(errors_of(R"({"type":"number","multipleOf":0.123457})"), "", "multipleOf"));
}

TEST_CASE("not of a type, const, enum or required set", "[grammar]") {
  check(R"({"not":{"type":"string"}})", {"1", "null", "{}", "[true]"}, {"\"a\""});
  check(R"({"type":"number","not":{"type":"integer"}})", {"1.5", "-0.25"}, {"1", "0", "2e3"});
  check(R"({"not":{"type":["object","array","string","number"]}})", {"null", "true"}, {"1", "\"a\"", "[]", "{}"});
  check(R"({"type":"string","not":{"enum":["a","b"]}})", {"\"c\"", "\"ab\"", "\"\""}, {"\"a\"", "\"b\""});
  check(R"({"type":"string","pattern":"^[ab]$","not":{"const":"a"}})", {"\"b\""}, {"\"a\"", "\"c\""});
  check(R"({"enum":["a","b","c"],"not":{"const":"b"}})", {"\"a\"", "\"c\""}, {"\"b\""});
  check(R"({"type":["boolean","null"],"not":{"const":true}})", {"false", "null"}, {"true"});
  check(R"({"type":["boolean","null"],"not":{"enum":[null,false]}})", {"true"}, {"false", "null"});
  check(R"({"type":"object","properties":{"a":{},"b":{}},"not":{"required":["a","b"]}})",
        {"{\"a\":1}", "{}"}, {"{\"a\":1,\"b\":2}"});
  check(R"({"type":"object","properties":{"a":{},"b":{}},"required":["a"],"not":{"required":["a","b"]}})",
        {"{\"a\":1}"}, {"{\"a\":1,\"b\":2}", "{\"b\":2}"});
  CHECK_FALSE(compile_json_schema(R"({"type":"object","required":["a"],"not":{"required":["a"]}})").ok());
  CHECK(has_error(errors_of(R"({"not":{"type":"string","minLength":2}})"), "/not", "not"));
  CHECK(has_error(errors_of(R"({"not":{"minimum":2}})"), "/not", "not"));
  CHECK(has_error(errors_of(R"({"type":"number","not":{"const":1}})"), "/not", "not"));
  // A numeric const is fine when the type already excludes numbers.
  check(R"({"type":"string","not":{"enum":[1,"z"]}})", {"\"y\""}, {"\"z\""});
}

// ---------------------------------------------------------------------------------------------
// Memory bounds (issue 15 item 2)

namespace {
// A distinct object schema with n properties of mixed types (seed makes the names unique).
std::string big_schema(int n, int seed) {
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; i < n; ++i) {
    if (i) s += ',';
    s += "\"p" + std::to_string(seed) + "_" + std::to_string(i) + "\":";
    s += i % 3 == 0 ? R"({"type":"string","maxLength":8})" : i % 3 == 1 ? R"({"type":"integer","minimum":0})" : R"({"type":"boolean"})";
  }
  return s + "}}";
}
}  // namespace

TEST_CASE("the grammar cache is bounded by bytes, not entries", "[grammar]") {
  // 320 distinct 2,000-property schemas through a 16 MB cache: each is served, the accounted
  // bytes never exceed the bound, and what was evicted is recompiled on demand.
  constexpr size_t kMax = size_t(16) << 20;
  GrammarCache cache(kMax);
  REQUIRE(cache.max_bytes() == kMax);
  size_t one = 0, peak = 0;
  for (int i = 0; i < 320; ++i) {
    auto r = cache.schema(big_schema(2000, i));
    INFO(i << ": " << r.error_text());
    REQUIRE(r.ok());
    if (i == 0) one = grammar_memory_bytes(*r.grammar);
    peak = std::max(peak, cache.bytes());
    REQUIRE(cache.bytes() <= kMax);
  }
  INFO("one grammar " << one << " bytes, peak " << peak << ", entries " << cache.entries());
  CHECK(one > 100000);                        // the accounting sees the tables
  CHECK(cache.entries() >= kMax / one / 2);   // and the cache is not needlessly empty
  CHECK(cache.entries() < 320);
  CHECK(peak > kMax / 2);
  // The most recent one is a hit (same grammar object), the first one was evicted and comes back.
  auto last = cache.schema(big_schema(2000, 319));
  CHECK(cache.schema(big_schema(2000, 319)).grammar == last.grammar);
  auto first = cache.schema(big_schema(2000, 0));
  REQUIRE(first.ok());
  CHECK(cache.bytes() <= kMax);
}

TEST_CASE("a compile limit queues misses without losing or mixing them up", "[grammar]") {
  // max_parallel_compiles 1 (the provider's default): 6 threads each miss on their own schema and
  // on one they share; every caller gets its own schema's grammar, hits stay hits, nobody hangs.
  GrammarCache cache(GrammarCache::kDefaultMaxBytes, 1);
  std::vector<CompileResult> own(6), shared(6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      own[size_t(t)] = cache.schema(big_schema(200, 100 + t));
      shared[size_t(t)] = cache.schema(big_schema(200, 99));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 6; ++t) {
    INFO(t);
    REQUIRE(own[size_t(t)].ok());
    REQUIRE(shared[size_t(t)].ok());
    CHECK(grammar_to_text(*own[size_t(t)].grammar) == grammar_to_text(*compile_json_schema(big_schema(200, 100 + t)).grammar));
    CHECK(cache.schema(big_schema(200, 100 + t)).grammar == own[size_t(t)].grammar);  // kept: a hit now
  }
  CHECK(cache.entries() == 7);
}

TEST_CASE("a grammar larger than the cache is returned but not kept; mask growth is counted", "[grammar]") {
  GrammarCache tiny(64 << 10);
  auto r = tiny.schema(big_schema(2000, 7));
  REQUIRE(r.ok());
  CHECK(grammar_memory_bytes(*r.grammar) > (64u << 10));
  CHECK(tiny.entries() == 0);
  CHECK(tiny.bytes() == 0);
  CHECK(tiny.schema(big_schema(2000, 7)).grammar != r.grammar);  // compiled again

  GrammarCache cache;
  auto g = cache.schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}})");
  REQUIRE(g.ok());
  const size_t before = cache.bytes();
  const size_t gbefore = grammar_memory_bytes(*g.grammar);
  {
    auto vocab = byte_vocab();
    Matcher m(g.grammar, vocab);
    std::vector<uint32_t> mask((vocab->size() + 31) / 32);
    for (char c : std::string(R"({"a":"xyz","b":12})")) {
      m.fill_mask(mask.data());
      REQUIRE(m.accept_bytes(std::string(1, c)));
    }
  }
  CHECK(grammar_memory_bytes(*g.grammar) > gbefore);  // masks cached in the grammar
  CHECK(cache.schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}})").grammar ==
        g.grammar);
  CHECK(cache.bytes() > before);  // re-measured on use
}

TEST_CASE("a schema whose grammar would exceed max_grammar_bytes is refused naming the size", "[grammar]") {
  CompileOptions o;
  o.max_grammar_bytes = size_t(1) << 20;
  auto r = compile_json_schema(big_schema(10000, 1), o);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].keyword == "size");
  CHECK(r.error_text().find("1.0 MB") != std::string::npos);
  // The default bound admits it (the estimate is an upper bound of what is kept).
  auto ok = compile_json_schema(big_schema(10000, 1));
  REQUIRE(ok.ok());
  CHECK(grammar_memory_bytes(*ok.grammar) < CompileOptions{}.max_grammar_bytes);
  // Tool lists have the same bound.
  ToolListOptions to;
  to.schema.max_grammar_bytes = size_t(1) << 20;
  auto t = compile_tool_list("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":" + big_schema(10000, 2) + "}}]", to);
  REQUIRE_FALSE(t.ok());
  CHECK(t.errors[0].keyword == "size");
}

// Issue 28 leftover: the compiler stops at its limits as it goes, whatever the schema. An 8 MB
// body of 150,000 properties used to parse in quadratic time (a linear duplicate-key scan) and
// build a 600 MB automaton of the extra keys (any string but the 150,000 names) before the 32 MB
// grammar limit was noticed: 106 s and 610 MB before the 400.
TEST_CASE("an 8 MB schema of 150,000 properties is refused for size, naming the limit", "[grammar]") {
  std::string schema = R"({"type":"object","required":["property_name_000001"],"properties":{)";
  for (int i = 0; i < 150000; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%s\"property_name_%06d\":", i ? "," : "", i);
    schema += name;
    schema += R"({"type":"string","maxLength":64})";
  }
  schema += "}}";
  REQUIRE(schema.size() > (size_t(7) << 20));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = compile_json_schema(schema);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("150,000 properties (%.1f MB): refused in %.0f ms: %s\n", double(schema.size()) / (1 << 20), ms,
              r.error_text().c_str());
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].keyword == "size");
  CHECK(r.error_text().find("32.0 MB") != std::string::npos);
  // Tool parameters (additionalProperties false: no key automaton) stop the same way.
  ToolListOptions to;
  auto t = compile_tool_list(R"([{"type":"function","function":{"name":"f","parameters":)" + schema + "}}]", to);
  REQUIRE_FALSE(t.ok());
  CHECK(t.errors[0].keyword == "size");
}

TEST_CASE("automata that would pass the compile scratch bound are refused before they are built", "[grammar]") {
  // 2,000 long names without shared prefixes: their trie (the extra keys are any string but
  // these) has ~100,000 nodes, ~200 MB of transition rows, while the grammar's rules take ~6 MB.
  // With max_grammar_bytes 16 MB the scratch bound is 48 MB: refused, naming it.
  std::string schema = R"({"type":"object","properties":{)";
  uint64_t x = 29;
  for (int i = 0; i < 2000; ++i) {
    std::string name;
    for (int k = 0; k < 48; ++k) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      name += char('a' + (x >> 59) % 26);
    }
    schema += (i ? ",\"" : "\"") + name + R"(":{"type":"integer"})";
  }
  schema += "}}";
  CompileOptions o;
  o.max_grammar_bytes = size_t(16) << 20;
  auto r = compile_json_schema(schema, o);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].keyword == "size");
  CHECK(r.error_text().find("48.0 MB (3 x max_grammar_bytes 16.0 MB)") != std::string::npos);
  // Without extra keys there is no such automaton, and the rules fit.
  o.additional_properties_default = false;
  CHECK(compile_json_schema(schema, o).ok());
}

// Issue 29: a `$ref` may point anywhere in the document (a root-level name, inside a $defs entry,
// through escapes); its target gets the same keyword rules as any other schema location, and a
// refusal names the pointer of the keyword at the target.
TEST_CASE("$ref targets anywhere in the document: refused keywords are named at the target", "[grammar]") {
  // The issue's reproducers (each compiled with exit 0 and sampled invalid instances before).
  CHECK(has_error(errors_of(R"({"type":"object","properties":{"p":{"$ref":"#/$defs/g/inner"}},"required":["p"],
      "$defs":{"g":{"inner":{"type":"array","items":{"const":7},"minItems":2,"uniqueItems":true}}}})"),
                  "/$defs/g/inner/uniqueItems", "uniqueItems"));
  auto ifthen = errors_of(R"({"$ref":"#/x","x":{"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"boolean"}},"required":["a"],"if":{"required":["a"]},"then":{"required":["b"]}}})");
  CHECK(has_error(ifthen, "/x/if", "if"));
  CHECK(has_error(ifthen, "/x/then", "then"));
  CHECK(has_error(errors_of(R"({"$ref":"#/x","x":{"type":"string","not":{"pattern":"a"},"minLength":5}})"),
                  "/x/not", "not"));
  // MaskBench Handwritten/notnames4 (reconstructed from the issue: allOf of $refs into #/ddd/...).
  auto notnames = errors_of(R"({"allOf":[{"$ref":"#/ddd/names"},{"$ref":"#/ddd/pp"}],"type":"object",
      "ddd":{"names":{"required":["foo","bar"],"not":{"propertyNames":{"enum":["foo","bar"]}}},
             "pp":{"patternProperties":{"^x":{"type":"integer"}}}}})");
  CHECK(has_error(notnames, "/ddd/names/not", "not"));
  CHECK(has_error(notnames, "/ddd/pp/patternProperties", "patternProperties"));
  // Nested targets, escapes (~0 ~1) and percent-encoding resolve to the same canonical pointer.
  CHECK(has_error(errors_of(R"({"$ref":"#/a~1b/c~0d","a/b":{"c~d":{"type":"array","contains":{}}}})"),
                  "/a~1b/c~0d/contains", "contains"));
  CHECK(has_error(errors_of(R"({"$ref":"#/a%25b/x","a%b":{"x":{"dependentRequired":{}}}})"),
                  "/a%b/x/dependentRequired", "dependentRequired"));
  CHECK(has_error(errors_of(R"({"$ref":"#/definitions/d/deep/er","definitions":{"d":{"deep":{"er":{"$ref":"#/y"}}}},
      "y":{"type":"object","unevaluatedProperties":false}})"),
                  "/y/unevaluatedProperties", "unevaluatedProperties"));
  // A refused keyword reached twice (tree walk and $ref) is reported once.
  auto once = errors_of(R"({"$defs":{"u":{"uniqueItems":true}},"items":{"$ref":"#/$defs/u"},"type":"array"})");
  CHECK(once.size() == 1);
  // Supported keywords at such targets are compiled and enforced.
  check(R"({"$ref":"#/x","x":{"type":"string","minLength":2,"not":{"const":"ab"}}})", {"\"abc\"", "\"xy\""},
        {"\"ab\"", "\"a\"", "1"});
  check(R"({"type":"object","properties":{"p":{"$ref":"#/$defs/g/inner"}},"required":["p"],"additionalProperties":false,
      "$defs":{"g":{"inner":{"type":"array","items":{"const":7},"minItems":2,"maxItems":2}}}})",
        {"{\"p\":[7,7]}"}, {"{\"p\":[7]}", "{\"p\":[7,8]}", "{}"});
}

TEST_CASE("format date and date-time: exactly the calendar dates", "[grammar]") {
  auto date = compile_ok(R"({"type":"string","format":"date"})");
  auto date_time = compile_ok(R"({"type":"string","format":"date-time"})");
  CHECK(matches(date, "\"2028-02-29\""));
  CHECK(matches(date, "\"2000-02-29\""));
  CHECK(matches(date_time, "\"2000-02-29T00:00:00Z\""));
  CHECK_FALSE(matches(date, "\"2100-02-29\""));
  CHECK_FALSE(matches(date_time, "\"2100-02-29T00:00:00Z\""));
  CHECK_FALSE(matches(date, "\"0000-01-01\""));
  auto leap = [](int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; };
  auto days_in = [&](int y, int m) {
    static const int kDays[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : kDays[m];
  };
  std::vector<int> years = {1, 4, 100, 104, 400, 800, 999, 1000, 1600, 1700, 1900, 1996, 2000, 2023, 2024,
                            2028, 2100, 2400, 2500, 9996, 9999};
  std::mt19937 rng(29);
  for (int i = 0; i < 20; ++i) years.push_back(1 + int(rng() % 9999));
  int n_valid = 0;
  for (int y : years)
    for (int m = 0; m <= 13; ++m)
      for (int d = 0; d <= 32; ++d) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "\"%04d-%02d-%02d\"", y, m, d);
        const bool valid = m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m);
        n_valid += valid;
        INFO(buf);
        CHECK(matches(date, buf) == valid);
        if (d == 29 || d == 31) {
          std::string dt = std::string(buf, 11) + "T23:59:59.5+01:00\"";
          CHECK(matches(date_time, dt) == valid);
        }
      }
  CHECK(n_valid > 10000);
}

// Issue 29: `check` judges values. The grammar admits one spelling of a value; check_instance
// also accepts the same value spelled another way, and only that.
TEST_CASE("check_instance: any spelling of an admitted value, in any member order", "[grammar]") {
  static auto vocab = byte_vocab();
  auto by_value = [&](const std::string& schema, const std::string& instance) {
    auto c = check_instance(compile_ok(schema), vocab, instance);
    INFO(schema << " / " << instance << " -> " << c.canonical << " " << c.detail);
    return c.accepted;
  };
  // The issue's cases.
  CHECK(by_value(R"({"type":"string","format":"date"})", "\"2028-02-29\""));
  CHECK(by_value(R"({"type":"string","format":"date-time"})", "\"2000-02-29T00:00:00Z\""));
  CHECK_FALSE(by_value(R"({"type":"string","format":"date"})", "\"2100-02-29\""));
  CHECK(by_value(R"({"type":"number","maximum":100})", "60.0"));
  CHECK(by_value(R"({"type":"integer"})", "1.0"));
  // Numbers by value: bounds, integer, enum/const and multipleOf apply to the value.
  CHECK(by_value(R"({"type":"number","maximum":100})", "1e2"));
  CHECK_FALSE(by_value(R"({"type":"number","maximum":100})", "1.01e2"));
  CHECK_FALSE(by_value(R"({"type":"number","exclusiveMaximum":100})", "100.0"));
  CHECK(by_value(R"({"type":"integer","minimum":-3})", "-3.000"));
  CHECK(by_value(R"({"type":"integer","minimum":-3})", "-0.0"));
  CHECK_FALSE(by_value(R"({"type":"integer"})", "1.5"));
  CHECK_FALSE(by_value(R"({"type":"integer","maximum":5})", "6.0"));
  CHECK(by_value(R"({"type":"integer","maximum":500})", "2.5e2"));
  CHECK(by_value(R"({"enum":[1,"a"]})", "1.0"));
  CHECK(by_value(R"({"const":1.0})", "1"));
  CHECK(by_value(R"({"const":2})", "2e0"));
  CHECK_FALSE(by_value(R"({"const":2})", "2.1"));
  CHECK(by_value(R"({"type":"number","multipleOf":0.5})", "1.50"));
  CHECK_FALSE(by_value(R"({"type":"number","multipleOf":0.5})", "1.25"));
  CHECK(by_value(R"({"type":"number"})", "1.5E-7"));
  // Member order and escapes.
  const std::string ab = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x","y"]}},
      "required":["a","b"],"additionalProperties":false})";
  CHECK(by_value(ab, R"({"b":"x","a":2})"));
  CHECK(by_value(ab, R"({"b":"\u0079","\u0061":2.0})"));
  CHECK_FALSE(by_value(ab, R"({"b":"z","a":2})"));
  CHECK_FALSE(by_value(ab, R"({"b":"x","a":2,"c":1})"));
  CHECK_FALSE(by_value(ab, R"({"b":"x"})"));
  CHECK(by_value(R"({"type":"string","pattern":"^a+$"})", "\"\\u0061a\""));
  CHECK(by_value(R"({"type":"string","pattern":"^\\n$"})", "\"\\u000a\""));
  CHECK(by_value(R"({"const":{"a":1,"b":[1,2]}})", R"({"b":[1.0,2],"a":1})"));
  // Nested and under anyOf branches that order differently.
  CHECK(by_value(R"({"anyOf":[{"type":"object","properties":{"p":{"type":"integer"},"q":{"type":"string"}},
      "required":["p","q"]},{"type":"object","properties":{"q":{"type":"boolean"},"p":{"type":"null"}},"required":["p","q"]}]})",
                 R"({"q":true,"p":null})"));
  CHECK(by_value(R"({"type":"array","items":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}}}})",
                 R"([{"y":1.0,"x":2},{},{"x":3E0}])"));
  // Not JSON, or not the schema's value: rejected, with the reason.
  auto c = check_instance(compile_ok(R"({"type":"integer"})"), vocab, "1.");
  CHECK_FALSE(c.accepted);
  CHECK(c.detail.find("not one JSON value") != std::string::npos);
}

// Issue 29: a `number` value may end in fraction zeros (a model that wrote "20.0" can stop there
// instead of being pushed to "20.01"); the value, and so validity, is the same. `integer` values
// stay plain digits.
TEST_CASE("number values admit trailing fraction zeros, integer values do not", "[grammar]") {
  check(R"({"type":"number","minimum":0,"maximum":100})", {"20", "20.0", "20.00", "60.0", "100.0", "99.50", "0.0", "0.50"},
        {"100.01", "100.10", "-0.5", "1e2", "20.", "-0.0"});
  check(R"({"type":"number","exclusiveMaximum":100,"exclusiveMinimum":-1.5})", {"99.90", "-1.40", "0.0"},
        {"100.0", "-1.50", "-1.5", "100"});
  check(R"({"type":"integer","minimum":0,"maximum":100})", {"20", "0"}, {"20.0", "1.0", "1.5"});
  check(R"({"type":"number","not":{"type":"integer"}})", {"1.5", "1.50"}, {"1.0", "1", "2.00"});
  check(R"({"type":"number","not":{"type":"integer"},"minimum":0,"maximum":3})", {"1.5", "1.50"}, {"1.0", "3.0", "0.00"});
  check(R"({"type":"number","multipleOf":0.25,"minimum":-1,"maximum":2})", {"0.50", "0.250", "2.00", "-1.0"},
        {"0.30", "2.250", "-1.250"});
  check(R"({"type":"number","multipleOf":5})", {"10", "10.0", "-5.00"}, {"10.5", "11.0"});
  check(R"({"type":"number"})", {"20.0", "1.50", "1.5e-7"}, {"1.5e-70.0", "1e2.0"});
  // Fifteen significant digits at most, zeros included (readable numbers).
  check(R"({"type":"number","maximum":5})", {"1.00000000000000"}, {"1.000000000000000"});
}

// docs/GRAMMAR.md: boolean exclusiveMinimum/exclusiveMaximum are read as draft 4 (modifiers of
// minimum/maximum), with or without $schema; a 2020-12 validator would call the schema invalid.
TEST_CASE("boolean exclusiveMinimum/exclusiveMaximum: the draft-4 reading", "[grammar]") {
  check(R"({"type":"number","minimum":0,"exclusiveMinimum":true})", {"0.5", "1", "2"}, {"0", "-1"});
  check(R"({"type":"integer","maximum":10,"exclusiveMaximum":true})", {"9", "-3"}, {"10", "11"});
  check(R"({"type":"number","minimum":0,"exclusiveMinimum":false})", {"0", "0.5"}, {"-0.5"});
  check(R"({"type":"integer","exclusiveMinimum":true})", {"-5", "0", "5"}, {"1.5"});
  check(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer","minimum":1,"exclusiveMinimum":true})",
        {"2"}, {"1", "0"});
}

TEST_CASE("check_instance: large instances stay within the search bounds", "[grammar]") {
  static auto vocab = byte_vocab();
  auto g = compile_ok(R"({"type":"array","items":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"}}}})");
  // 1,000 values that all need respelling: found by value, in one pass (the instance's own order
  // fails only at the key, so each member costs a rejected and an accepted advance).
  std::string big = "[";
  for (int i = 0; i < 333; ++i) big += std::string(i ? "," : "") + "{\"b\":1.50e0,\"a\":" + std::to_string(i) + ".0}";
  big += "]";
  auto c = check_instance(g, vocab, big);
  INFO(c.detail);
  CHECK(c.accepted);
  CHECK_FALSE(c.as_written);
  // Past the value bound the instance is judged as written only, and the reason says so.
  std::string huge = "[";
  for (int i = 0; i < 2000; ++i) huge += std::string(i ? "," : "") + "{\"a\":1.0}";
  huge += "]";
  auto h = check_instance(g, vocab, huge);
  CHECK_FALSE(h.accepted);
  CHECK(h.detail.find("values") != std::string::npos);
}

TEST_CASE("tool list with an answer schema: the calls or the schema's instance, in every format", "[grammar][tools]") {
  const std::string tools =
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}])";
  const std::string answer = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false})";
  struct Case {
    ToolCallFormat format;
    std::string arguments_key;
    std::vector<std::string> good, bad;
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::Hermes, "arguments",
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "{\"city\": \"Paris\"}",
        "{\n  \"city\": \"Paris\"\n}"},
       {"{\"a\": 1}", "{\"city\": 3}", "<tool_call>\n{\"city\": \"Paris\"}\n</tool_call>", "Paris"}},
      {ToolCallFormat::JsonObject, "parameters",
       {"{\"name\": \"f\", \"parameters\": {\"a\": 1}}", "{\"city\": \"Paris\"}"},
       {"{\"name\": \"f\"}", "{\"name\": \"g\", \"parameters\": {\"a\": 1}}", "{\"city\": \"Paris\", \"a\": 1}"}},
      {ToolCallFormat::QwenXml, "arguments",
       {"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", "{\"city\": \"x\"}"},
       {"<tool_call>\n{\"city\": \"x\"}\n</tool_call>", "{}"}},
      {ToolCallFormat::PythonList, "arguments",
       {"<|tool_call_start|>[f(a=1)]<|tool_call_end|>", "{\"city\": \"x\"}"},
       {"[f(a=1)]", "{\"city\": null}"}},
      {ToolCallFormat::Envelope, "arguments",
       {"{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1}}]}", "{\"content\": {\"city\": \"x\"}}"},
       {"{\"content\": \"x\"}", "{\"city\": \"x\"}", "{\"content\": {\"city\": 1}}"}},
  };
  for (const Case& c : cases) {
    ToolListOptions o;
    o.format = c.format;
    o.arguments_key = c.arguments_key;
    o.allow_text = c.format == ToolCallFormat::Envelope;
    o.schema.whitespace = Whitespace::Natural;
    o.answer_schema = answer;
    o.answer_options.whitespace = Whitespace::Natural;
    o.answer_options.max_indent = 16;
    auto r = compile_tool_list(tools, o);
    INFO("format " << int(c.format) << ": " << r.error_text());
    REQUIRE(r.ok());
    for (const auto& s : c.good) {
      INFO("should accept " << s);
      CHECK(matches(r.grammar, s));
    }
    for (const auto& s : c.bad) {
      INFO("should reject " << s);
      CHECK_FALSE(matches(r.grammar, s));
    }
    // The shortest completion from the start is the shorter branch, and it is complete.
    static auto vocab = byte_vocab();
    Matcher m(r.grammar, vocab);
    const std::string shortest = m.shortest_completion();
    INFO("shortest " << shortest);
    CHECK(matches(r.grammar, shortest));
  }
  // Errors: an answer schema that is not JSON, or that cannot compile, is reported.
  ToolListOptions bad;
  bad.format = ToolCallFormat::Hermes;
  bad.answer_schema = "{";
  CHECK_FALSE(compile_tool_list(tools, bad).ok());
  bad.answer_schema = R"({"type":"object","if":{}})";
  auto r = compile_tool_list(tools, bad);
  CHECK_FALSE(r.ok());
  CHECK(r.error_text().find("/answer_schema") != std::string::npos);
}
