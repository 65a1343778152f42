#include "openai.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "json_writer.h"
#include "openai_json.h"

namespace picolm {

namespace dom = simdjson::dom;
using json::JsonWriter;

std::string error_json(const ApiError& e) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(e.message);
  w.key("type").value(e.type);
  w.key("param");
  if (e.param.empty()) w.null(); else w.value(e.param);
  w.key("code");
  if (e.code.empty()) w.null(); else w.value(e.code);
  w.end_object().end_object();
  return w.take();
}

namespace wire {

bool fail(ApiError& err, std::string param, std::string message) {
  err.status = 400;
  err.type = "invalid_request_error";
  err.param = std::move(param);
  err.message = std::move(message);
  return false;
}

const char* type_name(dom::element_type t) {
  switch (t) {
    case dom::element_type::ARRAY: return "array";
    case dom::element_type::OBJECT: return "object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64: return "integer";
    case dom::element_type::DOUBLE: return "number";
    case dom::element_type::STRING: return "string";
    case dom::element_type::BOOL: return "boolean";
    case dom::element_type::NULL_VALUE: return "null";
  }
  return "?";
}

bool is_number(dom::element e) {
  auto t = e.type();
  return t == dom::element_type::INT64 || t == dom::element_type::UINT64 || t == dom::element_type::DOUBLE;
}

double as_double(dom::element e) {
  switch (e.type()) {
    case dom::element_type::INT64: return static_cast<double>(int64_t(e));
    case dom::element_type::UINT64: return static_cast<double>(uint64_t(e));
    default: return double(e);
  }
}

bool wrong_type(ApiError& err, const std::string& param, const char* expected, dom::element e) {
  return fail(err, param, "'" + param + "' must be " + expected + ", got " + type_name(e.type()));
}

bool get_string(dom::element e, const std::string& param, std::string& out, ApiError& err) {
  if (e.type() != dom::element_type::STRING) return wrong_type(err, param, "a string", e);
  out = std::string(std::string_view(e));
  return true;
}

bool get_number(dom::element e, const std::string& param, double lo, double hi, std::optional<double>& out,
                ApiError& err) {
  if (e.is_null()) return true;
  if (!is_number(e)) return wrong_type(err, param, "a number", e);
  double v = as_double(e);
  if (!(v >= lo && v <= hi)) {
    return fail(err, param, "'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  out = v;
  return true;
}

bool get_int(dom::element e, const std::string& param, int64_t lo, int64_t hi, std::optional<int64_t>& out,
             ApiError& err) {
  if (e.is_null()) return true;
  int64_t v = 0;
  if (e.type() == dom::element_type::INT64) v = int64_t(e);
  else if (e.type() == dom::element_type::UINT64) v = INT64_MAX;
  else if (e.type() == dom::element_type::DOUBLE && std::floor(double(e)) == double(e) && std::fabs(double(e)) < 9e15)
    v = static_cast<int64_t>(double(e));
  else return wrong_type(err, param, "an integer", e);
  if (v < lo || v > hi) {
    return fail(err, param, "'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  out = v;
  return true;
}

bool unsupported_content_part(ApiError& err, const std::string& param, const std::string& type,
                              const char* supported) {
  // Images, audio and files get a 400 in the words clients look for before falling back to another
  // model or to text only (PicoClaw's isVisionUnsupportedError: "does not support image input").
  const char* kind = nullptr;
  if (type == "image_url" || type == "input_image" || type == "image") kind = "image";
  else if (type == "input_audio" || type == "audio") kind = "audio";
  else if (type == "file" || type == "input_file") kind = "file";
  if (!kind) return fail(err, param, "content part type '" + type + "' is not supported (" + supported + ")");
  std::string part = param;
  if (part.ends_with(".type")) part.resize(part.size() - 5);
  fail(err, param,
       std::string("this model does not support ") + kind + " input ('" + part + "' is a part of type '" + type +
           "'; this provider serves text-only models)");
  err.code = std::string(kind) + "_input_not_supported";
  return false;
}

// Message content: a string, null, or an array of {"type":"text","text":...} parts (joined).
bool get_content(dom::element e, const std::string& param, std::string& out, ApiError& err) {
  if (e.is_null()) { out.clear(); return true; }
  if (e.type() == dom::element_type::STRING) { out = std::string(std::string_view(e)); return true; }
  if (e.type() != dom::element_type::ARRAY) return wrong_type(err, param, "a string or an array of content parts", e);
  out.clear();
  size_t i = 0;
  for (dom::element part : dom::array(e)) {
    std::string p = param + "[" + std::to_string(i++) + "]";
    if (part.type() == dom::element_type::STRING) { out += std::string_view(part); continue; }
    if (part.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", part);
    dom::element type, text;
    std::string type_s;
    if (part["type"].get(type) || !get_string(type, p + ".type", type_s, err)) {
      if (err.message.empty()) fail(err, p + ".type", "'" + p + ".type' is required");
      return false;
    }
    if (type_s != "text") return unsupported_content_part(err, p + ".type", type_s, "text only");
    std::string t;
    if (part["text"].get(text)) return fail(err, p + ".text", "'" + p + ".text' is required");
    if (!get_string(text, p + ".text", t, err)) return false;
    out += t;
  }
  return true;
}

// A call's "arguments" in `parent` (absent: {}): a JSON object encoded as a string, or an object.
bool parse_call_arguments(dom::element parent, const std::string& p, std::string& out, ApiError& err) {
  dom::element x;
  if (parent["arguments"].get(x)) {
    out = "{}";
  } else if (x.type() == dom::element_type::STRING) {
    // Arguments arrive as a JSON string; the templates need them to be a JSON object.
    dom::parser sub;
    dom::element parsed;
    if (sub.parse(std::string(std::string_view(x))).get(parsed) || parsed.type() != dom::element_type::OBJECT) {
      return fail(err, p + ".arguments", "'" + p + ".arguments' must be a JSON object encoded as a string");
    }
    out = simdjson::minify(parsed);
  } else if (x.type() == dom::element_type::OBJECT) {
    out = simdjson::minify(x);
  } else {
    return wrong_type(err, p + ".arguments", "a string", x);
  }
  return true;
}

bool parse_messages(dom::element msgs, std::vector<ChatMessage>& out, ApiError& err) {
  if (msgs.type() != dom::element_type::ARRAY) return wrong_type(err, "messages", "an array", msgs);
  size_t i = 0;
  for (dom::element m : dom::array(msgs)) {
    std::string p = "messages[" + std::to_string(i++) + "]";
    if (m.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", m);
    ChatMessage msg;
    dom::element v;
    if (m["role"].get(v)) return fail(err, p + ".role", "'" + p + ".role' is required");
    if (!get_string(v, p + ".role", msg.role, err)) return false;
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system role
    const bool legacy_function = msg.role == "function";  // the legacy tool result: {"name", "content"}
    if (legacy_function) msg.role = "tool";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
      return fail(err, p + ".role", "unknown role '" + msg.role + "'");
    }
    if (!m["content"].get(v) && !get_content(v, p + ".content", msg.content, err)) return false;
    if (!m["name"].get(v) && !v.is_null() && !get_string(v, p + ".name", msg.name, err)) return false;
    if (legacy_function) {
      if (msg.name.empty()) return fail(err, p + ".name", "'" + p + ".name' is required for role function");
      // It answers the latest call of that function (legacy calls carry no id).
      bool found = false;
      for (auto prev = out.rbegin(); prev != out.rend() && !found; ++prev) {
        for (const ToolCall& c : prev->tool_calls) {
          if (c.name == msg.name && !found) {
            msg.tool_call_id = c.id;
            found = true;
          }
        }
      }
      if (!found) msg.tool_call_id = "call_fn_" + msg.name;
    } else if (msg.role == "tool") {
      if (m["tool_call_id"].get(v)) return fail(err, p + ".tool_call_id", "'" + p + ".tool_call_id' is required for role tool");
      if (!get_string(v, p + ".tool_call_id", msg.tool_call_id, err)) return false;
    }
    if (msg.role == "assistant" && !m["reasoning_content"].get(v) && !v.is_null()) {
      std::string rc;
      if (!get_string(v, p + ".reasoning_content", rc, err)) return false;
      msg.reasoning_content = std::move(rc);
    }
    if (msg.role == "assistant" && !m["tool_calls"].get(v) && !v.is_null()) {
      if (v.type() != dom::element_type::ARRAY) return wrong_type(err, p + ".tool_calls", "an array", v);
      size_t j = 0;
      for (dom::element tc : dom::array(v)) {
        std::string q = p + ".tool_calls[" + std::to_string(j++) + "]";
        if (tc.type() != dom::element_type::OBJECT) return wrong_type(err, q, "an object", tc);
        ToolCall call;
        dom::element x, fn;
        if (!tc["id"].get(x) && !get_string(x, q + ".id", call.id, err)) return false;
        if (tc["function"].get(fn)) return fail(err, q + ".function", "'" + q + ".function' is required");
        if (fn.type() != dom::element_type::OBJECT) return wrong_type(err, q + ".function", "an object", fn);
        if (fn["name"].get(x)) return fail(err, q + ".function.name", "'" + q + ".function.name' is required");
        if (!get_string(x, q + ".function.name", call.name, err)) return false;
        if (!parse_call_arguments(fn, q + ".function", call.arguments_json, err)) return false;
        msg.tool_calls.push_back(std::move(call));
      }
    }
    if (msg.role == "assistant" && !m["function_call"].get(v) && !v.is_null()) {
      // Legacy: one call, without an id; the function message answering it refers to it by name.
      if (v.type() != dom::element_type::OBJECT) return wrong_type(err, p + ".function_call", "an object", v);
      ToolCall call;
      dom::element x;
      call.id = "call_fn_" + std::to_string(i - 1);
      if (v["name"].get(x)) return fail(err, p + ".function_call.name", "'" + p + ".function_call.name' is required");
      if (!get_string(x, p + ".function_call.name", call.name, err)) return false;
      if (!parse_call_arguments(v, p + ".function_call", call.arguments_json, err)) return false;
      msg.tool_calls.push_back(std::move(call));
    }
    out.push_back(std::move(msg));
  }
  if (out.empty()) return fail(err, "messages", "'messages' must not be empty");
  return true;
}

// One function definition {"name", "description"?, "parameters"?} (p names it in errors).
bool parse_function(dom::element fn, const std::string& p, ChatRequest& r, ApiError& err) {
  if (fn.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", fn);
  dom::element v;
  ToolSpec spec;
  if (fn["name"].get(v)) return fail(err, p + ".name", "'" + p + ".name' is required");
  if (!get_string(v, p + ".name", spec.name, err)) return false;
  if (spec.name.empty()) return fail(err, p + ".name", "tool names must not be empty");
  for (const auto& other : r.tools) {
    if (other.name == spec.name) return fail(err, p + ".name", "duplicate tool name '" + spec.name + "'");
  }
  if (!fn["description"].get(v) && !v.is_null() && !get_string(v, p + ".description", spec.description, err)) return false;
  spec.parameters_json = "{}";
  if (!fn["parameters"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, p + ".parameters", "an object", v);
    spec.parameters_json = simdjson::minify(v);
  }
  r.tools.push_back(std::move(spec));
  return true;
}

bool parse_tools(dom::element tools, ChatRequest& r, ApiError& err) {
  if (tools.is_null()) return true;
  if (tools.type() != dom::element_type::ARRAY) return wrong_type(err, "tools", "an array", tools);
  size_t i = 0;
  for (dom::element t : dom::array(tools)) {
    std::string p = "tools[" + std::to_string(i++) + "]";
    if (t.type() != dom::element_type::OBJECT) return wrong_type(err, p, "an object", t);
    dom::element v, fn;
    std::string type = "function";
    if (!t["type"].get(v) && !get_string(v, p + ".type", type, err)) return false;
    if (type != "function") return fail(err, p + ".type", "tool type '" + type + "' is not supported (function only)");
    if (t["function"].get(fn)) return fail(err, p + ".function", "'" + p + ".function' is required");
    if (!parse_function(fn, p + ".function", r, err)) return false;
  }
  if (!r.tools.empty()) r.tools_json = simdjson::minify(tools);
  return true;
}

// The legacy "functions" array (a function object each, as inside a tool): the same tools, and
// the tools array the templates read. function_call becomes tool_choice.
bool parse_legacy_functions(dom::object obj, ChatRequest& r, ApiError& err) {
  dom::element fns, v;
  if (obj["functions"].get(fns) || fns.is_null()) return true;
  if (!r.tools.empty()) return fail(err, "functions", "give either 'tools' or the legacy 'functions', not both");
  if (fns.type() != dom::element_type::ARRAY) return wrong_type(err, "functions", "an array", fns);
  JsonWriter tools;
  tools.begin_array();
  size_t i = 0;
  for (dom::element fn : dom::array(fns)) {
    if (!parse_function(fn, "functions[" + std::to_string(i++) + "]", r, err)) return false;
    tools.begin_object().key("type").value("function").key("function").raw(simdjson::minify(fn)).end_object();
  }
  tools.end_array();
  if (!r.tools.empty()) r.tools_json = tools.take();
  r.legacy_functions = true;
  r.parallel_tool_calls = false;  // a legacy reply holds one function_call
  if (!obj["function_call"].get(v) && !v.is_null()) {
    if (!obj["tool_choice"].get(fns) && !fns.is_null()) {
      return fail(err, "function_call", "give either 'tool_choice' or the legacy 'function_call', not both");
    }
    if (v.type() == dom::element_type::STRING && (std::string_view(v) == "none" || std::string_view(v) == "auto")) {
      r.tool_choice = std::string_view(v) == "none" ? ToolChoice::None : ToolChoice::Auto;
    } else if (v.type() == dom::element_type::OBJECT && !v["name"].get(fns) && fns.type() == dom::element_type::STRING) {
      r.tool_choice = ToolChoice::Named;
      r.tool_choice_name = std::string(std::string_view(fns));
    } else {
      return fail(err, "function_call", "'function_call' must be none, auto or {\"name\": ...}");
    }
  }
  return true;
}

bool parse_tool_choice(dom::element v, ChatRequest& r, ApiError& err) {
  if (v.is_null()) return true;
  if (v.type() == dom::element_type::STRING) {
    std::string_view s = v;
    if (s == "none") r.tool_choice = ToolChoice::None;
    else if (s == "auto") r.tool_choice = ToolChoice::Auto;
    else if (s == "required" || s == "any") r.tool_choice = ToolChoice::Required;
    else return fail(err, "tool_choice", "'tool_choice' must be none, auto, required or an object naming a function");
  } else if (v.type() == dom::element_type::OBJECT) {
    dom::element fn, name;
    if (v["function"].get(fn) || fn.type() != dom::element_type::OBJECT || fn["name"].get(name) ||
        name.type() != dom::element_type::STRING) {
      return fail(err, "tool_choice", "'tool_choice' object must be {\"type\":\"function\",\"function\":{\"name\":...}}");
    }
    r.tool_choice = ToolChoice::Named;
    r.tool_choice_name = std::string(std::string_view(name));
  } else {
    return wrong_type(err, "tool_choice", "a string or an object", v);
  }
  return true;
}

// Checks that apply after all fields are read.
bool finish_validation(ChatRequest& r, ApiError& err) {
  if (r.tool_choice == ToolChoice::Named) {
    bool found = false;
    for (const auto& t : r.tools) found = found || t.name == r.tool_choice_name;
    if (!found) return fail(err, "tool_choice", "tool_choice names '" + r.tool_choice_name + "', which is not in 'tools'");
  }
  if (r.tool_choice == ToolChoice::Required && r.tools.empty()) {
    return fail(err, "tool_choice", "tool_choice 'required' needs a non-empty 'tools' array");
  }
  return true;
}

bool parse_common_sampling(dom::object obj, ChatRequest& r, ApiError& err) {
  dom::element v;
  if (!obj["max_completion_tokens"].get(v) && !get_int(v, "max_completion_tokens", 1, 1 << 30, r.max_tokens, err)) return false;
  if (!r.max_tokens && !obj["max_tokens"].get(v) && !get_int(v, "max_tokens", 1, 1 << 30, r.max_tokens, err)) return false;
  if (!obj["temperature"].get(v) && !get_number(v, "temperature", 0.0, 2.0, r.temperature, err)) return false;
  if (!obj["top_p"].get(v) && !get_number(v, "top_p", 0.0, 1.0, r.top_p, err)) return false;
  if (!obj["top_k"].get(v) && !get_int(v, "top_k", 0, 1 << 30, r.top_k, err)) return false;
  if (!obj["min_p"].get(v) && !get_number(v, "min_p", 0.0, 1.0, r.min_p, err)) return false;
  if (!obj["repeat_penalty"].get(v) && !get_number(v, "repeat_penalty", 0.0, 10.0, r.repeat_penalty, err)) return false;
  if (!obj["seed"].get(v) && !v.is_null()) {
    if (v.type() == dom::element_type::INT64) r.seed = static_cast<uint64_t>(int64_t(v));
    else if (v.type() == dom::element_type::UINT64) r.seed = uint64_t(v);
    else return wrong_type(err, "seed", "an integer", v);
  }
  return true;
}

bool get_bool(dom::element e, const std::string& param, std::optional<bool>& out, ApiError& err) {
  if (e.is_null()) return true;
  if (e.type() != dom::element_type::BOOL) return wrong_type(err, param, "a boolean", e);
  out = bool(e);
  return true;
}

// The thinking switches clients send, resolved into one on/off switch (enable_thinking) and one
// effort, most specific first (README "Thinking"):
//   switch: chat_template_kwargs.enable_thinking (llama.cpp server, vLLM), a top-level
//           enable_thinking, thinking.type enabled|disabled (Anthropic's shape, which PicoClaw
//           sends), reasoning.enabled (OpenRouter);
//   effort: reasoning_effort (OpenAI chat), reasoning.effort (Responses API, OpenRouter).
// plan_thinking then lets the switch win over the effort (effort none = off). Other keys of
// chat_template_kwargs, thinking (budget_tokens) and reasoning (max_tokens, exclude, summary) are
// ignored: the templates read no others and the budget is the effort's share of max_tokens.
bool parse_thinking(dom::object obj, ChatRequest& r, ApiError& err) {
  dom::element v, x;
  // Each field given is validated; the first one given sets the value.
  auto effort_from = [&](dom::element e, const std::string& param) {
    if (e.is_null()) return true;
    std::string name;
    if (!get_string(e, param, name, err)) return false;
    std::optional<ReasoningEffort> effort = reasoning_effort_from_name(name);
    if (!effort) return fail(err, param, "'" + param + "' must be none, minimal, low, medium, high, xhigh or max");
    if (!r.reasoning_effort) r.reasoning_effort = effort;
    return true;
  };
  auto switch_from = [&](dom::element e, const std::string& param) {
    std::optional<bool> on;
    if (!get_bool(e, param, on, err)) return false;
    if (!r.enable_thinking) r.enable_thinking = on;
    return true;
  };
  if (!obj["chat_template_kwargs"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "chat_template_kwargs", "an object", v);
    if (!v["enable_thinking"].get(x) && !switch_from(x, "chat_template_kwargs.enable_thinking")) return false;
  }
  if (!obj["enable_thinking"].get(v) && !switch_from(v, "enable_thinking")) return false;
  if (!obj["thinking"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "thinking", "an object", v);
    std::string type;
    if (v["type"].get(x) || x.is_null()) return fail(err, "thinking.type", "'thinking.type' is required (enabled or disabled)");
    if (!get_string(x, "thinking.type", type, err)) return false;
    if (type != "enabled" && type != "disabled") {
      return fail(err, "thinking.type", "'thinking.type' must be enabled or disabled");
    }
    if (!r.enable_thinking) r.enable_thinking = type == "enabled";
  }
  std::optional<dom::element> reasoning;
  if (!obj["reasoning"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "reasoning", "an object", v);
    reasoning = v;
    if (!v["enabled"].get(x) && !switch_from(x, "reasoning.enabled")) return false;
  }
  if (!obj["reasoning_effort"].get(v) && !effort_from(v, "reasoning_effort")) return false;
  if (reasoning && !(*reasoning)["effort"].get(x) && !effort_from(x, "reasoning.effort")) return false;
  return true;
}

// The first key that occurs twice in one object, anywhere in the value (nullopt if none).
// simdjson's lookup takes the first occurrence while the clients' parsers (Python, JavaScript)
// keep the last, so a body with a repeated key would mean different things to the client and to
// us: it is rejected (issue 15 item 8). Sorting the keys keeps a 10,000-property schema cheap.
std::optional<std::string_view> duplicate_key(dom::element e) {
  if (e.type() == dom::element_type::ARRAY) {
    for (dom::element x : dom::array(e))
      if (auto d = duplicate_key(x)) return d;
    return std::nullopt;
  }
  if (e.type() != dom::element_type::OBJECT) return std::nullopt;
  std::vector<std::string_view> keys;
  for (dom::key_value_pair kv : dom::object(e)) {
    keys.push_back(kv.key);
    if (auto d = duplicate_key(kv.value)) return d;
  }
  std::sort(keys.begin(), keys.end());
  auto it = std::adjacent_find(keys.begin(), keys.end());
  if (it == keys.end()) return std::nullopt;
  return *it;
}

bool parse_json_body(std::string_view body, dom::parser& parser, dom::element& root, ApiError& err) {
  if (auto e = parser.parse(body.data(), body.size(), true).get(root)) {
    return fail(err, "", e == simdjson::UTF8_ERROR ? "the request body is not valid UTF-8"
                                                   : "the request body is not valid JSON");
  }
  if (root.type() != dom::element_type::OBJECT) return fail(err, "", "the request body must be a JSON object");
  if (auto dup = duplicate_key(root)) {
    return fail(err, "", "the request body repeats the key \"" + std::string(*dup) + "\" in one object");
  }
  return true;
}

}  // namespace wire

using namespace wire;

bool parse_chat_request(std::string_view body, ChatRequest& r, ApiError& err) {
  dom::parser parser;
  dom::element root;
  if (!parse_json_body(body, parser, root, err)) return false;
  dom::object obj = root;
  dom::element v;
  if (!obj["model"].get(v) && !v.is_null() && !get_string(v, "model", r.model, err)) return false;
  if (obj["messages"].get(v)) return fail(err, "messages", "'messages' is required");
  if (!parse_messages(v, r.messages, err)) return false;
  if (!obj["tools"].get(v) && !parse_tools(v, r, err)) return false;
  if (!obj["tool_choice"].get(v) && !parse_tool_choice(v, r, err)) return false;
  if (!obj["parallel_tool_calls"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "parallel_tool_calls", "a boolean", v);
    r.parallel_tool_calls = bool(v);
  }
  if (!parse_legacy_functions(obj, r, err)) return false;
  if (!obj["response_format"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "response_format", "an object", v);
    dom::element t;
    std::string type;
    if (v["type"].get(t)) return fail(err, "response_format.type", "'response_format.type' is required");
    if (!get_string(t, "response_format.type", type, err)) return false;
    if (type == "text") {
      r.response_format = ResponseFormat::Text;
    } else if (type == "json_object") {
      r.response_format = ResponseFormat::JsonObject;
    } else if (type == "json_schema") {
      dom::element js, schema;
      if (v["json_schema"].get(js) || js.type() != dom::element_type::OBJECT) {
        return fail(err, "response_format.json_schema", "'response_format.json_schema' must be an object");
      }
      if (js["schema"].get(schema)) {
        r.response_schema_json = "{}";  // absent: any JSON value (OpenAI requires it; be lenient)
      } else if (schema.type() != dom::element_type::OBJECT && schema.type() != dom::element_type::BOOL) {
        return wrong_type(err, "response_format.json_schema.schema", "an object", schema);
      } else {
        r.response_schema_json = simdjson::minify(schema);
      }
      dom::element strict;
      if (!js["strict"].get(strict) && !strict.is_null() && strict.type() != dom::element_type::BOOL) {
        return wrong_type(err, "response_format.json_schema.strict", "a boolean", strict);
      }
      r.response_format = ResponseFormat::JsonSchema;
    } else {
      return fail(err, "response_format.type", "response_format type '" + type + "' is not supported");
    }
  }
  if (!parse_common_sampling(obj, r, err)) return false;
  if (!obj["return_prompt"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "return_prompt", "a boolean", v);
    r.return_prompt = bool(v);
  }
  if (!obj["stop"].get(v) && !v.is_null()) {
    if (v.type() == dom::element_type::STRING) {
      r.stop.emplace_back(std::string_view(v));
    } else if (v.type() == dom::element_type::ARRAY) {
      for (dom::element s : dom::array(v)) {
        if (s.type() != dom::element_type::STRING) return wrong_type(err, "stop", "a string or an array of strings", s);
        r.stop.emplace_back(std::string_view(s));
      }
    } else {
      return wrong_type(err, "stop", "a string or an array of strings", v);
    }
    if (r.stop.size() > 16) return fail(err, "stop", "at most 16 stop sequences");
    for (const auto& s : r.stop) {
      if (s.empty()) return fail(err, "stop", "stop sequences must not be empty");
    }
  }
  std::optional<double> pen;
  if (!obj["presence_penalty"].get(v) && !get_number(v, "presence_penalty", -2.0, 2.0, pen, err)) return false;
  if (pen) r.presence_penalty = *pen;
  pen.reset();
  if (!obj["frequency_penalty"].get(v) && !get_number(v, "frequency_penalty", -2.0, 2.0, pen, err)) return false;
  if (pen) r.frequency_penalty = *pen;
  if (!obj["n"].get(v) && !v.is_null()) {
    // One KV slot runs one sequence: n choices would cost n full generations in a row. With
    // parallel slots they become cheap, and n > 1 can then be accepted.
    std::optional<int64_t> n;
    if (!get_int(v, "n", 1, 1, n, err)) return fail(err, "n", "only n = 1 is supported (one choice per request)");
  }
  if (!obj["logprobs"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "logprobs", "a boolean", v);
    r.logprobs = bool(v);
  }
  if (!obj["top_logprobs"].get(v) && !v.is_null()) {
    std::optional<int64_t> top;
    if (!get_int(v, "top_logprobs", 0, kMaxTopLogprobs, top, err)) return false;
    if (!r.logprobs) return fail(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = static_cast<int>(*top);
  }
  if (!obj["stream"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "stream", "a boolean", v);
    r.stream = bool(v);
  }
  if (!parse_thinking(obj, r, err)) return false;
  if (!obj["stream_options"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::OBJECT) return wrong_type(err, "stream_options", "an object", v);
    dom::element u;
    if (!v["include_usage"].get(u) && !u.is_null()) {
      if (u.type() != dom::element_type::BOOL) return wrong_type(err, "stream_options.include_usage", "a boolean", u);
      r.include_usage = bool(u);
    }
  }
  return finish_validation(r, err);
}

bool parse_tool_call_request(std::string_view body, ChatRequest& r, ApiError& err) {
  dom::parser parser;
  dom::element root;
  if (!parse_json_body(body, parser, root, err)) return false;
  dom::object obj = root;
  dom::element v;
  std::string system;
  if (!obj["system"].get(v) && !v.is_null() && !get_string(v, "system", system, err)) return false;
  if (!system.empty()) r.messages.push_back(ChatMessage{"system", system, {}, "", "", std::nullopt});
  bool have_messages = !obj["messages"].get(v) && !v.is_null();
  if (have_messages) {
    std::vector<ChatMessage> msgs;
    if (!parse_messages(v, msgs, err)) return false;
    for (auto& m : msgs) r.messages.push_back(std::move(m));
  } else if (!obj["prompt"].get(v) && !v.is_null()) {
    std::string prompt;
    if (!get_string(v, "prompt", prompt, err)) return false;
    r.messages.push_back(ChatMessage{"user", prompt, {}, "", "", std::nullopt});
  } else {
    return fail(err, "messages", "one of 'messages' or 'prompt' is required");
  }
  if (obj["tools"].get(v)) return fail(err, "tools", "'tools' is required");
  if (!parse_tools(v, r, err)) return false;
  if (r.tools.empty()) return fail(err, "tools", "'tools' must not be empty");
  r.tool_choice = ToolChoice::Required;
  r.parallel_tool_calls = false;  // one message, one call, unless asked for more
  if (!obj["tool_choice"].get(v) && !parse_tool_choice(v, r, err)) return false;
  if (!obj["parallel_tool_calls"].get(v) && !v.is_null()) {
    if (v.type() != dom::element_type::BOOL) return wrong_type(err, "parallel_tool_calls", "a boolean", v);
    r.parallel_tool_calls = bool(v);
  }
  if (!parse_thinking(obj, r, err)) return false;
  if (!parse_common_sampling(obj, r, err)) return false;
  return finish_validation(r, err);
}

namespace {

void write_usage(JsonWriter& w, const Completion& c) {
  w.key("usage").begin_object();
  w.key("prompt_tokens").value(c.prompt_tokens);
  w.key("completion_tokens").value(c.completion_tokens);
  w.key("total_tokens").value(c.prompt_tokens + c.completion_tokens);
  w.key("prompt_tokens_details").begin_object().key("cached_tokens").value(c.cached_tokens).end_object();
  w.key("completion_tokens_details").begin_object().key("reasoning_tokens").value(c.reasoning_tokens).end_object();
  w.end_object();
}

void write_timings(JsonWriter& w, const Timings& t) {
  w.key("timings").begin_object();
  w.key("prompt_n").value(t.prompt_n);
  w.key("cached_n").value(t.cached_n);
  w.key("prompt_ms").value(t.prompt_ms);
  w.key("prompt_per_second").value(t.prompt_ms > 0 ? 1000.0 * static_cast<double>(t.prompt_n) / t.prompt_ms : 0.0);
  w.key("predicted_n").value(t.predicted_n);
  w.key("predicted_ms").value(t.predicted_ms);
  w.key("predicted_per_second").value(t.predicted_ms > 0 ? 1000.0 * static_cast<double>(t.predicted_n) / t.predicted_ms : 0.0);
  w.key("queue_ms").value(t.queue_ms);
  w.end_object();
}

// Provider extensions, only when there is something to say (clients ignore unknown fields).
void write_picolm(JsonWriter& w, const Completion& c) {
  if (c.dropped_messages <= 0 && c.volatile_lines_moved <= 0 && !c.evaluated_prompt_text) return;
  w.key("picolm").begin_object();
  if (c.dropped_messages > 0) w.key("dropped_messages").value(c.dropped_messages);
  if (c.volatile_lines_moved > 0) w.key("volatile_lines_moved").value(c.volatile_lines_moved);
  if (c.evaluated_prompt_text) {
    w.key("prompt").value(*c.evaluated_prompt_text);
    w.key("messages").raw(c.evaluated_messages_json);
  }
  w.end_object();
}

// A legacy functions request ends a call with "function_call" instead of "tool_calls".
std::string_view finish_reason_of(const ResponseIds& ids, std::string_view finish_reason) {
  return ids.legacy_functions && finish_reason == "tool_calls" ? "function_call" : finish_reason;
}

void write_head(JsonWriter& w, const ResponseIds& ids, const char* object) {
  w.key("id").value(ids.id);
  w.key("object").value(object);
  w.key("created").value(ids.created);
  w.key("model").value(ids.model);
  w.key("system_fingerprint").value("picolm");
}

}  // namespace

namespace {
// "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}] of a request's
// ToolCall or a reply's GeneratedToolCall (same fields).
template <class Call>
void write_tool_calls(JsonWriter& w, const std::vector<Call>& calls) {
  w.key("tool_calls").begin_array();
  for (const Call& tc : calls) {
    w.begin_object();
    w.key("id").value(tc.id);
    w.key("type").value("function");
    w.key("function").begin_object().key("name").value(tc.name).key("arguments").value(tc.arguments_json).end_object();
    w.end_object();
  }
  w.end_array();
}
}  // namespace

std::string messages_json(std::span<const ChatMessage> messages) {
  JsonWriter w;
  w.begin_array();
  for (const ChatMessage& m : messages) {
    w.begin_object();
    w.key("role").value(m.role);
    w.key("content").value(m.content);
    if (!m.name.empty()) w.key("name").value(m.name);
    if (!m.tool_call_id.empty()) w.key("tool_call_id").value(m.tool_call_id);
    if (m.reasoning_content) w.key("reasoning_content").value(*m.reasoning_content);
    if (!m.tool_calls.empty()) write_tool_calls(w, m.tool_calls);
    w.end_object();
  }
  w.end_array();
  return w.take();
}

std::string chat_completion_json(const ResponseIds& ids, const Completion& c) {
  JsonWriter w;
  w.begin_object();
  write_head(w, ids, "chat.completion");
  w.key("choices").begin_array().begin_object();
  w.key("index").value(0);
  w.key("message").begin_object();
  w.key("role").value("assistant");
  w.key("content");
  if (c.content) w.value(*c.content); else w.null();
  if (c.reasoning_content) w.key("reasoning_content").value(*c.reasoning_content);
  if (ids.legacy_functions && !c.tool_calls.empty()) {
    const GeneratedToolCall& tc = c.tool_calls.front();  // the request allowed one call
    w.key("function_call").begin_object().key("name").value(tc.name).key("arguments").value(tc.arguments_json).end_object();
  } else if (!c.tool_calls.empty()) {
    write_tool_calls(w, c.tool_calls);
  }
  w.key("refusal").null();
  w.end_object();
  w.key("logprobs");
  if (c.logprobs) w.raw(logprobs_json(*c.logprobs)); else w.null();
  w.key("finish_reason").value(finish_reason_of(ids, c.finish_reason));
  w.end_object().end_array();
  write_usage(w, c);
  write_timings(w, c.timings);
  write_picolm(w, c);
  w.end_object();
  return w.take();
}

namespace {
JsonWriter chunk_begin(const ResponseIds& ids) {
  JsonWriter w;
  w.begin_object();
  write_head(w, ids, "chat.completion.chunk");
  w.key("choices").begin_array().begin_object();
  w.key("index").value(0);
  return w;
}
std::string chunk_end(JsonWriter& w, const char* finish_reason, const std::vector<TokenLogprob>* logprobs = nullptr) {
  w.key("logprobs");
  if (logprobs) w.raw(logprobs_json(*logprobs)); else w.null();
  w.key("finish_reason");
  if (finish_reason) w.value(finish_reason); else w.null();
  w.end_object().end_array().end_object();
  return w.take();
}
}  // namespace

std::string chunk_role_json(const ResponseIds& ids) {
  JsonWriter w = chunk_begin(ids);
  w.key("delta").begin_object().key("role").value("assistant").key("content").value("").end_object();
  return chunk_end(w, nullptr);
}

std::string chunk_content_json(const ResponseIds& ids, std::string_view delta,
                               const std::vector<TokenLogprob>* logprobs) {
  JsonWriter w = chunk_begin(ids);
  w.key("delta").begin_object().key("content").value(delta).end_object();
  return chunk_end(w, nullptr, logprobs);
}

std::string chunk_reasoning_json(const ResponseIds& ids, std::string_view delta) {
  JsonWriter w = chunk_begin(ids);
  w.key("delta").begin_object().key("reasoning_content").value(delta).end_object();
  return chunk_end(w, nullptr);
}

std::string chunk_tool_call_json(const ResponseIds& ids, size_t index, const GeneratedToolCall& call) {
  JsonWriter w = chunk_begin(ids);
  if (ids.legacy_functions) {
    w.key("delta").begin_object().key("function_call").begin_object();
    w.key("name").value(call.name).key("arguments").value(call.arguments_json);
    w.end_object().end_object();
    return chunk_end(w, nullptr);
  }
  w.key("delta").begin_object().key("tool_calls").begin_array().begin_object();
  w.key("index").value(static_cast<int64_t>(index));
  w.key("id").value(call.id);
  w.key("type").value("function");
  w.key("function").begin_object().key("name").value(call.name).key("arguments").value(call.arguments_json).end_object();
  w.end_object().end_array().end_object();
  return chunk_end(w, nullptr);
}

std::string chunk_tool_call_start_json(const ResponseIds& ids, size_t index, std::string_view id, std::string_view name) {
  JsonWriter w = chunk_begin(ids);
  if (ids.legacy_functions) {  // legacy functions: delta.function_call {name, arguments: ""}, then pieces
    w.key("delta").begin_object().key("function_call").begin_object();
    w.key("name").value(name).key("arguments").value("");
    w.end_object().end_object();
    return chunk_end(w, nullptr);
  }
  w.key("delta").begin_object().key("tool_calls").begin_array().begin_object();
  w.key("index").value(static_cast<int64_t>(index));
  w.key("id").value(id);
  w.key("type").value("function");
  w.key("function").begin_object().key("name").value(name).key("arguments").value("").end_object();
  w.end_object().end_array().end_object();
  return chunk_end(w, nullptr);
}

std::string chunk_tool_call_arguments_json(const ResponseIds& ids, size_t index, std::string_view piece) {
  JsonWriter w = chunk_begin(ids);
  if (ids.legacy_functions) {
    w.key("delta").begin_object().key("function_call").begin_object().key("arguments").value(piece);
    w.end_object().end_object();
    return chunk_end(w, nullptr);
  }
  w.key("delta").begin_object().key("tool_calls").begin_array().begin_object();
  w.key("index").value(static_cast<int64_t>(index));
  w.key("function").begin_object().key("arguments").value(piece).end_object();
  w.end_object().end_array().end_object();
  return chunk_end(w, nullptr);
}

std::string chunk_finish_json(const ResponseIds& ids, std::string_view finish_reason,
                              const std::vector<TokenLogprob>* logprobs) {
  JsonWriter w = chunk_begin(ids);
  w.key("delta").begin_object().end_object();
  std::string fr(finish_reason_of(ids, finish_reason));
  return chunk_end(w, fr.c_str(), logprobs);
}

std::string chunk_usage_json(const ResponseIds& ids, const Completion& c) {
  JsonWriter w;
  w.begin_object();
  write_head(w, ids, "chat.completion.chunk");
  w.key("choices").begin_array().end_array();
  write_usage(w, c);
  write_timings(w, c.timings);
  write_picolm(w, c);
  w.end_object();
  return w.take();
}

std::string tool_call_response_json(const Completion& c) {
  JsonWriter w;
  w.begin_object();
  w.key("tool_calls").begin_array();
  for (const auto& tc : c.tool_calls) {
    w.begin_object();
    w.key("id").value(tc.id);
    w.key("name").value(tc.name);
    w.key("arguments").raw(tc.arguments_json);
    w.end_object();
  }
  w.end_array();
  if (c.content) w.key("content").value(*c.content);
  w.key("finish_reason").value(c.finish_reason);
  write_usage(w, c);
  w.end_object();
  return w.take();
}

namespace {
void write_model(JsonWriter& w, const std::string& model_id, int64_t created, int64_t n_ctx) {
  w.begin_object();
  w.key("id").value(model_id);
  w.key("object").value("model");
  w.key("created").value(created);
  w.key("owned_by").value("picolm");
  w.key("context_length").value(n_ctx);
  w.end_object();
}

// A logprob as JSON: -inf (a token the mask allowed with a logit of -inf) has no JSON spelling;
// OpenAI writes -9999.0 for "practically impossible", and so do we.
void write_logprob_value(JsonWriter& w, double lp) {
  if (!(lp > -9999.0)) lp = -9999.0;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", lp);
  w.raw(buf);
}

void write_token_bytes(JsonWriter& w, const std::string& token) {
  w.key("bytes").begin_array();
  for (unsigned char c : token) w.value(static_cast<int64_t>(c));
  w.end_array();
}
}  // namespace

std::vector<std::string> served_model_ids(const std::string& model_id) {
  std::vector<std::string> ids{model_id};
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  if (lower(model_id) != kModelAlias) ids.emplace_back(kModelAlias);
  return ids;
}

std::string models_json(const std::string& model_id, int64_t created, int64_t n_ctx) {
  JsonWriter w;
  w.begin_object().key("object").value("list").key("data").begin_array();
  for (const std::string& id : served_model_ids(model_id)) write_model(w, id, created, n_ctx);
  w.end_array().end_object();
  return w.take();
}

std::string model_json(const std::string& model_id, int64_t created, int64_t n_ctx) {
  JsonWriter w;
  write_model(w, model_id, created, n_ctx);
  return w.take();
}

std::string logprobs_json(const std::vector<TokenLogprob>& entries) {
  JsonWriter w;
  w.begin_object().key("content").raw(logprobs_array_json(entries));
  w.key("refusal").null();
  w.end_object();
  return w.take();
}

std::string logprobs_array_json(const std::vector<TokenLogprob>& entries) {
  JsonWriter w;
  w.begin_array();
  for (const TokenLogprob& e : entries) {
    w.begin_object();
    w.key("token").value(e.token);  // a cut UTF-8 sequence shows as U+FFFD; "bytes" has the truth
    w.key("logprob");
    write_logprob_value(w, e.logprob);
    write_token_bytes(w, e.token);
    w.key("top_logprobs").begin_array();
    for (const TopLogprob& t : e.top) {
      w.begin_object();
      w.key("token").value(t.token);
      w.key("logprob");
      write_logprob_value(w, t.logprob);
      write_token_bytes(w, t.token);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  return w.take();
}

namespace {
// {"name": string, "arguments": object (or a string holding one)} -> call. key: "arguments" or "parameters".
bool call_from_object(dom::element obj, GeneratedToolCall& call) {
  if (obj.type() != dom::element_type::OBJECT) return false;
  dom::element name, args;
  if (obj["name"].get(name) || name.type() != dom::element_type::STRING) return false;
  call.name = std::string(std::string_view(name));
  if (obj["arguments"].get(args) && obj["parameters"].get(args)) {
    call.arguments_json = "{}";
    return true;
  }
  if (args.type() == dom::element_type::OBJECT) {
    call.arguments_json = simdjson::minify(args);
    return true;
  }
  if (args.type() == dom::element_type::STRING) {
    dom::parser sub;
    dom::element parsed;
    if (sub.parse(std::string(std::string_view(args))).get(parsed) || parsed.type() != dom::element_type::OBJECT) return false;
    call.arguments_json = simdjson::minify(parsed);
    return true;
  }
  return false;
}
}  // namespace

namespace {

// Index one past the JSON object or array that starts at text[start] ('{' or '['), skipping over
// strings (so brackets or tags inside string values do not count); npos if it does not close.
size_t json_container_end(std::string_view text, size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

void calls_from_json(std::string_view json, std::vector<GeneratedToolCall>& calls) {
  dom::parser parser;
  dom::element root;
  if (parser.parse(std::string(json)).get(root)) return;
  GeneratedToolCall call;
  if (root.type() == dom::element_type::ARRAY) {
    for (dom::element e : dom::array(root))
      if (call_from_object(e, call)) calls.push_back(call);
  } else if (call_from_object(root, call)) {
    calls.push_back(std::move(call));
  }
}

// For a reply cut off by max_tokens inside {"tool_calls":[...: the complete elements of that array.
std::vector<GeneratedToolCall> complete_calls_of_cut_envelope(std::string_view text) {
  std::vector<GeneratedToolCall> calls;
  size_t key = text.find("\"tool_calls\"");
  if (key == std::string_view::npos) return calls;
  size_t i = text.find('[', key);
  if (i == std::string_view::npos) return calls;
  for (++i; i < text.size(); ++i) {
    if (text[i] == ']') break;  // the array itself closed (then the full parse would have worked)
    if (text[i] != '{') continue;
    const size_t end = json_container_end(text, i);
    if (end == std::string_view::npos) break;
    calls_from_json(text.substr(i, end - i), calls);
    i = end - 1;
  }
  return calls;
}

}  // namespace

std::vector<GeneratedToolCall> parse_bare_tool_calls(std::string_view text) {
  std::vector<GeneratedToolCall> calls;
  size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || (text[start] != '{' && text[start] != '[')) return calls;
  const size_t end = json_container_end(text, start);
  if (end != std::string_view::npos) calls_from_json(text.substr(start, end - start), calls);
  return calls;
}

std::vector<GeneratedToolCall> parse_tagged_tool_calls(std::string_view text, std::string_view open_tag,
                                                       std::string_view close_tag) {
  // The call after each open tag is a JSON value; its end is found by a string-aware scan, because
  // the close tag may legitimately appear inside a string argument.
  std::vector<GeneratedToolCall> calls;
  size_t pos = 0;
  while ((pos = text.find(open_tag, pos)) != std::string_view::npos) {
    size_t start = pos + open_tag.size();
    while (start < text.size() && (text[start] == ' ' || text[start] == '\n' || text[start] == '\r' || text[start] == '\t'))
      ++start;
    if (start >= text.size() || (text[start] != '{' && text[start] != '[')) {
      pos = start;
      continue;
    }
    const size_t end = json_container_end(text, start);
    if (end == std::string_view::npos) break;  // cut off mid-call
    calls_from_json(text.substr(start, end - start), calls);
    pos = end;
    if (!close_tag.empty() && text.substr(pos).find(close_tag) != std::string_view::npos) {
      // Skip to after the close tag that follows this call (whitespace may precede it).
      size_t after = pos;
      while (after < text.size() && (text[after] == ' ' || text[after] == '\n' || text[after] == '\r' || text[after] == '\t'))
        ++after;
      if (text.substr(after, close_tag.size()) == close_tag) pos = after + close_tag.size();
    }
  }
  return calls;
}

bool parse_envelope(std::string_view text, std::vector<GeneratedToolCall>& calls, std::optional<std::string>& content) {
  dom::parser parser;
  dom::element root;
  if (parser.parse(std::string(text)).get(root) || root.type() != dom::element_type::OBJECT) {
    calls = complete_calls_of_cut_envelope(text);
    return false;
  }
  dom::element v;
  if (!root["tool_calls"].get(v) && v.type() == dom::element_type::ARRAY) {
    for (dom::element e : dom::array(v)) {
      GeneratedToolCall call;
      if (!call_from_object(e, call)) return false;
      calls.push_back(std::move(call));
    }
    return true;
  }
  if (!root["content"].get(v) && v.type() == dom::element_type::STRING) {
    content = std::string(std::string_view(v));
    return true;
  }
  return false;
}

}  // namespace picolm
