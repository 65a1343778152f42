// The HTTP side of Ollama's API (ollama.h): its routes, mounted on the provider's server through
// the few things they need from it (OllamaHttpHooks), so the server keeps one admission, one
// request path (Engine::prepare + submit) and one authentication edge for every API.
//
//   POST /api/chat, /api/generate   (stream, the default: NDJSON lines, application/x-ndjson)
//   GET  /api/tags, /api/version, /api/ps;  POST /api/show;  GET / ("Ollama is running")
// Errors on /api/* (the server's own too: 401, 404, 405, 413, 429, 503) are {"error":"text"}:
// the server's error handler calls ollama_error_shape.
//
// Thread-safety: add_ollama_routes is called once while routes are set up; the handlers it
// registers run on any HTTP thread (the model facts they share are read once, under a mutex).
#pragma once
#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "openai.h"
#include "scheduler.h"

namespace picolm {

struct OllamaHttpHooks {
  // Registers a handler for method ("GET" | "POST") and path behind the server's edge
  // (authentication, metrics under `endpoint`, no exception escapes, 405 for other methods).
  std::function<void(const char* method, const char* path, const char* endpoint, httplib::Server::Handler)> route;
  // The server's admission (null: it answered 503, draining), its engine once loaded (null: it
  // answered 503), the engine without answering, and Engine::prepare + submit (null: it answered
  // the 400 / 429; map_error renames fields in a 400).
  std::function<std::shared_ptr<void>(httplib::Response&)> admit;
  std::function<std::shared_ptr<Engine>(httplib::Response&)> ready_engine;
  std::function<std::shared_ptr<Engine>()> engine;
  std::function<std::shared_ptr<Job>(const std::shared_ptr<Engine>&, const ChatRequest&, std::string endpoint,
                                     httplib::Response&, void (*map_error)(ApiError&))>
      start_job;
  // True once the client of this request has gone away (the server's ConnectionWatch).
  std::function<std::function<bool()>(const httplib::Request&)> watch;
  std::string model_id;
  std::string model_path;
};

void add_ollama_routes(OllamaHttpHooks hooks);

// For the server's error handler: on an /api/ path, the error body becomes {"error":"text"}.
void ollama_error_shape(const httplib::Request& req, httplib::Response& res);

}  // namespace picolm
