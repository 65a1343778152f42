// A PicoClaw agent session as /v1/chat/completions request bodies (issue 27), for picolm-agentbench,
// the cluster test and the prompt-cache tests: what sipeed/picoclaw's BuildMessagesFromPrompt sends.
// One system message: a static part (identity, AGENT.md, SOUL.md, USER.md, skill list, memory;
// ~2,300 tokens, always the same bytes) joined by "\n\n---\n\n" to the dynamic block
//   ## Current Time\n2026-11-26 09:44 (Thursday)\n\n## Runtime\n...\n\n## Current Session\n
//   Channel: telegram\nChat ID: 581234907\n\n## Current Sender\nCurrent sender: Anna (ID: 581234907)
// (and an optional "CONTEXT_SUMMARY: ..." part), then the history, then the new user message, with
// PicoClaw's tool list and tool_choice "auto". The history grows turn by turn with assistant
// tool_calls, short tool results and final answers.
// Deterministic: the same options give the same bytes. Thread-safety: a pure function.
#pragma once
#include <string>
#include <vector>

namespace picolm::tools {

struct AgentSessionOptions {
  int turns = 8;                  // requests in the session (the scripted chat repeats after 8)
  int minutes_between_turns = 3;  // the clock line advances this much per turn
  bool clock_frozen = false;      // every turn shows the first turn's minute
  // Where the dynamic block sits in the system message: after the static part (PicoClaw), between
  // its workspace files and its skill list, or before everything.
  enum class DynamicAt { End, Middle, Start };
  DynamicAt at = DynamicAt::End;
  bool sender_changes = false;    // a group chat: the sender line alternates between two people
  bool with_summary = false;      // a CONTEXT_SUMMARY part after the dynamic block (updated halfway)
  int max_tokens = 16;
  bool stream = false;            // "stream": true with stream_options.include_usage
  std::string model = "local";
};

struct AgentTurn {
  std::string request_json;  // the whole /v1/chat/completions body
  // The dynamic block's values as this turn shows them (time line, runtime line, the session's
  // channel and chat lines, sender line, summary text if any): each must reach the model once.
  std::vector<std::string> current_values;
  // Values earlier turns showed that differ from every current one (an older minute, another
  // sender, the old summary): the model must never see them.
  std::vector<std::string> earlier_values;
};

std::vector<AgentTurn> make_agent_session(const AgentSessionOptions& options);

// The static part alone (what precedes "\n\n---\n\n## Current Time" in PicoClaw's layout).
const std::string& agent_static_prompt();

// JSON string literal of `s` (quotes included), escaping per RFC 8259.
std::string json_string(const std::string& s);

}  // namespace picolm::tools
