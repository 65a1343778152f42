// Model download (--hf) against a loopback server laid out like the Hugging Face hub
// (tests/file_server.h): download with the hub's redirect and checksum headers, resume after a
// connection cut at 50%, a wrong checksum rejected, offline reuse, and the errors a user meets
// (404, no network, disk full). The SHA-256 oracle is coreutils' sha256sum, not our own code.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_common.h"
#include "file_server.h"
#include "hf_download.h"
#include "test_util.h"

using namespace picolm;
using test_util::HubFileServer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/picolm_download_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Run {
  int status = -1;
  std::string out, err;
};

Run run_shell(const std::string& cmd) {
  const std::string err_file = "/tmp/picolm_download_test_err_" + std::to_string(::getpid());
  Run r;
  FILE* p = popen((cmd + " 2>" + err_file).c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = read_file(err_file);
  std::remove(err_file.c_str());
  return r;
}

// The oracle: coreutils' sha256sum.
std::string sha256sum(const std::string& path) {
  Run r = run_shell("sha256sum '" + path + "'");
  REQUIRE(r.status == 0);
  REQUIRE(r.out.size() >= 64);
  return r.out.substr(0, 64);
}

const std::string kModel = test_util::model_path("stories260K.gguf");

// The loopback server must be reached directly even where the environment names an HTTP proxy
// (libcurl honours http_proxy; NO_PROXY exempts these hosts). Also inherited by the picolm runs.
[[maybe_unused]] const bool kNoProxy = [] {
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  ::setenv("no_proxy", "127.0.0.1,localhost", 1);
  return true;
}();

download::ModelRef ref_of(const std::string& file) { return {"test", "repo", file}; }

download::FetchOptions options(const HubFileServer& s, const TempDir& d, std::vector<std::string>* log = nullptr) {
  download::FetchOptions o;
  o.endpoint = s.endpoint();
  o.models_dir = d.path;
  o.token = "-";  // never the environment's HF_TOKEN
  o.connect_timeout_sec = 5;
  o.stall_timeout_sec = 10;
  if (log) o.log = [log](std::string_view m) { log->emplace_back(m); };
  return o;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("download: OWNER/REPO/FILE.gguf parsing", "[download]") {
  auto a = download::parse_model_ref("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf");
  REQUIRE(a.ok());
  CHECK(a->owner == "Qwen");
  CHECK(a->repo == "Qwen2.5-0.5B-Instruct-GGUF");
  CHECK(a->file == "qwen2.5-0.5b-instruct-q4_k_m.gguf");
  // A URL pasted from the hub's page gives the same reference.
  auto b = download::parse_model_ref("https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/blob/main/"
                                     "qwen2.5-0.5b-instruct-q4_k_m.gguf");
  REQUIRE(b.ok());
  CHECK(b->owner == "Qwen");
  CHECK(b->repo == "Qwen2.5-0.5B-Instruct-GGUF");
  CHECK(b->file == "qwen2.5-0.5b-instruct-q4_k_m.gguf");
  auto sub = download::parse_model_ref("o/r/sub/dir/m.gguf");
  REQUIRE(sub.ok());
  CHECK(sub->file == "sub/dir/m.gguf");
  for (const char* bad : {"", "model.gguf", "o/model.gguf", "o/r/", "o/r/model.bin", "../r/m.gguf", "o/r/../m.gguf",
                          "o//m.gguf", "o/r/a//m.gguf"}) {
    INFO(bad);
    auto r = download::parse_model_ref(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) CHECK(contains(r.error(), "OWNER/REPO/FILE.gguf"));
  }
  CHECK(download::model_url(*a, "http://127.0.0.1:9/") ==
        "http://127.0.0.1:9/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf");
  CHECK(download::local_path(*a, "/m") == "/m/Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf");
}

TEST_CASE("download: sha256 matches coreutils", "[download]") {
  REQUIRE(download::download_supported());
  // FIPS 180-2 test vectors.
  CHECK(download::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(download::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  auto f = download::sha256_file(kModel);
  REQUIRE(f.ok());
  CHECK(*f == sha256sum(kModel));
}

TEST_CASE("download: a hub-style download is checked and renamed into place", "[download]") {
  const std::string bytes = read_file(kModel);
  REQUIRE(bytes.size() > 100000);
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, sha256sum(kModel), -1});
  TempDir dir;
  std::vector<std::string> log;
  uint64_t last_done = 0, last_total = 0;
  auto o = options(srv, dir, &log);
  o.progress = [&](const download::Progress& p) {
    CHECK(p.done >= last_done);  // monotonic
    last_done = p.done;
    last_total = p.total;
  };
  auto path = download::fetch_model(ref_of("stories260K.gguf"), o);
  REQUIRE(path.ok());
  CHECK(*path == dir.path + "/test/repo/stories260K.gguf");
  CHECK(read_file(*path) == bytes);
  CHECK_FALSE(fs::exists(*path + ".part"));
  CHECK(last_done == bytes.size());
  CHECK(last_total == bytes.size());
  bool checked = false;
  for (const auto& l : log) checked = checked || (contains(l, "sha256 " + sha256sum(kModel)) && contains(l, " ok"));
  CHECK(checked);
  CHECK(srv.ranges() == std::vector<std::string>{""});  // one request for the bytes, no Range
}

TEST_CASE("download: interrupted at 50% resumes with Range and the file's sha256 matches", "[download]") {
  const std::string bytes = read_file(kModel);
  const std::string sum = sha256sum(kModel);
  const int64_t half = int64_t(bytes.size() / 2);
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, sum, half});
  TempDir dir;
  const std::string final_path = dir.path + "/test/repo/stories260K.gguf";

  auto first = download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir));
  REQUIRE_FALSE(first.ok());
  CHECK(contains(first.error(), "interrupted"));
  CHECK(contains(first.error(), "run the same command again to resume"));
  CHECK_FALSE(fs::exists(final_path));
  REQUIRE(fs::exists(final_path + ".part"));
  CHECK(fs::file_size(final_path + ".part") == uint64_t(half));

  uint64_t resumed_from = 0;
  auto o = options(srv, dir);
  o.progress = [&](const download::Progress& p) { resumed_from = p.resumed_from; };
  auto second = download::fetch_model(ref_of("stories260K.gguf"), o);
  REQUIRE(second.ok());
  CHECK(resumed_from == uint64_t(half));
  CHECK(srv.ranges() == std::vector<std::string>{"", "bytes=" + std::to_string(half) + "-"});
  CHECK(sha256sum(final_path) == sum);
  CHECK_FALSE(fs::exists(final_path + ".part"));
}

TEST_CASE("download: a server that ignores Range restarts the file from zero", "[download]") {
  const std::string bytes = read_file(kModel);
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, sha256sum(kModel), int64_t(bytes.size() / 3)});
  TempDir dir;
  REQUIRE_FALSE(download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir)).ok());
  srv.honour_range(false);
  auto again = download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir));
  REQUIRE(again.ok());
  CHECK(read_file(*again) == bytes);
}

TEST_CASE("download: a .part longer than the file (HTTP 416) starts over", "[download]") {
  const std::string bytes = read_file(kModel);
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, sha256sum(kModel), -1});
  TempDir dir;
  fs::create_directories(dir.path + "/test/repo");
  std::ofstream(dir.path + "/test/repo/stories260K.gguf.part", std::ios::binary) << bytes << "trailing junk";
  auto r = download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir));
  REQUIRE(r.ok());
  CHECK(read_file(*r) == bytes);
}

TEST_CASE("download: a wrong checksum is rejected and nothing is kept", "[download]") {
  const std::string bytes = read_file(kModel);
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, download::sha256_hex("other bytes"), -1});
  TempDir dir;
  const std::string final_path = dir.path + "/test/repo/stories260K.gguf";
  auto r = download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir));
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.error(), "checksum mismatch"));
  CHECK(contains(r.error(), sha256sum(kModel)));  // names what it got
  CHECK_FALSE(fs::exists(final_path));
  CHECK_FALSE(fs::exists(final_path + ".part"));
}

TEST_CASE("download: a file downloaded before is used offline", "[download]") {
  const std::string bytes = read_file(kModel);
  TempDir dir;
  std::string endpoint;
  {
    HubFileServer srv;
    srv.put("test/repo/stories260K.gguf", {bytes, sha256sum(kModel), -1});
    REQUIRE(download::fetch_model(ref_of("stories260K.gguf"), options(srv, dir)).ok());
    endpoint = srv.endpoint();
  }  // server stopped: its port refuses connections now
  std::vector<std::string> log;
  download::FetchOptions o;
  o.endpoint = endpoint;
  o.models_dir = dir.path;
  o.log = [&](std::string_view m) { log.emplace_back(m); };
  auto r = download::fetch_model(ref_of("stories260K.gguf"), o);
  REQUIRE(r.ok());
  CHECK(read_file(*r) == bytes);
  REQUIRE(log.size() == 1);
  CHECK(contains(log[0], "downloaded before"));
}

TEST_CASE("download: clear errors for 404, no network and a full disk", "[download]") {
  const std::string bytes = read_file(kModel);
  TempDir dir;
  HubFileServer srv;
  srv.put("test/repo/stories260K.gguf", {bytes, sha256sum(kModel), -1});

  auto missing = download::fetch_model(ref_of("nope.gguf"), options(srv, dir));
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.error(), "HTTP 404"));
  CHECK(contains(missing.error(), "/test/repo/resolve/main/nope.gguf"));
  CHECK_FALSE(fs::exists(dir.path + "/test/repo/nope.gguf.part"));  // no litter

  std::string closed_endpoint;
  {
    HubFileServer gone;
    closed_endpoint = gone.endpoint();
  }
  download::FetchOptions o = options(srv, dir);
  o.endpoint = closed_endpoint;
  auto offline = download::fetch_model(ref_of("stories260K.gguf"), o);
  REQUIRE_FALSE(offline.ok());
  CHECK(contains(offline.error(), "cannot reach 127.0.0.1"));
  CHECK(contains(offline.error(), "no network"));

  download::FetchOptions full = options(srv, dir);
  full.free_bytes = [](const std::string&) -> uint64_t { return 4096; };
  auto disk = download::fetch_model(ref_of("stories260K.gguf"), full);
  REQUIRE_FALSE(disk.ok());
  CHECK(contains(disk.error(), "disk full"));
  CHECK(contains(disk.error(), "PICOLM_MODELS"));
  CHECK_FALSE(fs::exists(dir.path + "/test/repo/stories260K.gguf"));
}

TEST_CASE("download: picolm --hf prints what -m prints, also with the server stopped", "[download][cli]") {
  const std::string bin = std::string(PICOLM_BIN_DIR) + "/picolm";
  const std::string args = " -p 'Once upon a time' -n 8 --temp 0 -j 1";
  Run local = run_shell(bin + " -m " + kModel + args);
  REQUIRE(local.status == 0);
  REQUIRE_FALSE(local.out.empty());
  TempDir dir;
  std::string env;
  {
    HubFileServer srv;
    srv.put("test/repo/stories260K.gguf", {read_file(kModel), sha256sum(kModel), -1});
    env = "HF_ENDPOINT=" + srv.endpoint() + " PICOLM_MODELS=" + dir.path + " ";
    Run hf = run_shell(env + bin + " --hf test/repo/stories260K.gguf" + args);
    INFO(hf.err);
    REQUIRE(hf.status == 0);
    CHECK(hf.out == local.out);
    CHECK(contains(hf.err, "sha256"));
  }
  Run offline = run_shell(env + bin + " --hf test/repo/stories260K.gguf" + args);
  INFO(offline.err);
  REQUIRE(offline.status == 0);
  CHECK(offline.out == local.out);
  CHECK(contains(offline.err, "downloaded before"));

  Run bad = run_shell(env + bin + " --hf test/repo/missing.gguf" + args);
  CHECK(bad.status == 1);
  CHECK(contains(bad.err, "cannot reach 127.0.0.1"));
  Run both = run_shell(bin + " -m " + kModel + " --hf test/repo/stories260K.gguf" + args);
  CHECK(both.status == 1);
  CHECK(contains(both.err, "not both"));
}

TEST_CASE("download: the progress meter's text", "[download]") {
  using M = cli::ProgressMeter;
  CHECK(M::describe(M::Unit::Bytes, 512ull << 20, 1024ull << 20, double(64 << 20)) ==
        " 50% 512.0/1024.0 MiB, 64.0 MiB/s, ETA 0:08");
  CHECK(M::describe(M::Unit::Tokens, 1000, 4000, 250.0) == " 25% 1000/4000 tokens, 250.0 tok/s, ETA 0:12");
  CHECK(M::describe(M::Unit::Tokens, 4000, 4000, 250.0) == "100% 4000/4000 tokens, 250.0 tok/s");
  // A pipe gets whole lines, never carriage returns; a terminal gets one redrawn line.
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  {
    M m(f, "download x", M::Unit::Bytes, /*terminal=*/false, /*line_every_sec=*/0.0);
    m.update(10, 100);
    m.update(100, 100);
    m.finish();
  }
  std::fclose(f);
  const std::string lines(buf, len);
  std::free(buf);
  CHECK(lines.find('\r') == std::string::npos);
  CHECK(contains(lines, "download x:  10% "));
  CHECK(contains(lines, "download x: 100% "));
  f = open_memstream(&buf, &len);
  {
    M m(f, "prefill", M::Unit::Tokens, /*terminal=*/true);
    m.update(100, 100);
    m.finish();
  }
  std::fclose(f);
  const std::string bar(buf, len);
  std::free(buf);
  CHECK(bar.rfind("\rprefill [########################] 100% 100/100 tokens", 0) == 0);
  CHECK(bar.back() == '\n');
}

TEST_CASE("download: picolm-provider --hf reports a missing file and exits", "[download][cli]") {
  const std::string bin = std::string(PICOLM_BIN_DIR) + "/picolm-provider";
  if (::access(bin.c_str(), X_OK) != 0) {
    WARN("picolm-provider not built (PICOLM_BUILD_SERVER=OFF)");
    return;
  }
  HubFileServer srv;
  TempDir dir;
  const std::string env = "HF_ENDPOINT=" + srv.endpoint() + " PICOLM_MODELS=" + dir.path + " ";
  Run r = run_shell(env + bin + " --hf test/repo/missing.gguf --port 0 --cache-dir none");
  CHECK(r.status == 1);
  CHECK(contains(r.err, "picolm-provider: not found (HTTP 404)"));
  CHECK(r.out.empty());  // never started listening
  Run both = run_shell(env + bin + " -m " + kModel + " --hf test/repo/stories260K.gguf --port 0");
  CHECK(both.status == 2);
  CHECK(contains(both.err, "not both"));
}
