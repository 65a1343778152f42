// Internal: JSON Schema -> rules in a RuleBuilder. Used by compile_json_schema and compile_tool_list
// (which compiles each tool's parameters into the same builder).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/json_value.h"

namespace picolm::grammar::detail {

// How a tool's arguments object is written (the object itself; nested values stay JSON, or
// Python literals with CompileOptions::python_literals).
enum class ArgumentSyntax {
  JsonObject,     // {"a": 1, "b": "x"}
  PythonKwargs,   // a=1, b="x"            (inside the caller's "name(" ... ")")
  XmlParameters,  // <parameter=a>\n1\n</parameter>\n<parameter=b>\nx\n</parameter>\n  (Qwen3.5)
  Gemma4Object,   // {a:1,b:<|"|>x<|"|>}  (Gemma 4; chosen for every object by CompileOptions::gemma4_values)
};

// Compiles `root` (a whole schema document) into rb; returns the rule id of the root schema.
// Errors are appended to `errors` with pointers prefixed by `pointer_prefix`. The returned rule is
// valid only when no error was added. object_only: accept only the object instances (tool
// arguments), written in `syntax` (anything but JsonObject requires object_only).
uint32_t compile_schema_into(RuleBuilder& rb, const JValue& root, const CompileOptions& opts,
                             const std::string& pointer_prefix, std::vector<CompileError>& errors,
                             bool object_only = false, ArgumentSyntax syntax = ArgumentSyntax::JsonObject);

// Optional whitespace at the structural positions of JSON, per CompileOptions::whitespace (the
// rules are built on first use and shared by every position of one compile).
//   Compact: none. Flexible: a bounded run of JSON whitespace after '{' '[' ',' ':' and after
//   every key and value. Natural: what JSON writers emit, no more: one optional space after ':';
//   after '{' '[' ',' and before the '}' ']' of a non-empty container, "", " " or (max_indent >= 0)
//   a newline and up to max_indent spaces; nothing before ':' and ','.
class JsonSpacing {
 public:
  JsonSpacing(RuleBuilder& rb, const CompileOptions& opts) : rb_(rb), opts_(opts) {}
  void after_open(std::vector<Elem>& seq) { add(seq, Slot::AfterOpen); }      // after '{' or '['
  void before_close(std::vector<Elem>& seq) { add(seq, Slot::BeforeClose); }  // non-empty containers
  void after_value(std::vector<Elem>& seq) { add(seq, Slot::AfterValue); }    // after a key or value
  void after_colon(std::vector<Elem>& seq) { add(seq, Slot::AfterColon); }
  void after_comma(std::vector<Elem>& seq) { add(seq, Slot::AfterComma); }

 private:
  enum class Slot { AfterOpen, BeforeClose, AfterValue, AfterColon, AfterComma };
  void add(std::vector<Elem>& seq, Slot slot);
  RuleBuilder& rb_;
  CompileOptions opts_;
  std::optional<uint32_t> any_, space_, line_;
};

// An ASCII Python identifier (LFM2's function and keyword names).
bool python_identifier(std::string_view s);

// Gemma 4's call syntax (ToolCallFormat::Gemma4, CompileOptions::gemma4_values).
inline constexpr std::string_view kGemma4CallOpen = "<|tool_call>call:";
inline constexpr std::string_view kGemma4CallClose = "<tool_call|>";
inline constexpr std::string_view kGemma4Quote = "<|\"|>";  // opens and closes a string
// A tool name written unquoted between "call:" and '{': no whitespace, control byte or { } : < >.
bool gemma4_name(std::string_view s);
// An object key written unquoted before ':': no whitespace, control byte or : , { } [ ] " < >.
bool gemma4_key(std::string_view s);

// Shared helpers for the tool-list wrapper.
uint32_t whitespace_rule(RuleBuilder& rb, const CompileOptions& opts);  // Flexible's bounded run
uint32_t plain_string_rule(RuleBuilder& rb);                          // '"' chars '"'
uint32_t key_string_rule(RuleBuilder& rb);  // the same, tagged as an object key (KeyTag)

}  // namespace picolm::grammar::detail
