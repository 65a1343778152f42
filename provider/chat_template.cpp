// The conversation as a Jinja context (chat_template.h states the conventions) and the family
// table, which is read from the records in protocols/.
#include "chat_template.h"

#include <ctime>
#include <exception>

#include "calls/call_syntax.h"
#include "protocols/protocol.h"

namespace picolm {
namespace {

namespace jj = jinja;

// OpenAI clients send content: null next to tool_calls; the oracle does the same, so templates
// that test `content is none` or concatenate it see None.
bool content_is_null(const ChatMessage& m) { return m.role == "assistant" && !m.tool_calls.empty() && m.content.empty(); }

// A JSON value as a Python literal: None / True / False, the rest as json.dumps spells it.
void dump_python(const jj::Value& v, std::string& out) {
  switch (v.kind()) {
    case jj::Value::Kind::None: out += "None"; return;
    case jj::Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case jj::Value::Kind::List:
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        dump_python(v.items()[i], out);
      }
      out += ']';
      return;
    case jj::Value::Kind::Dict:
      out += '{';
      for (size_t i = 0; i < v.entries().size(); ++i) {
        if (i) out += ", ";
        out += jj::to_json(jj::Value::string(v.entries()[i].first));
        out += ": ";
        dump_python(v.entries()[i].second, out);
      }
      out += '}';
      return;
    default: out += jj::to_json(v); return;
  }
}

std::string local_strftime(std::string_view format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &tm);
  return std::string(buf, n);
}

bool parse_arguments(const ToolCall& tc, jj::Value* out, std::string* error) {
  std::string err;
  if (jj::parse_json(tc.arguments_json, out, &err)) return true;
  *error = "tool call '" + tc.name + "': arguments are not valid JSON: " + err;
  return false;
}

// One message as the template sees it, keys in the order an OpenAI client writes them.
bool message_value(const ChatMessage& m, const ChatProtocol& p, jj::Value* out, std::string* error) {
  jj::Value v = jj::Value::dict();
  v.set("role", jj::Value::string(m.role));
  std::string content = m.content;
  if (p.calls_in_content && !m.tool_calls.empty()) {
    const CallSyntax* syntax = p.tools.call_syntax;
    if (!syntax || !syntax->calls_into_content) {
      *error = "the template renders no tool calls and the family has no syntax to write them into content";
      return false;
    }
    if (!syntax->calls_into_content(m.tool_calls, p.tools, content, error)) return false;
  }
  if (content_is_null(m) && !p.null_content_as_empty && !p.calls_in_content) v.set("content", jj::Value::none());
  else v.set("content", jj::Value::string(std::move(content)));
  if (m.reasoning_content) v.set("reasoning_content", jj::Value::string(*m.reasoning_content));
  if (!m.tool_calls.empty()) {
    jj::Value calls = jj::Value::list();
    for (const ToolCall& tc : m.tool_calls) {
      jj::Value fn = jj::Value::dict();
      fn.set("name", jj::Value::string(tc.name));
      jj::Value args;
      if (p.arguments_as_text) args = jj::Value::string(tc.arguments_json);
      else if (!parse_arguments(tc, &args, error)) return false;
      fn.set("arguments", std::move(args));
      jj::Value call = jj::Value::dict();
      call.set("id", jj::Value::string(tc.id));
      call.set("type", jj::Value::string("function"));
      call.set("function", std::move(fn));
      calls.items().push_back(std::move(call));
    }
    v.set("tool_calls", std::move(calls));
  }
  if (!m.tool_call_id.empty()) v.set("tool_call_id", jj::Value::string(m.tool_call_id));
  if (!m.name.empty()) v.set("name", jj::Value::string(m.name));
  *out = std::move(v);
  return true;
}

// Phi-4-mini's convention (its model card): the functions of the tool list as JSON text in the
// `tools` field of the system message, which the template writes between <|tool|> and <|/tool|>.
void put_tools_in_system_message(const jj::Value& tools, jj::Value& messages) {
  jj::Value functions = jj::Value::list();
  for (const jj::Value& t : tools.items()) {
    const jj::Value* fn = t.is_dict() ? t.find("function") : nullptr;
    functions.items().push_back(fn && fn->is_dict() ? *fn : t);
  }
  jj::Value text = jj::Value::string(jj::to_json(functions));
  std::vector<jj::Value>& list = messages.items();
  const jj::Value* role = list.empty() ? nullptr : list.front().find("role");
  if (role && role->is_string() && role->as_string() == "system") {
    list.front().set("tools", std::move(text));
    return;
  }
  jj::Value system = jj::Value::dict();
  system.set("role", jj::Value::string("system"));
  system.set("content", jj::Value::string(""));
  system.set("tools", std::move(text));
  list.insert(list.begin(), std::move(system));
}

bool chat_context(const ChatProtocol& p, std::span<const ChatMessage> messages, const RenderOptions& options,
                  jj::Value* out, std::string* error) {
  jj::Value ctx = jj::Value::dict();
  jj::Value list = jj::Value::list();
  list.items().reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jj::Value v;
    if (!message_value(m, p, &v, error)) return false;
    list.items().push_back(std::move(v));
  }
  std::string_view tools_text = options.tools_json;
  while (!tools_text.empty() && (tools_text.front() == ' ' || tools_text.front() == '\n' || tools_text.front() == '\t' ||
                                 tools_text.front() == '\r'))
    tools_text.remove_prefix(1);
  jj::Value tools;
  if (!tools_text.empty()) {
    std::string err;
    if (!jj::parse_json(tools_text, &tools, &err)) {
      *error = "tools is not valid JSON: " + err;
      return false;
    }
    if (!tools.is_none() && !tools.is_list()) {
      *error = "tools must be a JSON array";
      return false;
    }
  }
  const bool has_tools = tools.is_list() && !tools.items().empty();
  if (has_tools && p.tools_in_system_message) put_tools_in_system_message(tools, list);
  ctx.set("messages", std::move(list));
  if (has_tools) ctx.set("tools", std::move(tools));
  ctx.set("add_generation_prompt", jj::Value::boolean(options.add_generation_prompt));
  ctx.set("bos_token", jj::Value::string(options.bos_token));
  ctx.set("eos_token", jj::Value::string(options.eos_token));
  if (!options.date_string.empty()) ctx.set("date_string", jj::Value::string(options.date_string));
  if (options.enable_thinking) ctx.set("enable_thinking", jj::Value::boolean(*options.enable_thinking));
  *out = std::move(ctx);
  return true;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return r;
}

// Every family's reference template, parsed once (immutable afterwards).
struct BuiltinTemplates {
  std::vector<ChatTemplate> by_family;
  BuiltinTemplates() : by_family(static_cast<size_t>(kLastTemplateFamily) + 1) {
    for (size_t f = 0; f < by_family.size(); ++f) {
      auto family = static_cast<TemplateFamily>(f);
      const ChatProtocol& p = protocol_of(family == TemplateFamily::Unknown ? TemplateFamily::ChatML : family);
      std::string error;
      // The records' templates are tested to parse (test_chat_template); a failure leaves the
      // entry empty and every render with it fails with "no template".
      ChatTemplate::create(p.reference_template, family, &by_family[f], &error);
    }
  }
};

}  // namespace

bool ChatTemplate::create(std::string_view text, TemplateFamily family, ChatTemplate* out, std::string* error) {
  ChatTemplate t;
  t.family_ = family;
  if (!jj::Template::parse(text, &t.parsed_, error)) return false;
  *out = std::move(t);
  return true;
}

const ChatTemplate& ChatTemplate::builtin(TemplateFamily family) {
  static const BuiltinTemplates kBuiltin;
  return kBuiltin.by_family[static_cast<size_t>(family)];
}

ChatRenderResult ChatTemplate::render(std::span<const ChatMessage> messages, const RenderOptions& options) const {
  ChatRenderResult result;
  jj::Value ctx;
  if (!chat_context(protocol_of(family_), messages, options, &ctx, &result.error)) return result;
  jj::Options jo;
  jo.strftime_now = local_strftime;
  jj::RenderResult r = parsed_.render(ctx, jo);
  result.ok = r.ok;
  if (!r.ok) {
    result.error = std::move(r.error);
    return result;
  }
  result.text = std::move(r.text);
  const ChatProtocol::TurnReopen& reopen = protocol_of(family_).reopen_turn;
  if (options.add_generation_prompt && !reopen.after.empty() && result.text.ends_with(reopen.after)) result.text += reopen.open;
  return result;
}

ChatRenderResult render_chat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, const RenderOptions& options) {
  return tmpl.render(messages, options);
}

ChatRenderResult render_chat(TemplateFamily family, std::span<const ChatMessage> messages, const RenderOptions& options) {
  if (family == TemplateFamily::Unknown) {
    ChatRenderResult r;
    r.error = "unknown chat template family";
    return r;
  }
  return ChatTemplate::builtin(family).render(messages, options);
}

const FamilyTraits& family_traits(TemplateFamily family) { return protocol_of(family).tools; }

std::string_view family_name(TemplateFamily family) { return family_traits(family).name; }

const ReasoningTraits& reasoning_traits(TemplateFamily family) { return protocol_of(family).reasoning; }

bool template_thinks(TemplateFamily family, std::span<const ChatMessage> messages, std::optional<bool> enable_thinking) {
  const ChatProtocol& p = protocol_of(family);
  return p.thinks ? p.thinks(messages, enable_thinking) : false;
}

std::optional<TemplateFamily> family_from_name(std::string_view name) {
  const std::string key = lower(name);
  for (const ChatProtocol* p : all_protocols()) {
    if (p->tools.name == key) return p->family;
    for (std::string_view alias : p->aliases)
      if (alias == key) return p->family;
  }
  return std::nullopt;
}

TemplateFamily detect_template_family(std::string_view t) {
  const ChatProtocol* p = detect_protocol(t);
  return p ? p->family : TemplateFamily::Unknown;
}

std::string describe_template(std::string_view t) {
  std::string_view first = t.substr(0, t.find('\n'));
  if (first.size() > 80) first = first.substr(0, 80);
  std::string line;
  for (char ch : first) line += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
  static constexpr std::string_view kMarkers[] = {"<｜User｜>/<｜Assistant｜> (DeepSeek)", "<start_of_turn> (Gemma)",
                                                  "[INST] (Mistral)", "<|start_header_id|> (Llama 3)",
                                                  "<|im_start|> (ChatML)", "<|user|>/<|assistant|> (Zephyr, Phi)",
                                                  "none known"};
  return std::to_string(t.size()) + " bytes, first line " + python_json_quote(line) + ", turn markers: " +
         std::string(kMarkers[static_cast<size_t>(turn_markers(t))]);
}

std::string python_json_quote(std::string_view s) { return jj::to_json(jj::Value::string(std::string(s))); }

bool format_json_array_tool_calls(std::span<const ToolCall> calls, const FamilyTraits& t, std::string& out,
                                  std::string* error) {
  jj::Value list = jj::Value::list();
  for (const ToolCall& tc : calls) {
    jj::Value args;
    if (!parse_arguments(tc, &args, error)) return false;
    jj::Value call = jj::Value::dict();
    call.set("name", jj::Value::string(tc.name));
    call.set(std::string(t.arguments_key), std::move(args));
    list.items().push_back(std::move(call));
  }
  try {
    out += std::string(t.tool_call_start) + jj::to_json(list) + std::string(t.tool_call_end);
  } catch (const std::exception& e) {  // nested deeper than tojson goes
    *error = e.what();
    return false;
  }
  return true;
}

bool format_python_tool_calls(std::span<const ToolCall> calls, std::string& out, std::string* error) {
  std::string text = "<|tool_call_start|>[";
  for (size_t i = 0; i < calls.size(); ++i) {
    jj::Value args;
    std::string err;
    if (!parse_arguments(calls[i], &args, &err)) {
      if (error) *error = std::move(err);
      return false;
    }
    if (!args.is_dict()) {
      if (error) *error = "tool call '" + calls[i].name + "': arguments are not a JSON object (keyword arguments need one)";
      return false;
    }
    if (i) text += ", ";
    text += calls[i].name + "(";
    for (size_t k = 0; k < args.entries().size(); ++k) {
      if (k) text += ", ";
      text += args.entries()[k].first + "=";
      dump_python(args.entries()[k].second, text);
    }
    text += ")";
  }
  out += text + "]<|tool_call_end|>";
  return true;
}

bool python_tojson(std::string_view json_text, std::string& out, int indent, std::string* error) {
  jj::Value v;
  std::string err;
  if (!jj::parse_json(json_text, &v, &err)) {
    if (error) *error = std::move(err);
    return false;
  }
  try {
    // json.dumps with an indent separates items by "," and a newline.
    out += jj::to_json(v, indent, indent >= 0 ? "," : ", ");
  } catch (const std::exception& e) {  // nested deeper than tojson goes
    if (error) *error = e.what();
    return false;
  }
  return true;
}

}  // namespace picolm
