// Thinking ("reasoning") output of models that write <think> ... </think> before their answer
// (Qwen3, SmolLM3, DeepSeek R1): the split of the generated text into reasoning and content, as
// OpenAI-compatible servers expose it (message.reasoning_content / delta.reasoning_content, as the
// llama.cpp server, vLLM and the DeepSeek API do), and the per-request thinking plan (on or off, how
// many tokens thinking may take before the provider closes it).
//
// The scheduler runs one ReasoningSplitter per generation; everything it reports as content goes
// on to the stop-string, tool-call trigger and grammar logic as if the model had written only that.
//
// Thread-safety: a ReasoningSplitter belongs to one generation (one thread); the free functions are
// pure.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "chat_template.h"

namespace picolm {

// OpenAI's reasoning_effort. None turns thinking off; the others turn it on with a budget.
enum class ReasoningEffort : uint8_t { None, Low, Medium, High };
// --reasoning: the provider's default when a request says nothing. Auto = what the chat template
// does by itself (Qwen3 and SmolLM3 think by default).
enum class ReasoningMode : uint8_t { Auto, On, Off };

std::optional<ReasoningEffort> reasoning_effort_from_name(std::string_view name);  // none|minimal|low|medium|high|xhigh|max
std::optional<ReasoningMode> reasoning_mode_from_name(std::string_view name);      // auto|on|off

// The default share of max_tokens thinking may use, and its ceiling in tokens:
//   low 1/4 (at most 1024), medium 1/2 (at most 4096), high 3/4 (at most 16384); none 0.
// A request with thinking on and no reasoning_effort gets medium. The rest of max_tokens is the
// answer's; a constrained answer additionally keeps the room issue 13's budget helper asks for.
int64_t thinking_budget_tokens(ReasoningEffort effort, int64_t max_tokens);

// What one generation does about thinking; decided by Engine::prepare from the request, the
// provider default and the template.
struct ThinkingPlan {
  bool split = false;         // the family marks reasoning: run a ReasoningSplitter over the reply
  bool enabled = false;       // the rendered prompt lets the model think
  bool force_open = false;    // the provider writes `open` + "\n" as the first tokens of the reply
  bool start_inside = false;  // the prompt itself ends inside an open block (DeepSeek R1)
  ReasoningEffort effort = ReasoningEffort::None;  // None: thinking gets no tokens
  int64_t budget = 0;         // thinking tokens (the forced open included) before close is forced
  std::string open;           // "<think>"
  std::string close;          // "</think>"
  std::string separator;      // written after a forced close: the template's "\n\n" (Qwen3)
  // Plain replies of a family whose answer may carry more blocks or stray markers (Gemma 4's
  // "<|channel>", ChatProtocol::answer_block_marker); "" otherwise. See ReasoningSplitter.
  std::string block_marker;
};

// Decides the plan. effort / enable_thinking come from the request (nullopt = not given);
// chat_template_kwargs.enable_thinking wins over reasoning_effort, which wins over the default.
// RenderOptions::enable_thinking must then be set to render_enable_thinking. The budget is sized
// later (size_thinking_budget), once max_tokens is known.
ThinkingPlan plan_thinking(TemplateFamily family, std::span<const ChatMessage> messages,
                           std::optional<bool> enable_thinking, std::optional<ReasoningEffort> effort,
                           ReasoningMode default_mode, std::optional<bool>& render_enable_thinking);
// Sets budget (thinking_budget_tokens of the plan's effort) and force_open (thinking on with a
// budget above zero, and the prompt did not open the block already).
void size_thinking_budget(ThinkingPlan& plan, int64_t max_tokens);

struct ReasoningPiece {
  std::string reasoning;  // newly decided reasoning text
  std::string content;    // newly decided answer text
};

// Splits generated text, fed piece by piece in any chunking, into reasoning and content:
//   - a reply that starts (after optional whitespace) with `open` is reasoning up to `close`;
//     a reply that starts otherwise is all content (a think block is only recognised first);
//   - reasoning is trimmed of whitespace after `open` and before `close`, content of whitespace
//     after `close` (the template's separator), so streamed and final texts agree;
//   - text that may still turn out to be a tag (a prefix of `open` at the start, of `close` in
//     reasoning) or trailing whitespace of reasoning is held back until it is decided.
// With a `marker` (Gemma 4: "<|channel>", of which `open` "<|channel>thought" is the marker plus
// a name), the answer is read as llama.cpp 3f545be reads Gemma 4's replies without tools
// (common/chat.cpp: message = thought content, repeated): a block anywhere in the answer, after
// any number of extra markers, is reasoning too; the first marker that opens no block, or a
// `close` outside one, ends the answer there (State::Ended: the rest is dropped, ended() says so,
// and the caller stops the reply), so stray "<channel|>" or an empty "<|channel>thought\n<channel|>"
// after the text never reach the content.
class ReasoningSplitter {
 public:
  enum class State : uint8_t { Start, Thinking, Answer, Ended };

  ReasoningSplitter(std::string open, std::string close, bool start_inside, std::string marker = {});

  ReasoningPiece push(std::string_view text);
  // End of the reply: what was held is released (an unclosed block's reasoning, an incomplete
  // open tag as content).
  ReasoningPiece finish();

  State state() const { return state_; }
  bool in_answer() const { return state_ == State::Answer || state_ == State::Ended; }
  bool ended() const { return state_ == State::Ended; }

 private:
  void run(ReasoningPiece& out);
  // Answer text with a marker: content up to the next marker or close, then what follows them.
  // False when more text is needed to decide.
  bool answer_with_marker(ReasoningPiece& out);

  std::string open_, close_, marker_;
  State state_;
  std::string held_;      // text not decided yet
  bool skip_ws_ = false;  // whitespace at the start of reasoning or of the answer is dropped
};

}  // namespace picolm
