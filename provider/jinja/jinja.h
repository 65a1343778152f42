// A Jinja interpreter for chat templates: the subset of Jinja2 that published chat templates use,
// with the environment Hugging Face transformers renders `tokenizer.chat_template` in
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, keep_trailing_newline off,
// loopcontrols, `{% generation %}` blocks; `tojson` = json.dumps(ensure_ascii=False), key order kept; globals
// raise_exception and strftime_now). tests/test_jinja.cpp checks it byte for byte against
// python3-jinja2 running the same templates (tests/render_jinja.py).
//
// Values follow Python: printing None gives "None", floats print as Python's repr, strings are
// UTF-8 and measured in code points, dict keys keep insertion order. Undefined behaves as jinja2's
// default Undefined: it prints as "", iterates as empty, is false; arithmetic, calls, subscripts
// and attributes on it fail the render. What the subset does not know (a filter, a test, a
// statement) fails the render with a message naming the template line; so do templates that
// exceed the limits of JinjaOptions (recursion depth, output size, steps).
//
// Thread-safety: render_jinja is a pure function of its arguments (the strftime_now callback is
// called on the caller's thread); JinjaValue shares lists and dicts between copies, so a context
// is used by one render at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace picolm::jinja {

struct Callable;  // functions, macros and bound methods; internal to the interpreter

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

  Value() = default;  // Undefined
  static Value none() { return Value(Kind::None); }
  static Value boolean(bool b) { Value v(Kind::Bool); v.b_ = b; return v; }
  static Value integer(int64_t i) { Value v(Kind::Int); v.i_ = i; return v; }
  // An integer beyond int64, kept as its decimal spelling (Python prints it as it is).
  static Value big_integer(std::string digits) { Value v(Kind::Int); v.s_ = std::move(digits); return v; }
  static Value number(double f) { Value v(Kind::Float); v.f_ = f; return v; }
  static Value string(std::string s) { Value v(Kind::String); v.s_ = std::move(s); return v; }
  // markupsafe.Markup, what `|safe` and `|escape` return: `+` with a plain string HTML-escapes
  // the plain side (jinja2 keeps this even with autoescape off).
  static Value markup(std::string s) { Value v = string(std::move(s)); v.flag_ = 1; return v; }
  static Value list(List items = {}, bool tuple = false) {
    Value v(Kind::List);
    v.list_ = std::make_shared<List>(std::move(items));
    v.flag_ = tuple ? 1 : 0;
    return v;
  }
  // What jinja2's map, select, reject, selectattr, rejectattr and unique return: a lazy generator
  // that iterates like a list but has no length, no index, is always true and is no JSON.
  static Value generator(List items) {
    Value v = list(std::move(items));
    v.flag_ = 2;
    return v;
  }
  static Value dict(Dict items = {}, bool is_namespace = false) {
    Value v(Kind::Dict);
    v.dict_ = std::make_shared<Dict>(std::move(items));
    v.flag_ = is_namespace ? 1 : 0;
    return v;
  }
  static Value callable(std::shared_ptr<Callable> fn) { Value v(Kind::Callable); v.fn_ = std::move(fn); return v; }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_big_integer() const { return kind_ == Kind::Int && !s_.empty(); }
  bool is_tuple() const { return kind_ == Kind::List && flag_ == 1; }
  bool is_generator() const { return kind_ == Kind::List && flag_ == 2; }
  bool is_markup() const { return kind_ == Kind::String && flag_ == 1; }
  bool is_namespace() const { return kind_ == Kind::Dict && flag_ == 1; }
  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  const std::string& as_string() const { return s_; }  // String, or the digits of a big integer
  const List& items() const { return *list_; }
  List& items() { return *list_; }
  const Dict& entries() const { return *dict_; }
  Dict& entries() { return *dict_; }
  const std::shared_ptr<Callable>& fn() const { return fn_; }

  // Dict helpers: nullptr when absent. set() keeps the position of an existing key.
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  uint8_t flag_ = 0;  // List: 1 = a tuple, 2 = a generator; Dict: 1 = a namespace(); String: 1 = Markup
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

struct Options {
  // strftime_now(fmt) as the template calls it; empty = the template fails if it calls it.
  std::function<std::string(std::string_view format)> strftime_now;
  size_t max_output_bytes = 16u << 20;  // the render (and each captured block) stays under this
  int max_depth = 256;                  // nesting of expressions, statements and macro calls
  uint64_t max_steps = 20'000'000;      // statements and loop iterations executed
};

struct RenderResult {
  bool ok = false;
  std::string text;   // the render when ok
  std::string error;  // otherwise: what failed, with "line N" of the template
};

RenderResult render(std::string_view template_text, const Value& context, const Options& options = {});

// A template parsed once and rendered many times (the provider keeps one per model: parsing a
// published template costs about as much as rendering it). Immutable after parse(); render() is
// const and may run on several threads at once (the tree is only read).
class Template {
 public:
  Template();
  ~Template();
  Template(const Template&);
  Template& operator=(const Template&);
  // False, with a message naming the template line in *error, on a syntax error or a construct
  // outside the subset.
  static bool parse(std::string_view text, Template* out, std::string* error, int max_depth = 256);
  bool empty() const { return body_ == nullptr; }
  // As render(text, context, options) with the text given to parse().
  RenderResult render(const Value& context, const Options& options = {}) const;

 private:
  struct Body;
  std::shared_ptr<const Body> body_;
};

// JSON text -> Value, as Python's json.loads reads it (ints stay ints, 1e400 is inf, "-0" is 0,
// \u escapes decoded, duplicate keys: the last value at the first position). On failure returns
// false with a message in *error.
bool parse_json(std::string_view text, Value* out, std::string* error);

// The context of a chat template from a JSON object such as
//   {"messages": [...], "tools": [...], "add_generation_prompt": true, "bos_token": "<s>",
//    "eos_token": "</s>", "enable_thinking": false}
// Keys are passed as they are (a key that is absent stays undefined in the template, as
// Hugging Face leaves `tools` undefined without tools); with parse_tool_arguments, each
// messages[].tool_calls[].function.arguments given as JSON text is parsed into its value, as
// Hugging Face and llama.cpp hand arguments to templates that apply tojson. On failure returns
// false with a message naming the message index.
bool chat_context_from_json(std::string_view json, Value* out, std::string* error, bool parse_tool_arguments = true);

// Python's spellings: json.dumps(v, ensure_ascii=False) with the given indent (<0 = none) and
// separators, and str(v).
std::string to_json(const Value& v, int indent = -1, std::string_view item_sep = ", ", std::string_view key_sep = ": ");
std::string to_python_str(const Value& v);

}  // namespace picolm::jinja
