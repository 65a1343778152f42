#include "ollama.h"

#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <utility>

#include "gguf.h"
#include "json_writer.h"
#include "openai_json.h"

namespace picolm {

namespace dom = simdjson::dom;
using json::JsonWriter;
using wire::fail;
using wire::get_string;
using wire::wrong_type;

// ---------------------------------------------------------------- request

namespace {

// The id of the call_index-th call of a conversation that names none: 9 alphanumeric characters
// (Mistral's template requires exactly that), the same on every turn, so the rendered history and
// its cached prefix do not change between requests.
std::string call_id_for(size_t call_index) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "call%05zu", call_index % 100000);
  return buf;
}

// Ollama's tool calls ({"function":{"name","arguments":{...}}}, arguments also as a JSON string)
// as chat-completions calls. Records (id, name) of each in `calls`.
bool write_tool_calls(JsonWriter& w, dom::element v, const std::string& p, size_t& call_counter,
                      std::vector<std::pair<std::string, std::string>>& calls, ApiError& err) {
  if (v.type() != dom::element_type::ARRAY) return wrong_type(err, p, "an array", v);
  w.key("tool_calls").begin_array();
  size_t j = 0;
  for (dom::element tc : dom::array(v)) {
    const std::string q = p + "[" + std::to_string(j++) + "]";
    if (tc.type() != dom::element_type::OBJECT) return wrong_type(err, q, "an object", tc);
    dom::element fn, x;
    if (tc["function"].get(fn)) return fail(err, q + ".function", "'" + q + ".function' is required");
    if (fn.type() != dom::element_type::OBJECT) return wrong_type(err, q + ".function", "an object", fn);
    std::string name, id;
    if (fn["name"].get(x)) return fail(err, q + ".function.name", "'" + q + ".function.name' is required");
    if (!get_string(x, q + ".function.name", name, err)) return false;
    if (!tc["id"].get(x) && !x.is_null() && !get_string(x, q + ".id", id, err)) return false;
    if (id.empty()) id = call_id_for(call_counter);
    ++call_counter;
    w.begin_object().key("id").value(id).key("type").value("function");
    w.key("function").begin_object().key("name").value(name).key("arguments");
    if (fn["arguments"].get(x) || x.is_null()) w.raw("{}");
    else if (x.type() == dom::element_type::OBJECT || x.type() == dom::element_type::STRING) w.raw(simdjson::minify(x));
    else return wrong_type(err, q + ".function.arguments", "an object", x);
    w.end_object().end_object();
    calls.emplace_back(std::move(id), std::move(name));
  }
  w.end_array();
  return true;
}

// Image input: the same words chat completions uses, so clients that fall back on them do.
bool refuse_images(dom::element obj, const std::string& p, ApiError& err) {
  dom::element v;
  if (!obj["images"].get(v) && !v.is_null() && !(v.type() == dom::element_type::ARRAY && dom::array(v).size() == 0)) {
    return fail(err, p.empty() ? "images" : p + ".images",
                "this model does not support image input ('" + (p.empty() ? std::string() : p + ".") + "images')");
  }
  return true;
}

// Ollama messages as chat-completions messages. A tool result names its call by tool_call_id, or
// by tool_name (the oldest unanswered call of that name), or by position (the oldest unanswered
// call): Home Assistant sends tool results with neither.
bool write_messages(JsonWriter& w, dom::element msgs, ApiError& err) {
  if (msgs.type() != dom::element_type::ARRAY) return wrong_type(err, "messages", "an array", msgs);
  std::vector<std::pair<std::string, std::string>> pending;  // (id, name) of unanswered calls
  size_t call_counter = 0, i = 0;
  w.key("messages").begin_array();
  for (dom::element m : dom::array(msgs)) {
    const std::string p = "messages[" + std::to_string(i++) + "]";
    if (m.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", m);
    if (!refuse_images(m, p, err)) return false;
    dom::element v;
    std::string role, content;
    if (m["role"].get(v)) return fail(err, p + ".role", "'" + p + ".role' is required");
    if (!get_string(v, p + ".role", role, err)) return false;
    if (!m["content"].get(v) && !v.is_null() && !get_string(v, p + ".content", content, err)) return false;
    w.begin_object().key("role").value(role).key("content").value(content);
    if (role == "assistant") {
      if (!m["thinking"].get(v) && !v.is_null()) {
        std::string thinking;
        if (!get_string(v, p + ".thinking", thinking, err)) return false;
        if (!thinking.empty()) w.key("reasoning_content").value(thinking);
      }
      if (!m["tool_calls"].get(v) && !v.is_null()) {
        pending.clear();
        if (!write_tool_calls(w, v, p + ".tool_calls", call_counter, pending, err)) return false;
      }
    } else if (role == "tool") {
      std::string id, name;
      if (!m["tool_call_id"].get(v) && !v.is_null() && !get_string(v, p + ".tool_call_id", id, err)) return false;
      if (!m["tool_name"].get(v) && !v.is_null() && !get_string(v, p + ".tool_name", name, err)) return false;
      if (name.empty() && !m["name"].get(v) && !v.is_null() && !get_string(v, p + ".name", name, err)) return false;
      auto match = pending.end();
      if (!id.empty()) {
        match = std::find_if(pending.begin(), pending.end(), [&](const auto& c) { return c.first == id; });
      } else {
        if (!name.empty()) {
          match = std::find_if(pending.begin(), pending.end(), [&](const auto& c) { return c.second == name; });
        }
        if (match == pending.end() && !pending.empty()) match = pending.begin();
      }
      if (match != pending.end()) {
        if (id.empty()) id = match->first;
        if (name.empty()) name = match->second;
        pending.erase(match);
      }
      if (id.empty()) id = call_id_for(call_counter++);  // a result of no call we know of
      w.key("tool_call_id").value(id);
      if (!name.empty()) w.key("name").value(name);
    }
    w.end_object();
  }
  w.end_array();
  return true;
}

// format: "json", a JSON Schema object, or ""/null (free text).
bool write_format(JsonWriter& w, dom::object obj, ApiError& err) {
  dom::element v;
  if (obj["format"].get(v) || v.is_null()) return true;
  if (v.type() == dom::element_type::STRING) {
    const std::string_view s = v;
    if (s.empty()) return true;
    if (s != "json") return fail(err, "format", "'format' must be \"json\" or a JSON Schema object, got \"" + std::string(s) + "\"");
    w.key("response_format").begin_object().key("type").value("json_object").end_object();
    return true;
  }
  if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "format", "\"json\" or a JSON Schema object", v);
  w.key("response_format").begin_object().key("type").value("json_schema");
  w.key("json_schema").begin_object().key("name").value("format").key("schema").raw(simdjson::minify(v));
  w.end_object().end_object();
  return true;
}

// think: true/false, or an effort ("low", "medium", "high").
bool write_think(JsonWriter& w, dom::object obj, ApiError& err) {
  dom::element v;
  if (obj["think"].get(v) || v.is_null()) return true;
  if (v.type() == dom::element_type::BOOL) {
    w.key("enable_thinking").value(bool(v));
    return true;
  }
  if (v.type() == dom::element_type::STRING) {
    const std::string_view s = v;
    if (s == "low" || s == "medium" || s == "high") {
      w.key("reasoning_effort").value(s);
      return true;
    }
  }
  return fail(err, "think", "'think' must be true, false, \"low\", \"medium\" or \"high\"");
}

// options: mapped onto the ChatRequest after parse_chat_request, so errors name options.x.
bool apply_options(dom::object obj, OllamaRequest& r, ApiError& err) {
  using wire::get_int;
  using wire::get_number;
  dom::element o;
  if (obj["options"].get(o) || o.is_null()) return true;
  if (o.type() != dom::element_type::OBJECT) return wrong_type(err, "options", "an object", o);
  ChatRequest& c = r.chat;
  dom::element v;
  if (!o["temperature"].get(v) && !get_number(v, "options.temperature", 0.0, 2.0, c.temperature, err)) return false;
  if (!o["top_p"].get(v) && !get_number(v, "options.top_p", 0.0, 1.0, c.top_p, err)) return false;
  if (!o["top_k"].get(v) && !get_int(v, "options.top_k", 0, 1 << 30, c.top_k, err)) return false;
  if (!o["min_p"].get(v) && !get_number(v, "options.min_p", 0.0, 1.0, c.min_p, err)) return false;
  if (!o["repeat_penalty"].get(v) && !get_number(v, "options.repeat_penalty", 0.0, 10.0, c.repeat_penalty, err)) return false;
  std::optional<double> pen;
  if (!o["presence_penalty"].get(v) && !get_number(v, "options.presence_penalty", -2.0, 2.0, pen, err)) return false;
  if (pen) c.presence_penalty = *pen;
  pen.reset();
  if (!o["frequency_penalty"].get(v) && !get_number(v, "options.frequency_penalty", -2.0, 2.0, pen, err)) return false;
  if (pen) c.frequency_penalty = *pen;
  std::optional<int64_t> n;
  if (!o["seed"].get(v) && !get_int(v, "options.seed", INT64_MIN, INT64_MAX, n, err)) return false;
  if (n && *n >= 0) c.seed = static_cast<uint64_t>(*n);  // Ollama: a negative seed is a random one
  n.reset();
  if (!o["num_predict"].get(v) && !get_int(v, "options.num_predict", -2, 1 << 30, n, err)) return false;
  if (n && *n == 0) return fail(err, "options.num_predict", "'options.num_predict' must be at least 1 (or -1: no limit)");
  c.max_tokens.reset();
  if (n && *n > 0) c.max_tokens = *n;  // -1 (no limit) and -2 (fill the context): the context bounds the reply
  n.reset();
  if (!o["num_ctx"].get(v) && !get_int(v, "options.num_ctx", 1, 1 << 30, n, err)) return false;
  r.num_ctx = n;
  if (!o["stop"].get(v) && !v.is_null()) {
    c.stop.clear();
    if (v.type() == dom::element_type::STRING) {
      c.stop.emplace_back(std::string_view(v));
    } else if (v.type() == dom::element_type::ARRAY) {
      for (dom::element s : dom::array(v)) {
        if (s.type() != dom::element_type::STRING) return wrong_type(err, "options.stop", "an array of strings", s);
        c.stop.emplace_back(std::string_view(s));
      }
    } else {
      return wrong_type(err, "options.stop", "an array of strings", v);
    }
    if (c.stop.size() > 16) return fail(err, "options.stop", "at most 16 stop sequences");
    for (const auto& s : c.stop)
      if (s.empty()) return fail(err, "options.stop", "stop sequences must not be empty");
  }
  // Samplers this engine does not have: refused unless set to their "off" value, so a client that
  // sends the defaults works and one that relies on them learns they are not applied.
  struct Off { const char* key; double off; };
  for (Off s : {Off{"mirostat", 0.0}, Off{"typical_p", 1.0}, Off{"tfs_z", 1.0}}) {
    std::optional<double> x;
    if (!o[s.key].get(v) && !get_number(v, std::string("options.") + s.key, -1e9, 1e9, x, err)) return false;
    if (x && *x != s.off) {
      return fail(err, std::string("options.") + s.key,
                  std::string("'options.") + s.key + "' is not supported by this server (only its default, " +
                      (s.off == 0.0 ? "0" : "1") + ")");
    }
  }
  // The rest (num_keep, repeat_last_n, num_thread, num_gpu, num_batch, use_mmap, ...) are hardware
  // or runtime settings the server fixes at start-up; like Ollama, unknown options are ignored.
  return true;
}

// The fields both endpoints share, after the messages: tools, format, think, stream.
bool write_common(JsonWriter& w, dom::object obj, OllamaRequest& r, ApiError& err) {
  dom::element v;
  if (!obj["model"].get(v) && !v.is_null()) {
    if (!get_string(v, "model", r.model, err)) return false;
    w.key("model").value(r.model);
  }
  if (!write_format(w, obj, err) || !write_think(w, obj, err)) return false;
  bool stream = true;  // Ollama streams unless told not to
  if (!obj["stream"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "stream", "a boolean", v);
    stream = bool(v);
  }
  w.key("stream").value(stream);
  if (!obj["keep_alive"].get(v) && !v.is_null() && v.type() != dom::element_type::STRING &&
      v.type() != dom::element_type::INT64 && v.type() != dom::element_type::UINT64 && v.type() != dom::element_type::DOUBLE) {
    return wrong_type(err, "keep_alive", "a duration (\"5m\", \"300s\") or a number of seconds", v);
  }
  return true;
}

bool finish(std::string_view translated, dom::object obj, OllamaRequest& r, ApiError& err) {
  if (!parse_chat_request(translated, r.chat, err)) {
    ollama_error_names(err);
    return false;
  }
  return apply_options(obj, r, err);
}

}  // namespace

void ollama_error_names(ApiError& err) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"response_format.json_schema.schema", "format"},
      {"response_format", "format"},
      {"max_completion_tokens", "options.num_predict"},
      {"reasoning_effort", "think"},
      {"chat_template_kwargs.enable_thinking", "think"},
      {"enable_thinking", "think"},
  };
  for (auto [from, to] : kNames) {
    for (std::string* s : {&err.param, &err.message}) {
      for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + std::string_view(to).size())) {
        s->replace(at, std::string_view(from).size(), to);
      }
    }
  }
}

bool parse_ollama_chat_request(std::string_view body, OllamaRequest& r, ApiError& err) {
  dom::parser parser;
  dom::element root;
  if (!wire::parse_json_body(body, parser, root, err)) return false;
  dom::object obj = root;
  dom::element v;
  JsonWriter w;
  w.begin_object();
  if (obj["messages"].get(v) || v.is_null() || (v.type() == dom::element_type::ARRAY && dom::array(v).size() == 0)) {
    r.load_only = true;
    w.key("messages").begin_array().begin_object().key("role").value("user").key("content").value("").end_object().end_array();
  } else if (!write_messages(w, v, err)) {
    return false;
  }
  if (!obj["tools"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::ARRAY) return wrong_type(err, "tools", "an array", v);
    w.key("tools").raw(simdjson::minify(v));
  }
  // Not Ollama's: chat completions' tool_choice, accepted as an extension (a client that must get
  // a call, and the tests, ask for "required").
  if (!obj["tool_choice"].get(v) && !v.is_null()) w.key("tool_choice").raw(simdjson::minify(v));
  if (!write_common(w, obj, r, err)) return false;
  w.end_object();
  return finish(w.str(), obj, r, err);
}

bool parse_ollama_generate_request(std::string_view body, OllamaRequest& r, ApiError& err) {
  dom::parser parser;
  dom::element root;
  if (!wire::parse_json_body(body, parser, root, err)) return false;
  dom::object obj = root;
  dom::element v;
  r.generate = true;
  if (!refuse_images(root, "", err)) return false;
  if (!obj["raw"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "raw", "a boolean", v);
    if (bool(v)) {
      return fail(err, "raw", "'raw' prompts are not supported: the prompt is always rendered with the model's chat "
                              "template (send raw: false, or use /api/chat)");
    }
  }
  for (const char* key : {"suffix", "template"}) {
    std::string s;
    if (!obj[key].get(v) && !v.is_null() && !get_string(v, key, s, err)) return false;
    if (!s.empty()) {
      return fail(err, key, std::string("'") + key + "' is not supported: " +
                                (std::string_view(key) == "suffix" ? "fill-in-the-middle is not available"
                                                                   : "the model's own chat template is used"));
    }
  }
  if (!obj["context"].get(v) && !v.is_null() && !(v.type() == dom::element_type::ARRAY && dom::array(v).size() == 0)) {
    return fail(err, "context", "'context' (the token context of an earlier /api/generate) is not supported; send the "
                                "conversation to /api/chat instead");
  }
  std::string system, prompt;
  if (!obj["system"].get(v) && !v.is_null() && !get_string(v, "system", system, err)) return false;
  if (!obj["prompt"].get(v) && !v.is_null() && !get_string(v, "prompt", prompt, err)) return false;
  r.load_only = prompt.empty();
  JsonWriter w;
  w.begin_object().key("messages").begin_array();
  if (!system.empty()) w.begin_object().key("role").value("system").key("content").value(system).end_object();
  w.begin_object().key("role").value("user").key("content").value(prompt).end_object();
  w.end_array();
  if (!write_common(w, obj, r, err)) return false;
  w.end_object();
  return finish(w.str(), obj, r, err);
}

// ---------------------------------------------------------------- answers

std::string ollama_error_json(std::string_view message) {
  JsonWriter w;
  w.begin_object().key("error").value(message).end_object();
  return w.take();
}

std::string ollama_error_from_openai(std::string_view body) {
  dom::parser parser;
  dom::element root, e, m;
  if (!parser.parse(body.data(), body.size(), true).get(root) && root.type() == dom::element_type::OBJECT &&
      !root["error"].get(e)) {
    if (e.type() == dom::element_type::STRING) return std::string(body);  // already Ollama's shape
    if (e.type() == dom::element_type::OBJECT && !e["message"].get(m) && m.type() == dom::element_type::STRING) {
      return ollama_error_json(std::string_view(m));
    }
  }
  return ollama_error_json(body);
}

std::string ollama_timestamp(int64_t unix_nanos) {
  const std::time_t secs = static_cast<std::time_t>(unix_nanos / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRId64 "Z", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_nanos % 1000000000);
  return buf;
}

namespace {

void write_calls(JsonWriter& w, const Completion& c) {
  w.key("tool_calls").begin_array();
  for (size_t i = 0; i < c.tool_calls.size(); ++i) {
    const GeneratedToolCall& call = c.tool_calls[i];
    w.begin_object().key("id").value(call.id);
    w.key("function").begin_object().key("index").value(static_cast<int64_t>(i)).key("name").value(call.name);
    w.key("arguments").raw(call.arguments_json.empty() ? std::string_view("{}") : std::string_view(call.arguments_json));
    w.end_object().end_object();
  }
  w.end_array();
}

void write_done(JsonWriter& w, const Completion& c, int64_t total_nanos) {
  // Ollama's reasons are stop, length and load; a reply of calls ends with "stop" there.
  w.key("done").value(true).key("done_reason").value(c.finish_reason == "length" ? "length" : "stop");
  w.key("total_duration").value(total_nanos);
  w.key("load_duration").value(static_cast<int64_t>(0));  // the model stays loaded
  w.key("prompt_eval_count").value(c.prompt_tokens);
  w.key("prompt_eval_duration").value(static_cast<int64_t>(c.timings.prompt_ms * 1e6));
  w.key("eval_count").value(c.completion_tokens);
  w.key("eval_duration").value(static_cast<int64_t>(c.timings.predicted_ms * 1e6));
}

}  // namespace

std::string OllamaReply::delta_line(std::string_view text, bool thinking, int64_t now_nanos) const {
  JsonWriter w;
  w.begin_object().key("model").value(model_).key("created_at").value(ollama_timestamp(now_nanos));
  if (generate_) {
    w.key("response").value(thinking ? std::string_view() : text);
    if (thinking) w.key("thinking").value(text);
  } else {
    w.key("message").begin_object().key("role").value("assistant").key("content").value(thinking ? std::string_view() : text);
    if (thinking) w.key("thinking").value(text);
    w.end_object();
  }
  w.key("done").value(false).end_object();
  return w.take() + "\n";
}

std::string OllamaReply::calls_line(const Completion& c, int64_t now_nanos) const {
  if (c.tool_calls.empty() || generate_) return {};
  JsonWriter w;
  w.begin_object().key("model").value(model_).key("created_at").value(ollama_timestamp(now_nanos));
  w.key("message").begin_object().key("role").value("assistant").key("content").value("");
  write_calls(w, c);
  w.end_object().key("done").value(false).end_object();
  return w.take() + "\n";
}

std::string OllamaReply::final_line(const Completion& c, int64_t now_nanos, int64_t total_nanos) const {
  JsonWriter w;
  w.begin_object().key("model").value(model_).key("created_at").value(ollama_timestamp(now_nanos));
  if (generate_) w.key("response").value("");
  else w.key("message").begin_object().key("role").value("assistant").key("content").value("").end_object();
  write_done(w, c, total_nanos);
  w.end_object();
  return w.take() + "\n";
}

std::string OllamaReply::whole(const Completion& c, int64_t now_nanos, int64_t total_nanos) const {
  JsonWriter w;
  w.begin_object().key("model").value(model_).key("created_at").value(ollama_timestamp(now_nanos));
  const std::string content = c.content.value_or("");
  if (generate_) {
    w.key("response").value(content);
    if (c.reasoning_content) w.key("thinking").value(*c.reasoning_content);
  } else {
    w.key("message").begin_object().key("role").value("assistant").key("content").value(content);
    if (c.reasoning_content) w.key("thinking").value(*c.reasoning_content);
    if (!c.tool_calls.empty()) write_calls(w, c);
    w.end_object();
  }
  write_done(w, c, total_nanos);
  w.end_object();
  return w.take();
}

std::string OllamaReply::load_only(int64_t now_nanos) const {
  JsonWriter w;
  w.begin_object().key("model").value(model_).key("created_at").value(ollama_timestamp(now_nanos));
  if (generate_) w.key("response").value("");
  else w.key("message").begin_object().key("role").value("assistant").key("content").value("").end_object();
  w.key("done").value(true).key("done_reason").value("load").end_object();
  return w.take();
}

// ---------------------------------------------------------------- model facts

namespace {

std::string human_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.1fB", static_cast<double>(n) / 1e9);
  else if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
  else if (n >= 1000) std::snprintf(buf, sizeof buf, "%.0fK", static_cast<double>(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%" PRId64, n);
  return buf;
}

// 64 hex digits from four FNV-1a passes with different seeds over `bytes` and the size.
std::string fingerprint_hex(std::span<const uint8_t> bytes, uint64_t size) {
  std::string out;
  for (uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull, 0xd6e8feb86659fd93ull}) {
    uint64_t h = seed ^ size;
    for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
    out += buf;
  }
  return out;
}

void write_gguf_value(JsonWriter& w, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::STRING: w.value(v.s); break;
    case GgufValueType::BOOL: w.value(v.i != 0); break;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: w.value(v.f); break;
    case GgufValueType::UINT64: w.value(v.u); break;
    case GgufValueType::ARRAY: w.null(); break;  // token lists are large; Ollama shows them as null too
    default: w.value(v.i); break;
  }
}

}  // namespace

OllamaModelFacts read_ollama_model_facts(const std::string& model_path, const std::string& model_id) {
  OllamaModelFacts m;
  m.name = model_id;
  struct stat st {};
  if (::stat(model_path.c_str(), &st) == 0) {
    m.size = static_cast<int64_t>(st.st_size);
    m.modified_at = ollama_timestamp(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  }
  auto file = GgufFile::open(model_path);
  if (!file.ok()) return m;
  const GgufFile& g = *file.value();
  m.family = std::string(g.get_string("general.architecture").value_or(""));
  m.chat_template = std::string(g.get_string("tokenizer.chat_template").value_or(""));
  std::map<std::string, uint64_t> bytes_by_type;
  for (const GgufTensor& t : g.tensors()) {
    m.parameter_count += static_cast<int64_t>(t.n_elements());
    const GgmlTypeTraits* traits = ggml_type_traits(t.type);
    if (t.ne.size() >= 2 && traits) bytes_by_type[traits->name] += t.n_bytes;  // matrices, not norms
  }
  // general.file_type names the mix as llama.cpp's quantizer did ("Q4_K_M"); without it, the type
  // of most matrix bytes.
  static const std::pair<int64_t, const char*> kFileTypes[] = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {32, "BF16"}};
  if (auto ft = g.get_int("general.file_type")) {
    for (auto [id, name] : kFileTypes)
      if (id == *ft) m.quantization_level = name;
  }
  uint64_t most = 0;
  for (const auto& [name, bytes] : bytes_by_type) {
    if (m.quantization_level.empty() && bytes > most) { most = bytes; m.quantization_level = name; }
  }
  m.parameter_size = human_count(m.parameter_count);
  const size_t header = static_cast<size_t>(std::min<uint64_t>(g.data_offset(), g.bytes().size()));
  m.digest = fingerprint_hex(g.bytes().subspan(0, header), g.bytes().size());
  JsonWriter w;
  w.begin_object();
  for (const auto& [key, value] : g.metadata()) {
    if (key == "tokenizer.chat_template") continue;  // shown as "template"
    w.key(key);
    write_gguf_value(w, value);
  }
  w.key("general.parameter_count").value(m.parameter_count);
  w.end_object();
  m.model_info_json = w.take();
  return m;
}

namespace {

void write_details(JsonWriter& w, const OllamaModelFacts& m) {
  w.key("details").begin_object();
  w.key("parent_model").value("").key("format").value("gguf").key("family").value(m.family);
  w.key("families").begin_array();
  if (!m.family.empty()) w.value(m.family);
  w.end_array();
  w.key("parameter_size").value(m.parameter_size).key("quantization_level").value(m.quantization_level);
  w.end_object();
}

void write_model_entry(JsonWriter& w, const OllamaModelFacts& m) {
  w.key("name").value(m.name).key("model").value(m.name);
  w.key("modified_at").value(m.modified_at).key("size").value(m.size).key("digest").value(m.digest);
  write_details(w, m);
}

}  // namespace

std::string ollama_version_json() {
  // The Ollama release whose API fields this server implements (think, tool_name, tool call index).
  return R"({"version":"0.12.0"})";
}

std::string ollama_tags_json(const OllamaModelFacts& m) {
  JsonWriter w;
  w.begin_object().key("models").begin_array().begin_object();
  write_model_entry(w, m);
  w.end_object().end_array().end_object();
  return w.take();
}

std::string ollama_show_json(const OllamaModelFacts& m, const std::vector<std::string>& capabilities, int64_t n_ctx) {
  JsonWriter w;
  w.begin_object();
  w.key("license").value("").key("modelfile").value("# served by picolm-provider\nFROM " + m.name + "\n");
  w.key("parameters").value("num_ctx " + std::to_string(n_ctx));
  w.key("template").value(m.chat_template);
  write_details(w, m);
  w.key("model_info").raw(m.model_info_json);
  w.key("capabilities").begin_array();
  for (const auto& c : capabilities) w.value(c);
  w.end_array();
  w.key("modified_at").value(m.modified_at);
  w.end_object();
  return w.take();
}

std::string ollama_ps_json(const OllamaModelFacts* loaded, int64_t n_ctx) {
  JsonWriter w;
  w.begin_object().key("models").begin_array();
  if (loaded) {
    w.begin_object();
    write_model_entry(w, *loaded);
    // The model stays loaded until the server stops: no expiry (a date far ahead, as Ollama shows keep_alive -1).
    w.key("expires_at").value("2318-01-01T00:00:00Z").key("size_vram").value(static_cast<int64_t>(0));
    w.key("context_length").value(n_ctx);
    w.end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace picolm
