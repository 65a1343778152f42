// Internal: regular expressions (an ECMA-262 subset) compiled to byte-level DFAs over the UTF-8
// bytes of a decoded string value, plus the few DFA operations the schema compiler needs
// (intersection, difference, literal sets).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace picolm::grammar::detail {

struct Dfa {
  std::vector<std::array<int32_t, 256>> next;  // [state][byte] -> state, -1 = reject
  std::vector<uint8_t> accept;                 // [state]
  int32_t start = 0;
  bool empty_language() const;  // no accepting state reachable
};

struct RegexOutcome {
  bool ok = false;
  std::string error;
  Dfa dfa;
};

// full_match: the whole value must match (used for our own number/format patterns). Otherwise JSON
// Schema `pattern` semantics: unanchored means "contains"; ^ and $ anchor per top-level alternative.
// Character semantics are chosen so that every accepted string also matches under Python `re` and
// ECMA-262 (e.g. \D, \W, \S only cover ASCII): when the two dialects disagree we accept less.
RegexOutcome compile_regex(std::string_view pattern, bool full_match, size_t max_states = 4000);

Dfa dfa_intersect(const Dfa& a, const Dfa& b, size_t max_states = 200000);
Dfa dfa_minus(const Dfa& a, const Dfa& b, size_t max_states = 200000);  // L(a) \ L(b)
Dfa dfa_literals(const std::vector<std::string>& words);
// Removes states that cannot reach an accepting state (their transitions become -1).
void dfa_prune(Dfa& d);
bool dfa_matches(const Dfa& d, std::string_view s);

// Regex (full-match syntax) for the decimal integers in [lo, hi] written without leading zeros;
// lo >= 0, hi = -1 means unbounded. Returns "" for an empty range.
std::string nonneg_range_regex(int64_t lo, int64_t hi);

}  // namespace picolm::grammar::detail
