// Issue 15, hardening: the provider under idle and slow clients, a second provider on its port,
// hostile cache directories, methods and metrics at the HTTP edge. Black-box over loopback with raw
// sockets (to be the slow client) and httplib's client; the binary itself for its start-up lines.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "connection_pool.h"
#include "constant_time.h"
#include "model.h"
#include "server.h"

using namespace picolm;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K.gguf";
const std::string kBin = PICOLM_BIN_DIR;

ServerOptions stories_options() {
  REQUIRE(fs::exists(kStories));  // a missing input fails the test
  ServerOptions o;
  o.engine.model_path = kStories;
  o.engine.threads = 1;
  o.engine.n_ctx = 512;
  o.engine.max_queue = 8;
  o.engine.cache_ram_mb = 16;
  o.port = 0;
  return o;
}

struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
};

Running start(ServerOptions o) {
  Running r;
  r.server = std::make_unique<Server>(std::move(o));
  auto port = r.server->start();
  INFO((port.ok() ? "" : port.error()));
  REQUIRE(port.ok());
  r.port = port.value();
  Status st = r.server->wait_loaded(std::chrono::seconds(60));
  INFO((st.ok() ? std::string() : st.error()));
  REQUIRE(st.ok());
  return r;
}

std::unique_ptr<httplib::Client> client(int port, int read_timeout_sec = 30) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(read_timeout_sec, 0);
  c->set_write_timeout(5, 0);
  return c;
}

const std::string kChat =
    R"({"model":"x","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8,"temperature":0})";

// A TCP connection to the server that we drive byte by byte (the misbehaving client).
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }
  // Reads until `until` appears in what was received or the deadline passes; returns what came.
  std::string read_until(const std::string& until, Clock::time_point deadline) {
    while (got_.find(until) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got_.append(buf, size_t(n));
    }
    return got_;
  }
  // True once the server has closed its end (recv returns 0 or an error), waiting up to `wait`.
  bool closed_by_server(std::chrono::milliseconds wait) {
    const auto deadline = Clock::now() + wait;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left < 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  std::string got_;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Collects everything logged through spdlog's default logger while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<Sink>()) { spdlog::default_logger()->sinks().push_back(sink_); }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lk(sink_->lines_mu);
    return sink_->lines;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    mutable std::mutex lines_mu;
    std::vector<std::string> lines;
    void sink_it_(const spdlog::details::log_msg& m) override {
      std::lock_guard<std::mutex> lk(lines_mu);
      lines.emplace_back(m.payload.data(), m.payload.size());
    }
    void flush_() override {}
  };
  std::shared_ptr<Sink> sink_;
};

// picolm-provider as a child process; its stdout and stderr are collected into one text.
class Child : public picolm::tools::ChildProcess {
 public:
  explicit Child(std::vector<std::string> args) {
    picolm::tools::ChildOptions o;
    o.argv = std::move(args);
    std::string why;
    if (!start(o, why)) FAIL(why);
  }
  bool wait_for(const std::string& text, std::chrono::seconds within) const {
    return ChildProcess::wait_for(text, within);
  }
  int wait_exit(std::chrono::seconds within) { return ChildProcess::wait_exit(within); }
};

int port_of(const std::string& out) { return picolm::tools::listening_port_in(out); }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("idle and slow connections do not stall /health or a chat (issue 15 item 1)", "[server][harden]") {
  ServerOptions o = stories_options();
  Running s = start(o);
  // 200 idle keep-alives: each asks /health once, gets its answer, and then sends nothing more.
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<RawConn>(s.port));
    REQUIRE(idle.back()->ok());
    REQUIRE(idle.back()->send("GET /health HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\n\r\n"));
  }
  const auto setup_deadline = Clock::now() + std::chrono::seconds(10);
  int answered = 0;
  for (auto& c : idle) answered += c->read_until("{\"status\":\"ok\"}", setup_deadline).find("200 OK") != std::string::npos;
  CHECK(answered == 200);
  // 64 slow ones: half stop after part of their headers, half after part of a body.
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < 64; ++i) {
    slow.push_back(std::make_unique<RawConn>(s.port));
    REQUIRE(slow.back()->ok());
    if (i % 2) REQUIRE(slow.back()->send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Le"));
    else REQUIRE(slow.back()->send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 400\r\n\r\n{\"model\":\"x\",\"mess"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server take them all in
  // The verdict is structural, not a stopwatch: /health and the chat must be answered while all 64
  // slow connections are still held (their read timeout is 15 s; before the fix, 12 threads served
  // everything and /health waited until timeouts freed one). The client timeouts stay below that.
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    auto c = client(s.port, 10);
    const auto t0 = Clock::now();
    auto r = c->Get("/health");
    worst = std::max(worst, ms_since(t0));
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  auto c = client(s.port, 10);
  const auto t0 = Clock::now();
  auto chat = c->Post("/v1/chat/completions", kChat, "application/json");
  REQUIRE(chat);
  CHECK(chat->status == 200);
  CHECK(chat->body.find("\"finish_reason\"") != std::string::npos);
  int held = 0;
  for (auto& conn : slow) held += !conn->closed_by_server(std::chrono::milliseconds(0));
  INFO("slowest /health: " << worst << " ms, chat " << ms_since(t0) << " ms");
  CHECK(held == 64);
  slow.clear();
  idle.clear();
}

TEST_CASE("stalled requests and idle keep-alives are closed after their timeouts", "[server][harden]") {
  ServerOptions o = stories_options();
  o.read_timeout_sec = 1;
  o.keep_alive_timeout_sec = 1;
  Running s = start(o);
  RawConn partial_body(s.port), partial_header(s.port), idle(s.port);
  REQUIRE(partial_body.send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"a"));
  REQUIRE(partial_header.send("GET /health HTTP/1.1\r\nHo"));
  REQUIRE(idle.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  REQUIRE(idle.read_until("{\"status\":\"ok\"}", Clock::now() + std::chrono::seconds(5)).find("200 OK") !=
          std::string::npos);
  const auto t0 = Clock::now();
  CHECK(partial_body.closed_by_server(std::chrono::seconds(8)));
  CHECK(partial_header.closed_by_server(std::chrono::seconds(8)));
  CHECK(idle.closed_by_server(std::chrono::seconds(8)));
  CHECK(ms_since(t0) < 6000.0);
}

TEST_CASE("a second provider on a port in use fails to start (issue 15 item 3)", "[server][harden]") {
  Running first = start(stories_options());
  ServerOptions o = stories_options();
  o.port = first.port;
  Server second(o);
  auto r = second.start();
  REQUIRE(!r.ok());
  CHECK_THAT(r.error(), Catch::Contains("already in use"));
  CHECK_THAT(r.error(), Catch::Contains(std::to_string(first.port)));
  // The first one still serves every request (none was taken by the second).
  auto c = client(first.port);
  for (int i = 0; i < 10; ++i) {
    auto h = c->Get("/health");
    REQUIRE(h);
    CHECK(h->status == 200);
  }
}

TEST_CASE("picolm-provider: 'listening on' once; a port in use is a clear start-up error", "[server][harden]") {
  const std::string bin = kBin + "/picolm-provider";
  REQUIRE(fs::exists(bin));
  REQUIRE(fs::exists(kStories));
  Child a({bin, "-m", kStories, "--port", "0", "--cache-dir", "none", "-j", "1", "-c", "256"});
  REQUIRE(a.wait_for("listening on 127.0.0.1:", std::chrono::seconds(30)));
  const int port = port_of(a.output());
  REQUIRE(port > 0);
  auto c = client(port);
  bool healthy = false;
  for (int i = 0; i < 300 && !healthy; ++i) {
    auto h = c->Get("/health");
    healthy = h && h->status == 200;
    if (!healthy) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(healthy);

  Child b({bin, "-m", kStories, "--port", std::to_string(port), "--cache-dir", "none", "-j", "1"});
  const int rc = b.wait_exit(std::chrono::seconds(30));
  INFO(b.output());
  CHECK(rc == 1);
  CHECK_THAT(b.output(), Catch::Contains("already in use"));
  CHECK(b.output().find("listening on") == std::string::npos);

  a.signal(SIGTERM);
  CHECK(a.wait_exit(std::chrono::seconds(30)) == 0);
  INFO(a.output());
  CHECK(count_of(a.output(), "listening on") == 1);
}

TEST_CASE("another method on a known endpoint gets 405 with Allow (issue 15 item 10)", "[server][harden]") {
  Running s = start(stories_options());
  auto c = client(s.port);
  auto get_chat = c->Get("/v1/chat/completions");
  REQUIRE(get_chat);
  CHECK(get_chat->status == 405);
  CHECK(get_chat->get_header_value("Allow") == "POST");
  CHECK_THAT(get_chat->body, Catch::Contains("\"code\":\"method_not_allowed\""));
  CHECK_THAT(get_chat->body, Catch::Contains("\"type\":\"invalid_request_error\""));
  auto post_health = c->Post("/health", "{}", "application/json");
  REQUIRE(post_health);
  CHECK(post_health->status == 405);
  CHECK(post_health->get_header_value("Allow") == "GET, HEAD");
  auto del = c->Delete("/v1/models");
  REQUIRE(del);
  CHECK(del->status == 405);
  auto unknown = c->Get("/v1/nothing-here");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK_THAT(unknown->body, Catch::Contains("\"code\":\"not_found\""));
  auto m = c->Get("/metrics");
  REQUIRE(m);
  CHECK_THAT(m->body, Catch::Contains("picolm_requests_total{endpoint=\"other\",status=\"405\"} 3"));
}

TEST_CASE("streamed chats and /metrics are counted under their real status (issue 15 item 9)", "[server][harden]") {
  Running s = start(stories_options());
  auto c = client(s.port);
  const std::string stream_body =
      R"({"model":"x","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true})";
  auto st = c->Post("/v1/chat/completions", stream_body, "application/json");
  REQUIRE(st);
  CHECK(st->status == 200);
  CHECK_THAT(st->body, Catch::Contains("data: [DONE]"));
  REQUIRE(c->Get("/metrics"));
  auto m = c->Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find("status=\"-1\"") == std::string::npos);
  CHECK_THAT(m->body, Catch::Contains("picolm_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1"));
  CHECK_THAT(m->body, Catch::Contains("picolm_requests_total{endpoint=\"metrics\",status=\"200\"} 1"));
}

TEST_CASE("the API key comparison: only the exact key passes", "[server][harden]") {
  CHECK(constant_time_equal("Bearer sk-1", "Bearer sk-1"));
  CHECK(constant_time_equal("", ""));
  CHECK_FALSE(constant_time_equal("Bearer sk-", "Bearer sk-1"));
  CHECK_FALSE(constant_time_equal("Bearer sk-11", "Bearer sk-1"));
  CHECK_FALSE(constant_time_equal("Bearer sk-2", "Bearer sk-1"));
  CHECK_FALSE(constant_time_equal("", "Bearer sk-1"));
  CHECK_FALSE(constant_time_equal("x", ""));
  // Same bytes repeated: a comparison that wrapped the shorter input around would accept these.
  CHECK_FALSE(constant_time_equal("abab", "ab"));
  CHECK_FALSE(constant_time_equal("ab", "abab"));
  ServerOptions o = stories_options();
  o.api_key = "sk-secret";
  Running s = start(o);
  for (const auto& [header, status] : std::vector<std::pair<std::string, int>>{
           {"Bearer sk-secret", 200}, {"Bearer sk-secre", 401}, {"Bearer sk-secretX", 401},
           {"Bearer SK-secret", 401}, {"sk-secret", 401}, {"", 401}}) {
    auto c = client(s.port);
    httplib::Headers h;
    if (!header.empty()) h.emplace("Authorization", header);
    auto r = c->Get("/v1/models", h);
    REQUIRE(r);
    INFO(header);
    CHECK(r->status == status);
  }
}

TEST_CASE("a FIFO in the cache directory blocks neither requests nor /metrics (issue 15 item 4)",
          "[server][harden]") {
  auto model = Model::load(kStories);
  REQUIRE(model.ok());
  char fp[17];
  std::snprintf(fp, sizeof fp, "%016" PRIx64, model.value()->fingerprint());
  std::string tmpl = (fs::temp_directory_path() / "picolm-harden-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const std::string dir = tmpl, fifo = dir + "/" + fp + "-00000000000000aa.pkv";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  // Before the fix, opening the FIFO waited for a writer forever; opening its writing end (before
  // the server stops, also when a REQUIRE unwinds) lets a blocked engine, and the test, finish.
  struct Unblock {
    std::string path;
    void now() const {
      int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
    }
    ~Unblock() { now(); }
  };
  LogCapture logs;
  {
    ServerOptions o = stories_options();
    o.engine.cache_dir = dir;
    Running s = start(o);
    Unblock guard{fifo};  // destroyed before `s`
    auto c = client(s.port, 20);
    auto chat = c->Post("/v1/chat/completions", kChat, "application/json");
    REQUIRE(chat);
    CHECK(chat->status == 200);
    auto m = client(s.port, 3)->Get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    guard.now();
    s.server->stop();
  }
  CHECK(fs::is_fifo(fifo));
  bool reported = false;
  for (const std::string& l : logs.lines()) {
    INFO(l);
    CHECK(l.find("prompt cache: prompt cache:") == std::string::npos);
    reported = reported || (l.rfind("prompt cache: ignoring", 0) == 0 && l.find("not a regular file") != std::string::npos);
  }
  CHECK(reported);
  fs::remove_all(dir);
}

TEST_CASE("ConnectionPool: grows to its cap, queues beyond it, shrinks when idle, runs every job", "[server][harden]") {
  ConnectionPoolOptions po;
  po.min_threads = 2;
  po.max_threads = 6;
  po.idle_exit = std::chrono::milliseconds(200);
  ConnectionPool pool(po);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i)
    pool.enqueue([&] {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return release; });
      ++ran;
    });
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (pool.stats().busy < 6 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto st = pool.stats();
  CHECK(st.threads == 6);
  CHECK(st.busy == 6);
  CHECK(st.queued == 4);
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  while (ran < 10 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(ran == 10);
  // Idle threads above the minimum leave after idle_exit.
  const auto shrink_deadline = Clock::now() + std::chrono::seconds(5);
  while (pool.stats().threads > 2 && Clock::now() < shrink_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(pool.stats().threads == 2);
  CHECK(pool.stats().peak_threads == 6);
  // Jobs queued at shutdown still run (each is a connection that must be closed).
  std::atomic<int> late{0};
  for (int i = 0; i < 5; ++i) pool.enqueue([&] { ++late; });
  pool.shutdown();
  CHECK(late == 5);
  CHECK(pool.stats().threads == 0);
}
