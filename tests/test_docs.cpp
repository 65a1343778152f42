// The README against the binaries: the option lists in the README are the binaries' --help output
// (scripts/update-readme-help.sh writes them; this test fails when they drift), the "Models" table
// is --list-models' list, and --version names the version, the commit and the CPU features.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_common.h"

namespace {

std::string run_stdout(const std::string& cmd, int* status) {
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string readme() {
  std::ifstream in(std::string(PICOLM_SOURCE_DIR) + "/README.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text of the fenced block between "<!-- BEGIN NAME --help" and "<!-- END NAME --help -->".
std::string help_block(const std::string& doc, const std::string& name) {
  const std::string begin = "<!-- BEGIN " + name + " --help";
  const size_t b = doc.find(begin);
  INFO("README.md has no block starting with '" << begin << "'");
  REQUIRE(b != std::string::npos);
  const size_t fence = doc.find("```text\n", b);
  const size_t end_fence = doc.find("\n```\n", fence);
  const size_t end = doc.find("<!-- END " + name + " --help -->", b);
  REQUIRE(fence != std::string::npos);
  REQUIRE(end_fence != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(end_fence < end);
  return doc.substr(fence + 8, end_fence + 1 - (fence + 8));
}

bool contains(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

}  // namespace

TEST_CASE("docs: the README's option lists are the binaries' --help", "[docs]") {
  const std::string doc = readme();
  for (const char* name : {"picolm", "picolm-provider", "picolm-bench", "picolm-synth", "picolm-gguf", "picolm-grammar",
                           "picolm-cachebench", "picolm-budgetbench", "picolm-loadbench", "picolm-agentbench"}) {
    const std::string bin = std::string(PICOLM_BIN_DIR) + "/" + name;
    const bool server_tool = std::string(name) == "picolm-provider" || std::string(name) == "picolm-cachebench" ||
                             std::string(name) == "picolm-loadbench" || std::string(name) == "picolm-agentbench";
    if (server_tool && access(bin.c_str(), X_OK) != 0) {
      WARN(name << " not built (PICOLM_BUILD_SERVER=OFF): its block is not checked");
      continue;
    }
    INFO(name);
    int st = -1;
    const std::string help = run_stdout(bin + " --help", &st);
    REQUIRE(st == 0);
    REQUIRE(help.size() > 80);
    INFO(name << ": README.md differs from --help; run scripts/update-readme-help.sh");
    CHECK(help_block(doc, name) == help);
  }
}

TEST_CASE("docs: the README's Models table is --list-models", "[docs]") {
  const std::string doc = readme();
  const size_t models = doc.find("\n## Models");
  REQUIRE(models != std::string::npos);
  const size_t next = doc.find("\n## ", models + 1);
  const std::string section = doc.substr(models, next - models);
  int rows = 0;
  for (size_t p = section.find("\n| `"); p != std::string::npos; p = section.find("\n| `", p + 1)) ++rows;
  const auto list = picolm::cli::recommended_models();
  CHECK(rows == int(list.size()));
  for (const auto& m : list) {
    INFO(m.spec);
    CHECK(contains(section, std::string("| `") + m.spec + "` | " + m.size + " | " + m.ram + " |"));
  }
  int st = -1;
  const std::string out = run_stdout(std::string(PICOLM_BIN_DIR) + "/picolm --list-models", &st);
  CHECK(st == 0);
  for (const auto& m : list) CHECK(contains(out, m.spec));
}

TEST_CASE("docs: --version names version, commit and CPU features", "[docs]") {
  for (const char* name : {"picolm", "picolm-provider"}) {
    const std::string bin = std::string(PICOLM_BIN_DIR) + "/" + name;
    if (access(bin.c_str(), X_OK) != 0) continue;
    int st = -1;
    const std::string v = run_stdout(bin + " --version", &st);
    INFO(v);
    CHECK(st == 0);
    CHECK(v.rfind(std::string(name) + " 0.", 0) == 0);
    CHECK(contains(v, "(git "));
    CHECK_FALSE(contains(v, "(git unknown)"));  // tests run from a git checkout
    CHECK(contains(v, "\nkernels: "));
    CHECK(contains(v, "(CPU: "));
  }
}
