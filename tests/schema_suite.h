// Reads the official JSON-Schema-Test-Suite files and re-serializes their instances, for the
// grammar tests.
//
// Instances are re-serialized from their original text, token by token, so numbers and string
// escapes keep their exact spelling (1.0 stays 1.0: JSON Schema calls it an integer, and a grammar
// must decide on the text, not on a parsed double).
// Thread-safety: free functions without shared state.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace picolm::grammar_tests {

struct SuiteTest {
  std::string description;
  std::string data;  // the instance, original JSON text
  bool valid = false;
};

struct SuiteGroup {
  std::string description;
  std::string schema;  // original JSON text
  std::vector<SuiteTest> tests;
};

// Parses one suite file (a list of groups). Returns false and sets `error` on malformed input.
bool load_suite_file(const std::string& path, std::vector<SuiteGroup>& groups, std::string& error);

// The *.json files directly in `dir` (not in subfolders such as optional/), sorted by name.
std::vector<std::string> list_suite_files(const std::string& dir);

// `json` without any whitespace outside strings.
std::string json_compact(std::string_view json);

// `json` pretty-printed: newline and two spaces per level after `{` `[` `,` and before `}` `]`,
// one space after `:`. Indentation is capped so that no run of whitespace exceeds `max_ws_run`
// bytes (the grammar's CompileOptions::max_whitespace_run).
std::string json_pretty(std::string_view json, int max_ws_run = 16);

}  // namespace picolm::grammar_tests
