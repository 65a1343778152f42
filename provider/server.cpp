#include "server.h"

#include <dirent.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "json_writer.h"
#include "connection_pool.h"
#include "constant_time.h"
#include "metrics.h"
#include "ollama_http.h"
#include "openai.h"
#include "responses.h"

namespace picolm {

namespace {

// After a request body at least this large (a large schema or tool list), the free pages its
// parse and compile left in the allocator are given back to the system.
constexpr size_t kTrimAfterBodyBytes = size_t(64) << 10;

void release_free_heap() {
#if defined(__GLIBC__)
  ::malloc_trim(0);  // also returns whole free pages inside the heaps, not only at their tops
#endif
}

double mib(uint64_t bytes) { return double(bytes) / double(1 << 20); }

// httplib 0.11 (Debian 12) cannot tell a handler whether its client is still connected
// (Request::is_connection_closed arrived in later versions), so we find the connection's socket by
// its address pair among our open descriptors and peek at it. The descriptor belongs to the httplib
// thread that is running our handler, so it stays open while we watch it.
class ConnectionWatch {
 public:
  explicit ConnectionWatch(const httplib::Request& req) { fd_ = find_socket(req); }

  // True once the peer has closed or reset the connection. A client that half-closes its sending
  // side after the request (rare for HTTP clients) reads as gone too.
  bool closed() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
      char c;
      ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n == 0;
    }
    return false;
  }

 private:
  static std::string numeric_host(const sockaddr_storage& ss, socklen_t len, int& port) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      return {};
    }
    port = std::atoi(serv);
    return host;
  }

  static int find_socket(const httplib::Request& req) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return -1;
    int found = -1;
    while (dirent* e = readdir(dir)) {
      char* end = nullptr;
      long fd = std::strtol(e->d_name, &end, 10);
      if (!end || *end != '\0' || fd < 0) continue;
      struct stat st;
      if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      sockaddr_storage peer{}, local{};
      socklen_t pl = sizeof peer, ll = sizeof local;
      if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
      if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
      int pport = -1, lport = -1;
      std::string phost = numeric_host(peer, pl, pport);
      numeric_host(local, ll, lport);
      if (pport == req.remote_port && lport == req.local_port && phost == req.remote_addr) {
        found = static_cast<int>(fd);
        break;
      }
    }
    closedir(dir);
    return found;
  }

  int fd_ = -1;
};

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_json(e)); }

ApiError server_error(std::string message, std::string code = "") {
  return ApiError{500, std::move(message), "server_error", "", std::move(code)};
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  Metrics metrics;
  httplib::Server http;
  std::thread listener, loader;
  std::string model_id;
  int64_t started_unix = std::time(nullptr);

  mutable std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Engine> engine;  // null until loaded
  bool load_done = false;
  std::string load_error;
  bool stopped = false;
  bool draining = false;  // begin_drain(): new generations and /health answer 503
  int in_flight = 0;      // generations admitted and not yet answered (see admit())
  std::condition_variable drained_cv;
  std::atomic<bool> listener_done{false};

  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};
  // Stored Responses API responses (previous_response_id, item_reference, GET/DELETE by id): the
  // last kStoredResponses, at most kStoredResponseBytes.
  static constexpr size_t kStoredResponses = 512, kStoredResponseBytes = size_t(64) << 20;
  ResponseStore responses{kStoredResponses, kStoredResponseBytes};

  std::map<std::string, std::string> allowed_methods;  // route path -> its Allow header (405s)
  int listen_fd = -1;                                  // set while binding (socket options hook)

  explicit Impl(ServerOptions o) : opts(std::move(o)) {}

  std::shared_ptr<Engine> get_engine() const {
    std::lock_guard<std::mutex> lock(mu);
    return engine;
  }
  std::string new_completion_id() { return new_id("chatcmpl-"); }
  std::string new_id(std::string_view prefix) {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::lock_guard<std::mutex> lock(rng_mu);
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
    return id;
  }

  // Admits a generation unless draining: the count stays up until the returned token is released,
  // which the response (a streamed one's content provider included) does when it is written. While
  // draining, answers 503 and returns null: nothing started, so a proxy's `retry-on 503` sends the
  // request to another replica.
  std::shared_ptr<void> admit(httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!draining && !stopped) {
        ++in_flight;
        return std::shared_ptr<void>(static_cast<void*>(this), [this](void*) {
          std::lock_guard<std::mutex> l(mu);
          if (--in_flight == 0) drained_cv.notify_all();
        });
      }
    }
    res.set_header("Retry-After", "1");
    send_error(res, ApiError{503, "the server is shutting down (draining)", "server_error", "", "draining"});
    return nullptr;
  }

  void setup_routes();
  void load_model();
  void handle_generation(const httplib::Request& req, httplib::Response& res, bool tool_call_api);
  void handle_responses(const httplib::Request& req, httplib::Response& res);
  void handle_stored_response(const httplib::Request& req, httplib::Response& res, bool erase);
  // The request path every generation endpoint shares: Engine::prepare and submit. Answers the
  // error (400, 429, 503) itself and returns null.
  // map_error: renames fields in a 400 (the Responses API's names).
  std::shared_ptr<Job> start_job(const std::shared_ptr<Engine>& eng, const ChatRequest& r, std::string endpoint,
                                 httplib::Response& res, void (*map_error)(ApiError&) = nullptr);
  void add_cors_headers(const httplib::Request& req, httplib::Response& res) const;
  // Returns the engine, or answers 503 and returns null.
  std::shared_ptr<Engine> ready_engine(httplib::Response& res);
};

std::shared_ptr<Engine> Server::Impl::ready_engine(httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu);
  if (engine) return engine;
  ApiError e{503, load_error.empty() ? "the model is still loading" : "the model failed to load: " + load_error,
             "server_error", "", "model_not_ready"};
  res.set_header("Retry-After", "1");
  send_error(res, e);
  return nullptr;
}

void Server::Impl::load_model() {
  auto t0 = std::chrono::steady_clock::now();
  auto created = Engine::create(opts.engine, metrics);
  std::shared_ptr<Engine> eng;
  std::string error;
  if (created.ok()) {
    eng = std::shared_ptr<Engine>(std::move(created.value()));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("loaded {} ({}) in {:.0f} ms: ctx {}, chat template {}", opts.engine.model_path, eng->description(),
                 ms, eng->n_ctx(), family_name(eng->family()));
    const EngineMemoryBudget b = eng->memory_budget();
    spdlog::info("memory budget: {:.0f} MiB + 3 x the request bodies in flight (each <= {:.0f} MiB): model {:.0f} + "
                 "slots {:.0f} + prompt cache RAM {:.0f} + grammar cache {:.0f} + {} grammar compile(s) x {:.0f} + "
                 "other {:.0f} (docs/RELIABILITY.md)",
                 mib(b.total()), mib(opts.max_body_bytes), mib(b.model), mib(b.slots), mib(b.prompt_cache_ram),
                 mib(b.grammar_cache), b.parallel_compiles, mib(b.compile_scratch), mib(b.other));
    if (!opts.warm_file.empty()) {
      // A directory opens as an ifstream on Linux and its first read throws
      // std::ios_base::failure, which nothing here may let escape (issue 15 item 6): only regular
      // files are read.
      struct stat st_warm {};
      const bool regular = ::stat(opts.warm_file.c_str(), &st_warm) == 0 && S_ISREG(st_warm.st_mode);
      std::ifstream in;
      if (regular) in.open(opts.warm_file, std::ios::binary);
      std::string body;
      try {
        if (in) body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      } catch (const std::ios_base::failure&) {  // a read error (EIO) throws the same way
        in.setstate(std::ios::badbit);
      }
      ChatRequest req;
      ApiError err;
      if (!regular) {
        spdlog::warn("--warm: {} is not a regular file; nothing prefilled", opts.warm_file);
      } else if (!in) {
        spdlog::warn("--warm: cannot read {}", opts.warm_file);
      } else if (!parse_chat_request(body, req, err)) {
        spdlog::warn("--warm: {}: {}", opts.warm_file, err.message);
      } else {
        Status st = eng->warm(req);
        if (st.ok()) spdlog::info("--warm: prefilled the prompt of {}", opts.warm_file);
        else spdlog::warn("--warm: {}", st.error());
      }
    }
  } else {
    error = created.error();
    spdlog::error("cannot load the model: {}", error);
  }
  bool discard = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopped) engine = eng;
    else discard = eng != nullptr;
    load_done = true;
    load_error = error;
  }
  cv.notify_all();
  if (discard) eng->shutdown();
}

void Server::Impl::handle_generation(const httplib::Request& req, httplib::Response& res, bool tool_call_api) {
  std::shared_ptr<void> flight = admit(res);
  if (!flight) return;
  ChatRequest r;
  ApiError err;
  bool parsed = tool_call_api ? parse_tool_call_request(req.body, r, err) : parse_chat_request(req.body, r, err);
  if (!parsed) return send_error(res, err);
  if (tool_call_api) r.stream = false;
  std::shared_ptr<Engine> eng = ready_engine(res);
  if (!eng) return;
  std::shared_ptr<Job> job = start_job(eng, r, tool_call_api ? "tool_call" : (r.stream ? "chat stream" : "chat"), res);
  if (!job) return;
  ResponseIds ids{new_completion_id(), static_cast<int64_t>(std::time(nullptr)), eng->model_id(), r.legacy_functions};
  // Old turns left out to fit the context (--context-overflow drop-oldest): known before the reply,
  // so streams get it too.
  if (job->dropped_messages > 0) res.set_header("X-Picolm-Dropped-Messages", std::to_string(job->dropped_messages));
  auto watch = std::make_shared<ConnectionWatch>(req);

  if (r.stream) {
    struct StreamState {
      bool sent_role = false;
      bool finished = false;
      std::vector<TokenLogprob> logprobs;  // recorded, not yet attached to a chunk
      std::vector<Delta> first;  // what arrived before the headers went out
      size_t calls_streamed = 0;  // tool calls announced while written (their arguments streamed too)
    };
    auto state = std::make_shared<StreamState>();
    // The headers leave with the first piece of the reply, not at admission: until then the client
    // has nothing, so a proxy in front can still retry the request on another replica if this one
    // dies or restarts while the job waits in the queue (examples/cluster).
    while (!job->wait(std::chrono::milliseconds(100), state->first) && state->first.empty()) {
      if (watch->closed()) { job->cancel(); break; }
    }
    const bool include_usage = r.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, ids, include_usage, state, watch, eng, flight](size_t, httplib::DataSink& sink) -> bool {
          try {
            auto write_event = [&](const std::string& data) {
              std::string line = "data: " + data + "\n\n";
              return sink.write(line.data(), line.size());
            };
            if (state->finished) return false;
            if (!state->sent_role) {
              state->sent_role = true;
              if (!write_event(chunk_role_json(ids))) { job->cancel(); return false; }
            }
            std::vector<Delta> deltas = std::move(state->first);
            state->first.clear();
            bool done = job->wait(std::chrono::milliseconds(deltas.empty() ? 100 : 0), deltas);
            const bool logprobs = job->logprobs_top >= 0;
            if (logprobs) {
              std::vector<TokenLogprob> more = job->take_logprobs();
              state->logprobs.insert(state->logprobs.end(), more.begin(), more.end());
            }
            for (const auto& d : deltas) {
              if (d.call >= 0) {
                const size_t index = static_cast<size_t>(d.call);
                if (!d.call_id.empty()) state->calls_streamed = std::max(state->calls_streamed, index + 1);
                const std::string event = d.call_id.empty() ? chunk_tool_call_arguments_json(ids, index, d.text)
                                                            : chunk_tool_call_start_json(ids, index, d.call_id, d.call_name);
                if (!write_event(event)) { job->cancel(); return false; }
                continue;
              }
              // logprobs ride on content chunks: those recorded so far go with the next one.
              const bool attach = logprobs && !d.reasoning;
              const std::string event = d.reasoning ? chunk_reasoning_json(ids, d.text)
                                                    : chunk_content_json(ids, d.text, attach ? &state->logprobs : nullptr);
              if (attach) state->logprobs.clear();
              if (!write_event(event)) { job->cancel(); return false; }
            }
            if (!done) {
              if (watch->closed()) { job->cancel(); return false; }
              return true;
            }
            state->finished = true;
            if (job->failed()) {
              write_event(error_json(server_error(job->error())));
            } else {
              const Completion& c = job->result();
              // Calls streamed while written are complete already; the others arrive whole.
              for (size_t i = state->calls_streamed; i < c.tool_calls.size(); ++i) {
                if (!write_event(chunk_tool_call_json(ids, i, c.tool_calls[i]))) return false;
              }
              // Entries no content chunk carried (a reply of tool calls, the last tokens) go with the finish.
              std::vector<TokenLogprob> rest = job->take_logprobs();
              state->logprobs.insert(state->logprobs.end(), rest.begin(), rest.end());
              const bool lp = job->logprobs_top >= 0 && !state->logprobs.empty();
              if (!write_event(chunk_finish_json(ids, c.finish_reason, lp ? &state->logprobs : nullptr))) return false;
              if (include_usage && !write_event(chunk_usage_json(ids, c))) return false;
            }
            write_event("[DONE]");
            sink.done();
            return true;
          } catch (const std::exception& e) {
            spdlog::error("stream: {}", e.what());
            job->cancel();
            return false;
          }
        });
    return;
  }

  job->wait_unstreamed([&] { return watch->closed(); });
  if (job->failed()) return send_error(res, server_error(job->error()));
  if (tool_call_api) send_json(res, 200, tool_call_response_json(job->result()));
  else send_json(res, 200, chat_completion_json(ids, job->result()));
}

std::shared_ptr<Job> Server::Impl::start_job(const std::shared_ptr<Engine>& eng, const ChatRequest& r,
                                             std::string endpoint, httplib::Response& res,
                                             void (*map_error)(ApiError&)) {
  ApiError err;
  std::shared_ptr<Job> job = eng->prepare(r, err);
  if (!job) {
    if (map_error) map_error(err);
    send_error(res, err);
    return nullptr;
  }
  job->endpoint = std::move(endpoint);
  if (!eng->submit(job)) {
    metrics.count_rejected();
    res.set_header("Retry-After", "2");
    send_error(res, ApiError{429, "the server is busy: the request queue is full", "rate_limit_error", "", "queue_full"});
    return nullptr;
  }
  return job;
}

// POST /v1/responses (responses.h): the same ChatRequest and job as chat completions, answered as
// a response object or its typed events; stored for previous_response_id unless store is false.
void Server::Impl::handle_responses(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<void> flight = admit(res);
  if (!flight) return;
  auto rr = std::make_shared<ResponsesRequest>();
  ApiError err;
  if (!parse_responses_request(req.body, &responses, *rr, err)) return send_error(res, err);
  std::shared_ptr<Engine> eng = ready_engine(res);
  if (!eng) return;
  std::shared_ptr<Job> job =
      start_job(eng, rr->chat, rr->chat.stream ? "responses stream" : "responses", res, responses_error_names);
  if (!job) return;
  ResponseHead head{new_id("resp_"), static_cast<int64_t>(std::time(nullptr)), eng->model_id()};
  ItemIdFn new_item_id = [this](std::string_view prefix) { return new_id(prefix); };
  auto watch = std::make_shared<ConnectionWatch>(req);
  auto keep = [this, rr, head](const Completion& c, std::vector<ResponseItem> output) {
    if (!rr->store) return;
    std::string object = response_json(head, *rr, &c, output);  // what GET /v1/responses/{id} answers
    std::vector<ResponseItem> conversation = rr->conversation;
    for (auto& it : output) conversation.push_back(std::move(it));
    responses.put(head.id, std::move(conversation), std::move(object));
  };

  if (rr->chat.stream) {
    struct StreamState {
      explicit StreamState(ResponsesStream s) : stream(std::move(s)) {}
      ResponsesStream stream;
      bool started = false;
      bool finished = false;
    };
    auto state = std::make_shared<StreamState>(ResponsesStream(head, *rr, new_item_id));
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [job, state, watch, eng, keep, flight](size_t, httplib::DataSink& sink) -> bool {
          try {
            auto write = [&](const std::string& events) { return events.empty() || sink.write(events.data(), events.size()); };
            if (state->finished) return false;
            if (!state->started) {
              state->started = true;
              if (!write(state->stream.start())) { job->cancel(); return false; }
            }
            std::vector<Delta> deltas;
            const bool done = job->wait(std::chrono::milliseconds(100), deltas);
            std::vector<TokenLogprob> logprobs;
            if (job->logprobs_top >= 0) logprobs = job->take_logprobs();
            for (const auto& d : deltas) {
              if (d.call >= 0) {
                const std::string events = d.call_id.empty()
                                               ? state->stream.call_arguments_delta(static_cast<size_t>(d.call), d.text)
                                               : state->stream.call_start(static_cast<size_t>(d.call), d.call_id, d.call_name);
                if (!write(events)) { job->cancel(); return false; }
                continue;
              }
              std::string events = d.reasoning ? state->stream.reasoning_delta(d.text)
                                               : state->stream.text_delta(d.text, logprobs.empty() ? nullptr : &logprobs);
              if (!d.reasoning) logprobs.clear();
              if (!write(events)) { job->cancel(); return false; }
            }
            if (!done) {
              if (watch->closed()) { job->cancel(); return false; }
              return true;
            }
            state->finished = true;
            if (job->failed()) {
              write(state->stream.fail(job->error()));
            } else {
              std::vector<ResponseItem> output;
              if (!write(state->stream.finish(job->result(), output))) return false;
              keep(job->result(), std::move(output));
            }
            sink.done();
            return true;
          } catch (const std::exception& e) {
            spdlog::error("responses stream: {}", e.what());
            job->cancel();
            return false;
          }
        });
    return;
  }

  job->wait_unstreamed([&] { return watch->closed(); });
  if (job->failed()) return send_error(res, server_error(job->error()));
  const Completion& c = job->result();
  std::vector<ResponseItem> output = response_output_items(c, new_item_id);
  send_json(res, 200, response_json(head, *rr, &c, output));
  keep(c, std::move(output));
}

// GET / DELETE /v1/responses/{id}: a response the store keeps (store true, recent, no restart since).
void Server::Impl::handle_stored_response(const httplib::Request& req, httplib::Response& res, bool erase) {
  const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
  if (!erase && req.has_param("stream") && req.get_param_value("stream") != "false") {
    return send_error(res, ApiError{400, "stream is not supported when retrieving a stored response",
                                    "invalid_request_error", "stream", ""});
  }
  std::optional<std::string> object = erase ? std::nullopt : responses.response(id);
  if (erase ? !responses.erase(id) : !object) {
    return send_error(res, ApiError{404,
                                    "Response with id '" + id + "' not found: this server keeps the last " +
                                        std::to_string(kStoredResponses) +
                                        " stored responses in memory, until it restarts",
                                    "invalid_request_error", "response_id", "response_not_found"});
  }
  if (object) return send_json(res, 200, *object);
  json::JsonWriter w;
  w.begin_object().key("id").value(id).key("object").value("response.deleted").key("deleted").value(true).end_object();
  send_json(res, 200, w.take());
}

// CORS (--cors): the allowed origin is echoed (or "*"), on every answer of the server.
void Server::Impl::add_cors_headers(const httplib::Request& req, httplib::Response& res) const {
  if (opts.cors_origins.empty()) return;
  const std::string origin = req.get_header_value("Origin");
  bool any = false, listed = false;
  for (const auto& o : opts.cors_origins) {
    any = any || o == "*";
    listed = listed || (!origin.empty() && o == origin);
  }
  if (any) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else {
    // The answer depends on Origin: caches must keep one copy per origin.
    res.set_header("Vary", "Origin");
    if (listed) res.set_header("Access-Control-Allow-Origin", origin);
  }
}

void Server::Impl::setup_routes() {
  // Every handler goes through this edge: authentication, metrics, and no exception escapes.
  auto edge = [this](std::string endpoint, bool needs_auth, auto fn) {
    return [this, endpoint, needs_auth, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        res.set_header("X-Picolm-Instance", opts.instance_id);
        if (needs_auth && !opts.api_key.empty()) {
          const std::string auth = req.get_header_value("Authorization");
          // Constant time: how long a wrong key takes must not tell how much of it was right.
          if (!constant_time_equal(auth, "Bearer " + opts.api_key)) {
            send_error(res, ApiError{401, "invalid or missing API key (Authorization: Bearer ...)",
                                     "invalid_request_error", "", "invalid_api_key"});
            metrics.count_request(endpoint, res.status);
            return;
          }
        }
        fn(req, res);
        // A streamed answer (chunked provider) and /metrics leave the status unset (-1) when the
        // handler returns; httplib sends them as 200 (issue 15 item 9).
        if (res.status == -1) res.status = 200;
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, server_error(std::string("internal error: ") + e.what()));
      } catch (...) {
        send_error(res, server_error("internal error"));
      }
      metrics.count_request(endpoint, res.status);
      // A large body (a big schema or tool list) leaves its parse and compile scratch free in the
      // allocator's arenas: give those pages back now, so what stays resident is the budgets.
      if (req.body.size() >= kTrimAfterBodyBytes) release_free_heap();
    };
  };

  // Routes are registered through these two so that another method on a known path gets 405 with
  // an Allow header instead of httplib's 404 (issue 15 item 10).
  auto post = [this](const char* path, httplib::Server::Handler h) {
    http.Post(path, std::move(h));
    std::string& allow = allowed_methods[path];
    allow += allow.empty() ? "POST" : ", POST";
  };
  auto get = [this](const char* path, httplib::Server::Handler h) {
    http.Get(path, std::move(h));  // httplib answers HEAD from the GET handler
    std::string& allow = allowed_methods[path];
    allow += allow.empty() ? "GET, HEAD" : ", GET, HEAD";
  };

  auto chat = edge("chat_completions", true,
                   [this](const httplib::Request& q, httplib::Response& s) { handle_generation(q, s, false); });
  post("/v1/chat/completions", chat);
  post("/chat/completions", chat);
  auto tool_call = edge("tool_call", true,
                        [this](const httplib::Request& q, httplib::Response& s) { handle_generation(q, s, true); });
  post("/tool_call", tool_call);
  post("/v1/tool_call", tool_call);

  auto models = edge("models", true, [this](const httplib::Request&, httplib::Response& res) {
    auto eng = get_engine();
    send_json(res, 200, models_json(model_id, started_unix, eng ? eng->n_ctx() : 0));
  });
  get("/v1/models", models);
  get("/models", models);

  // ---- issue 21: the Responses API, one model by id, CORS ----
  auto responses_route = edge("responses", true,
                              [this](const httplib::Request& q, httplib::Response& s) { handle_responses(q, s); });
  post("/v1/responses", responses_route);
  post("/responses", responses_route);
  // Issue 30: responses.retrieve and responses.delete for stored responses.
  auto stored_get = edge("responses_get", true, [this](const httplib::Request& q, httplib::Response& s) {
    handle_stored_response(q, s, false);
  });
  auto stored_delete = edge("responses_delete", true, [this](const httplib::Request& q, httplib::Response& s) {
    handle_stored_response(q, s, true);
  });
  for (const char* path : {R"(/v1/responses/([^/]+))", R"(/responses/([^/]+))"}) {
    http.Get(path, stored_get);
    http.Delete(path, stored_delete);
  }
  auto model = edge("models", true, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
    const std::vector<std::string> ids = served_model_ids(model_id);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      return send_error(res, ApiError{404, "The model '" + id + "' does not exist; this server serves '" + model_id + "'",
                                      "invalid_request_error", "model", "model_not_found"});
    }
    auto eng = get_engine();
    send_json(res, 200, model_json(id, started_unix, eng ? eng->n_ctx() : 0));
  });
  http.Get(R"(/v1/models/(.+))", model);
  http.Get(R"(/models/(.+))", model);
  if (!opts.cors_origins.empty()) {
    // Preflight: answered for every path without authentication (browsers send no credentials
    // with it); the headers a client may send are those it asks for.
    http.Options(R"(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
      res.set_header("Access-Control-Max-Age", "86400");
      metrics.count_request("cors_preflight", res.status);
    });
    // Every answer (errors, 404s and streams included) passes here before its headers are written.
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      add_cors_headers(req, res);
    });
  }

  get("/health", edge("health", false, [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    std::string id_field = ",\"instance_id\":";
    json::append_json_string(id_field, opts.instance_id);
    // Draining first: a proxy must stop sending here even though the engine still runs.
    if (draining) send_json(res, 503, R"({"status":"draining")" + id_field + "}");
    else if (engine) send_json(res, 200, R"({"status":"ok")" + id_field + "}");
    else if (!load_done) send_json(res, 503, R"({"status":"loading")" + id_field + "}");
    else send_json(res, 503, R"({"status":"error","message":"the model failed to load")" + id_field + "}");
  }));
  get("/metrics", edge("metrics", true, [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  }));

  // ---- issue 30: Ollama's native API (ollama_http.h), on the same admission, edge and job path ----
  OllamaHttpHooks ollama;
  ollama.route = [edge, post, get](const char* method, const char* path, const char* endpoint,
                                   httplib::Server::Handler h) {
    httplib::Server::Handler wrapped = edge(endpoint, true, std::move(h));
    if (std::string_view(method) == "POST") post(path, std::move(wrapped));
    else get(path, std::move(wrapped));
  };
  ollama.admit = [this](httplib::Response& res) { return admit(res); };
  ollama.ready_engine = [this](httplib::Response& res) { return ready_engine(res); };
  ollama.engine = [this] { return get_engine(); };
  ollama.start_job = [this](const std::shared_ptr<Engine>& eng, const ChatRequest& r, std::string endpoint,
                            httplib::Response& res, void (*map_error)(ApiError&)) {
    return start_job(eng, r, std::move(endpoint), res, map_error);
  };
  ollama.watch = [](const httplib::Request& req) {
    auto watch = std::make_shared<ConnectionWatch>(req);
    return std::function<bool()>([watch] { return watch->closed(); });
  };
  ollama.model_id = model_id;
  ollama.model_path = opts.engine.model_path;
  add_ollama_routes(std::move(ollama));

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, server_error("internal error"));
  });
  // Errors httplib produces itself (unknown route, body too large, bad request line) get an
  // OpenAI-style body too (on /api/*: Ollama's {"error": text}, ollama_http.h).
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return ollama_error_shape(req, res);  // {"error":"text"} on /api/*
    ApiError e{res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""};
    auto allowed = allowed_methods.find(req.path);
    if (res.status == 404 && allowed != allowed_methods.end()) {
      res.status = 405;
      res.set_header("Allow", allowed->second);
      e = ApiError{405, req.method + " is not allowed on " + req.path + " (allowed: " + allowed->second + ")",
                   "invalid_request_error", "", "method_not_allowed"};
    } else if (res.status == 404) {
      e.message = "no such endpoint: " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = "the request body is larger than " + std::to_string(opts.max_body_bytes) + " bytes";
      e.code = "request_too_large";
      // cpp-httplib caps form-encoded bodies at 8 KB before any handler runs; `curl -d` sends that
      // content type unless told otherwise, so say what to do instead of blaming the size.
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
        e.message = "the body was sent as application/x-www-form-urlencoded, which is limited to 8192 bytes; "
                    "send JSON with the header 'Content-Type: application/json'";
      }
    }
    send_error(res, e);
    metrics.count_request("other", res.status);
    ollama_error_shape(req, res);
  });
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    // Generations that ran log their own line (tokens, timings) from the engine.
    bool generation = req.method == "POST" && res.status == 200;
    if (!generation) spdlog::info("{} {} -> {}", req.method, req.path, res.status);
  });
}

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Server::~Server() { stop(); }

Result<int> Server::start() {
  Impl& s = *impl_;
  s.model_id = s.opts.engine.model_id;
  if (s.model_id.empty()) {
    std::string path = s.opts.engine.model_path;
    size_t slash = path.find_last_of('/');
    s.model_id = slash == std::string::npos ? path : path.substr(slash + 1);
    if (s.model_id.size() > 5 && s.model_id.ends_with(".gguf")) s.model_id.resize(s.model_id.size() - 5);
    s.opts.engine.model_id = s.model_id;
  }
  s.setup_routes();
  s.http.set_payload_max_length(s.opts.max_body_bytes);
  // Every connection holds one thread from accept to close (cpp-httplib), so idle and slow clients
  // are bounded twice: by the timeouts (each read or write, and an idle keep-alive, gives up after
  // so long) and by the pool, which grows to max_connections threads of 1 MiB stack before a new
  // connection has to wait (docs/RELIABILITY.md; issue 15 item 1).
  ConnectionPoolOptions pool;
  pool.max_threads = std::max<size_t>(8, s.opts.max_connections);
#if defined(__SANITIZE_ADDRESS__)
  pool.stack_bytes = size_t(4) << 20;  // ASan's redzones make frames several times larger
#endif
  s.http.new_task_queue = [pool] { return new ConnectionPool(pool); };
  s.http.set_keep_alive_timeout(s.opts.keep_alive_timeout_sec);
  s.http.set_keep_alive_max_count(100);
  s.http.set_read_timeout(s.opts.read_timeout_sec);
  // A write blocks only while the client's receive window is full, i.e. it stopped reading; a slow
  // generation waits between writes, not in them.
  s.http.set_write_timeout(s.opts.write_timeout_sec);
  // httplib's default sets SO_REUSEPORT, which lets a second provider bind the same port and take a
  // share of the connections (issue 15 item 3). SO_REUSEADDR only allows a restart while old
  // connections are in TIME_WAIT; a port someone listens on stays refused.
  s.http.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    s.listen_fd = sock;  // the last call is the socket that gets bound
  });

  int port = s.opts.port;
  bool bound = false;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.opts.host);
    bound = port > 0;
  } else {
    bound = s.http.bind_to_port(s.opts.host, port);
  }
  if (!bound) {
    const int err = errno;
    std::string why = err == EADDRINUSE ? "the address is already in use (is another provider running on it?)"
                                        : std::strerror(err);
    return Error{"cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) + ": " + why};
  }
  // The library listens with a backlog of 5 (compiled in); a burst of connections beyond that got
  // SYN retries of a second or more. listen() again on a listening socket only resizes its backlog.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, std::max(16, s.opts.listen_backlog));
  if (s.opts.instance_id.empty()) {
    // A wildcard address is the same on every board; the host name tells replicas apart.
    std::string host = s.opts.host;
    char name[256] = {};
    if ((host == "0.0.0.0" || host == "::" || host.empty()) && ::gethostname(name, sizeof name - 1) == 0) host = name;
    s.opts.instance_id = host + ":" + std::to_string(port);
  }
  s.metrics.set_instance_id(s.opts.instance_id);
  s.listener = std::thread([&s] {
    s.http.listen_after_bind();
    s.listener_done = true;
  });
  // httplib's stop() does nothing until the listener thread has marked itself running, and the
  // listener then accepts forever: a stop() right after start() (a model that fails to load at
  // once) hung the process about once in 200 starts (issue 15 item 5). The flag is set first thing
  // in the listener thread, so this wait is short.
  while (!s.http.is_running() && !s.listener_done) std::this_thread::sleep_for(std::chrono::microseconds(200));
  s.loader = std::thread([&s] { s.load_model(); });
  return port;
}

Status Server::wait_loaded(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_for(lock, timeout, [&] { return s.load_done; })) return Error{"the model is still loading"};
  if (!s.engine) return Error{s.load_error.empty() ? "stopped" : s.load_error};
  return Ok{};
}

void Server::wait() {
  if (impl_->listener.joinable()) impl_->listener.join();
}

void Server::begin_drain() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->draining = true;
}

bool Server::wait_drained(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  return s.drained_cv.wait_for(lock, timeout, [&] { return s.in_flight == 0; });
}

int Server::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->in_flight;
}

const std::string& Server::instance_id() const { return impl_->opts.instance_id; }

void Server::stop() {
  Impl& s = *impl_;
  std::shared_ptr<Engine> eng;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopped) return;
    s.stopped = true;
    eng = s.engine;
  }
  if (eng) eng->shutdown();  // waiting handlers return promptly
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
  if (s.loader.joinable()) s.loader.join();
  std::lock_guard<std::mutex> lock(s.mu);
  s.engine.reset();
}

std::shared_ptr<Engine> Server::engine() const { return impl_->get_engine(); }

}  // namespace picolm
