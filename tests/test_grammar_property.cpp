// Property test: whatever a model picks under the grammar's mask is a valid instance.
//
// Random walks (tools/grammar_walk.h: random logits over the allowed tokens, steered towards
// closing tokens after a random soft length) under the masks of
//   - a deterministic selection of JSON-Schema-Test-Suite schemas the compiler accepts, and
//   - the PicoClaw-like tool list in every tool-call format, single and parallel,
// with the 32k Llama SentencePiece vocabulary and the 152k Qwen2.5 byte-level BPE vocabulary.
// Every seed walks twice: freely, and switching to the closing mask (Matcher::fill_mask_closing)
// after a random prefix, as a decoder whose token budget runs out does; the closing walk must
// finish within min_completion_tokens() + slack tokens of that point.
// Every walk must end with end-of-generation within its token budget (a walk that gets stuck or
// cannot finish is a grammar bug), its bytes must be accepted again by a fresh matcher, and the
// instance must validate with an independent validator: Python's jsonschema
// (tests/validate_instances.py, one process for all instances).
#include <catch2/catch.hpp>

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar_walk.h"
#include "schema_suite.h"
#include "vocab_loader.h"
#include "python_oracle.h"

namespace {

using namespace picolm;
using test_oracle::hex;
using test_oracle::read_file;

constexpr int kMaxSuiteSchemas = 80;  // x 2 vocabularies = 160 walks
constexpr int kToolSeeds = 4;         // x 13 tool configurations x 2 vocabularies = 104 walks

struct WalkCase {
  std::string label;       // for messages
  std::string record;      // validator record on one line, without id and text_hex: {"kind":"schema","schema":...}
  std::shared_ptr<const grammar::Grammar> grammar;
};

// Suite schemas the compiler accepts and for which at least one valid test instance is accepted
// (so the schema is satisfiable and the grammar agrees), evenly thinned to kMaxSuiteSchemas.
std::vector<WalkCase> suite_cases() {
  const auto bytes = tools::byte_vocabulary();
  const auto files =
      grammar_tests::list_suite_files(std::string(PICOLM_SHARED_DIR) + "/json-schema-test-suite/tests/draft2020-12");
  REQUIRE(files.size() > 10);
  std::vector<WalkCase> all;
  for (const auto& path : files) {
    std::vector<grammar_tests::SuiteGroup> groups;
    std::string err;
    REQUIRE(grammar_tests::load_suite_file(path, groups, err));
    const std::string stem = std::filesystem::path(path).stem().string();
    for (const auto& g : groups) {
      grammar::CompileOptions opts;
      opts.whitespace = all.size() % 3 == 0   ? grammar::Whitespace::Compact
                        : all.size() % 3 == 1 ? grammar::Whitespace::Flexible
                                              : grammar::Whitespace::Natural;
      opts.max_indent = 16;
      auto r = grammar::compile_json_schema(g.schema, opts);
      if (!r.ok()) continue;
      bool satisfiable = false;
      for (const auto& t : g.tests) {
        if (!t.valid) continue;
        grammar::Matcher m(r.grammar, bytes);
        // Natural: the pretty printer's ": " and newline + indentation (at most 16 spaces).
        const std::string text = opts.whitespace == grammar::Whitespace::Compact
                                     ? grammar_tests::json_compact(t.data)
                                     : grammar_tests::json_pretty(t.data, opts.whitespace == grammar::Whitespace::Natural
                                                                              ? opts.max_indent + 1
                                                                              : opts.max_whitespace_run);
        if (m.accept_bytes(text) && m.is_complete()) satisfiable = true;
      }
      if (!satisfiable) continue;
      all.push_back({stem + "/" + g.description, "{\"kind\":\"schema\",\"schema\":" + grammar_tests::json_compact(g.schema) + "}", r.grammar});
    }
  }
  INFO("compilable, satisfiable suite schemas: " << all.size());
  REQUIRE(all.size() >= 20);
  std::vector<WalkCase> picked;
  const size_t n = std::min<size_t>(all.size(), kMaxSuiteSchemas);
  for (size_t i = 0; i < n; ++i) picked.push_back(all[i * all.size() / n]);
  return picked;
}

std::vector<WalkCase> tool_cases() {
  const std::string tools_json = read_file(std::string(PICOLM_SHARED_DIR) + "/tool-lists/picoclaw-like-tools.json");
  struct Config {
    const char* name;
    grammar::ToolCallFormat format;
    bool parallel;
    grammar::Whitespace ws;
    bool allow_text = false;
    const char* forced_tool = "";
    int indent = -1;  // Natural only
  };
  const Config configs[] = {
      {"object", grammar::ToolCallFormat::JsonObject, false, grammar::Whitespace::Compact},
      {"object", grammar::ToolCallFormat::JsonObject, true, grammar::Whitespace::Flexible},
      {"array", grammar::ToolCallFormat::JsonArray, false, grammar::Whitespace::Flexible},
      {"array", grammar::ToolCallFormat::JsonArray, true, grammar::Whitespace::Compact},
      {"hermes", grammar::ToolCallFormat::Hermes, false, grammar::Whitespace::Compact},
      {"hermes", grammar::ToolCallFormat::Hermes, true, grammar::Whitespace::Flexible},
      {"envelope", grammar::ToolCallFormat::Envelope, false, grammar::Whitespace::Flexible},
      {"envelope", grammar::ToolCallFormat::Envelope, true, grammar::Whitespace::Compact},
      {"envelope", grammar::ToolCallFormat::Envelope, false, grammar::Whitespace::Compact, /*allow_text=*/true},
      {"object", grammar::ToolCallFormat::JsonObject, false, grammar::Whitespace::Flexible, false, "cron"},
      {"hermes", grammar::ToolCallFormat::Hermes, true, grammar::Whitespace::Natural},
      {"object", grammar::ToolCallFormat::JsonObject, false, grammar::Whitespace::Natural},
      {"envelope", grammar::ToolCallFormat::Envelope, true, grammar::Whitespace::Natural, true, "", 16},
  };
  std::vector<WalkCase> cases;
  for (const Config& c : configs) {
    grammar::ToolListOptions opts;
    opts.format = c.format;
    opts.parallel = c.parallel;
    opts.schema.whitespace = c.ws;
    opts.schema.max_indent = c.indent;
    opts.allow_text = c.allow_text;
    opts.forced_tool = c.forced_tool;
    auto r = grammar::compile_tool_list(tools_json, opts);
    const std::string label = std::string("tools/") + c.name + (c.parallel ? "/parallel" : "") +
                              (c.allow_text ? "/allow-text" : "") + (*c.forced_tool ? "/forced-" + std::string(c.forced_tool) : "") +
                              (c.ws == grammar::Whitespace::Compact    ? "/compact"
                               : c.ws == grammar::Whitespace::Flexible ? "/flexible"
                                                                       : "/natural");
    INFO(label << ": " << r.error_text());
    REQUIRE(r.ok());
    cases.push_back({label,
                     std::string("{\"kind\":\"tools\",\"format\":\"") + c.name + "\",\"parallel\":" +
                         (c.parallel ? "true" : "false") + ",\"allow_text\":" + (c.allow_text ? "true" : "false") +
                         ",\"forced_tool\":\"" + c.forced_tool + "\",\"tools\":" + grammar_tests::json_compact(tools_json) + "}",
                     r.grammar});
  }
  return cases;
}

// Schemas with the keywords zod 4 and MCP tool lists emit (issue 21): propertyNames, min/max
// Properties, decimal multipleOf, not. Fractional multipleOf is validated in exact decimal.
constexpr int kKeywordSeeds = 3;  // x 12 schemas x 2 vocabularies x 2 (free, closing) = 144 walks
std::vector<WalkCase> keyword_cases() {
  const char* schemas[] = {
      // z.record(z.string(), z.number())
      R"({"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"number"}})",
      R"({"type":"object","propertyNames":{"type":"string","pattern":"^[a-z_]+$","maxLength":8},"additionalProperties":{"type":"integer"},"minProperties":1})",
      R"({"type":"object","propertyNames":{"enum":["red","green","blue"]},"additionalProperties":{"type":"boolean"}})",
      R"({"type":"object","properties":{"id":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id"],"additionalProperties":{"type":"null"},"minProperties":2,"maxProperties":3})",
      // z.number().multipleOf(0.01)
      R"({"type":"number","multipleOf":0.01})",
      R"({"type":"object","properties":{"price":{"type":"number","multipleOf":0.01,"minimum":0,"maximum":1000},"qty":{"type":"number","multipleOf":0.25,"exclusiveMinimum":-2.5,"maximum":3.3}},"required":["price","qty"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"integer","multipleOf":0.5,"minimum":-40}})",
      R"({"not":{"type":["object","array"]}})",
      R"({"type":"object","properties":{"mode":{"type":"string","not":{"enum":["auto","off"]}},"x":{"type":"number","not":{"type":"integer"}}},"required":["mode","x"],"additionalProperties":false})",
      R"({"type":"object","properties":{"path":{"type":"string"},"url":{"type":"string"},"force":{"type":"boolean","not":{"const":true}}},"not":{"required":["path","url"]},"additionalProperties":false})",
      R"({"type":"object","properties":{"a":{"type":"string"}},"propertyNames":{"minLength":1,"maxLength":4},"additionalProperties":{"enum":[1,2]},"maxProperties":2})",
      R"({"type":"object","properties":{"m":{"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"number","multipleOf":0.01}}},"required":["m"]})",
  };
  std::vector<WalkCase> cases;
  int i = 0;
  for (const char* schema : schemas) {
    grammar::CompileOptions opts;
    opts.whitespace = i % 3 == 0 ? grammar::Whitespace::Compact
                      : i % 3 == 1 ? grammar::Whitespace::Flexible
                                   : grammar::Whitespace::Natural;
    opts.max_indent = 4;
    auto r = grammar::compile_json_schema(schema, opts);
    INFO(schema << ": " << r.error_text());
    REQUIRE(r.ok());
    const bool decimal = std::string(schema).find("\"multipleOf\":0.") != std::string::npos;
    cases.push_back({"keywords/" + std::to_string(i),
                     std::string("{\"kind\":\"schema\",") + (decimal ? "\"decimal\":true," : "") + "\"schema\":" + schema + "}",
                     r.grammar});
    ++i;
  }
  return cases;
}

// Replays the tokenizer's own tokenization of `text` (what a model trained on it would emit)
// through a fresh matcher: each token must be in the mask and accepted, then end-of-generation.
// Skipped (true, not counted) when the tokens do not spell `text` exactly: SentencePiece adds a
// leading space.
bool canonical_tokens_accepted(const std::shared_ptr<const grammar::Grammar>& g, const tools::VocabBundle& b,
                               const std::string& text, std::string& problem, int& n_replayed) {
  const std::vector<int32_t> ids = b.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/false);
  std::string spelled;
  for (int32_t id : ids) spelled += b.vocab->token(id);
  if (spelled != text) return true;
  ++n_replayed;
  grammar::Matcher m(g, b.vocab);
  std::vector<uint32_t> mask((b.vocab->size() + 31) / 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::fill(mask.begin(), mask.end(), 0u);
    m.fill_mask(mask.data());
    const int32_t id = ids[i];
    const bool in_mask = (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
    if (!in_mask || !m.accept_token(id)) {
      problem = "canonical token " + std::to_string(i) + " (id " + std::to_string(id) + ", \"" + b.vocab->token(id) +
                "\") " + (in_mask ? "refused by accept_token" : "not in the mask") + " after \"" + m.text() + "\"";
      return false;
    }
  }
  if (!m.accept_token(b.vocab->eog_ids().front())) {
    problem = "canonical tokenization accepted but end-of-generation refused";
    return false;
  }
  return true;
}

struct Outcome {
  std::string label, vocab, text;
  tools::WalkStatus status;
  std::string detail;
  int n_tokens = 0;
};

}  // namespace

TEST_CASE("random walks under the mask produce valid instances", "[grammar]") {
  const std::string shared = PICOLM_SHARED_DIR;
  struct NamedVocab {
    std::string name;
    tools::VocabBundle bundle;
    tools::WalkVocabulary wv;
  };
  std::vector<NamedVocab> vocabs;
  for (const auto& [name, path] : {std::pair{"llama-spm-32k", shared + "/vocab/ggml-vocab-llama-spm.gguf"},
                                   std::pair{"qwen2-152k", shared + "/models/qwen2-bpe-q4km.gguf"}}) {
    auto v = tools::load_vocab_bundle(path);
    INFO(path << ": " << (v ? "" : v.error()));
    REQUIRE(v.ok());
    REQUIRE(v->vocab->eog_ids().size() > 0);
    auto vocab = v->vocab;
    vocabs.push_back({name, std::move(*v), tools::WalkVocabulary(vocab)});
  }

  std::vector<std::pair<WalkCase, int>> plan;  // case, seeds
  for (auto& c : suite_cases()) plan.emplace_back(std::move(c), 1);
  for (auto& c : tool_cases()) plan.emplace_back(std::move(c), kToolSeeds);
  for (auto& c : keyword_cases()) plan.emplace_back(std::move(c), kKeywordSeeds);

  const auto bytes = tools::byte_vocabulary();
  std::vector<Outcome> outcomes;
  std::ostringstream jsonl;
  std::vector<size_t> record_outcome;  // validator id -> outcomes index
  std::map<std::string, int> status_count;
  long total_tokens = 0;
  int n_canonical = 0;  // instances whose canonical tokenization was replayed
  int n_closing = 0, n_closed = 0;  // walks asked to close / that reached closing mode
  long closing_tokens = 0;
  uint64_t seed = 1;
  for (const auto& [c, n_seeds] : plan) {
    for (const NamedVocab& nv : vocabs) {
      // Each seed walks twice: freely, and switching to closing mode after a random prefix (it
      // must then finish within min_completion_tokens() + slack tokens, and still validate).
      for (int s = 0; s < 2 * n_seeds; ++s) {
        const bool closing = s % 2 == 1;
        tools::WalkOptions wo;
        wo.seed = seed++;
        wo.rollback_check = 0.1;
        if (closing) {
          wo.close_after = static_cast<int>(wo.seed * 7919 % 17);
          wo.closing_slack = static_cast<int>(wo.seed % 3);
        }
        const tools::WalkResult w = tools::random_walk(c.grammar, nv.wv, wo);
        Outcome o{c.label + (closing ? "/closing" : ""), nv.name, w.text, w.status, w.detail, w.n_tokens};
        if (closing) {
          ++n_closing;
          if (w.closing_used >= 0) {
            ++n_closed;
            closing_tokens += w.closing_used;
            if (w.closing_used > w.closing_budget || w.closing_budget != w.closing_min_tokens + wo.closing_slack) {
              o.status = tools::WalkStatus::Inconsistent;
              o.detail = "closing mode used " + std::to_string(w.closing_used) + " tokens, allowed " +
                         std::to_string(w.closing_budget) + " (shortest " + std::to_string(w.closing_min_tokens) + ")";
            }
          }
        }
        status_count[tools::walk_status_name(w.status)]++;
        total_tokens += w.n_tokens;
        if (o.status == tools::WalkStatus::Finished) {
          grammar::Matcher again(c.grammar, bytes);
          std::string canonical_problem;
          if (!again.accept_bytes(w.text) || !again.is_complete()) {
            o.status = tools::WalkStatus::Inconsistent;
            o.detail = "a fresh matcher does not accept the walk's bytes as a complete instance";
          } else if (!canonical_tokens_accepted(c.grammar, nv.bundle, w.text, canonical_problem, n_canonical)) {
            o.status = tools::WalkStatus::Inconsistent;
            o.detail = canonical_problem;
          } else {
            jsonl << c.record.substr(0, c.record.size() - 1) << ",\"id\":" << record_outcome.size() << ",\"text_hex\":\""
                  << hex(w.text) << "\"}\n";
            record_outcome.push_back(outcomes.size());
          }
        }
        outcomes.push_back(std::move(o));
      }
    }
  }

  // One validator process for every instance.
  std::vector<std::string> verdicts;
  for (auto& v : test_oracle::run_python_oracle("validate_instances.py", jsonl.str(), record_outcome.size(), "grammar_property"))
    verdicts.push_back(v.ok ? "ok" : v.error);

  int n_invalid = 0, n_unfinished = 0;
  std::vector<std::string> problems;
  for (size_t id = 0; id < verdicts.size(); ++id) {
    REQUIRE(!verdicts[id].empty());  // the validator answered for every instance
    if (verdicts[id] == "ok") continue;
    const Outcome& o = outcomes[record_outcome[id]];
    ++n_invalid;
    problems.push_back("INVALID " + o.label + " [" + o.vocab + "]: " + verdicts[id] + "\n    instance: " + o.text);
  }
  for (const Outcome& o : outcomes) {
    if (o.status == tools::WalkStatus::Finished) continue;
    ++n_unfinished;
    problems.push_back(std::string(tools::walk_status_name(o.status)) + " " + o.label + " [" + o.vocab + "] after " +
                       std::to_string(o.n_tokens) + " tokens: " + o.detail + "\n    text: " + o.text);
  }
  for (size_t i = 0; i < problems.size() && i < 40; ++i) std::printf("%s\n", problems[i].c_str());
  std::printf("grammar property: %zu walks, %ld tokens; ", outcomes.size(), total_tokens);
  for (const auto& [k, v] : status_count) std::printf("%s %d; ", k.c_str(), v);
  std::printf("%zu validated, %d invalid; canonical tokenization replayed for %d; closing mode reached in %d of %d "
              "walks (%ld tokens)\n",
              verdicts.size(), n_invalid, n_canonical, n_closed, n_closing, closing_tokens);
  CHECK(n_unfinished == 0);
  CHECK(n_invalid == 0);
  CHECK(outcomes.size() >= 300);
  CHECK(n_closed >= n_closing * 2 / 3);  // most closing walks were still open when asked to close
  CHECK(n_canonical >= 50);  // the byte-exact (BPE) vocabulary must replay a good share
}

// ---------------------------------------------------------------------------------------------
// Natural whitespace (issue 19): the calls and answers each template family writes, in that
// family's formatting and tokenized by the real tokenizer, are accepted token by token; random
// walks under the same masks never write structural whitespace runs longer than the bound.

namespace {

// Longest run of whitespace bytes outside JSON strings (string contents are data, not layout).
size_t longest_structural_ws_run(const std::string& text) {
  size_t best = 0, run = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
      best = std::max(best, ++run);
    } else {
      run = 0;
      if (ch == '"') in_string = true;
    }
  }
  return best;
}

// The tokens a model of this vocabulary emits for `text` mid-reply: the tokenizer's own
// tokenization with special tokens parsed (Qwen's <tool_call> is one added token). A
// SentencePiece tokenizer prepends a space to the whole text; mid-reply there is none, so the
// first token is replaced by its twin without the leading space.
std::vector<int32_t> reply_tokens(const tools::VocabBundle& b, const std::string& text, std::string& problem) {
  std::vector<int32_t> ids = b.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
  std::string spelled;
  for (int32_t id : ids) spelled += b.vocab->token(id);
  if (spelled == text) return ids;
  if (spelled == " " + text && !ids.empty()) {
    const std::string first = b.vocab->token(ids[0]);
    if (first == " ") {
      ids.erase(ids.begin());
      return ids;
    }
    for (size_t id = 0; id < b.vocab->size(); ++id)
      if (b.vocab->token(static_cast<int32_t>(id)) == first.substr(1)) {
        ids[0] = static_cast<int32_t>(id);
        return ids;
      }
  }
  problem = "tokens spell \"" + spelled + "\", not the text";
  return {};
}

struct NativeCase {
  std::string family;
  std::shared_ptr<const grammar::Grammar> grammar;
  std::vector<std::string> examples;  // in the family's own formatting
  size_t ws_bound;                    // documented longest structural whitespace run
};

std::vector<NativeCase> native_cases() {
  const std::string tools_json = read_file(std::string(PICOLM_SHARED_DIR) + "/tool-lists/picoclaw-like-tools.json");
  std::vector<NativeCase> cases;
  auto tool_grammar = [&](grammar::ToolCallFormat format, bool parallel, const std::string& key) {
    grammar::ToolListOptions o;
    o.format = format;
    o.parallel = parallel;
    o.arguments_key = key;
    o.schema.whitespace = grammar::Whitespace::Natural;
    o.schema.max_indent = -1;  // tool calls are written on one line by every family
    auto r = grammar::compile_tool_list(tools_json, o);
    INFO(r.error_text());
    REQUIRE(r.ok());
    return r.grammar;
  };
  // Qwen2.5 / Qwen3 / Hermes: the template's own example, json.dumps separators.
  cases.push_back({"hermes", tool_grammar(grammar::ToolCallFormat::Hermes, true, "arguments"),
                   {"<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"/tmp/notes.txt\", \"offset\": 10}}\n</tool_call>",
                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                    "<tool_call>\n{\"name\": \"message\", \"arguments\": {\"content\": \"Hi, see you at 5\", \"media\": "
                    "[{\"type\": \"image\", \"path\": \"/tmp/a.png\"}, {\"type\": \"file\", \"path\": \"b.txt\"}]}}\n</tool_call>"},
                   1});
  // Llama 3.x: the bare call with "parameters".
  cases.push_back({"llama3", tool_grammar(grammar::ToolCallFormat::JsonObject, false, "parameters"),
                   {"{\"name\": \"web_search\", \"parameters\": {\"query\": \"picoclaw release\", \"count\": 3}}",
                    "{\"name\": \"exec\", \"parameters\": {\"action\": \"run\", \"command\": \"ls -la\", \"background\": false}}"},
                   1});
  // json.dumps-style answers (response_format json_schema, one line).
  const std::string answer_schema =
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"integer"}},)"
      R"("c":{"type":"object","properties":{"d":{"type":["string","null"]}}}},"required":["a","b"]})";
  {
    grammar::CompileOptions o;
    o.whitespace = grammar::Whitespace::Natural;
    o.max_indent = -1;
    auto r = grammar::compile_json_schema(answer_schema, o);
    REQUIRE(r.ok());
    cases.push_back({"json.dumps", r.grammar,
                     {"{\"a\": 1, \"b\": [1, 2]}", "{\"a\": -7, \"b\": [], \"c\": {\"d\": null}}",
                      "{\"a\": 1, \"b\": [1, 2], \"c\": {\"d\": \"x y\"}}"},
                     1});
  }
  // Pretty-printed answers (indent 2), as models write JSON in documents.
  {
    grammar::CompileOptions o;
    o.whitespace = grammar::Whitespace::Natural;
    o.max_indent = 16;
    auto r = grammar::compile_json_schema(answer_schema, o);
    REQUIRE(r.ok());
    cases.push_back({"pretty-2", r.grammar,
                     {"{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}",
                      "{\n  \"a\": 3,\n  \"b\": [],\n  \"c\": {\n    \"d\": \"two words\"\n  }\n}",
                      "{\"a\": 1, \"b\": [1, 2]}"},
                     17});
  }
  return cases;
}

}  // namespace

TEST_CASE("natural whitespace: native call formats accepted token by token, runs bounded", "[grammar]") {
  const std::string shared = PICOLM_SHARED_DIR;
  const std::vector<NativeCase> cases = native_cases();
  int n_replayed = 0, n_walks = 0;
  size_t longest_seen = 0;
  uint64_t seed = 1000;
  for (const char* model : {"qwen2-bpe-q4km.gguf", "qwen3-bpe-q4km.gguf", "llama-spm32k-q4km.gguf"}) {
    auto loaded = tools::load_vocab_bundle(shared + "/models/" + model);
    INFO(model << ": " << (loaded ? "" : loaded.error()));
    REQUIRE(loaded.ok());
    const tools::VocabBundle& b = *loaded;
    const tools::WalkVocabulary wv(b.vocab);
    std::vector<uint32_t> mask((b.vocab->size() + 31) / 32);
    for (const NativeCase& c : cases) {
      for (const std::string& text : c.examples) {
        INFO(model << " / " << c.family << ": " << text);
        std::string problem;
        const std::vector<int32_t> ids = reply_tokens(b, text, problem);
        INFO(problem);
        REQUIRE(!ids.empty());
        grammar::Matcher m(c.grammar, b.vocab);
        for (size_t i = 0; i < ids.size(); ++i) {
          std::fill(mask.begin(), mask.end(), 0u);
          m.fill_mask(mask.data());
          const int32_t id = ids[i];
          INFO("token " << i << " (id " << id << ", \"" << b.vocab->token(id) << "\") after \"" << m.text() << "\"");
          REQUIRE(((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) == 1u);
          REQUIRE(m.accept_token(id));
        }
        CHECK(m.accept_token(b.vocab->eog_ids().front()));
        ++n_replayed;
      }
      for (int s = 0; s < 12; ++s) {
        tools::WalkOptions wo;
        wo.seed = seed++;
        const tools::WalkResult w = tools::random_walk(c.grammar, wv, wo);
        INFO(model << " / " << c.family << " walk: " << tools::walk_status_name(w.status) << " " << w.detail << "\n" << w.text);
        CHECK(w.status == tools::WalkStatus::Finished);
        const size_t run = longest_structural_ws_run(w.text);
        CHECK(run <= c.ws_bound);
        longest_seen = std::max(longest_seen, run);
        ++n_walks;
      }
    }
  }
  std::printf("natural whitespace: %d native examples replayed, %d walks, longest structural whitespace run %zu\n",
              n_replayed, n_walks, longest_seen);
  CHECK(n_replayed == 3 * 11);
  CHECK(longest_seen >= 2);  // the walks did use the newline + indentation of the pretty-printed case
}

// Issue 21, "numbers clients can read": 1,000 numbers sampled by random walks (Qwen2.5 vocabulary,
// multi-digit tokens) under number/integer schemas with and without bounds and multipleOf must
// parse in Python (json: int/float) and JavaScript (JSON.parse) to finite values that round-trip
// to the written decimal, integers to safe integers, and validate: jsonschema in Python (exact
// decimals when multipleOf is fractional, since jsonschema divides floats), and the bounds and
// multipleOf checked again on the JavaScript number. One python and one node process in all.
TEST_CASE("generated numbers read back exactly in Python and JavaScript", "[grammar]") {
  const bool have_node = std::system("node --version > /dev/null 2>&1") == 0;
  if (!have_node) WARN("node not found: JavaScript half skipped");
  auto v = tools::load_vocab_bundle(std::string(PICOLM_SHARED_DIR) + "/models/qwen2-bpe-q4km.gguf");
  REQUIRE(v.ok());
  tools::WalkVocabulary wv(v->vocab);
  const char* schemas[] = {
      R"({"type":"number"})",
      R"({"type":"integer"})",
      R"({"type":"integer","minimum":1})",
      R"({"type":"integer","maximum":-5})",
      R"({"type":"number","minimum":-1e300})",
      R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})",
      R"({"type":"number","minimum":-273.15,"maximum":1e6})",
      R"({"type":"integer","multipleOf":7,"minimum":-100000})",
      R"({"type":"number","multipleOf":0.01})",
      R"({"type":"number","multipleOf":0.25,"minimum":-3.5,"exclusiveMaximum":1000000})",
      R"({"type":"number","multipleOf":0.001,"exclusiveMinimum":0})",
      R"({"type":"integer","multipleOf":0.5})",
  };
  constexpr int kPerSchema = 84;  // 12 x 84 = 1008 numbers
  std::ostringstream lines;
  int n = 0, longest = 0;
  uint64_t seed = 1000;
  for (const char* schema : schemas) {
    auto r = grammar::compile_json_schema(schema);
    INFO(schema << ": " << r.error_text());
    REQUIRE(r.ok());
    for (int k = 0; k < kPerSchema; ++k) {
      tools::WalkOptions wo;
      wo.seed = seed++;
      wo.soft_len_min = 1;
      wo.soft_len_max = 12;
      wo.max_tokens = 64;
      const tools::WalkResult w = tools::random_walk(r.grammar, wv, wo);
      INFO(schema << " seed " << wo.seed << ": " << w.detail << " text " << w.text);
      REQUIRE(w.status == tools::WalkStatus::Finished);
      longest = std::max<int>(longest, int(w.text.size()));
      lines << "{\"schema\":" << schema << ",\"text\":\"" << w.text << "\"}\n";
      ++n;
    }
  }
  REQUIRE(n >= 1000);
  const auto dir = std::filesystem::temp_directory_path();
  const std::string base = (dir / ("picolm_numbers_" + std::to_string(getpid()))).string();
  const std::string in = base + ".jsonl", py = base + ".py", js = base + ".js", out_py = base + ".py.out",
                    out_js = base + ".js.out";
  struct RemoveOnExit {
    std::vector<std::string> files;
    ~RemoveOnExit() {
      std::error_code ec;
      for (const auto& f : files) std::filesystem::remove(f, ec);
    }
  } cleanup{{in, py, js, out_py, out_js}};
  {
    std::ofstream(in, std::ios::binary) << lines.str();
    std::ofstream(py) << R"PY(
import json, math, sys
from decimal import Decimal
from jsonschema import Draft202012Validator
bad = 0
for line in open(sys.argv[1]):
    rec = json.loads(line)
    text, schema = rec["text"], rec["schema"]
    val = json.loads(text)
    why = None
    if isinstance(val, float) and not math.isfinite(val): why = "not finite"
    elif isinstance(val, float) and Decimal(repr(val)) != Decimal(text): why = "float does not round-trip: " + repr(val)
    elif schema["type"] == "integer" and not isinstance(val, int): why = "not an int"
    elif isinstance(val, int) and abs(val) > 2**53 - 1: why = "beyond 2^53"
    else:
        step = schema.get("multipleOf")
        if isinstance(step, float):  # fractional: jsonschema's float division drifts, use decimals
            dschema = json.loads(json.dumps(schema), parse_float=Decimal)
            errs = list(Draft202012Validator(dschema).iter_errors(json.loads(text, parse_float=Decimal)))
        else:
            errs = list(Draft202012Validator(schema).iter_errors(val))
        if errs: why = errs[0].message
    if why:
        bad += 1
        print("%s under %s: %s" % (text, json.dumps(schema), why))
print("checked", sum(1 for _ in open(sys.argv[1])), "bad", bad)
)PY";
    std::ofstream(js) << R"JS(
const fs = require("fs");
let bad = 0, n = 0;
// Decimal places of a number's shortest round-trip spelling (1e-7 style included).
function places(x) {
  const s = String(Math.abs(x));
  const m = s.match(/^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/);
  return Math.max(0, (m[2] || "").length - Number(m[3] || 0));
}
for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n")) {
  if (!line) continue;
  n++;
  const { schema, text } = JSON.parse(line);
  const v = JSON.parse(text);
  let why = null;
  if (typeof v !== "number" || !Number.isFinite(v)) why = "not a finite number";
  else if (schema.type === "integer" && !Number.isSafeInteger(v)) why = "not a safe integer";
  else if (Number.isInteger(v) && !Number.isSafeInteger(v)) why = "integer beyond 2^53";
  else if (schema.minimum !== undefined && !(v >= schema.minimum)) why = "below minimum";
  else if (schema.maximum !== undefined && !(v <= schema.maximum)) why = "above maximum";
  else if (schema.exclusiveMinimum !== undefined && !(v > schema.exclusiveMinimum)) why = "not above exclusiveMinimum";
  else if (schema.exclusiveMaximum !== undefined && !(v < schema.exclusiveMaximum)) why = "not below exclusiveMaximum";
  else if (schema.multipleOf !== undefined) {
    // As zod does: scale both to integers by the larger number of decimal places.
    const d = Math.max(places(v), places(schema.multipleOf));
    const a = Math.round(v * 10 ** d), b = Math.round(schema.multipleOf * 10 ** d);
    if (!Number.isSafeInteger(a) || a % b !== 0) why = "not a multiple of " + schema.multipleOf;
  }
  if (why) { bad++; console.log(text + " under " + JSON.stringify(schema) + ": " + why); }
}
console.log("checked " + n + " bad " + bad);
)JS";
  }
  const std::string py_cmd = "/usr/bin/python3 '" + py + "' '" + in + "' > '" + out_py + "' 2>&1";
  REQUIRE(std::system(py_cmd.c_str()) == 0);
  const std::string py_out = read_file(out_py);
  INFO("python:\n" << py_out);
  CHECK(py_out.find("checked " + std::to_string(n) + " bad 0") != std::string::npos);
  if (have_node) {
    const std::string js_cmd = "node '" + js + "' '" + in + "' > '" + out_js + "' 2>&1";
    REQUIRE(std::system(js_cmd.c_str()) == 0);
    const std::string js_out = read_file(out_js);
    INFO("node:\n" << js_out);
    CHECK(js_out.find("checked " + std::to_string(n) + " bad 0") != std::string::npos);
  }
  INFO("longest number written: " << longest << " bytes");
  CHECK(longest <= 40);
}
