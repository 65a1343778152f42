// Internal: a small JSON DOM for schemas. We keep our own tree (instead of simdjson's read-only DOM)
// because the schema compiler merges and rewrites subschemas, and enum/const literals must keep the
// exact source spelling of numbers. It is also the project's one JSON tree outside the grammar: the
// provider's tool-call readers (provider/calls/) build the arguments they read back in it and read
// the tools' schemas with it; where a document is only read once, simdjson's DOM serves.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace picolm::grammar::detail {

struct JValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string str;  // String: decoded UTF-8 value; Number: source spelling
  std::vector<JValue> arr;
  std::vector<std::pair<std::string, JValue>> obj;  // source order kept (property order matters)

  bool is_object() const { return kind == Kind::Object; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Number; }
  bool is_bool() const { return kind == Kind::Bool; }
  bool is_integer_valued() const;  // a Number whose value is an integer (1.0 counts, per 2020-12)
  const JValue* get(std::string_view key) const;

  // Declared here, defaulted after the class: clang with libstdc++ 12 instantiates the copy of
  // vector<pair<string, JValue>> at an implicit definition, where JValue is still incomplete.
  JValue();
  JValue(const JValue&);
  JValue(JValue&&) noexcept;
  JValue& operator=(const JValue&);
  JValue& operator=(JValue&&) noexcept;
  ~JValue();
};
inline JValue::JValue() = default;
inline JValue::JValue(const JValue&) = default;
inline JValue::JValue(JValue&&) noexcept = default;
inline JValue& JValue::operator=(const JValue&) = default;
inline JValue& JValue::operator=(JValue&&) noexcept = default;
inline JValue::~JValue() = default;

// Parses a whole document (RFC 8259; trailing garbage is an error). Returns false and sets err.
// repeated_key (optional): set to the first key an object repeats (the tree keeps the last value).
bool parse_json(std::string_view text, JValue& out, std::string& err, std::string* repeated_key = nullptr);
// An upper bound of the bytes parse_json's tree of `text` takes (one pass, nothing allocated): a
// tree holds ~100-250 bytes per value, so an 8 MB body of `[0,0,...]` would be ~1 GB; the
// compiler charges this before parsing (RuleBuilder::charge_scratch).
size_t json_tree_bytes(std::string_view text);

// Compact serialization; strings are re-escaped (only '"', '\\' and controls), numbers keep their
// source spelling. The result is a valid JSON text for the same value.
std::string to_json(const JValue& v);
std::string json_quote(std::string_view utf8);

// Equality per JSON Schema (numbers by value, objects ignoring key order).
bool json_equal(const JValue& a, const JValue& b);

}  // namespace picolm::grammar::detail
