// Shared between the interpreter's files; not part of the public API (jinja.h).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

#include "jinja.h"

namespace picolm::jinja::detail {

// Internal only: render() catches it and returns the message. `line` 0 = not known yet (the
// statement being run adds it).
struct Error : std::runtime_error {
  explicit Error(const std::string& m, int line_ = 0) : std::runtime_error(m), line(line_) {}
  int line;
};

void append_utf8(std::string& out, uint32_t cp);
uint32_t next_cp(std::string_view s, size_t& i);
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
size_t cp_count(std::string_view s);
bool py_space(uint32_t c);
std::string py_float(double f);
std::string py_repr_string(std::string_view s);
void json_string(std::string_view s, std::string& out);

// Python's format(value, spec) (a str.format field's spec: fill, align, sign, '#', '0', width,
// grouping, precision, types s d n x X o b c f F e E g G %) and printf-style `fmt % args` (args a
// tuple, a mapping for "%(key)s", or one value). Both throw Error as Python raises.
std::string py_format_spec(const Value& v, std::string_view spec);
std::string py_percent_format(std::string_view fmt, const Value& args);

// Dict keys are strings (Value::Dict). Python also allows ints, floats, booleans and None as keys
// (ByteDance Seed-OSS maps token budgets by int); such a key is stored as '\0', a type letter and
// its repr ("\0i512"), and a string key that itself starts with '\0' is stored behind "\0s", so
// plain string keys stay as they are for Value::find. dict_key throws Error for an unhashable key.
std::string dict_key(const Value& key);
Value key_value(const std::string& stored);
// Dict lookup and insertion with Python's key equality (True == 1, 2.0 == 2): the stored key
// keeps the type it was first given with, as in Python.
const Value* find_key(const Value& dict, const Value& key);
void set_key(Value& dict, const Value& key, Value value);
// The key as json.dumps writes it: ints and floats as their text, true/false/null.
std::string key_json_text(const std::string& stored);

}  // namespace picolm::jinja::detail
