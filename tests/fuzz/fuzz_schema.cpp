// libFuzzer target: the JSON-Schema and tool-list compilers, then a short walk of a matcher over a
// byte vocabulary. Any input must compile or give errors; a compiled grammar must give masks.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace g = picolm::grammar;

namespace {

// 256 single-byte tokens, a few multi-byte ones, and an end-of-generation id.
std::shared_ptr<const g::Vocabulary> byte_vocab() {
  static const std::shared_ptr<const g::Vocabulary> v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.emplace_back(1, char(b));
    for (const char* t : {"\"", "\":", "{\"", "true", "false", "null", "\\u00", "  ", "\n"}) toks.emplace_back(t);
    toks.emplace_back();  // eog
    return g::Vocabulary::create(std::move(toks), {int32_t(256 + 9)});
  }();
  return v;
}

void walk(const std::shared_ptr<const g::Grammar>& grammar) {
  auto vocab = byte_vocab();
  g::Matcher m(grammar, vocab);
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  // Always take the lowest allowed token: deterministic, and it reaches deep into the grammar.
  for (int step = 0; step < 64 && !m.is_terminated(); ++step) {
    m.fill_mask(mask.data());
    int32_t pick = -1;
    for (size_t w = 0; w < mask.size() && pick < 0; ++w)
      if (mask[w]) pick = int32_t(w * 32 + size_t(__builtin_ctz(mask[w])));
    if (pick < 0 || !m.accept_token(pick)) break;
  }
  (void)m.min_completion_bytes();
  (void)m.shortest_completion();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  g::CompileOptions co;
  co.max_grammar_bytes = size_t(4) << 20;  // keeps each input's work small; the bound is itself tested
  co.whitespace = size % 2 ? g::Whitespace::Natural : g::Whitespace::Compact;
  g::CompileResult r = g::compile_json_schema(text, co);
  if (r.ok()) walk(r.grammar);
  else (void)r.error_text();
  g::ToolListOptions to;
  to.schema = co;
  to.format = size % 3 ? g::ToolCallFormat::JsonObject : g::ToolCallFormat::Hermes;
  g::CompileResult t = g::compile_tool_list(text, to);
  if (t.ok()) walk(t.grammar);
  return 0;
}
