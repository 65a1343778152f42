// Internal: JSON Schema -> rules in a RuleBuilder. Used by compile_json_schema and compile_tool_list
// (which compiles each tool's parameters into the same builder).
#pragma once
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/json_value.h"

namespace picolm::grammar::detail {

// Compiles `root` (a whole schema document) into rb; returns the rule id of the root schema.
// Errors are appended to `errors` with pointers prefixed by `pointer_prefix`. The returned rule is
// valid only when no error was added. object_only: accept only the object instances (tool arguments).
uint32_t compile_schema_into(RuleBuilder& rb, const JValue& root, const CompileOptions& opts,
                             const std::string& pointer_prefix, std::vector<CompileError>& errors,
                             bool object_only = false);

// Shared helpers for the tool-list wrapper.
uint32_t whitespace_rule(RuleBuilder& rb, const CompileOptions& opts);  // "" when Compact
uint32_t plain_string_rule(RuleBuilder& rb);                          // '"' chars '"'

}  // namespace picolm::grammar::detail
