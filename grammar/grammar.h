// Public API of the grammar engine: JSON Schema / OpenAI tool lists -> grammar -> token masks.
//
// Depends on nothing in engine/: a vocabulary (token id -> byte string, plus end-of-generation ids)
// goes in, a bitmask comes out.
// Thread-safety: Grammar and Vocabulary are immutable after creation and may be shared by any number
// of threads; a Matcher is used by one thread at a time.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace picolm::grammar {

enum class Whitespace {
  Compact,   // no optional whitespace at all: {"a":1,"b":[1,2]}
  Flexible,  // JSON whitespace allowed wherever JSON allows it (bounded run length, see CompileOptions)
  // The whitespace JSON writers emit, bounded: json.dumps' {"a": 1, "b": [1, 2]} and, with
  // max_indent >= 0, pretty-printed JSON (a newline and up to max_indent spaces after '{' '[' ','
  // and before '}' ']'). Nothing before ':' or ','. Longest run: max(1, 1 + max_indent) bytes.
  Natural,
};

// The order in which generation writes an object's listed properties (docs/GRAMMAR.md "Property
// order"). `check` accepts any order either way.
enum class PropertyOrder {
  Schema,  // `properties` order, then required names not listed, then extra keys
  // Any order, each key at most once, all required ones before the object closes: the grammar
  // tracks which required keys are written (one rule per subset and count: an object needing
  // more than 4,096 such rules keeps schema order) and the matcher's key sets refuse a repeated
  // optional key. Listed keys are then tracked keys, which costs mask time (docs/GRAMMAR.md).
  Any,
};

struct CompileOptions {
  // JSON Schema says additionalProperties defaults to true; tool calls want false.
  bool additional_properties_default = true;
  Whitespace whitespace = Whitespace::Compact;
  int max_whitespace_run = 16;  // Flexible only: longest run of whitespace bytes accepted
  int max_indent = -1;          // Natural only: spaces allowed after a newline; -1 = no newlines
  // Per-schema bound: a schema whose grammar would take more (estimated while compiling, see
  // grammar_memory_bytes) is refused with an error naming the size, before it is allocated.
  size_t max_grammar_bytes = size_t(32) << 20;
  // Python literal spelling of JSON values (True, False, None; dicts and lists are written as JSON
  // writes them, which Python reads as the same literals): the values of LFM2's Python-style calls.
  bool python_literals = false;
  PropertyOrder property_order = PropertyOrder::Schema;
  // Gemma 4's value spelling (its tool calls): strings as <|"|>RAW<|"|> (the raw text, no escapes;
  // it never contains <|"|> and has no NUL byte), object keys unquoted (a key holds no whitespace,
  // control byte or any of : , { } [ ] " < >), members in the order the template's dictsort
  // writes them (case-insensitive by name), numbers, true, false and null as JSON writes them
  // (null also as None, which the template prints for Python's None), and no whitespace (implies
  // Whitespace::Compact).
  bool gemma4_values = false;
};

// One problem found while compiling; all problems of a schema are collected and reported together.
struct CompileError {
  std::string pointer;  // JSON pointer into the schema, e.g. "/properties/a/not"
  std::string keyword;  // the offending keyword, or "" for a structural error
  std::string message;  // human-readable, names the keyword
};

class Grammar;  // compiled, immutable

struct CompileResult {
  std::shared_ptr<const Grammar> grammar;  // null when errors is non-empty
  std::vector<CompileError> errors;
  bool ok() const { return grammar != nullptr; }
  std::string error_text() const;  // all errors, one per line
};

CompileResult compile_json_schema(std::string_view schema_json, const CompileOptions& opts = {});

// The compiled rules as GBNF-like text (one rule per line), for debugging and the CLI.
std::string grammar_to_text(const Grammar& grammar);

// Bytes a compiled grammar holds now: its tables plus its mask cache (which grows with use, up to
// ~5 MB with a 152k vocabulary).
size_t grammar_memory_bytes(const Grammar& grammar);

// How a tool call is written in the output.
enum class ToolCallFormat {
  JsonObject,     // {"name":"f","arguments":{...}}   (or an array of them when parallel)
  JsonArray,      // array_open [{"name":...,"arguments":...}, ...] array_close, always an array
  Hermes,         // <tool_call>\n{"name":...,"arguments":...}\n</tool_call> repeated
  TriggeredText,  // free text until `trigger`, then the call constrained (then free text again if allowed)
  Envelope,       // {"tool_calls":[{"name":..,"arguments":..},...]} or {"content":"..."} (models without a native format)
  // Qwen3.5's XML-parameter calls, as its template renders them (blocks joined by "\n" when parallel):
  //   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
  // A string VALUE is raw text (it cannot contain "</parameter>"); other values are JSON, and
  // booleans and null may also be written True / False / None (the template's str() of them).
  QwenXml,
  // LFM2 / LFM2.5 Python-style calls: list_open [name(a="v", n=3), ...] list_close, arguments as
  // keyword arguments with Python literal values (True / False / None).
  PythonList,
  // Gemma 4's calls, as its template writes them (adjacent when parallel, no separator):
  //   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
  // values in Gemma 4's spelling (CompileOptions::gemma4_values, forced on): {city:<|"|>Paris<|"|>,days:3}.
  // NAME holds no whitespace, control byte or any of { } : < >.
  Gemma4,
};

struct ToolListOptions {
  ToolCallFormat format = ToolCallFormat::JsonObject;
  bool parallel = false;       // allow more than one call
  std::string forced_tool;     // non-empty: only this tool may be called
  bool allow_text = false;     // Envelope: also allow {"content":"..."}; TriggeredText: text before trigger
  std::string trigger;         // TriggeredText: e.g. "<tool_call>"
  std::string arguments_key = "arguments";  // Llama 3.x writes its calls with "parameters"
  // PythonList: the text around the list ("" = a bare list).
  std::string list_open = "<|tool_call_start|>";
  std::string list_close = "<|tool_call_end|>";
  // JsonArray: the text around the array ("" = a bare array; Phi-4-mini: <|tool_call|> ... <|/tool_call|>).
  std::string array_open, array_close;
  CompileOptions schema;       // additional_properties_default is forced to false for tool parameters
  // A JSON Schema (text), or "": the reply is either the calls, written in `format` from its first
  // byte, or a text answer that is an instance of this schema (OpenAI's response_format beside
  // tools under tool_choice auto), compiled with `answer_options`: one grammar, an alternation at
  // the reply's start, so both branches keep the shortest-completion guarantees. Envelope (with
  // allow_text): the answer is the value of "content", {"content": <instance>}, instead of a
  // string. Not with TriggeredText + allow_text (its free text is already the other branch).
  std::string answer_schema;
  CompileOptions answer_options;
};

// tools_json: an OpenAI `tools` array ([{"type":"function","function":{"name","parameters"}}]).
CompileResult compile_tool_list(std::string_view tools_json, const ToolListOptions& opts = {});

// Compiled grammars cached by (schema text, options), bounded by bytes: least recently used
// entries are evicted while the total of grammar_memory_bytes (re-measured on every use, since mask
// caches grow) plus the keys exceeds max_bytes. A grammar larger than the whole cache is still
// returned to its caller but not kept. Thread-safe. At most `max_parallel_compiles` misses compile
// at once (0: no limit); the others wait for a turn. A compile's scratch grows with the schema
// (a 10,000-property schema takes tens of MB), so this bounds the memory that callers on many
// threads can hold at once (docs/RELIABILITY.md); compiles are CPU-bound, so running more of them
// than there are cores gains nothing.
class GrammarCache {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t(64) << 20;
  explicit GrammarCache(size_t max_bytes = kDefaultMaxBytes, int max_parallel_compiles = 0);
  ~GrammarCache();
  CompileResult schema(std::string_view schema_json, const CompileOptions& opts = {});
  CompileResult tools(std::string_view tools_json, const ToolListOptions& opts = {});
  size_t bytes() const;    // accounted bytes of the kept entries
  size_t entries() const;  // kept entries
  size_t max_bytes() const;
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Per-vocabulary tables computed once (token trie, per-token byte-class tables), shared by all
// grammars and matchers.
class Vocabulary {
 public:
  // token_bytes[id] is the exact byte string the token decodes to (special/control tokens that
  // must never appear inside constrained output should be given as empty strings).
  static std::shared_ptr<const Vocabulary> create(std::vector<std::string> token_bytes,
                                                  std::vector<int32_t> eog_ids);
  virtual ~Vocabulary() = default;
  virtual size_t size() const = 0;
  virtual const std::string& token(int32_t id) const = 0;
  virtual const std::vector<int32_t>& eog_ids() const = 0;
};

namespace detail {
struct MatcherTestAccess;  // grammar_impl.h: the recognizer state, for exact oracles in tests
}

// Walks one generation through a grammar.
class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // Advances by one token; false (and no state change) if the token is not allowed.
  // An end-of-generation id is accepted only when the instance is complete, and terminates.
  bool accept_token(int32_t id);
  // Advances by raw bytes (used by `check` and tests); false if any byte is rejected (state unchanged).
  // A successful call counts as one step for rollback().
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted tokens (or accept_bytes calls); n larger than the history undoes all.
  void rollback(int n_tokens);
  // True when the bytes so far form a complete instance (end-of-generation would be allowed).
  bool is_complete() const;
  // True when nothing but end-of-generation can follow.
  bool is_terminated() const;
  // Bit i of mask (word i/32, bit i%32) set = token i allowed. mask has (vocab size + 31) / 32 words.
  void fill_mask(uint32_t* mask) const;
  // The bytes accepted so far.
  const std::string& text() const;

  // ---- Shortest completion and closing mode (for finishing within a token budget) ----
  //
  // The canonical completion of the current state is the shortest byte string that makes the
  // instance complete, the lexicographically smallest among the shortest ones under a fixed byte
  // preference (letters, digits, then punctuation; see completion.cpp). It closes open strings,
  // fills required properties with their shortest values, closes arrays and objects and writes
  // the format's closing tags. It is suffix-closed: after accepting a token that is a prefix of
  // it, the new canonical completion is exactly the rest.

  // Bytes of the shortest completion; 0 when complete (or terminated). Cheap: computed from
  // per-position minimum lengths precomputed at compile time.
  size_t min_completion_bytes() const;
  // The canonical completion itself (for tests, logs and the CLI).
  std::string shortest_completion() const;
  // The fewest tokens of this vocabulary that spell the canonical completion (end-of-generation
  // not counted). An upper bound on the fewest tokens of any completion. 0 when complete; -1 when
  // the vocabulary cannot spell it (a byte no token starts with) or it is longer than 4 MiB.
  int min_completion_tokens() const;
  // Closing mode. Keeps only tokens that are prefixes of the canonical completion and after which
  // it still fits: 1 + min_completion_tokens() afterwards <= max(tokens_left, min_completion_tokens()
  // now); end-of-generation when complete. tokens_left = non-EOG tokens the caller may still
  // emit, this one included. Following this mask (with tokens_left counting down) therefore
  // finishes a complete instance within max(tokens_left, min_completion_tokens()) tokens and
  // never dead-ends; with tokens_left > min_completion_tokens() the extra room only lets the
  // model pick shorter tokens. When min_completion_tokens() is -1, the ordinary mask is given.
  void fill_mask_closing(uint32_t* mask, int tokens_left) const;

  // ---- Forced continuation (jump-forward decoding) ----
  //
  // The bytes every complete instance reachable from the current state continues with: the
  // longest b such that the grammar admits exactly one next byte at each position of b. Stops at
  // the first position with two or more possible bytes (a free string or number character, a
  // choice between properties or tools), where end-of-generation is allowed (the instance is
  // complete), or after max_bytes. Empty when terminated. Cheap when nothing is forced (one look
  // at the stack tops); otherwise one recognizer advance per forced byte.
  std::string forced_continuation(size_t max_bytes = 256) const;

 private:
  friend struct detail::MatcherTestAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checking a client's instance (a JSON text) against a compiled grammar by value. The grammar
// admits one spelling of each value (canonical numbers, properties in schema order, strings
// escaped as it writes them); JSON Schema judges values. When the bytes as written are rejected,
// the instance is parsed and spellings of the same value are searched (members in any order,
// numbers as `60`, `60.0`, `1e2` -> `100`, strings and keys re-escaped) for one the recognizer
// accepts; that spelling is `canonical`. Bounded (see instance_check.cpp); a text that is not
// one JSON value (Hermes tags, XML parameters, Python calls) is only checked as written (why:
// docs/GRAMMAR.md, "Native call formats are checked as written").
struct InstanceCheck {
  bool accepted = false;
  bool as_written = false;   // accepted byte for byte
  size_t rejected_at = 0;    // as written: bytes accepted before the first rejected byte (= size: incomplete)
  std::string canonical;     // accepted by value: the spelling the grammar accepted
  std::string detail;        // not accepted: why no other spelling was accepted either
};
InstanceCheck check_instance(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
                             std::string_view instance);

}  // namespace picolm::grammar
