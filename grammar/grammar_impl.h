// Internal: the compiled grammar (a context-free grammar over bytes) and the recognizer helpers.
//
// Representation: rules are lists of alternatives; an alternative is a sequence of elements ending in
// End. Terminal elements are byte classes (256-bit sets) and the JSON string-character element
// StrChar, a small fixed automaton that consumes exactly one JSON string character (raw UTF-8 code
// point with validation, or an escape incl. \uXXXX surrogate pairs). StrCharLoop is the same
// automaton but marks the loop `S ::= StrCharLoop S | '"'`: from that position every "string-safe"
// token is allowed, which the mask code answers from a precomputed bitset.
//
// The recognizer state is a set of stacks of element positions (as in llama.cpp's GBNF matcher):
// the top of each stack is a terminal, lower entries are return positions. The top entry also
// carries the StrChar sub-state in its high bits.
#pragma once
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace picolm::grammar {

namespace detail {

// StrCharRaw (arg: a class id) consumes one raw, unescaped character: an ASCII byte of the class,
// or any valid multi-byte UTF-8 character (the class also holds all bytes >= 0x80, so its loop
// tables describe the tokens such a chain accepts). Patterned strings like [^<>] use it.
enum class ElemKind : uint8_t { End, Ref, Class, StrChar, StrCharLoop, StrCharRaw };

// Key-uniqueness events (Elem::tag, a bit set; see docs/GRAMMAR.md "Unique keys"): what consuming a
// byte at this terminal means for the objects being written. The compiler tags the terminals of
// object delimiters and of key delimiters, in every argument syntax; the Matcher keeps the keys
// written per open object and refuses a key close that would repeat one.
enum KeyTag : uint8_t {
  kTagObjOpen = 1,    // opens an object: a new, empty key set
  kTagObjClose = 2,   // closes the innermost object
  kTagKeyOpen = 4,    // the bytes after this one spell a key (the byte itself is not part of it)
  kTagKeyClose = 8,   // this byte ends the key (not part of it): it must not repeat a written key
  kTagKeyJson = 16,   // with kTagKeyOpen: the key is JSON string content (escapes decoded)
  kTagKeySkipWs = 32, // with kTagKeyOpen: whitespace before the key's first byte is not part of it
};

struct Elem {
  ElemKind kind = ElemKind::End;
  uint8_t tag = 0;   // KeyTag bits (terminals only)
  uint32_t arg = 0;  // Ref: rule id; Class: class id
  constexpr Elem() = default;
  constexpr Elem(ElemKind k, uint32_t a, uint8_t t = 0) : kind(k), tag(t), arg(a) {}
};
static_assert(sizeof(Elem) == 8);
inline Elem tagged(Elem e, uint8_t t) {
  e.tag = uint8_t(e.tag | t);
  return e;
}

using ByteSet = std::array<uint64_t, 4>;
inline bool byteset_has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
inline void byteset_add(ByteSet& s, uint8_t b) { s[b >> 6] |= uint64_t(1) << (b & 63); }

// Builds rules; the schema compiler and the tool-list compiler write through it.
struct RuleBuilder {
  std::vector<std::vector<std::vector<Elem>>> rules;  // [rule][alternative][element], no End
  std::vector<ByteSet> classes;
  std::map<ByteSet, uint32_t> class_ids;
  // Size budget (CompileOptions::max_grammar_bytes): an estimate of the compiled grammar's bytes
  // (see Grammar::memory_bytes) grows with every rule and alternative. Past the budget nothing
  // more is stored (new_rule hands out rule 0, add_alt drops), so one hostile schema cannot
  // allocate gigabytes; the compile then fails with an error naming the size.
  // What Grammar::build keeps per rule (rule_alt_begin, min_rule_len), per alternative
  // (alt_starts) and per element, End included (elems plus the per-position tables).
  static constexpr size_t kRuleBytes = 12, kAltBytes = 4, kElemBytes = 28;
  size_t budget_bytes = SIZE_MAX;
  size_t used_bytes = 0;
  bool over_budget = false;
  // Scratch the compiler builds on the way (automata of key and string sets: a DFA state holds a
  // 1 KB transition row), charged before it is built, bounded by kScratchFactor x budget_bytes:
  // a schema whose automata alone would pass it is refused before they exist (issue 28: the
  // extra keys of 150,000 listed names, any string but those, are ~340 MB of transition rows).
  static constexpr size_t kScratchFactor = 3;
  size_t scratch_bytes = 0;
  bool over_scratch = false;
  bool charge_scratch(size_t bytes) {
    scratch_bytes += bytes;
    if (budget_bytes != SIZE_MAX && scratch_bytes > kScratchFactor * budget_bytes) over_budget = over_scratch = true;
    return !over_budget;
  }

  uint32_t new_rule() {
    used_bytes += kRuleBytes;
    if (used_bytes > budget_bytes) over_budget = true;
    if (over_budget && !rules.empty()) return 0;
    rules.emplace_back();
    return uint32_t(rules.size() - 1);
  }
  void add_alt(uint32_t r, std::vector<Elem> alt) {
    used_bytes += kAltBytes + kElemBytes * (alt.size() + 1);
    if (used_bytes > budget_bytes) over_budget = true;
    if (over_budget) return;
    rules[r].push_back(std::move(alt));
  }
  Elem cls(const ByteSet& s) {
    auto it = class_ids.find(s);
    if (it != class_ids.end()) return {ElemKind::Class, it->second};
    uint32_t id = uint32_t(classes.size());
    classes.push_back(s);
    class_ids.emplace(s, id);
    return {ElemKind::Class, id};
  }
  Elem byte(uint8_t b) {
    ByteSet s{};
    byteset_add(s, b);
    return cls(s);
  }
  Elem range(uint8_t lo, uint8_t hi) {
    ByteSet s{};
    for (int b = lo; b <= hi; ++b) byteset_add(s, uint8_t(b));
    return cls(s);
  }
  static Elem ref(uint32_t r) { return {ElemKind::Ref, r}; }
  void lit(std::vector<Elem>& seq, std::string_view bytes) {
    for (unsigned char c : bytes) seq.push_back(byte(c));
  }
  // A rule matching exactly `bytes`.
  uint32_t literal_rule(std::string_view bytes) {
    uint32_t r = new_rule();
    std::vector<Elem> seq;
    lit(seq, bytes);
    add_alt(r, std::move(seq));
    return r;
  }
};

// StrChar sub-automaton: kStrCharNext[sub][byte] -> next sub-state, kDone or kReject.
constexpr uint8_t kStrDone = 0xFE;
constexpr uint8_t kStrReject = 0xFF;
constexpr int kStrSubStates = 22;
const std::array<std::array<uint8_t, 256>, kStrSubStates>& strchar_table();

// Fewest bytes from each StrChar sub-state to the end of the character (sub-state 0: 1).
const std::array<uint8_t, kStrSubStates>& strchar_rest();
// Preference between equally short completion bytes (lower = preferred); see completion.cpp.
const std::array<uint8_t, 256>& completion_byte_rank();

constexpr uint32_t kPosBits = 26;
constexpr uint32_t kPosMask = (1u << kPosBits) - 1;

}  // namespace detail

namespace detail {
// Unique keys, per recognizer state: the allowed tokens that consume a byte tagged kTagKeyClose,
// and those that consume a kTagKeyOpen byte and end inside the key it opens (see `opening`).
struct KeyTokenLists {
  std::vector<int32_t> closing;
  std::vector<int32_t> closing_more;  // of `closing`: checked one by one (see key_tokens)
  // Of `closing`: tokens that open a key in the innermost object and close it, and nothing more:
  // (key bytes, token id), sorted. They repeat a key exactly when those bytes are a written key.
  std::vector<std::pair<std::string, int32_t>> closing_keyed;
  // (index of the token in the matcher's key-token set, offset of the key in it), sorted by the
  // key's bytes (read from that set's contiguous copy: binary searches without cache misses).
  std::vector<std::pair<int32_t, uint32_t>> opening;
  bool from_walk = false;  // being filled by Matcher's compute_mask (which tokens: its walked_done)
};
}  // namespace detail

class Grammar;
namespace detail {
// Fills Grammar::min_rule_len and min_suffix (called by Grammar::build).
void compute_min_lengths(Grammar& g);

// Tests only: the matcher's recognizer state as bytes (equal keys = equal states), so a test can
// search the state graph exactly (e.g. a breadth-first oracle for the shortest completion).
struct MatcherTestAccess {
  static std::string state_key(const Matcher& m);
};

}  // namespace detail

class Grammar {
 public:
  std::vector<detail::Elem> elems;        // flattened; every alternative ends with End
  std::vector<uint32_t> rule_alt_begin;   // [rule + 1]: index range into alt_starts
  std::vector<uint32_t> alt_starts;       // position of each alternative's first element
  std::vector<detail::ByteSet> classes;
  uint32_t start_pos = 0;                 // position of the synthetic `Ref(root) End`
  // [position] -> class id when the position starts an alternative `[Class C] Ref(own rule)`:
  // from such a stack top, any token made only of bytes in C keeps the stack alive (mask fast
  // path, e.g. free text before a trigger, or `[a-z]*` inside patterned strings). -1 otherwise.
  std::vector<int32_t> self_loop_class;
  std::vector<int32_t> loop_class_ids;  // distinct classes of self-loops and class runs (tables prebuilt)
  // [position] for StrChar positions: how many string characters in a row are certainly accepted
  // from there (a counted chain `B_i ::= StrChar B_i+1`, e.g. maxLength); kRunInf for StrCharLoop
  // and chains ending in one. The same for StrCharRaw chains of one class. 0 elsewhere. The mask accepts every string-safe token of at most
  // that many characters without walking it (see Matcher::Impl::compute_mask).
  static constexpr uint32_t kRunInf = UINT32_MAX;
  std::vector<uint32_t> strchar_run;
  // [position] for Class positions followed by a Ref: how many bytes of that same class in a row
  // are certainly accepted from there (a chain `R_i ::= [C] R_i+1`, e.g. a pattern's `[a-z]{50}`
  // or any-ASCII `[\s\S]{1000}`); kRunInf on self-loops. The mask accepts every token of at most
  // that many bytes, all in C, without walking it.
  std::vector<uint32_t> class_run;
  static constexpr uint32_t kMinClassRun = 4;  // shorter runs: the walk is cheap, no class tables
  // Shortest completion (bytes): min_rule_len[rule] = fewest bytes the rule derives;
  // min_suffix[pos] = fewest bytes from element `pos` to the End of its alternative. Saturate at
  // kCostInf (a counted chain of 10^5 nested in 10^5 would overflow nothing: 10^10 << 2^50).
  static constexpr uint64_t kCostInf = uint64_t(1) << 50;
  std::vector<uint64_t> min_rule_len;
  std::vector<uint64_t> min_suffix;
  std::string description;                // what was compiled (for debugging dumps)
  // Unique keys (KeyTag): whether any terminal carries a tag, and the bytes of the classes tagged
  // kTagKeyClose. Only tokens holding such a byte can close a key, so the mask checks just those.
  bool has_key_tags = false;
  detail::ByteSet key_open_bytes{}, key_close_bytes{};

  // Mask cache shared by all matchers of this grammar: (vocabulary fingerprint, recognizer state)
  // -> mask. Guarded by cache_mu; bounded (cleared when full).
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> mask_cache;
  static constexpr size_t kMaskCacheMax = 256;  // ~5 MB per grammar with a 152k vocabulary
  // Unique keys: per cached state (same key as mask_cache), the allowed tokens that close a key
  // or open one and end inside it (usually a few dozen). Only these (and the tokens that go on
  // spelling a written key) are checked against a matcher's written keys. Guarded by cache_mu;
  // cleared with mask_cache.
  mutable std::unordered_map<std::string, std::shared_ptr<const detail::KeyTokenLists>> key_token_cache;

  // Finalizes a builder: prunes unproductive alternatives; returns null (and an error message) if
  // the root cannot produce any string.
  static std::shared_ptr<Grammar> build(detail::RuleBuilder& rb, uint32_t root, std::string& err);
  std::string dump() const;  // a GBNF-like text, for debugging
  // Bytes held: the tables above plus the mask cache as it is now (it grows with use).
  size_t memory_bytes() const;
};

}  // namespace picolm::grammar
