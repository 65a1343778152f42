// Comparison of secrets (the API key) whose running time does not depend on where the inputs first
// differ, so a client cannot learn a key byte by byte from response times.
#pragma once
#include <cstddef>
#include <string_view>

namespace picolm {

// True iff a == b. Reads every byte of `given` whatever the contents; the time depends only on the
// lengths, which are not secret enough to matter (an attacker chooses the length of `given`, and a
// key's length is its format's).
inline bool constant_time_equal(std::string_view given, std::string_view expected) {
  // volatile: the compiler may not turn the accumulation back into an early exit.
  volatile unsigned char diff = given.size() != expected.size() ? 1 : 0;
  const size_t n = expected.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char e = n ? static_cast<unsigned char>(expected[i % n]) : 0;
    diff = diff | (static_cast<unsigned char>(given[i]) ^ e);
  }
  return diff == 0;
}

}  // namespace picolm
