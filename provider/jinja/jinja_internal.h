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

}  // namespace picolm::jinja::detail
