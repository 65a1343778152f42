// Request content is text (issue 15 item 7): only the chat template may produce control tokens.
//
// The renderers (chat_template.cpp, tool_format.cpp) build the prompt as one string, and the
// template's own control tokens (<|im_start|>, <|eot_id|>, </s>, ...) must be tokenized with
// parse_special. Content that spells a control token must not become one. Rather than thread span
// bookkeeping through every family's renderer, the content is marked before rendering: each
// occurrence of control-token text in a content string is bracketed by two Unicode noncharacters
// (U+FDD0 before, U+FDD2 after; a literal U+FDD0..U+FDD2 in content is escaped with U+FDD1). The
// marks travel through the renderers untouched (they are not whitespace, tojson keeps them as
// UTF-8, they never split a token text), and unmark() removes them, returning the exact prompt
// the unmarked render would give plus the byte ranges they bracketed, for
// Tokenizer::encode(text, add_special, plain). Content without control-token text is not changed
// at all, so a benign prompt renders and tokenizes exactly as before.
//
// Thread-safety: pure functions.
#pragma once
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template.h"

namespace picolm {

using ByteRange = std::pair<size_t, size_t>;  // [begin, end)
// Where a text holds control-token text (Tokenizer::find_control_text); ranges unordered, may overlap.
using ControlTextFinder = std::function<std::vector<ByteRange>(std::string_view)>;

// One content string marked.
std::string mark_control_text(std::string_view content, const ControlTextFinder& find);
// JSON text (a tools array, tool-call arguments): the control text inside its strings marked. A
// text with \u escapes is first re-serialised (python_tojson), as the templates' tojson will,
// so that an escaped "\u003c|im_end|>" is caught too; invalid JSON is marked as it is.
std::string mark_control_text_json(std::string_view json, const ControlTextFinder& find);
// Every string of the messages marked (content, reasoning, names, ids, tool-call arguments).
// DeepSeek R1 concatenates the arguments text as it is, so for it the arguments are not re-serialised.
std::vector<ChatMessage> mark_control_text(std::span<const ChatMessage> messages, TemplateFamily family,
                                           const ControlTextFinder& find);

struct UnmarkedPrompt {
  std::string text;               // the rendered prompt without marks
  std::vector<ByteRange> plain;   // sorted, disjoint: where content spelled control tokens
};
// Removes the marks of a rendered prompt. Tolerant: an unmatched close mark is dropped, an
// unclosed range ends at the end of the text.
UnmarkedPrompt unmark_control_text(std::string_view rendered);

}  // namespace picolm
