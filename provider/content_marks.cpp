#include "content_marks.h"

#include <algorithm>

#include "protocols/protocol.h"

namespace picolm {
namespace {

// U+FDD0..U+FDD2 are noncharacters: valid UTF-8 that no text is meant to contain, so the renderers
// pass them through and no template produces them.
constexpr std::string_view kOpen = "\xEF\xB7\x90";    // U+FDD0: content control text starts
constexpr std::string_view kEscape = "\xEF\xB7\x91";  // U+FDD1: the next mark is literal content
constexpr std::string_view kClose = "\xEF\xB7\x92";   // U+FDD2: content control text ends

bool is_mark_at(std::string_view s, size_t i) {
  return i + 3 <= s.size() && s[i] == '\xEF' && s[i + 1] == '\xB7' &&
         (s[i + 2] == '\x90' || s[i + 2] == '\x91' || s[i + 2] == '\x92');
}

}  // namespace

std::string mark_control_text(std::string_view content, const ControlTextFinder& find) {
  std::vector<ByteRange> r = find(content);
  bool has_mark = false;
  for (size_t i = 0; i + 3 <= content.size() && !has_mark; ++i) has_mark = is_mark_at(content, i);
  if (r.empty() && !has_mark) return std::string(content);
  // Merge overlapping or touching occurrences into one bracketed range.
  std::sort(r.begin(), r.end());
  std::vector<ByteRange> merged;
  for (const ByteRange& x : r) {
    if (!merged.empty() && x.first <= merged.back().second) merged.back().second = std::max(merged.back().second, x.second);
    else merged.push_back(x);
  }
  std::string out;
  out.reserve(content.size() + 6 * merged.size() + 16);
  size_t k = 0;
  for (size_t i = 0; i < content.size();) {
    if (k < merged.size() && merged[k].first == i) out += kOpen;
    if (is_mark_at(content, i)) {
      out += kEscape;
      out.append(content.substr(i, 3));
      i += 3;
    } else {
      out += content[i++];
    }
    // A range can end inside an escaped mark only if a token text contains a noncharacter; close
    // at the first byte boundary at or after its end.
    while (k < merged.size() && merged[k].first < i && merged[k].second <= i) {
      out += kClose;
      ++k;
    }
  }
  return out;
}

std::string mark_control_text_json(std::string_view json, const ControlTextFinder& find) {
  if (json.find("\\u") != std::string_view::npos) {
    std::string normal;
    if (python_tojson(json, normal)) return mark_control_text(normal, find);
  }
  return mark_control_text(json, find);
}

std::vector<ChatMessage> mark_control_text(std::span<const ChatMessage> messages, TemplateFamily family,
                                           const ControlTextFinder& find) {
  std::vector<ChatMessage> out(messages.begin(), messages.end());
  const bool arguments_as_text = protocol_of(family).arguments_as_text;
  for (ChatMessage& m : out) {
    // role is not content: the template decides what a role becomes, and an unknown role is
    // rejected or rendered by the template's own rules.
    m.content = mark_control_text(m.content, find);
    m.name = mark_control_text(m.name, find);
    m.tool_call_id = mark_control_text(m.tool_call_id, find);
    if (m.reasoning_content) m.reasoning_content = mark_control_text(*m.reasoning_content, find);
    for (ToolCall& c : m.tool_calls) {
      c.id = mark_control_text(c.id, find);
      c.name = mark_control_text(c.name, find);
      // Arguments the template concatenates as text are marked as text; otherwise they are parsed
      // JSON, whose strings are marked.
      c.arguments_json = arguments_as_text ? mark_control_text(c.arguments_json, find)
                                           : mark_control_text_json(c.arguments_json, find);
    }
  }
  return out;
}

UnmarkedPrompt unmark_control_text(std::string_view rendered) {
  UnmarkedPrompt u;
  u.text.reserve(rendered.size());
  bool open = false;
  size_t begin = 0;
  for (size_t i = 0; i < rendered.size();) {
    if (!is_mark_at(rendered, i)) {
      u.text += rendered[i++];
      continue;
    }
    const std::string_view mark = rendered.substr(i, 3);
    i += 3;
    if (mark == kEscape) {
      if (is_mark_at(rendered, i)) {
        u.text.append(rendered.substr(i, 3));
        i += 3;
      }
    } else if (mark == kOpen) {
      if (!open) {
        open = true;
        begin = u.text.size();
      }
    } else if (open) {  // kClose
      open = false;
      if (u.text.size() > begin) u.plain.emplace_back(begin, u.text.size());
    }
  }
  if (open && u.text.size() > begin) u.plain.emplace_back(begin, u.text.size());
  return u;
}

}  // namespace picolm
