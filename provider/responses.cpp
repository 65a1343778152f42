#include "responses.h"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <utility>

#include "json_writer.h"
#include "openai_json.h"

namespace picolm {

namespace dom = simdjson::dom;
using json::JsonWriter;
using wire::fail;
using wire::get_string;
using wire::wrong_type;

// ---------------------------------------------------------------- ResponseStore

namespace {
size_t item_bytes(const ResponseItem& it) {
  return sizeof(ResponseItem) + it.id.size() + it.role.size() + it.text.size() + it.call_id.size() + it.name.size() +
         it.arguments.size();
}
}  // namespace

ResponseStore::ResponseStore(size_t max_responses, size_t max_bytes)
    : max_responses_(max_responses), max_bytes_(max_bytes) {}

void ResponseStore::put(const std::string& response_id, std::vector<ResponseItem> conversation,
                        std::string response_json) {
  Entry e;
  for (const auto& it : conversation) e.bytes += item_bytes(it);
  e.bytes += response_json.size();
  e.items = std::move(conversation);
  e.response_json = std::move(response_json);
  std::lock_guard<std::mutex> lock(mu_);
  if (e.bytes > max_bytes_ || responses_.count(response_id)) return;  // too large to keep; ids are unique
  while (!order_.empty() && (order_.size() >= max_responses_ || bytes_ + e.bytes > max_bytes_)) {
    erase_locked(responses_.find(order_.front()));
  }
  for (size_t i = 0; i < e.items.size(); ++i) {
    if (!e.items[i].id.empty()) items_[e.items[i].id] = {response_id, i};
  }
  bytes_ += e.bytes;
  order_.push_back(response_id);
  responses_.emplace(response_id, std::move(e));
}

void ResponseStore::erase_locked(std::map<std::string, Entry>::iterator old) {
  for (const auto& it : old->second.items) {
    auto ref = items_.find(it.id);
    if (ref != items_.end() && ref->second.first == old->first) items_.erase(ref);
  }
  bytes_ -= old->second.bytes;
  order_.erase(std::find(order_.begin(), order_.end(), old->first));
  responses_.erase(old);
}

bool ResponseStore::erase(const std::string& response_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = responses_.find(response_id);
  if (it == responses_.end()) return false;
  erase_locked(it);
  return true;
}

std::optional<std::vector<ResponseItem>> ResponseStore::conversation(const std::string& response_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = responses_.find(response_id);
  if (it == responses_.end()) return std::nullopt;
  return it->second.items;
}

std::optional<std::string> ResponseStore::response(const std::string& response_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = responses_.find(response_id);
  if (it == responses_.end() || it->second.response_json.empty()) return std::nullopt;
  return it->second.response_json;
}

std::optional<ResponseItem> ResponseStore::item(const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto ref = items_.find(item_id);
  if (ref == items_.end()) return std::nullopt;
  return responses_.at(ref->second.first).items[ref->second.second];
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return responses_.size();
}

// ---------------------------------------------------------------- request

namespace {

// Text of a content value: a string, or parts with text (input_text, output_text, text,
// summary_text, reasoning_text; refusal). Images, files and audio are not supported.
bool get_text_content(dom::element e, const std::string& param, std::string& out, ApiError& err) {
  out.clear();
  if (e.is_null()) return true;
  if (e.type() == dom::element_type::STRING) { out = std::string(std::string_view(e)); return true; }
  if (e.type() != dom::element_type::ARRAY) return wrong_type(err, param, "a string or an array of content parts", e);
  size_t i = 0;
  for (dom::element part : dom::array(e)) {
    const std::string p = param + "[" + std::to_string(i++) + "]";
    if (part.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", part);
    dom::element t;
    std::string type;
    if (part["type"].get(t)) return fail(err, p + ".type", "'" + p + ".type' is required");
    if (!get_string(t, p + ".type", type, err)) return false;
    const char* field = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "summary_text" &&
        type != "reasoning_text" && type != "refusal") {
      return wire::unsupported_content_part(err, p + ".type", type, "text only");
    }
    std::string text;
    if (part[field].get(t)) return fail(err, p + "." + field, "'" + p + "." + field + "' is required");
    if (!get_string(t, p + "." + field, text, err)) return false;
    out += text;
  }
  return true;
}

bool required_string(dom::element obj, const char* key, const std::string& p, std::string& out, ApiError& err) {
  dom::element v;
  if (obj[key].get(v)) return fail(err, p + "." + key, "'" + p + "." + key + "' is required");
  return get_string(v, p + "." + key, out, err);
}

bool parse_item(dom::element it, const std::string& p, const ResponseStore* store, std::vector<ResponseItem>& out,
                ApiError& err) {
  if (it.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", it);
  dom::element v;
  std::string type;
  if (!it["type"].get(v) && !v.is_null() && !get_string(v, p + ".type", type, err)) return false;
  if (type.empty() && !it["role"].get(v)) type = "message";  // EasyInputMessage: {role, content}
  ResponseItem item;
  if (!it["id"].get(v) && v.type() == dom::element_type::STRING) item.id = std::string(std::string_view(v));
  if (type == "message") {
    item.kind = ResponseItem::Kind::Message;
    if (!required_string(it, "role", p, item.role, err)) return false;
    if (item.role != "user" && item.role != "system" && item.role != "developer" && item.role != "assistant") {
      return fail(err, p + ".role", "unknown role '" + item.role + "'");
    }
    if (!it["content"].get(v) && !get_text_content(v, p + ".content", item.text, err)) return false;
  } else if (type == "function_call") {
    item.kind = ResponseItem::Kind::FunctionCall;
    if (!required_string(it, "call_id", p, item.call_id, err) || !required_string(it, "name", p, item.name, err)) {
      return false;
    }
    item.arguments = "{}";
    if (!it["arguments"].get(v) && !v.is_null() && !get_string(v, p + ".arguments", item.arguments, err)) return false;
  } else if (type == "function_call_output") {
    item.kind = ResponseItem::Kind::FunctionCallOutput;
    if (!required_string(it, "call_id", p, item.call_id, err)) return false;
    if (it["output"].get(v)) return fail(err, p + ".output", "'" + p + ".output' is required");
    if (!get_text_content(v, p + ".output", item.text, err)) return false;
  } else if (type == "reasoning") {
    // The text a client sends back: its content (the reasoning itself), else its summary.
    item.kind = ResponseItem::Kind::Reasoning;
    if (!it["content"].get(v) && !v.is_null() && !get_text_content(v, p + ".content", item.text, err)) return false;
    if (item.text.empty() && !it["summary"].get(v) && !get_text_content(v, p + ".summary", item.text, err)) return false;
  } else if (type == "item_reference") {
    std::string id;
    if (!required_string(it, "id", p, id, err)) return false;
    std::optional<ResponseItem> found = store ? store->item(id) : std::nullopt;
    if (!found) {
      err.code = "item_not_found";
      return fail(err, p + ".id",
                  "item '" + id + "' is not known: this server keeps the items of recent stored responses in memory "
                  "only (gone after a restart or once evicted); send the item itself");
    }
    out.push_back(std::move(*found));
    return true;
  } else {
    return fail(err, p + ".type", "input item type '" + type + "' is not supported (message, function_call, "
                                  "function_call_output, reasoning, item_reference)");
  }
  out.push_back(std::move(item));
  return true;
}

// The chat-completions "messages" for instructions + items.
void write_messages(JsonWriter& w, const std::optional<std::string>& instructions, const std::vector<ResponseItem>& items) {
  std::map<std::string, std::string> call_names;
  for (const auto& it : items)
    if (it.kind == ResponseItem::Kind::FunctionCall) call_names[it.call_id] = it.name;

  // Consecutive assistant-side items (reasoning, text, calls) form one assistant message.
  struct Assistant {
    bool open = false;
    std::optional<std::string> content, reasoning;
    std::vector<const ResponseItem*> calls;
  } a;
  auto flush = [&] {
    if (!a.open) return;
    w.begin_object().key("role").value("assistant").key("content");
    if (a.content) w.value(*a.content); else w.null();
    if (a.reasoning) w.key("reasoning_content").value(*a.reasoning);
    if (!a.calls.empty()) {
      w.key("tool_calls").begin_array();
      for (const ResponseItem* c : a.calls) {
        w.begin_object().key("id").value(c->call_id).key("type").value("function");
        w.key("function").begin_object().key("name").value(c->name).key("arguments").value(c->arguments).end_object();
        w.end_object();
      }
      w.end_array();
    }
    w.end_object();
    a = Assistant{};
  };

  w.begin_array();
  if (instructions) w.begin_object().key("role").value("system").key("content").value(*instructions).end_object();
  for (const ResponseItem& it : items) {
    switch (it.kind) {
      case ResponseItem::Kind::Reasoning:
        if (a.open && (a.content || !a.calls.empty())) flush();
        a.open = true;
        a.reasoning = a.reasoning.value_or("") + it.text;
        break;
      case ResponseItem::Kind::FunctionCall:
        a.open = true;
        a.calls.push_back(&it);
        break;
      case ResponseItem::Kind::Message:
        if (it.role == "assistant") {
          if (a.open && (a.content || !a.calls.empty())) flush();
          a.open = true;
          a.content = it.text;
          break;
        }
        flush();
        w.begin_object().key("role").value(it.role).key("content").value(it.text).end_object();
        break;
      case ResponseItem::Kind::FunctionCallOutput: {
        flush();
        w.begin_object().key("role").value("tool").key("tool_call_id").value(it.call_id);
        auto name = call_names.find(it.call_id);
        if (name != call_names.end()) w.key("name").value(name->second);
        w.key("content").value(it.text).end_object();
        break;
      }
    }
  }
  flush();
  w.end_array();
}

// A flat Responses tool ({type, name, description, parameters, strict}) as a chat-completions tool.
bool write_tool(JsonWriter& w, dom::element t, const std::string& p, ApiError& err) {
  if (t.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", t);
  dom::element v;
  std::string type = "function";
  if (!t["type"].get(v) && !get_string(v, p + ".type", type, err)) return false;
  if (type != "function") {
    return fail(err, p + ".type", "tool type '" + type + "' is not supported (function tools only)");
  }
  if (!t["function"].get(v)) {  // the chat-completions shape, accepted too
    w.raw(simdjson::minify(t));
    return true;
  }
  w.begin_object().key("type").value("function").key("function").begin_object();
  for (const char* key : {"name", "description", "parameters", "strict"}) {
    if (!t[key].get(v)) w.key(key).raw(simdjson::minify(v));
  }
  w.end_object().end_object();
  return true;
}

}  // namespace

void responses_error_names(ApiError& err) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format.json_schema.schema", "text.format.schema"},
      {"response_format", "text.format"},
      {"messages", "input"},
      {".function.", "."},
  };
  for (auto [from, to] : kNames) {
    for (std::string* s : {&err.param, &err.message}) {
      for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + std::string_view(to).size())) {
        s->replace(at, std::string_view(from).size(), to);
      }
    }
  }
}

bool parse_responses_request(std::string_view body, const ResponseStore* store, ResponsesRequest& r, ApiError& err) {
  dom::parser parser;
  dom::element root;
  if (!wire::parse_json_body(body, parser, root, err)) return false;
  dom::object obj = root;
  dom::element v;

  for (const char* key : {"background", "conversation", "prompt"}) {
    if (!obj[key].get(v) && !v.is_null() && !(v.type() == dom::element_type::BOOL && !bool(v))) {
      return fail(err, key, std::string("'") + key + "' is not supported by this server");
    }
  }
  if (!obj["store"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "store", "a boolean", v);
    r.store = bool(v);
  }
  if (!obj["previous_response_id"].get(v) && !v.is_null()) {
    if (!get_string(v, "previous_response_id", r.previous_response_id, err)) return false;
    auto conv = store ? store->conversation(r.previous_response_id) : std::nullopt;
    if (!conv) {
      err.code = "previous_response_not_found";
      return fail(err, "previous_response_id",
                  "response '" + r.previous_response_id + "' is not known: this server keeps recent stored responses "
                  "in memory only (gone after a restart or once evicted; store: false keeps none); send the whole "
                  "conversation in 'input' instead");
    }
    r.conversation = std::move(*conv);
  }
  if (!obj["instructions"].get(v) && !v.is_null()) {
    std::string s;
    if (!get_string(v, "instructions", s, err)) return false;
    r.instructions = std::move(s);
  }
  bool have_input = false;
  if (!obj["input"].get(v) && !v.is_null()) {
    have_input = true;
    if (v.type() == dom::element_type::STRING) {
      ResponseItem it;
      it.role = "user";
      it.text = std::string(std::string_view(v));
      r.conversation.push_back(std::move(it));
    } else if (v.type() == dom::element_type::ARRAY) {
      size_t i = 0;
      for (dom::element it : dom::array(v)) {
        if (!parse_item(it, "input[" + std::to_string(i++) + "]", store, r.conversation, err)) return false;
      }
    } else {
      return wrong_type(err, "input", "a string or an array of items", v);
    }
  }
  if (!have_input && r.previous_response_id.empty()) return fail(err, "input", "'input' is required");
  if (r.conversation.empty()) return fail(err, "input", "'input' must not be empty");

  // ---- the equivalent chat-completions body ----
  JsonWriter w;
  w.begin_object();
  w.key("messages");
  write_messages(w, r.instructions, r.conversation);
  // Same meaning and name in both APIs (and the extensions chat completions accepts).
  for (const char* key : {"model", "temperature", "top_p", "seed", "parallel_tool_calls", "stream", "top_k", "min_p",
                          "repeat_penalty", "presence_penalty", "frequency_penalty", "chat_template_kwargs",
                          "enable_thinking", "thinking", "reasoning", "reasoning_effort"}) {
    if (!obj[key].get(v)) w.key(key).raw(simdjson::minify(v));
  }
  if (!obj["max_output_tokens"].get(v) && !v.is_null()) {
    w.key("max_completion_tokens").raw(simdjson::minify(v));
    if (v.type() == dom::element_type::INT64) r.max_output_tokens = int64_t(v);
  }
  bool logprobs = false;
  if (!obj["include"].get(v) && v.type() == dom::element_type::ARRAY) {
    for (dom::element inc : dom::array(v))
      if (inc.type() == dom::element_type::STRING && std::string_view(inc) == "message.output_text.logprobs") logprobs = true;
  }
  if (!obj["top_logprobs"].get(v) && !v.is_null()) {
    logprobs = true;
    w.key("top_logprobs").raw(simdjson::minify(v));
  }
  if (logprobs) w.key("logprobs").value(true);
  if (!obj["tools"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::ARRAY) return wrong_type(err, "tools", "an array", v);
    r.tools_json = simdjson::minify(v);
    w.key("tools").begin_array();
    size_t i = 0;
    for (dom::element t : dom::array(v)) {
      if (!write_tool(w, t, "tools[" + std::to_string(i++) + "]", err)) return false;
    }
    w.end_array();
  }
  if (!obj["tool_choice"].get(v) && !v.is_null()) {
    r.tool_choice_json = simdjson::minify(v);
    dom::element name, fn;
    if (v.type() == dom::element_type::OBJECT && v["function"].get(fn) && !v["name"].get(name)) {
      // {"type":"function","name":"f"} -> {"type":"function","function":{"name":"f"}}
      if (name.type() != dom::element_type::STRING) return wrong_type(err, "tool_choice.name", "a string", name);
      w.key("tool_choice").begin_object().key("type").value("function");
      w.key("function").begin_object().key("name").value(std::string_view(name)).end_object().end_object();
    } else if (v.type() == dom::element_type::OBJECT && v["function"].get(fn)) {
      return fail(err, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\":\"function\",\"name\":...}");
    } else {
      w.key("tool_choice").raw(r.tool_choice_json);
    }
  }
  if (!obj["text"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "text", "an object", v);
    dom::element f, t, x;
    if (!v["format"].get(f) && !f.is_null()) {
      if (f.type() != dom::element_type::OBJECT) return wrong_type(err, "text.format", "an object", f);
      r.text_format_json = simdjson::minify(f);
      std::string type;
      if (f["type"].get(t)) return fail(err, "text.format.type", "'text.format.type' is required");
      if (!get_string(t, "text.format.type", type, err)) return false;
      w.key("response_format").begin_object().key("type").value(type);
      if (type == "json_schema") {
        w.key("json_schema").begin_object();
        for (const char* key : {"name", "schema", "strict", "description"}) {
          if (!f[key].get(x)) w.key(key).raw(simdjson::minify(x));
        }
        w.end_object();
      }
      w.end_object();
    }
  }
  if (!obj["metadata"].get(v) && v.type() == dom::element_type::OBJECT) r.metadata_json = simdjson::minify(v);
  w.end_object();

  if (!parse_chat_request(w.str(), r.chat, err)) {
    responses_error_names(err);
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- response

namespace {

void write_usage(JsonWriter& w, const Completion& c) {
  w.key("usage").begin_object();
  w.key("input_tokens").value(c.prompt_tokens);
  w.key("input_tokens_details").begin_object().key("cached_tokens").value(c.cached_tokens).end_object();
  w.key("output_tokens").value(c.completion_tokens);
  w.key("output_tokens_details").begin_object().key("reasoning_tokens").value(c.reasoning_tokens).end_object();
  w.key("total_tokens").value(c.prompt_tokens + c.completion_tokens);
  w.end_object();
}

void write_output_text(JsonWriter& w, const std::string& text, const std::vector<TokenLogprob>* logprobs) {
  w.begin_object().key("type").value("output_text").key("text").value(text);
  w.key("annotations").begin_array().end_array();
  w.key("logprobs").raw(logprobs ? logprobs_array_json(*logprobs) : "[]");
  w.end_object();
}

void write_item(JsonWriter& w, const ResponseItem& it, const char* status, const std::vector<TokenLogprob>* logprobs) {
  w.begin_object().key("id").value(it.id);
  switch (it.kind) {
    case ResponseItem::Kind::Message:
      w.key("type").value("message").key("status").value(status).key("role").value("assistant");
      w.key("content").begin_array();
      write_output_text(w, it.text, logprobs);
      w.end_array();
      break;
    case ResponseItem::Kind::Reasoning:
      // The reasoning verbatim (content, as open-weight servers give it) and as its summary (what
      // clients built for OpenAI's models display).
      w.key("type").value("reasoning");
      w.key("summary").begin_array().begin_object().key("type").value("summary_text").key("text").value(it.text);
      w.end_object().end_array();
      w.key("content").begin_array().begin_object().key("type").value("reasoning_text").key("text").value(it.text);
      w.end_object().end_array();
      break;
    case ResponseItem::Kind::FunctionCall:
      w.key("type").value("function_call").key("status").value(status);
      w.key("call_id").value(it.call_id).key("name").value(it.name).key("arguments").value(it.arguments);
      break;
    case ResponseItem::Kind::FunctionCallOutput:  // never an output item
      w.key("type").value("function_call_output").key("call_id").value(it.call_id).key("output").value(it.text);
      break;
  }
  w.end_object();
}

const char* response_status(const Completion* c) {
  if (!c) return "in_progress";
  return c->finish_reason == "length" ? "incomplete" : "completed";
}

}  // namespace

std::vector<ResponseItem> response_output_items(const Completion& c, const ItemIdFn& new_id) {
  std::vector<ResponseItem> out;
  if (c.reasoning_content && !c.reasoning_content->empty()) {
    ResponseItem r;
    r.kind = ResponseItem::Kind::Reasoning;
    r.id = new_id("rs_");
    r.text = *c.reasoning_content;
    out.push_back(std::move(r));
  }
  if ((c.content && !c.content->empty()) || c.tool_calls.empty()) {
    ResponseItem m;
    m.id = new_id("msg_");
    m.role = "assistant";
    m.text = c.content.value_or("");
    out.push_back(std::move(m));
  }
  for (const auto& call : c.tool_calls) {
    ResponseItem f;
    f.kind = ResponseItem::Kind::FunctionCall;
    f.id = new_id("fc_");
    f.call_id = call.id;
    f.name = call.name;
    f.arguments = call.arguments_json;
    out.push_back(std::move(f));
  }
  return out;
}

std::string response_json(const ResponseHead& head, const ResponsesRequest& req, const Completion* c,
                          const std::vector<ResponseItem>& output) {
  JsonWriter w;
  const char* status = response_status(c);
  w.begin_object();
  w.key("id").value(head.id);
  w.key("object").value("response");
  w.key("created_at").value(head.created_at);
  w.key("status").value(status);
  w.key("background").value(false);
  w.key("error").null();
  w.key("incomplete_details");
  if (c && std::string_view(status) == "incomplete") {
    w.begin_object().key("reason").value("max_output_tokens").end_object();
  } else {
    w.null();
  }
  w.key("instructions");
  if (req.instructions) w.value(*req.instructions); else w.null();
  w.key("max_output_tokens");
  if (req.max_output_tokens) w.value(*req.max_output_tokens); else w.null();
  w.key("model").value(head.model);
  w.key("output").begin_array();
  const std::vector<TokenLogprob>* logprobs = c && c->logprobs ? &*c->logprobs : nullptr;
  for (const auto& it : output) write_item(w, it, "completed", logprobs);
  w.end_array();
  w.key("parallel_tool_calls").value(req.chat.parallel_tool_calls);
  w.key("previous_response_id");
  if (req.previous_response_id.empty()) w.null(); else w.value(req.previous_response_id);
  w.key("reasoning").begin_object().key("effort").null().key("summary").null().end_object();
  w.key("store").value(req.store);
  w.key("temperature");
  if (req.chat.temperature) w.value(*req.chat.temperature); else w.value(0.8);  // the provider's default
  w.key("text").begin_object().key("format").raw(req.text_format_json).end_object();
  w.key("tool_choice").raw(req.tool_choice_json);
  w.key("tools").raw(req.tools_json);
  w.key("top_p");
  if (req.chat.top_p) w.value(*req.chat.top_p); else w.value(0.95);
  w.key("truncation").value("disabled");
  if (c) write_usage(w, *c); else w.key("usage").null();
  w.key("metadata").raw(req.metadata_json);
  w.end_object();
  return w.take();
}

// ---------------------------------------------------------------- stream

ResponsesStream::ResponsesStream(ResponseHead head, const ResponsesRequest& req, ItemIdFn new_id)
    : head_(std::move(head)), req_(req), new_id_(std::move(new_id)), want_logprobs_(req.chat.logprobs) {}

std::string ResponsesStream::event(const std::string& type, const std::string& fields_json) {
  JsonWriter w;
  w.begin_object().key("type").value(type).key("sequence_number").value(seq_++);
  std::string json = w.take();
  if (!fields_json.empty()) json += "," + fields_json;
  json += "}";
  return "event: " + type + "\ndata: " + json + "\n\n";
}

namespace {
// `"key":value` pairs written by a JsonWriter object, without its braces.
std::string fields(JsonWriter& w) {
  w.end_object();
  std::string s = w.take();
  return s.substr(1, s.size() - 2);
}
JsonWriter item_fields(const std::string& item_id, int64_t output_index) {
  JsonWriter w;
  w.begin_object().key("item_id").value(item_id).key("output_index").value(output_index);
  return w;
}
}  // namespace

std::string ResponsesStream::start() {
  const std::string resp = response_json(head_, req_, nullptr, {});
  std::string out = event("response.created", "\"response\":" + resp);  // two statements: sequence numbers in order
  out += event("response.in_progress", "\"response\":" + resp);
  return out;
}

std::string ResponsesStream::reasoning_delta(std::string_view text) {
  std::string out;
  if (text.empty()) return out;
  if (message_open_ >= 0) out += close_message();  // not expected: reasoning comes before the answer
  if (reasoning_open_ < 0) {
    ResponseItem r;
    r.kind = ResponseItem::Kind::Reasoning;
    r.id = new_id_("rs_");
    reasoning_open_ = static_cast<int>(output_.size());
    output_.push_back(r);
    JsonWriter w;
    w.begin_object().key("output_index").value(static_cast<int64_t>(reasoning_open_)).key("item");
    w.begin_object().key("id").value(r.id).key("type").value("reasoning").key("summary").begin_array().end_array();
    w.end_object();
    out += event("response.output_item.added", fields(w));
    JsonWriter p = item_fields(r.id, reasoning_open_);
    p.key("summary_index").value(0).key("part").begin_object().key("type").value("summary_text").key("text").value("");
    p.end_object();
    out += event("response.reasoning_summary_part.added", fields(p));
  }
  ResponseItem& r = output_[static_cast<size_t>(reasoning_open_)];
  r.text += text;
  JsonWriter d = item_fields(r.id, reasoning_open_);
  d.key("summary_index").value(0).key("delta").value(text);
  out += event("response.reasoning_summary_text.delta", fields(d));
  return out;
}

std::string ResponsesStream::close_reasoning() {
  if (reasoning_open_ < 0) return {};
  const ResponseItem& r = output_[static_cast<size_t>(reasoning_open_)];
  std::string out;
  JsonWriter d = item_fields(r.id, reasoning_open_);
  d.key("summary_index").value(0).key("text").value(r.text);
  out += event("response.reasoning_summary_text.done", fields(d));
  JsonWriter p = item_fields(r.id, reasoning_open_);
  p.key("summary_index").value(0).key("part").begin_object().key("type").value("summary_text").key("text").value(r.text);
  p.end_object();
  out += event("response.reasoning_summary_part.done", fields(p));
  JsonWriter w;
  w.begin_object().key("output_index").value(static_cast<int64_t>(reasoning_open_)).key("item");
  write_item(w, r, "completed", nullptr);
  out += event("response.output_item.done", fields(w));
  reasoning_open_ = -1;
  return out;
}

// A new (empty, in-progress) assistant message item and its output_item.added /
// content_part.added events.
std::string ResponsesStream::open_message() {
  std::string out;
  ResponseItem m;
  m.id = new_id_("msg_");
  m.role = "assistant";
  message_open_ = static_cast<int>(output_.size());
  output_.push_back(m);
  JsonWriter w;
  w.begin_object().key("output_index").value(static_cast<int64_t>(message_open_)).key("item");
  w.begin_object().key("id").value(m.id).key("type").value("message").key("status").value("in_progress");
  w.key("role").value("assistant").key("content").begin_array().end_array().end_object();
  out += event("response.output_item.added", fields(w));
  JsonWriter p = item_fields(m.id, message_open_);
  p.key("content_index").value(0).key("part");
  write_output_text(p, "", nullptr);
  out += event("response.content_part.added", fields(p));
  return out;
}

std::string ResponsesStream::text_delta(std::string_view text, const std::vector<TokenLogprob>* logprobs) {
  std::string out;
  if (text.empty()) return out;
  out += close_reasoning();
  if (message_open_ < 0) out += open_message();
  ResponseItem& m = output_[static_cast<size_t>(message_open_)];
  m.text += text;
  JsonWriter d = item_fields(m.id, message_open_);
  d.key("content_index").value(0).key("delta").value(text);
  static const std::vector<TokenLogprob> kNone;
  d.key("logprobs").raw(logprobs_array_json(logprobs ? *logprobs : kNone));
  if (want_logprobs_ && logprobs) logprobs_.insert(logprobs_.end(), logprobs->begin(), logprobs->end());
  out += event("response.output_text.delta", fields(d));
  return out;
}

std::string ResponsesStream::close_message() {
  if (message_open_ < 0) return {};
  const ResponseItem& m = output_[static_cast<size_t>(message_open_)];
  const std::vector<TokenLogprob>* lp = want_logprobs_ ? &logprobs_ : nullptr;
  std::string out;
  JsonWriter d = item_fields(m.id, message_open_);
  d.key("content_index").value(0).key("text").value(m.text);
  d.key("logprobs").raw(lp ? logprobs_array_json(*lp) : "[]");
  out += event("response.output_text.done", fields(d));
  JsonWriter p = item_fields(m.id, message_open_);
  p.key("content_index").value(0).key("part");
  write_output_text(p, m.text, lp);
  out += event("response.content_part.done", fields(p));
  JsonWriter w;
  w.begin_object().key("output_index").value(static_cast<int64_t>(message_open_)).key("item");
  write_item(w, m, "completed", lp);
  out += event("response.output_item.done", fields(w));
  message_open_ = -1;
  return out;
}

std::string ResponsesStream::call_start(size_t index, std::string_view call_id, std::string_view name) {
  if (index != calls_.size()) return {};  // calls start in order, once each
  std::string out = close_reasoning();
  out += close_message();
  ResponseItem f;
  f.kind = ResponseItem::Kind::FunctionCall;
  f.id = new_id_("fc_");
  f.call_id = std::string(call_id);
  f.name = std::string(name);
  calls_.push_back(output_.size());
  output_.push_back(f);
  JsonWriter a;
  a.begin_object().key("output_index").value(static_cast<int64_t>(calls_.back())).key("item");
  a.begin_object().key("id").value(f.id).key("type").value("function_call").key("status").value("in_progress");
  a.key("call_id").value(f.call_id).key("name").value(f.name).key("arguments").value("").end_object();
  out += event("response.output_item.added", fields(a));
  return out;
}

std::string ResponsesStream::call_arguments_delta(size_t index, std::string_view piece) {
  if (index >= calls_.size() || piece.empty()) return {};
  ResponseItem& f = output_[calls_[index]];
  f.arguments += piece;
  JsonWriter d = item_fields(f.id, static_cast<int64_t>(calls_[index]));
  d.key("delta").value(piece);
  return event("response.function_call_arguments.delta", fields(d));
}

std::string ResponsesStream::finish(const Completion& c, std::vector<ResponseItem>& output) {
  std::string out = close_reasoning();
  // A reply with neither text nor calls still has its (empty) message, as the non-streamed one.
  bool have_message = false;
  for (const auto& it : output_) have_message = have_message || it.kind == ResponseItem::Kind::Message;
  if (!have_message && c.tool_calls.empty()) out += open_message();
  if (want_logprobs_ && c.logprobs && c.logprobs->size() > logprobs_.size()) {
    // Entries recorded after the last text delta (the scheduler's final flush): the message has them all.
    logprobs_ = *c.logprobs;
  }
  out += close_message();
  // Calls streamed while written (call_start) are closed with their final arguments; the others
  // arrive whole: one arguments delta.
  for (size_t i = 0; i < c.tool_calls.size(); ++i) {
    const GeneratedToolCall& call = c.tool_calls[i];
    if (i < calls_.size()) {
      ResponseItem& f = output_[calls_[i]];
      const int64_t index = static_cast<int64_t>(calls_[i]);
      f.arguments = call.arguments_json;
      JsonWriter e = item_fields(f.id, index);
      e.key("name").value(f.name).key("arguments").value(f.arguments);
      out += event("response.function_call_arguments.done", fields(e));
      JsonWriter w;
      w.begin_object().key("output_index").value(index).key("item");
      write_item(w, f, "completed", nullptr);
      out += event("response.output_item.done", fields(w));
      continue;
    }
    ResponseItem f;
    f.kind = ResponseItem::Kind::FunctionCall;
    f.id = new_id_("fc_");
    f.call_id = call.id;
    f.name = call.name;
    f.arguments = call.arguments_json;
    const int64_t index = static_cast<int64_t>(output_.size());
    output_.push_back(f);
    JsonWriter a;
    a.begin_object().key("output_index").value(index).key("item");
    a.begin_object().key("id").value(f.id).key("type").value("function_call").key("status").value("in_progress");
    a.key("call_id").value(f.call_id).key("name").value(f.name).key("arguments").value("").end_object();
    out += event("response.output_item.added", fields(a));
    JsonWriter d = item_fields(f.id, index);
    d.key("delta").value(f.arguments);
    out += event("response.function_call_arguments.delta", fields(d));
    JsonWriter e = item_fields(f.id, index);
    e.key("name").value(f.name).key("arguments").value(f.arguments);
    out += event("response.function_call_arguments.done", fields(e));
    JsonWriter w;
    w.begin_object().key("output_index").value(index).key("item");
    write_item(w, f, "completed", nullptr);
    out += event("response.output_item.done", fields(w));
  }
  const std::string resp = response_json(head_, req_, &c, output_);
  out += event(c.finish_reason == "length" ? "response.incomplete" : "response.completed", "\"response\":" + resp);
  output = output_;
  return out;
}

std::string ResponsesStream::fail(const std::string& message) {
  JsonWriter e;
  e.begin_object().key("code").value("server_error").key("message").value(message).key("param").null();
  std::string out = event("error", fields(e));
  std::string resp = response_json(head_, req_, nullptr, output_);
  // The in-progress object, marked failed with the error.
  const std::string from = "\"status\":\"in_progress\"", to = "\"status\":\"failed\"";
  if (size_t at = resp.find(from); at != std::string::npos) resp.replace(at, from.size(), to);
  const std::string err_from = "\"error\":null";
  JsonWriter ej;
  ej.begin_object().key("code").value("server_error").key("message").value(message).end_object();
  if (size_t at = resp.find(err_from); at != std::string::npos) resp.replace(at, err_from.size(), "\"error\":" + ej.str());
  out += event("response.failed", "\"response\":" + resp);
  return out;
}

}  // namespace picolm
