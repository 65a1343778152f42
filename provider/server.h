// The HTTP front of picolm-provider: OpenAI-compatible endpoints over cpp-httplib.
//
//   POST /v1/chat/completions, /chat/completions   (stream: SSE)
//   POST /v1/responses, /responses                 (OpenAI Responses API, responses.h; stream: typed SSE)
//   GET, DELETE /v1/responses/{id}, /responses/{id} (stored responses)
//   POST /tool_call, /v1/tool_call                 (plain tool-call API, schemas/tool_call.*.json)
//   GET  /v1/models, /models, /v1/models/{id}, /health, /metrics
//   OPTIONS *                                      (CORS preflight, with --cors)
//   POST /api/chat, /api/generate, /api/show; GET /api/tags, /api/ps, /api/version
//                                                  (Ollama's API, ollama_http.h; stream: NDJSON)
//
// Graceful drain (SIGTERM in picolm-provider, rolling restarts behind a proxy): begin_drain() makes
// /health and every new generation answer 503 (a proxy retries those elsewhere) while the requests
// already accepted, running or queued, finish; wait_drained() says when none is left; then stop().
//
// HTTP threads parse, validate and enqueue; the Engine's single worker generates. The model loads
// in the background after start(): /health answers 503 until it is ready.
// Thread-safety: start/stop/wait_loaded from one controlling thread; everything else is internal.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

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
  // CORS: origins allowed to call from a browser ("*" = any); empty = no CORS headers, OPTIONS 405.
  std::vector<std::string> cors_origins;
  // Names this replica in log lines, /health, /metrics (picolm_instance_info) and the
  // X-Picolm-Instance response header. "" = HOST:PORT once bound (the host name for 0.0.0.0 / ::).
  std::string instance_id;
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
  // From now on /health and new generations answer 503 (code "draining"); accepted ones go on.
  void begin_drain();
  // Blocks until no accepted generation is left unanswered (true) or the timeout passes (false).
  bool wait_drained(std::chrono::milliseconds timeout);
  // Generations accepted and not yet answered (running, queued or streaming).
  int in_flight() const;
  // Cancels whatever still runs and stops listening; safe right after start() (issue 15 item 5).
  void stop();
  // The instance id in use (ServerOptions::instance_id, or HOST:PORT once started).
  const std::string& instance_id() const;

  // The engine once loaded, else null (tests use it to pause the worker).
  std::shared_ptr<Engine> engine() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace picolm
