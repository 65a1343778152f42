// Independent checkers for the property tests: one python3 process (tests/validate_*.py) judges
// every record of a test, so that what the grammar produced is validated by code that shares
// nothing with it (python3-jsonschema, Python's own json / ast parsers).
//
// The protocol: the test writes one JSON object per line, each with "id" 0..n-1; the script
// prints one JSON object per line with that "id", "ok" (true/false), "error" when not ok, and any
// fields of its own (read them from `line`). Set PICOLM_ORACLE_KEEP=1 to keep both files in the
// temporary folder for debugging.
//
// Also here: the small text helpers the records are written with.
#pragma once
#include <catch2/catch.hpp>
#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace test_oracle {

struct Verdict {
  bool answered = false;  // the script wrote a line for this id
  bool ok = false;
  std::string error;      // the script's reason when !ok
  std::string line;       // the whole answer, for the script's own fields
};

// Runs tests/<script> over `jsonl` (n_records lines, ids 0..n_records-1). Fails the test (REQUIRE)
// when the script exits non-zero, answers an unknown id or leaves a record unanswered.
inline std::vector<Verdict> run_python_oracle(const std::string& script, const std::string& jsonl, size_t n_records,
                                              const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string in_path = (dir / ("picolm_" + tag + "_" + std::to_string(getpid()) + ".jsonl")).string();
  const std::string out_path = in_path + ".out";
  struct RemoveOnExit {
    std::string a, b;
    ~RemoveOnExit() {
      if (std::getenv("PICOLM_ORACLE_KEEP")) return;
      std::error_code ec;
      std::filesystem::remove(a, ec);
      std::filesystem::remove(b, ec);
    }
  } cleanup{in_path, out_path};
  {
    std::ofstream f(in_path, std::ios::binary);
    f << jsonl;
    REQUIRE(f.good());
  }
  const std::string cmd = "/usr/bin/python3 '" + std::string(PICOLM_SOURCE_DIR) + "/tests/" + script + "' '" + in_path + "' > '" +
                          out_path + "'";
  const int rc = std::system(cmd.c_str());
  INFO("python3 tests/" << script << " exited with " << rc);
  REQUIRE(rc == 0);
  std::vector<Verdict> verdicts(n_records);
  std::ifstream f(out_path);
  std::string line;
  simdjson::dom::parser parser;
  while (std::getline(f, line)) {
    simdjson::dom::element e = parser.parse(line);
    const auto id = static_cast<size_t>(int64_t(e["id"]));
    REQUIRE(id < verdicts.size());
    Verdict& v = verdicts[id];
    v.answered = true;
    v.ok = bool(e["ok"]);
    if (!v.ok) v.error = std::string(std::string_view(e["error"]));
    v.line = line;
  }
  for (size_t id = 0; id < verdicts.size(); ++id) {
    INFO("record " << id << " of " << n_records);
    REQUIRE(verdicts[id].answered);  // the oracle answered for every record
  }
  return verdicts;
}

// The whole file; fails the test when it cannot be read (a missing input must not pass).
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  INFO(path);
  REQUIRE(f.good());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Bytes as lower-case hex: how records carry model text (any bytes, not only valid UTF-8).
inline std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Appends s as a JSON string (quotes, backslashes and control bytes escaped).
inline void json_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else out += ch;
  }
  out += '"';
}

}  // namespace test_oracle
