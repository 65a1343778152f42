// The provider's life cycle behind a proxy (issue 22) and the stop race (issue 15 item 5): graceful
// drain (accepted requests finish, new ones and /health get 503), the drain bound, stop() right
// after start(), and the instance id in /health, /metrics and the X-Picolm-Instance header.
// Black box over loopback, in-process servers on ephemeral ports, the stories260K model.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server.h"

using namespace picolm;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string kStories = std::string(PICOLM_SHARED_DIR) + "/models/stories260K.gguf";

ServerOptions options(const std::string& model, const std::string& instance_id = "") {
  ServerOptions o;
  o.engine.model_path = model;
  o.engine.threads = 1;
  o.engine.n_ctx = 512;
  o.engine.max_queue = 8;
  o.engine.cache_ram_mb = 16;
  o.host = "127.0.0.1";
  o.port = 0;
  o.instance_id = instance_id;
  return o;
}

struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
};

Running start_loaded(const std::string& instance_id = "") {
  REQUIRE(fs::exists(kStories));  // a missing input fails the test
  Running r;
  r.server = std::make_unique<Server>(options(kStories, instance_id));
  auto port = r.server->start();
  REQUIRE(port.ok());
  r.port = port.value();
  Status st = r.server->wait_loaded(60s);
  INFO((st.ok() ? std::string() : st.error()));
  REQUIRE(st.ok());
  return r;
}

std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(60, 0);
  return c;
}

std::string chat(bool stream, int max_tokens) {
  return std::string(R"({"model":"x","messages":[{"role":"system","content":"Tell a story."},)") +
         R"({"role":"user","content":"Once upon a time"}],"temperature":0,"max_tokens":)" +
         std::to_string(max_tokens) + (stream ? R"(,"stream":true})" : "}");
}

struct Answer {
  int status = -1;
  std::string body;
};

Answer post(int port, const std::string& body) {
  auto c = client(port);
  auto res = c->Post("/v1/chat/completions", body, "application/json");
  if (!res) return {};
  return {res->status, res->body};
}

// Polls until the server has `n` generations admitted (queued behind a paused engine).
void wait_in_flight(Server& s, int n) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (s.in_flight() < n && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  REQUIRE(s.in_flight() == n);
}

}  // namespace

TEST_CASE("a provider whose model fails to load stops at once, every time (issue 15 item 5)", "[drain]") {
  // httplib's stop() was a no-op until the listener thread had started, which then accepted forever:
  // stop() right after start() hung about 1 in 200 starts. Half the rounds stop immediately (the
  // widest window), half after the load failed (what picolm-provider does).
  const std::string missing = (fs::temp_directory_path() / "picolm-no-such-model.gguf").string();
  std::atomic<int> round{0};
  auto loop = std::async(std::launch::async, [&] {
    for (int i = 0; i < 300; ++i, ++round) {
      Server s(options(missing));
      auto port = s.start();
      if (!port.ok()) return std::string("start failed: ") + port.error();
      if (i % 2) {
        Status st = s.wait_loaded(10s);
        if (st.ok()) return std::string("a missing model loaded");
      }
      s.stop();
    }
    return std::string();
  });
  if (loop.wait_for(90s) != std::future_status::ready) {
    // The hung round cannot be joined; report it and end the binary rather than hang CI.
    std::fprintf(stderr, "FAILED: stop() hung in round %d of start-with-a-bad-model\n", round.load());
    std::_Exit(1);
  }
  CHECK(loop.get().empty());
  CHECK(round == 300);
}

TEST_CASE("picolm-provider with a model that fails to load exits 1, 20 starts in a row", "[drain]") {
  // The process-level form of the stop race: the load fails at once, the load watcher raises
  // SIGTERM, main stops the server; `timeout` turns a hang into a kill. About 0.35 s a start, so
  // fewer rounds than the in-process loop above, which is where the race is reproduced.
  const std::string exe = std::string(PICOLM_BIN_DIR) + "/picolm-provider";
  REQUIRE(fs::exists(exe));
  const std::string missing = (fs::temp_directory_path() / "picolm-no-such-model.gguf").string();
  const std::string cmd = "timeout -s KILL 20 " + exe + " -m " + missing +
                          " --port 0 --cache-dir none -j 1 > /dev/null 2>&1";
  int exited_1 = 0;
  for (int i = 0; i < 20; ++i) {
    const int st = std::system(cmd.c_str());
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1) ++exited_1;
    else FAIL_CHECK("start " << i << ": wait status " << st);
  }
  CHECK(exited_1 == 20);
}

TEST_CASE("drain: accepted requests finish, new ones and /health get 503, then it is drained", "[drain]") {
  Running r = start_loaded("replica-a");
  auto eng = r.server->engine();
  REQUIRE(eng);
  eng->set_paused(true);  // hold the queue so the drain starts with work in flight
  auto a = std::async(std::launch::async, [&] { return post(r.port, chat(false, 8)); });
  auto b = std::async(std::launch::async, [&] { return post(r.port, chat(true, 8)); });
  wait_in_flight(*r.server, 2);

  r.server->begin_drain();
  auto c = client(r.port);
  auto health = c->Get("/health");
  REQUIRE(health);
  CHECK(health->status == 503);
  CHECK(health->body == R"({"status":"draining","instance_id":"replica-a"})");
  auto refused = c->Post("/v1/chat/completions", chat(false, 4), "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(refused->body.find("\"code\":\"draining\"") != std::string::npos);
  CHECK(refused->get_header_value("X-Picolm-Instance") == "replica-a");
  CHECK_FALSE(r.server->wait_drained(200ms));  // both still queued
  CHECK(r.server->in_flight() == 2);

  eng->set_paused(false);
  const Answer ra = a.get(), rb = b.get();
  CHECK(ra.status == 200);
  CHECK(ra.body.find("\"finish_reason\":\"length\"") != std::string::npos);
  CHECK(rb.status == 200);
  CHECK(rb.body.find("\"finish_reason\":\"length\"") != std::string::npos);
  CHECK(rb.body.ends_with("data: [DONE]\n\n"));
  CHECK(r.server->wait_drained(10s));
  CHECK(r.server->in_flight() == 0);
  r.server->stop();
}

TEST_CASE("drain: what is left at the bound is cancelled by stop() and answered", "[drain]") {
  Running r = start_loaded();
  auto eng = r.server->engine();
  REQUIRE(eng);
  eng->set_paused(true);
  auto a = std::async(std::launch::async, [&] { return post(r.port, chat(false, 8)); });
  wait_in_flight(*r.server, 1);
  r.server->begin_drain();
  CHECK_FALSE(r.server->wait_drained(300ms));
  const auto t0 = std::chrono::steady_clock::now();
  r.server->stop();
  const Answer ra = a.get();
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(ra.status >= 500);  // the queued job was failed, not left hanging
  CHECK(r.server->in_flight() == 0);
}

TEST_CASE("a queued stream sends its headers with the first token, so a proxy can still retry it", "[drain]") {
  Running r = start_loaded();
  auto eng = r.server->engine();
  REQUIRE(eng);
  eng->set_paused(true);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(r.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string body = chat(true, 4);
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  const std::string req = head + body;
  REQUIRE(::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size()));
  wait_in_flight(*r.server, 1);
  pollfd p{fd, POLLIN, 0};
  CHECK(::poll(&p, 1, 400) == 0);  // queued: not a byte yet, not even the status line

  eng->set_paused(false);
  std::string got;
  char buf[4096];
  for (;;) {
    p.revents = 0;
    if (::poll(&p, 1, 30000) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  CHECK(got.starts_with("HTTP/1.1 200"));
  CHECK(got.find("text/event-stream") != std::string::npos);
  CHECK(got.find("data: [DONE]") != std::string::npos);
  r.server->stop();
}

TEST_CASE("instance id: /health, /metrics and the response header name the replica", "[drain]") {
  Running named = start_loaded("board-2");
  auto c = client(named.port);
  auto health = c->Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(health->body == R"({"status":"ok","instance_id":"board-2"})");
  CHECK(health->get_header_value("X-Picolm-Instance") == "board-2");
  auto metrics = c->Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("\npicolm_instance_info{instance_id=\"board-2\"} 1\n") != std::string::npos);
  const Answer ans = post(named.port, chat(false, 2));
  CHECK(ans.status == 200);
  named.server->stop();

  // Without --instance-id the replica is HOST:PORT.
  Running plain = start_loaded();
  const std::string expected = "127.0.0.1:" + std::to_string(plain.port);
  CHECK(plain.server->instance_id() == expected);
  auto h2 = client(plain.port)->Get("/health");
  REQUIRE(h2);
  CHECK(h2->body == R"({"status":"ok","instance_id":")" + expected + "\"}");
  plain.server->stop();
}
