// Unicode helpers for the tokenizers (engine-internal): UTF-8 decoding the way llama.cpp does it,
// general-category groups and White_Space from the generated table (engine/unicode_data.cpp, made
// by tools/gen_unicode_tables.py), and GPT-2's byte <-> code point mapping.
// Thread-safety: stateless functions over constant tables.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace picolm {

// Category groups of the Unicode general category ("Cn", unassigned, is Unassigned).
enum class UnicodeCategory : uint8_t {
  Unassigned = 0, Letter = 1, Number = 2, Punctuation = 3, Mark = 4, Symbol = 5, Separator = 6, Other = 7,
};

struct CodepointFlags {
  uint8_t bits = 0;  // low nibble: UnicodeCategory; 0x10: White_Space
  UnicodeCategory category() const { return static_cast<UnicodeCategory>(bits & 0x0F); }
  bool is_letter() const { return category() == UnicodeCategory::Letter; }
  bool is_number() const { return category() == UnicodeCategory::Number; }
  bool is_punctuation() const { return category() == UnicodeCategory::Punctuation; }
  bool is_whitespace() const { return (bits & 0x10) != 0; }
};

CodepointFlags unicode_flags(uint32_t cpt);
const char* unicode_data_version();

// Length of the UTF-8 sequence that starts with this byte, from its high nibble alone (1 for
// continuation bytes), as llama.cpp's tokenizers split text into symbols.
inline size_t utf8_seq_len(uint8_t first) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[first >> 4];
}

// Decodes UTF-8; every byte that does not start a complete sequence becomes U+FFFD.
std::vector<uint32_t> utf8_to_codepoints(std::string_view text);
void append_utf8(std::string& out, uint32_t cpt);

// Well-formed UTF-8 (Unicode Table 3-7). Appends the well-formed part of `in` to `out`, ill-formed
// bytes as U+FFFD. If hold_partial_tail, a truncated but so far valid sequence at the very end is
// not consumed. Returns the number of bytes consumed.
size_t sanitize_utf8(std::string_view in, bool hold_partial_tail, std::string& out);

// GPT-2 byte-level BPE: each byte is shown as a printable code point.
uint32_t gpt2_byte_to_codepoint(uint8_t byte);
int gpt2_codepoint_to_byte(uint32_t cpt);  // -1 if cpt is not in the mapping

}  // namespace picolm
