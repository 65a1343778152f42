// The HTTP front of picolm-provider: OpenAI-compatible endpoints over cpp-httplib.
//
//   POST /v1/chat/completions, /chat/completions   (stream: SSE)
//   POST /tool_call, /v1/tool_call                 (plain tool-call API, schemas/tool_call.*.json)
//   GET  /v1/models, /models, /health, /metrics
//
// HTTP threads parse, validate and enqueue; the Engine's single worker generates. The model loads
// in the background after start(): /health answers 503 until it is ready.
// Thread-safety: start/stop/wait_loaded from one controlling thread; everything else is internal.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "result.h"
#include "scheduler.h"

namespace picolm {

struct ServerOptions {
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0 = any free port (start() returns it)
  std::string api_key;                    // "" = no authentication
  size_t max_body_bytes = 8u << 20;       // larger bodies get 413
  std::string warm_file;                  // a chat request (JSON) whose prompt is prefilled at start-up
  // Connections served at once, one thread each (docs/RELIABILITY.md); more wait for a free thread.
  // Idle and slow clients hold a connection only as long as the timeouts below allow.
  size_t max_connections = 512;
  int read_timeout_sec = 15;        // a request's headers or body stalled this long: connection closed
  int keep_alive_timeout_sec = 5;   // an idle keep-alive connection is closed after this
  int write_timeout_sec = 60;       // a client that stops reading its answer this long: closed
  int listen_backlog = 1024;        // connections the kernel holds before accept
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving in a background thread; starts loading the model. Returns the port.
  Result<int> start();
  // Blocks until the model is loaded (Ok) or failed to load (the error), or the timeout passes.
  Status wait_loaded(std::chrono::milliseconds timeout = std::chrono::hours(24));
  // Blocks until stop() is called or the listener fails.
  void wait();
  void stop();

  // The engine once loaded, else null (tests use it to pause the worker).
  std::shared_ptr<Engine> engine() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace picolm
