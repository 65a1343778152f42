// The picolm CLI as a user runs it: stdout carries only the generated text, errors exit non-zero.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {
struct Run {
  int status = -1;
  std::string out, err;
};

Run run(const std::string& args) {
  const std::string err_file = "/tmp/picolm_cli_test_err_" + std::to_string(::getpid());
  const std::string cmd = std::string(PICOLM_BIN_DIR) + "/picolm " + args + " 2>" + err_file;
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::remove(err_file.c_str());
  return r;
}

const std::string kStories = std::string(PICOLM_SHARED_DIR) + "/models/stories260K.gguf";
}  // namespace

TEST_CASE("cli: greedy generation prints only the text", "[cli]") {
  Run r = run("-m " + kStories + " -p 'Once upon a time' -n 12 --temp 0 -j 1");
  REQUIRE(r.status == 0);
  // llama.cpp's greedy continuation (golden): ", there was a little girl named Lily."
  CHECK(r.out.rfind(", there was a little girl named Lily.", 0) == 0);
  CHECK(r.err.find("tok/s") != std::string::npos);
}

TEST_CASE("cli: --tokenize prints the ids", "[cli]") {
  Run r = run("-m " + kStories + " -p 'Once upon a time' --tokenize");
  REQUIRE(r.status == 0);
  CHECK(r.out == "1 403 407 261 378\n");  // golden tokens
}

TEST_CASE("cli: --dump-logits writes one JSON line per evaluated position", "[cli]") {
  const std::string f = "/tmp/picolm_cli_dump_" + std::to_string(::getpid()) + ".jsonl";
  Run r = run("-m " + kStories + " -p 'Once upon a time' -n 3 --temp 0 --dump-logits " + f);
  REQUIRE(r.status == 0);
  std::ifstream in(f);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    CHECK(line.rfind("{\"pos\":" + std::to_string(lines) + ",\"token\":", 0) == 0);
    CHECK(line.find("\"logits\":[") != std::string::npos);
    ++lines;
  }
  CHECK(lines == 5 + 2);  // 5 prompt positions + 2 decoded tokens (the 3rd is sampled, not evaluated)
  std::remove(f.c_str());
}

TEST_CASE("cli: errors exit non-zero with a message", "[cli]") {
  Run a = run("-m /nonexistent.gguf -p hi");
  CHECK(a.status != 0);
  CHECK(a.err.find("cannot open") != std::string::npos);
  Run b = run("-m " + kStories + " -p hi --bogus");
  CHECK(b.status != 0);
  CHECK(b.err.find("unknown option '--bogus'") != std::string::npos);
  Run c = run("-m " + kStories + " -p hi -n abc");
  CHECK(c.status != 0);
  CHECK(c.err.find("not a number") != std::string::npos);
  Run d = run("-p hi");
  CHECK(d.status != 0);
  Run e = run("-m " + std::string(PICOLM_SHARED_DIR) + "/models/README.md -p hi");
  CHECK(e.status != 0);
  CHECK(e.err.find("GGUF") != std::string::npos);
}
