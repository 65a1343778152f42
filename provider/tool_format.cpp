// Conversation lowering for templates without tool syntax; see tool_format.h.
#include "tool_format.h"


#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <utility>

#include "protocols/protocol.h"
#include "utf8_out.h"

namespace picolm {
namespace {

// Splits the top level of a JSON array (already validated) into its element texts.
std::vector<std::string_view> split_array(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (depth == 1 && start == std::string_view::npos && !space && c != ',' && c != ']') start = i;
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (depth == 1 && start != std::string_view::npos) {  // closing the outer array
        out.push_back(text.substr(start, i - start));
        start = std::string_view::npos;
      }
      --depth;
    } else if (c == ',' && depth == 1 && start != std::string_view::npos) {
      out.push_back(text.substr(start, i - start));
      start = std::string_view::npos;
    }
  }
  for (auto& e : out)
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t' || e.back() == '\n' || e.back() == '\r')) e.remove_suffix(1);
  return out;
}

std::string json_quote(std::string_view s) { return python_json_quote(s); }

bool is_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  return true;
}

// One tool per line, as Qwen2.5 and Hermes list them.
bool tool_lines(std::string_view tools_json, std::string& out, std::string& error) {
  std::string normalized;
  if (!python_tojson(tools_json, normalized, -1, &error)) {
    error = "tools is not valid JSON: " + error;
    return false;
  }
  if (normalized.empty() || normalized.front() != '[') {
    error = "tools must be a JSON array";
    return false;
  }
  for (std::string_view tool : split_array(normalized)) {
    out += '\n';
    out += tool;
  }
  return true;
}

std::string instructions(bool native_lowering, const std::string& lines, LoweredToolSyntax syntax) {
  if (native_lowering) {
    // The wording of llama.cpp's DeepSeek R1 template, in the model's native call syntax.
    return "You can call any of the following function tools to satisfy the user's requests:" + lines +
           "\n\nExample function tool call syntax:\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
           "example_function_name\n```json\n{\n  \"arg1\": \"some_value\"\n  ...\n}\n```\n<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  }
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" +
      lines + "\n</tools>\n\n";
  if (syntax != LoweredToolSyntax::Envelope) {
    s += "For each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call>";
  } else {
    s += "Reply with one JSON object and nothing else: {\"tool_calls\": [{\"name\": <function-name>, "
         "\"arguments\": <args-json-object>}]} to call functions, or {\"content\": <your reply as a JSON "
         "string>} to answer directly.";
  }
  return s;
}

void append_turn(std::vector<ChatMessage>& out, ChatMessage m) {
  // Merge consecutive user turns (tool results followed by a question) into one.
  if (m.role == "user" && !out.empty() && out.back().role == "user" && out.back().tool_calls.empty()) {
    out.back().content += "\n\n" + m.content;
    return;
  }
  out.push_back(std::move(m));
}

}  // namespace

bool family_needs_tool_lowering(TemplateFamily family) { return !family_traits(family).renders_tool_list; }

std::string format_lowered_tool_calls(std::span<const ToolCall> calls, LoweredToolSyntax syntax, std::string* error) {
  std::string out;
  if (syntax == LoweredToolSyntax::Envelope) out += "{\"tool_calls\": [";
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string args;
    std::string err;
    if (!python_tojson(calls[i].arguments_json, args, -1, &err)) {
      if (error) *error = "tool call '" + calls[i].name + "': arguments are not valid JSON: " + err;
      return {};
    }
    const std::string name = json_quote(calls[i].name);
    const std::string call = "{\"name\": " + name + ", \"arguments\": " + args + "}";
    if (syntax != LoweredToolSyntax::Envelope) {
      if (i) out += '\n';
      out += "<tool_call>\n" + call + "\n</tool_call>";
    } else {
      if (i) out += ", ";
      out += call;
    }
  }
  if (syntax == LoweredToolSyntax::Envelope) out += "]}";
  return out;
}

LoweredConversation lower_tool_conversation(TemplateFamily family, std::span<const ChatMessage> messages,
                                            std::string_view tools_json, LoweredToolSyntax syntax) {
  LoweredConversation r;
  if (!family_needs_tool_lowering(family)) {
    r.ok = true;
    r.messages.assign(messages.begin(), messages.end());
    return r;
  }
  std::string lines;
  const bool has_tools = !is_blank(tools_json);
  if (has_tools && !tool_lines(tools_json, lines, r.error)) return r;
  const bool any_tools = has_tools && !lines.empty();
  const ChatProtocol& protocol = protocol_of(family);
  const bool native_lowering = protocol.native_lowering && syntax == LoweredToolSyntax::Native;
  const std::string preamble = any_tools ? instructions(native_lowering, lines, syntax) : std::string();

  std::vector<ChatMessage> out;
  size_t first = 0;
  std::string system_text;
  bool had_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system_text = messages[0].content;
    had_system = true;
    first = 1;
  }
  if (!preamble.empty()) system_text = had_system ? system_text + "\n\n" + preamble : preamble;

  // Gemma 2 refuses a system role: its system text opens the first user turn instead.
  const bool system_in_user = protocol.system_in_first_user;
  if (!system_text.empty() || had_system) {
    if (!system_in_user) {
      ChatMessage sys;
      sys.role = "system";
      sys.content = system_text;
      out.push_back(std::move(sys));
    }
  }
  std::string pending_user_prefix = system_in_user ? system_text : std::string();

  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (native_lowering) {  // native call and result rendering
      out.push_back(m);
      // The R1 template shows either the content or the calls of a turn (calls only when content
      // is null); keep the calls.
      if (!m.tool_calls.empty()) out.back().content.clear();
      continue;
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::string err;
      std::string calls = format_lowered_tool_calls(m.tool_calls, syntax, &err);
      if (!err.empty()) {
        r.error = std::move(err);
        return r;
      }
      ChatMessage a;
      a.role = "assistant";
      a.content = m.content.empty() ? calls : m.content + "\n" + calls;
      out.push_back(std::move(a));
    } else if (m.role == "assistant" && any_tools && syntax == LoweredToolSyntax::Envelope) {
      // Past replies in the shape the model is told to answer in (and was made to, by the grammar).
      ChatMessage a = m;
      std::string_view text = m.content;
      // R1's template keeps only what follows the last </think>; do so before wrapping, or the
      // split would cut the JSON.
      const size_t think = text.rfind("</think>");
      if (protocol.answer_after_last_think && think != std::string_view::npos) text.remove_prefix(think + 8);
      a.content = "{\"content\": " + json_quote(text) + "}";
      out.push_back(std::move(a));
    } else if (m.role == "tool") {
      ChatMessage u;
      u.role = "user";
      u.content = "<tool_response>\n" + m.content + "\n</tool_response>";
      // Results of one round of calls form one user turn, joined like Qwen2.5 joins them.
      if (i > first && messages[i - 1].role == "tool" && !out.empty() && out.back().role == "user") {
        out.back().content += "\n" + u.content;
      } else {
        append_turn(out, std::move(u));
      }
    } else if (m.role == "user") {
      append_turn(out, m);
    } else {
      out.push_back(m);
    }
  }
  if (!pending_user_prefix.empty()) {
    for (auto& m : out) {
      if (m.role == "user") {
        m.content = pending_user_prefix + "\n\n" + m.content;
        pending_user_prefix.clear();
        break;
      }
    }
    if (!pending_user_prefix.empty()) {  // no user turn at all
      ChatMessage u;
      u.role = "user";
      u.content = pending_user_prefix;
      out.insert(out.begin(), std::move(u));
    }
  }
  r.ok = true;
  r.messages = std::move(out);
  return r;
}

}  // namespace picolm
