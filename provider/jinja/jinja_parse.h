// The template as a tree: the lexer (whitespace control, trim_blocks, lstrip_blocks) and the parser.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jinja.h"

namespace picolm::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type : uint8_t {
    Literal, Name, GetAttr, GetItem, Slice, Call, Filter, Test, Neg, Pos, Not, Binary, And, Or, Cond,
    ListLit, TupleLit, DictLit
  };
  Type type;
  int line = 0;
  Value literal;                                      // Literal
  std::string name;                                   // Name, GetAttr, Filter, Test; Binary: the operator
  bool negated = false;                               // Test: `is not`
  std::vector<ExprPtr> args;                          // operands / call and filter arguments; DictLit: k, v, k, v...
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr target;                                     // the object: GetAttr, GetItem, Slice, Call, Filter, Test
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Type : uint8_t { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue };
  Type type;
  int line = 0;
  std::string text;                        // Text; Set/SetBlock/Macro: the name
  std::string attr;                        // Set: ns.attr
  std::vector<std::string> names;          // For / Set: targets (several = unpacking); Macro/CallBlock: params; With: names
  std::vector<ExprPtr> defaults;           // Macro/CallBlock: default of each param (null = none); With: values
  ExprPtr expr;                            // Output, Set, For: the iterable, CallBlock: the call, FilterBlock: filter chain
  ExprPtr cond;                            // For: the `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition and body (elif ...)
  Body body;                               // For, SetBlock, Macro, CallBlock, FilterBlock, With
  Body else_body;                          // If, For
};

// Throws Error with the line on a syntax error or a construct outside the subset.
Body parse_template(std::string_view text, int max_depth);

}  // namespace picolm::jinja::detail
