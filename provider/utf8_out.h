// Internal to picolm_chat: UTF-8 encoding of one code point, shared by the template renderer's and
// the tool-call reader's string-literal decoders (picolm_chat links nothing of engine/, whose
// unicode.h has the same function).
#pragma once
#include <cstdint>
#include <string>

namespace picolm {

// Appends cp as UTF-8. Lone surrogates (U+D800-U+DFFF) are written as their 3-byte form, as
// Python keeps them.
inline void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace picolm
