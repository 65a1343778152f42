// Volatile lines of a system message: the few lines that change between the requests of one
// conversation (a clock with minute resolution, a date, the current sender, a session line) while
// everything else stays. Left where the client put them, they change the prompt early, and every
// token after them (the tool list, the whole history) is prefilled again on every turn.
//
// The provider moves them instead: each volatile line of the system message is replaced by one
// fixed placeholder line, and their current text is appended to the latest message of the request
// (the user turn, or the tool results of an agent loop) as a context note. The system prompt, the
// tool list and the history then stay a stable prefix that the slots and the prompt cache reuse
// exactly (no KV computed under other earlier tokens is reused), the model sees every current value
// once, at the end where it is fresh, and never an earlier one: only the latest message carries a
// note, and an earlier message is rendered as the client sent it.
//
// Which lines are volatile (VolatileLineTracker::classify):
//   - lines that read as a clock (line_reads_as_clock: a date and a time under a short label, or a
//     date alone), from the first request on, so the clock never enters the cached prefix; with
//     it, the other value lines of its block (between horizontal rules or the message's ends) when
//     that block is short: the sender, the session (a group chat's sender then costs nothing either);
//   - lines that differ from the system message of the same conversation's previous request (a
//     line diff; a conversation is known by its first message, which a chat resends every turn),
//     when few lines differ: a sender, a session or any other line that changes while the rest
//     stays, whatever its wording and wherever it sits; such a line stays volatile for that prompt,
//     and similar prompts of other conversations move it too;
//   - never a line longer than max_line_bytes (content, not a value), never more than max_lines.
// What was learned is kept per system prompt (bounded) and, with a cache directory, in a small file
// beside the prompt cache, so a restart keeps the same layout and its cache files stay useful.
//
// Thread-safety: VolatileLineTracker is internally locked; the free functions are pure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.h"

namespace picolm {

struct VolatileOptions {
  size_t max_lines = 8;         // more lines than this differ: the prompt changed, it is not a clock
  size_t max_line_bytes = 300;  // a longer line is content, never moved
  size_t max_prompts = 64;      // system prompts remembered (least recently used go first)
  std::string state_file;       // "" = in memory only; else loaded at start, rewritten on change
};

// The line a volatile line is replaced with in the system message (fixed, so the prefix is stable).
inline constexpr std::string_view kVolatilePlaceholder = "(current value: see <current_context> in the latest message)";

// True if the line reads as a clock: a calendar date with a time of day under a short label
// ("2026-11-26 09:44 (Thursday)", "Current time: 2026-11-26T09:44Z"), or a date alone or with a
// label of at most two words ("Today is Nov 26, 2026"), never a markdown heading. A line that only
// mentions a time or a date among other words (a dated memory entry, a schedule) is content.
bool line_reads_as_clock(std::string_view line);

// The lines of `text` split at '\n' (joining them with '\n' gives `text` back).
std::vector<std::string_view> split_lines(std::string_view text);

class VolatileLineTracker {
 public:
  explicit VolatileLineTracker(VolatileOptions opts);

  // The indexes (into split_lines(system_text)) of the volatile lines, ascending; remembers the
  // prompt for the next call. `conversation` (conversation_key; 0 = unknown) says which requests
  // belong to one conversation: only there do changed lines become volatile.
  std::vector<size_t> classify(std::string_view system_text, uint64_t conversation);

  // Prompts remembered (for tests and metrics).
  size_t remembered() const;

 private:
  struct Entry {
    std::vector<uint64_t> hashes;   // one per line
    std::vector<uint8_t> volatile_; // 1 = volatile
    uint64_t key = 0;               // hash of the stable lines, in order
    uint64_t conversation = 0;      // conversation_key of the request
  };
  void load();
  void save_locked() const;

  VolatileOptions opts_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
};

// What the requests of one conversation share: its first message after the system message (a
// chat resends its whole history every turn). 0 when there is none.
uint64_t conversation_key(std::span<const ChatMessage> messages);

struct RelocatedMessages {
  std::vector<ChatMessage> messages;
  std::vector<std::string> moved;  // the moved lines, in their order in the system message
  size_t note_message = 0;         // index of the message that carries the note
};

// messages[0] must be a system message; `lines` index split_lines(messages[0].content). Each run of
// volatile lines becomes kVolatilePlaceholder; the lines, with the heading or label line just
// above each run, are appended to the last user or tool message as
// "\n\n<current_context>\n...\n</current_context>". With no user or tool message after the system
// message, or no lines, the messages are returned unchanged (moved empty).
RelocatedMessages relocate_volatile_lines(std::span<const ChatMessage> messages, std::span<const size_t> lines);

}  // namespace picolm
