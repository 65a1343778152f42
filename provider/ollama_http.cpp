#include "ollama_http.h"

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <vector>

#include "ollama.h"
#include "reasoning.h"

namespace picolm {

namespace {

int64_t unix_nanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json; charset=utf-8");
}

bool is_api_path(const std::string& path) { return path.rfind("/api/", 0) == 0 || path == "/api"; }

// State the handlers share: the hooks and the model facts, read from the file on first use.
struct OllamaApi {
  OllamaHttpHooks hooks;
  std::mutex mu;
  std::optional<OllamaModelFacts> facts;  // guarded by mu

  const OllamaModelFacts& model_facts() {
    std::lock_guard<std::mutex> lock(mu);
    if (!facts) facts = read_ollama_model_facts(hooks.model_path, hooks.model_id);
    return *facts;  // never reset once set
  }

  void generation(const httplib::Request& req, httplib::Response& res, bool generate);
};

void OllamaApi::generation(const httplib::Request& req, httplib::Response& res, bool generate) {
  const auto arrived = std::chrono::steady_clock::now();
  std::shared_ptr<void> flight = hooks.admit(res);
  if (!flight) return;
  auto r = std::make_shared<OllamaRequest>();
  ApiError err;
  const bool parsed = generate ? parse_ollama_generate_request(req.body, *r, err)
                               : parse_ollama_chat_request(req.body, *r, err);
  if (!parsed) return send_json(res, err.status, ollama_error_json(err.message));
  std::shared_ptr<Engine> eng = hooks.ready_engine(res);
  if (!eng) return;
  // Ollama answers with the name the client asked for; every name refers to the one model.
  auto reply = std::make_shared<OllamaReply>(r->model.empty() ? eng->model_id() : r->model, generate);
  if (r->load_only) return send_json(res, 200, reply->load_only(unix_nanos()));
  // As Ollama: asking a model that cannot think to think is a 400, not a silent no.
  const bool think_asked = r->chat.enable_thinking.value_or(false) ||
                           (r->chat.reasoning_effort && *r->chat.reasoning_effort != ReasoningEffort::None);
  if (think_asked && !reasoning_traits(eng->family()).supported) {
    return send_json(res, 400, ollama_error_json("'" + eng->model_id() + "' does not support thinking (its chat template, " +
                                                 std::string(family_name(eng->family())) +
                                                 ", has no thinking); send think: false or leave it out"));
  }
  if (r->num_ctx && *r->num_ctx > eng->n_ctx()) {
    spdlog::debug("ollama: options.num_ctx {} is capped at the server's context {}", *r->num_ctx, eng->n_ctx());
  }
  std::shared_ptr<Job> job = hooks.start_job(eng, r->chat, generate ? "ollama generate" : "ollama chat", res,
                                             ollama_error_names);
  if (!job) return;
  // Old turns left out to fit the context (--context-overflow drop-oldest), as on chat completions.
  if (job->dropped_messages > 0) res.set_header("X-Picolm-Dropped-Messages", std::to_string(job->dropped_messages));
  std::function<bool()> closed = hooks.watch(req);
  auto total_nanos = [arrived] {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrived).count());
  };

  if (r->chat.stream) {
    // As on chat completions, the headers leave with the first piece of the reply: until then a
    // proxy in front can still retry the request on another replica (examples/cluster).
    auto first = std::make_shared<std::vector<Delta>>();
    while (!job->wait(std::chrono::milliseconds(100), *first) && first->empty()) {
      if (closed()) { job->cancel(); break; }
    }
    auto finished = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "application/x-ndjson",
        [job, reply, first, finished, closed, total_nanos, eng, flight](size_t, httplib::DataSink& sink) -> bool {
          try {
            auto write = [&](const std::string& line) { return line.empty() || sink.write(line.data(), line.size()); };
            if (*finished) return false;
            std::vector<Delta> deltas = std::move(*first);
            first->clear();
            const bool done = job->wait(std::chrono::milliseconds(deltas.empty() ? 100 : 0), deltas);
            for (const Delta& d : deltas) {
              if (d.text.empty()) continue;
              if (!write(reply->delta_line(d.text, d.reasoning, unix_nanos()))) { job->cancel(); return false; }
            }
            if (!done) {
              if (closed()) { job->cancel(); return false; }
              return true;
            }
            *finished = true;
            if (job->failed()) {
              write(ollama_error_json(job->error()) + "\n");
            } else {
              const Completion& c = job->result();
              if (!write(reply->calls_line(c, unix_nanos()))) return false;
              if (!write(reply->final_line(c, unix_nanos(), total_nanos()))) return false;
            }
            sink.done();
            return true;
          } catch (const std::exception& e) {
            spdlog::error("ollama stream: {}", e.what());
            job->cancel();
            return false;
          }
        });
    return;
  }

  job->wait_unstreamed([&] { return closed(); });
  if (job->failed()) return send_json(res, 500, ollama_error_json(job->error()));
  send_json(res, 200, reply->whole(job->result(), unix_nanos(), total_nanos()));
}

}  // namespace

void add_ollama_routes(OllamaHttpHooks hooks) {
  auto api = std::make_shared<OllamaApi>();
  api->hooks = std::move(hooks);
  const auto& route = api->hooks.route;

  route("POST", "/api/chat", "ollama_chat",
        [api](const httplib::Request& q, httplib::Response& s) { api->generation(q, s, false); });
  route("POST", "/api/generate", "ollama_generate",
        [api](const httplib::Request& q, httplib::Response& s) { api->generation(q, s, true); });
  // Ollama answers its root with this text; clients (and people) check it to see a server is up.
  route("GET", "/", "ollama_root", [](const httplib::Request&, httplib::Response& s) {
    s.status = 200;
    s.set_content("Ollama is running", "text/plain; charset=utf-8");
  });
  route("GET", "/api/version", "ollama_version",
        [](const httplib::Request&, httplib::Response& s) { send_json(s, 200, ollama_version_json()); });
  route("GET", "/api/tags", "ollama_tags", [api](const httplib::Request&, httplib::Response& s) {
    send_json(s, 200, ollama_tags_json(api->model_facts()));
  });
  route("GET", "/api/ps", "ollama_ps", [api](const httplib::Request&, httplib::Response& s) {
    std::shared_ptr<Engine> eng = api->hooks.engine();
    send_json(s, 200, ollama_ps_json(eng ? &api->model_facts() : nullptr, eng ? eng->n_ctx() : 0));
  });
  route("POST", "/api/show", "ollama_show", [api](const httplib::Request& q, httplib::Response& s) {
    // {"model": ...} (or the older "name"); every name refers to the one model served.
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(q.body).get(root) || root.type() != simdjson::dom::element_type::OBJECT) {
      return send_json(s, 400, ollama_error_json("the request body must be a JSON object such as {\"model\":\"...\"}"));
    }
    std::shared_ptr<Engine> eng = api->hooks.ready_engine(s);
    if (!eng) return;
    // The provider constrains calls with its grammar on every model (the envelope where the
    // template has no call syntax), so every model takes tools.
    std::vector<std::string> capabilities = {"completion", "tools"};
    if (reasoning_traits(eng->family()).supported) capabilities.push_back("thinking");
    send_json(s, 200, ollama_show_json(api->model_facts(), capabilities, eng->n_ctx()));
  });
}

void ollama_error_shape(const httplib::Request& req, httplib::Response& res) {
  if (!is_api_path(req.path) || res.status < 400) return;
  if (res.status == 404 && res.body.find("\"not_found\"") != std::string::npos) {
    res.set_content(ollama_error_json("no such endpoint: " + req.method + " " + req.path +
                                      " (this server implements Ollama's /api/chat, /api/generate, /api/tags, "
                                      "/api/show, /api/version and /api/ps)"),
                    "application/json; charset=utf-8");
    return;
  }
  if (!res.body.empty()) res.set_content(ollama_error_from_openai(res.body), "application/json; charset=utf-8");
}

}  // namespace picolm
