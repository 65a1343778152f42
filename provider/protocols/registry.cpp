// The family records in detection order, and the generic record for templates none recognises.
#include <array>

#include "protocol.h"

namespace picolm {
namespace {

// The order detection tries them; first match wins (each detect() also checks its turn markers, or,
// Gemma 4's, a text only its family writes, so the order only matters within one kind of marker).
constexpr std::array<const ChatProtocol*, 19> kRecords = {
    &kDeepSeekR1Protocol, &kGemma4Protocol,  &kGemma2Protocol,  &kGemma3Protocol, &kMistralNemoProtocol,
    &kLlama31Protocol,    &kLlama32Protocol, &kSmolLM3Protocol, &kLfm2Protocol,   &kLfm25Protocol,
    &kQwen35Protocol,     &kQwen3Protocol,   &kQwen25Protocol,  &kHermesProtocol, &kChatMLProtocol,
    &kPhi35Protocol,      &kZephyrProtocol,  &kPhi4MiniProtocol,
    &kGranite4Protocol,
};

}  // namespace

// A template no record knows: rendered as written; no call syntax of its own, so tools are lowered
// into the system prompt and calls go through the JSON envelope (tool_format.h); the turn ends at
// the model's end-of-generation tokens.
const ChatProtocol kGenericProtocol = {
    .family = TemplateFamily::Unknown,
    .aliases = {},
    .detect = nullptr,
    .reference_template = {},
    .reference_origin = {},
    .tools = {"unknown", false, nullptr, "", "", "", false, {}},
    .reasoning = {},
    .thinks = nullptr,
};

TurnMarkers turn_markers(std::string_view t) {
  if (has_text(t, "<｜User｜>") && has_text(t, "<｜Assistant｜>")) return TurnMarkers::DeepSeek;
  if (has_text(t, "<start_of_turn>")) return TurnMarkers::Gemma;
  if (has_text(t, "[INST]")) return TurnMarkers::Inst;
  if (has_text(t, "<|start_header_id|>")) return TurnMarkers::Llama3Header;
  if (has_text(t, "<|im_start|>")) return TurnMarkers::ImStart;
  if (has_text(t, "<|user|>") && has_text(t, "<|assistant|>")) return TurnMarkers::UserAssistant;
  return TurnMarkers::Other;
}

const ChatProtocol& protocol_of(TemplateFamily family) {
  for (const ChatProtocol* p : kRecords)
    if (p->family == family) return *p;
  return kGenericProtocol;
}

std::span<const ChatProtocol* const> all_protocols() { return kRecords; }

const ChatProtocol* detect_protocol(std::string_view template_text) {
  for (const ChatProtocol* p : kRecords)
    if (p->detect && p->detect(template_text)) return p;
  return nullptr;
}

// Qwen3 / Qwen3.5: only `enable_thinking is false` turns it off.
bool thinks_unless_disabled(std::span<const ChatMessage>, std::optional<bool> enable_thinking) {
  return enable_thinking.value_or(true);
}
bool thinks_always(std::span<const ChatMessage>, std::optional<bool>) { return true; }

}  // namespace picolm
