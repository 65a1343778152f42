// Pre-tokenizers for byte-level BPE vocabularies (engine-internal, used by tokenizer.cpp).
//
// A pre-tokenizer is the ordered list of regexes llama.cpp uses for a "tokenizer.ggml.pre" name.
// Each regex splits every current fragment into its matches and the text between them, and the
// next regex works on the fragments. The regexes are not interpreted by a general engine: each has
// a shape (class run, optional prefix + class run, GPT-2 pattern, Llama-3 pattern, ...) with a
// hand-written matcher that follows ECMAScript leftmost-first backtracking semantics; character
// classes are parsed from the regex text, so the source keeps the upstream class strings (with
// non-ASCII characters written as \u escapes).
// Thread-safety: immutable after construction.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "result.h"
#include "unicode.h"

namespace picolm {

// A bracket expression such as [\p{P}\$\+<=>\^~\|] or [^\s\p{L}\p{N}].
struct CharClass {
  uint8_t categories = 0;   // bit (1 << UnicodeCategory) for \p{L}, \p{N}, \p{P}
  bool whitespace = false;  // \s
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive literal code point ranges

  // Parses "[...]" (UTF-8). Errors name the offending part.
  static Result<CharClass> parse(std::string_view bracket_expr);
  bool contains(uint32_t cpt, CodepointFlags flags) const;
};

enum class SplitShape : uint8_t {
  Gpt2,          // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  Llama3,        // (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // GPT-4o (o200k; Phi-4-mini), as llama.cpp writes it, with U = (?=[\p{L}])([^a-z]) and
  // L = (?=[\p{L}])([^A-Z]) (a non-ASCII letter is both) and C = (?:'[sS]|'[tT]|'[rR][eE]|...)?:
  // [^\r\n\p{L}\p{N}]?U*L+C|[^\r\n\p{L}\p{N}]?U+L*C|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Gpt4o,
  ClassOne,      // [C]
  ClassRun,      // P?[C]+ where the optional prefix P is \s (prefix_ws), ' ' (prefix_space) or absent
  ClassThree,    // [C][C][C]
  TrailingSpace, // \s+$
};

struct SplitRule {
  SplitShape shape = SplitShape::Gpt2;
  CharClass cls;
  bool prefix_ws = false;
  bool prefix_space = false;
  int max_digits = 3;  // Llama3 shape only
};

class PreTokenizer {
 public:
  // The pre-tokenizer llama.cpp picks for a tokenizer.ggml.pre value ("" means "default").
  static Result<PreTokenizer> for_name(std::string_view pre);

  // Splits text into words, each the UTF-8 of its code points (ill-formed input bytes have become
  // U+FFFD, as in llama.cpp). Concatenating the words gives the normalised text back.
  void split(std::string_view text, std::vector<std::string>& words) const;

  const std::vector<SplitRule>& rules() const { return rules_; }

 private:
  std::vector<SplitRule> rules_;
};

}  // namespace picolm
